"""The OpenAI-compatible endpoints: ``/v1/audio/speech``, ``/v1/voices``, ``/v1/models``, and our
``/v1/audio/speech/recording`` (the same request, spoken in the voice of a recording sent with it).

Request bodies are checked for shape here (unknown fields are refused, so no request can name a
server-side file or setting) and become the contract's :class:`~cosyvoice_mac.request.Request` here, once;
everything about the engine goes through :class:`~cosyvoice_mac.api.engine_link.EngineLink`.

Each output's sidecar records which interface asked: ``api``, or what the header ``X-CosyVoice-Interface``
says among the names a client may claim (``cli``: the command line's ``synth``, which sends its jobs here
whenever the app runs); see ``wire.py``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import AsyncIterator

from fastapi import APIRouter, Depends, File, Form, UploadFile
from fastapi import Request as HttpRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from cosyvoice_mac.api import audio_formats
from cosyvoice_mac.api.auth import ApiAccess
from cosyvoice_mac.api.engine_link import EngineLink, Ticket, contract_checks, samples_of
from cosyvoice_mac.api.errors import ApiError, bad_request, too_large
from cosyvoice_mac.api.streams import CutOnFailure, StreamEnd, audio_bytes, sse_stream
from cosyvoice_mac.api.timestamps import timestamped_answer
from cosyvoice_mac.engine.outputs import credential_facts
from cosyvoice_mac.request import LUFS_RANGE, SAMPLING_FIELDS, SPEED_RANGE, PostSettings, Request, Sampling
from cosyvoice_mac.settings import flag_default, setting
from cosyvoice_mac.sound.clearest import parse_trim
from cosyvoice_mac.wire import (
    CHECK_HEADER,
    CHECK_NOTE_HEADER,
    CLIENT_INTERFACES,
    FILE_HEADER,
    INTERFACE_HEADER,
    JOB_ID_HEADER,
    RECORDING_SPEECH_PATH,
    SAVED_HEADER,
    TIMESTAMPS_SPEECH_PATH,
    WARNING_HEADER,
)

STREAM_FORMATS = ("audio", "sse")
DISCONNECT_CHECK_S = 0.5
MAX_UPLOAD_NAME = 120  # characters of a client's file name kept (with its suffix)


def sampling_help(name: str) -> str:
    """A sampling field's help from the settings table, with its range and default in words."""
    row = setting(name)
    return f"{row.help}; {row.low:g} to {row.high:g}; leave it out for {row.default_words}"


class VoiceReference(BaseModel):
    """OpenAI's custom-voice form: ``{"id": "voice_..."}``."""

    model_config = ConfigDict(extra="forbid")
    id: str


class SpeechBody(BaseModel):
    """OpenAI's speech request, plus ``seed``, ``prompt_text``, ``stream``, ``trim``, ``loudness_lufs`` and the
    sampling settings (our extensions). ``input`` may hold inline markup (docs/page.md "Inline control")."""

    model_config = ConfigDict(extra="forbid")
    model: str
    input: str
    voice: str | VoiceReference
    instructions: str | None = None
    response_format: str = "mp3"
    speed: float = Field(default=1.0, description=f"{SPEED_RANGE[0]:g} to {SPEED_RANGE[1]:g}; 1 while streaming")
    stream: StrictBool = False  # JSON's true or false: "yes" is refused, as by the Gradio API
    stream_format: str = "audio"
    seed: int | None = Field(default=None, description="extension: the same seed and text give the same audio")
    prompt_text: str | None = Field(default=None, description="extension: what the saved voice's recording says")
    style: str | None = Field(default=None, description="extension: the saved voice's recording of this style")
    trim: StrictBool = Field(default=False, description="extension: cut the leading and trailing silence")
    loudness_lufs: float | None = Field(
        default=None,
        description=f"extension: normalise to this loudness, {LUFS_RANGE[0]:g} to {LUFS_RANGE[1]:g} LUFS",
    )
    temperature: float | None = Field(default=None, description=f"extension: {sampling_help('temperature')}")
    top_p: float | None = Field(default=None, description=f"extension: {sampling_help('top_p')}")
    top_k: float | None = Field(default=None, description=f"extension: {sampling_help('top_k')}")
    repetition_window: float | None = Field(
        default=None, description=f"extension: {sampling_help('repetition_window')}"
    )

    def sampling(self) -> Sampling:
        """The sampling settings asked for (RequestError naming a bad one; the rule is the contract's)."""
        return Sampling.build(**{name: getattr(self, name) for name in SAMPLING_FIELDS})

    check: StrictBool | None = Field(
        default=None,
        description="extension: check each sentence and retake the ones that fail (absent: as the server is set)",
    )


class RecordingSpeechBody(SpeechBody):
    """The body of ``/v1/audio/speech/recording``: the voice is the recording sent with it, so none is named
    (``prompt_text`` then says what the recording says: given, the request speaks zero-shot)."""

    voice: str | VoiceReference | None = None


class VoiceChange(BaseModel):
    """The body of ``PATCH /v1/voices/{id}``: a new ``name``, a new ``transcript`` (null: none), or both."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    transcript: str | None = None


def build_router(link: EngineLink, access: ApiAccess, upload_limit_bytes: int) -> APIRouter:
    """The /v1 routes, each behind the API key check."""
    router = APIRouter(prefix="/v1", dependencies=[Depends(access.check)])

    @router.post("/audio/speech")
    async def speech(body: SpeechBody, http: HttpRequest):
        speech_request = _request(link, body)
        ticket = link.submit(speech_request, asking_interface(http))
        return await _answer(link, ticket, speech_request, body, http)

    @router.post(TIMESTAMPS_SPEECH_PATH.removeprefix("/v1"))
    async def speech_with_timestamps(body: SpeechBody, http: HttpRequest):
        """The audio as base64 with each word's and character's times (the take check's recogniser times them)."""
        if body.stream or body.stream_format == "sse" or body.check is False:
            raise bad_request(
                "timestamps come from checking the whole finished audio: leave stream off and check on",
                "timestamps_need_check",
                "check" if body.check is False else "stream",
            )
        speech_request = _request(link, body.model_copy(update={"check": True}))
        ticket = link.submit(speech_request, asking_interface(http))
        result = await _last(link.follow(ticket), http)
        encoded = await asyncio.to_thread(_finished_audio, result, body.response_format)
        return JSONResponse(timestamped_answer(result, encoded, body.response_format), headers=_result_headers(result))

    @router.post(RECORDING_SPEECH_PATH.removeprefix("/v1"))
    async def speech_with_recording(
        http: HttpRequest,
        body: str = Form(...),
        prompt_audio: UploadFile | None = File(None),
        prompt_trim: str = Form(flag_default("prompt_trim")),
    ):
        """``body``: the JSON of /v1/audio/speech without ``voice``; ``prompt_audio``: 3-30 s of speech;
        ``prompt_trim``: "auto" keeps the clearest 12 s of a longer one, "START-END" that span in seconds (the
        settings table's row)."""
        try:
            trim = parse_trim(prompt_trim, "prompt_trim")
        except ValueError as error:
            raise bad_request(str(error), "invalid_prompt_trim", "prompt_trim") from None
        try:
            parsed = RecordingSpeechBody.model_validate_json(body)
        except ValidationError as error:
            raise RequestValidationError(error.errors()) from None
        if parsed.voice is not None:
            raise bad_request(
                "this endpoint speaks in the voice of the recording sent with it: leave 'voice' out, or use "
                "/v1/audio/speech for a saved voice",
                "voice_ambiguous",
                "voice",
            )
        if prompt_audio is None:
            raise bad_request(
                "send the prompt recording as the multipart file 'prompt_audio'", "missing_field", "prompt_audio"
            )
        folder, path = await _receive_upload(prompt_audio, upload_limit_bytes, "cosyvoice-api-prompt-")
        try:
            path = await asyncio.to_thread(link.check_recording, str(path), "prompt_audio", trim)
            speech_request = _request(link, parsed, recording=str(path))
            ticket = link.submit(speech_request, asking_interface(http))
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        ticket.on_end = lambda: shutil.rmtree(folder, ignore_errors=True)  # the job is over, or its client left
        return await _answer(link, ticket, speech_request, parsed, http)

    @router.get("/voices")
    @router.get("/audio/voices", include_in_schema=False)
    async def list_voices():
        return {"object": "list", "data": link.voices()}

    @router.post("/voices")
    @router.post("/audio/voices", include_in_schema=False)
    async def create_voice(
        name: str = Form(...),
        transcript: str | None = Form(None),
        audio: UploadFile | None = File(None),
        audio_sample: UploadFile | None = File(None),
        consent: str | None = Form(None),
    ):
        upload = audio or audio_sample
        if upload is None:
            raise bad_request("send the recording as the multipart file field 'audio'", "missing_field", "audio")
        folder, path = await _receive_upload(upload, upload_limit_bytes, "cosyvoice-api-voice-")
        try:
            entry = await asyncio.to_thread(link.create_voice, name, str(path), transcript)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return JSONResponse(entry, status_code=201)

    @router.patch("/voices/{voice_id}")
    @router.patch("/audio/voices/{voice_id}", include_in_schema=False)
    async def change_voice(voice_id: str, body: VoiceChange):
        """Rename a saved voice (``name``) and/or set its transcript (``transcript``; null: none)."""
        fields = body.model_fields_set
        if not fields & {"name", "transcript"}:
            raise bad_request("send 'name' (the new name) and/or 'transcript'", "missing_field", "name")
        transcript = body.transcript if "transcript" in fields else ...
        return link.rename_voice(voice_id, body.name if "name" in fields else None, transcript)

    @router.put("/voices/{voice_id}")
    @router.put("/audio/voices/{voice_id}", include_in_schema=False)
    async def replace_voice(voice_id: str, transcript: str | None = Form(None), audio: UploadFile | None = File(None)):
        """Overwrite a saved voice's recording (and transcript), keeping its name."""
        if audio is None:
            raise bad_request("send the new recording as the multipart file field 'audio'", "missing_field", "audio")
        folder, path = await _receive_upload(audio, upload_limit_bytes, "cosyvoice-api-voice-")
        try:
            return await asyncio.to_thread(link.replace_voice, voice_id, str(path), transcript)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    @router.delete("/voices/{voice_id}")
    @router.delete("/audio/voices/{voice_id}", include_in_schema=False)
    async def delete_voice(voice_id: str):
        return link.delete_voice(voice_id)

    @router.get("/models")
    async def list_models():
        return {"object": "list", "data": link.models()}

    @router.get("/models/{model_id}")
    async def get_model(model_id: str):
        link.check_model(model_id)
        return next(
            (entry for entry in link.models() if entry["id"] == model_id),
            {"id": model_id, "object": "model", "owned_by": "cosyvoice-mac", "alias": True},
        )

    return router


def _finished_audio(result, response_format: str) -> bytes:
    """A finished job's audio in ``response_format``: for WAV the saved file as it is (credentials and all), else the
    samples encoded with the credentials the format can carry."""
    if response_format == "wav" and result.output_path:
        return Path(result.output_path).read_bytes()
    return audio_formats.encode(*samples_of(result), response_format, credential_facts(result))


async def _answer(link: EngineLink, ticket: Ticket, speech: Request, body: SpeechBody, http: HttpRequest):
    """The job's audio: the whole file once it is done, or a stream (raw chunks or SSE) as the model makes it."""
    headers = {JOB_ID_HEADER: ticket.job_id}
    pieces = link.follow(ticket)
    if not speech.stream:
        result = await _last(pieces, http)
        headers.update(_result_headers(result))
        encoded = await asyncio.to_thread(_finished_audio, result, body.response_format)
        return Response(encoded, media_type=audio_formats.media_type(body.response_format), headers=headers)
    first = await _next(pieces, http)  # an early failure still gets its own status
    if body.stream_format == "sse":
        events = sse_stream(first, pieces, body.response_format, len(speech.text), ticket.job_id)
        return StreamingResponse(events, media_type="text/event-stream", headers=headers)
    return CutOnFailure(  # a failure from here on cuts the body short (streams.py)
        audio_bytes(first, pieces, body.response_format, StreamEnd()),
        ticket.job_id,
        media_type=audio_formats.media_type(body.response_format),
        headers=headers,
    )


async def _receive_upload(upload: UploadFile, limit: int, prefix: str) -> tuple[Path, Path]:
    """The uploaded file saved in a new temporary folder of this server: (folder, file). 413 over ``limit``.
    The file keeps the client's name (``upload_name``): refusals and sidecars name the file the user sent."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    path = folder / upload_name(upload.filename)
    try:
        with path.open("wb") as handle:
            await asyncio.to_thread(shutil.copyfileobj, upload.file, handle, 1 << 20)
        if path.stat().st_size > limit:
            raise too_large("the upload", limit)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder, path


def upload_name(filename: str | None) -> str:
    """The client's file name as this server keeps it: its last part only (no folders), no leading dots, no
    control or text-direction characters, at most MAX_UPLOAD_NAME characters; its suffix (lower case, ASCII,
    ``.wav`` when it has none) tells the decoder the container. ``upload.wav`` when nothing is left."""
    name = "".join(char for char in (filename or "").replace("\\", "/").rsplit("/", 1)[-1] if char.isprintable())
    stem, suffix = os.path.splitext(name.strip().lstrip(". "))
    suffix = suffix.lower() if suffix.isascii() and 1 < len(suffix) <= 8 else ".wav"
    return (stem.strip()[: MAX_UPLOAD_NAME - len(suffix)] or "upload") + suffix


def asking_interface(http: HttpRequest) -> str:
    """Who asked, as the client says in ``X-CosyVoice-Interface`` (default ``api``): a known name, or a 400."""
    claimed = http.headers.get(INTERFACE_HEADER, "api").strip().lower()
    if claimed not in CLIENT_INTERFACES:
        raise bad_request(
            f"the header {INTERFACE_HEADER} says {claimed!r}; a client may say one of {', '.join(CLIENT_INTERFACES)}",
            "unknown_interface",
            INTERFACE_HEADER,
        )
    return claimed


def _request(link: EngineLink, body: SpeechBody, recording: str | None = None) -> Request:
    """The body as a valid Request: first its choices checked against what this server offers, then the
    contract's own rules (a 400 naming the body field). The voice is ``recording`` (an uploaded prompt's
    file), else the saved voice the body names."""
    if body.response_format not in audio_formats.FORMATS:
        raise bad_request(
            f"response_format {body.response_format!r} is not supported; use one of {', '.join(audio_formats.FORMATS)}",
            "unsupported_response_format",
            "response_format",
        )
    if body.stream_format not in STREAM_FORMATS:
        raise bad_request(
            f"stream_format {body.stream_format!r} is not supported; use one of {', '.join(STREAM_FORMATS)}",
            "unsupported_stream_format",
            "stream_format",
        )
    stream = body.stream or body.stream_format == "sse"
    if stream and body.response_format not in audio_formats.STREAMABLE:
        raise bad_request(
            f"streaming sends {' or '.join(audio_formats.STREAMABLE)} (audio that can be played "
            f"before it is complete); {body.response_format} comes whole: leave stream off",
            "unsupported_stream_response_format",
            "response_format",
        )
    if stream and (body.trim or body.loudness_lufs is not None):
        raise bad_request(
            "trim and loudness_lufs need the whole audio, so a stream cannot have them (what streams is "
            "the model's raw audio); leave stream off to get the post-processed audio",
            "post_stream",
            "loudness_lufs" if body.loudness_lufs is not None else "trim",
        )
    link.check_model(body.model)
    reference = body.voice.id if isinstance(body.voice, VoiceReference) else body.voice
    name = None if recording is not None else link.find_voice(reference)
    voice = link.voice(name, transcript=body.prompt_text, recording=recording, style=(body.style or "").strip() or None)
    with contract_checks():
        return Request.build(
            body.input,
            voice,
            instruct=body.instructions or None,
            seed=body.seed,
            speed=body.speed,
            stream=stream,
            post=PostSettings(body.trim, body.loudness_lufs),
            sampling=body.sampling(),
            check=body.check,
        )


async def _next(pieces: AsyncIterator, http: HttpRequest):
    """The next item of ``pieces``; a client that went away meanwhile ends the job (and this request)."""
    waiting = asyncio.ensure_future(pieces.__anext__())
    try:
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=DISCONNECT_CHECK_S)
            if done:
                return waiting.result()
            if await http.is_disconnected():
                raise ApiError(499, "the client closed the connection", code="client_closed")
    finally:
        if not waiting.done():
            waiting.cancel()
            await pieces.aclose()


async def _last(pieces: AsyncIterator, http: HttpRequest):
    while True:
        item = await _next(pieces, http)
        if not isinstance(item, tuple):
            return item


def _result_headers(result) -> dict[str, str]:
    headers = {
        "x-cosyvoice-seed": str(result.seed),
        "x-cosyvoice-sample-rate": str(result.sample_rate),
        "x-cosyvoice-duration": f"{result.duration_s:.3f}",
    }
    return {**headers, **check_headers(result), **saved_headers(result.output_path, result.output_error)}


def check_headers(result) -> dict[str, str]:
    """``X-CosyVoice-Check`` (passed, retaken or flagged; absent when the job was not checked) and, after a retake
    or a flag, ``X-CosyVoice-Check-Note`` with what each sentence's note says."""
    if result.check_status is None:
        return {}
    notes = [sentence["note"] for sentence in result.check["sentences"] if sentence.get("note")]
    headers = {CHECK_HEADER: result.check_status}
    if notes:
        headers[CHECK_NOTE_HEADER] = _ascii("; ".join(notes))
    return headers


def _ascii(text: str) -> str:
    return text.encode("ascii", "backslashreplace").decode("ascii")


def saved_headers(output_path: str | None, output_error: str | None) -> dict[str, str]:
    """``X-CosyVoice-Saved`` and the saved file's name, or, when nothing was saved, a ``Warning`` (RFC 7234:
    ``199 - "reason"``) saying why: the audio is in the answer all the same."""
    if output_path:
        return {SAVED_HEADER: "true", FILE_HEADER: Path(output_path).name}
    reason = output_error or "the result was not saved"
    quoted = _ascii(reason).replace("\\", "\\\\").replace('"', '\\"')
    return {SAVED_HEADER: "false", WARNING_HEADER: f'199 - "not saved: {quoted}"'}
