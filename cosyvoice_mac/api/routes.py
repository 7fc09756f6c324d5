"""The OpenAI-compatible endpoints: ``/v1/audio/speech``, ``/v1/voices``, ``/v1/models``.

Request bodies are checked for shape here (unknown fields are refused, so no request can name a
server-side file or setting); everything about the engine and the request contract goes through
:class:`~cosyvoice_mac.api.engine_link.EngineLink`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import tempfile
from pathlib import Path
from typing import AsyncIterator

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from cosyvoice_mac.api import audio_formats
from cosyvoice_mac.api.auth import ApiAccess
from cosyvoice_mac.api.engine_link import EngineLink, SpeechOrder, samples_of
from cosyvoice_mac.api.errors import ApiError, bad_request

STREAM_FORMATS = ("audio", "sse")
DISCONNECT_CHECK_S = 0.5


class VoiceReference(BaseModel):
    """OpenAI's custom-voice form: ``{"id": "voice_..."}``."""

    model_config = ConfigDict(extra="forbid")
    id: str


class SpeechBody(BaseModel):
    """OpenAI's speech request, plus ``seed``, ``prompt_text``, ``stream``, ``trim`` and ``loudness_lufs``
    (our extensions)."""

    model_config = ConfigDict(extra="forbid")
    model: str
    input: str
    voice: str | VoiceReference
    instructions: str | None = None
    response_format: str = "mp3"
    speed: float = 1.0
    stream: bool = False
    stream_format: str = "audio"
    seed: int | None = Field(default=None, description="extension: the same seed and text give the same audio")
    prompt_text: str | None = Field(default=None, description="extension: what the saved voice's recording says")
    trim: bool = Field(default=False, description="extension: cut the leading and trailing silence")
    loudness_lufs: float | None = Field(default=None, description="extension: normalise to this loudness (LUFS)")


def build_router(link: EngineLink, access: ApiAccess, upload_limit_bytes: int) -> APIRouter:
    """The /v1 routes, each behind the API key check."""
    router = APIRouter(prefix="/v1", dependencies=[Depends(access.check)])

    @router.post("/audio/speech")
    async def speech(body: SpeechBody, request: Request):
        order, response_format, stream_format = _order(link, body)
        ticket = link.submit(order)
        headers = {"x-cosyvoice-job-id": ticket.job_id}
        pieces = link.follow(ticket)
        if not order.stream:
            result = await _last(pieces, request)
            headers.update(_result_headers(result))
            encoded = audio_formats.encode(*samples_of(result), response_format)
            return Response(encoded, media_type=audio_formats.media_type(response_format), headers=headers)
        first = await _next(pieces, request)  # an early failure still gets its own status
        if stream_format == "sse":
            return StreamingResponse(
                _sse(first, pieces, response_format, len(order.text)), media_type="text/event-stream", headers=headers
            )
        return StreamingResponse(
            _chunks(first, pieces, response_format),
            media_type=audio_formats.media_type(response_format),
            headers=headers,
        )

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
        folder = Path(tempfile.mkdtemp(prefix="cosyvoice-api-voice-"))
        try:
            # Only the file's suffix is kept from the client's name: it tells the decoder the container.
            suffix = Path(upload.filename or "").suffix.lower()[:8] or ".wav"
            path = folder / f"upload{suffix if suffix.isascii() else '.wav'}"
            with path.open("wb") as handle:
                await asyncio.to_thread(shutil.copyfileobj, upload.file, handle, 1 << 20)
            if path.stat().st_size > upload_limit_bytes:
                raise _too_large(upload_limit_bytes)
            entry = await asyncio.to_thread(link.create_voice, name, str(path), transcript)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return JSONResponse(entry, status_code=201)

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


def _order(link: EngineLink, body: SpeechBody) -> tuple[SpeechOrder, str, str]:
    """The body's choices checked against what this server offers (the contract checks come at submit)."""
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
    order = SpeechOrder(
        text=body.input,
        voice=link.find_voice(reference),
        instructions=body.instructions,
        prompt_text=body.prompt_text,
        seed=body.seed,
        speed=body.speed,
        stream=stream,
        trim=body.trim,
        loudness_lufs=body.loudness_lufs,
    )
    return order, body.response_format, body.stream_format


async def _next(pieces: AsyncIterator, request: Request):
    """The next item of ``pieces``; a client that went away meanwhile ends the job (and this request)."""
    waiting = asyncio.ensure_future(pieces.__anext__())
    try:
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=DISCONNECT_CHECK_S)
            if done:
                return waiting.result()
            if await request.is_disconnected():
                raise ApiError(499, "the client closed the connection", code="client_closed")
    finally:
        if not waiting.done():
            waiting.cancel()
            await pieces.aclose()


async def _last(pieces: AsyncIterator, request: Request):
    while True:
        item = await _next(pieces, request)
        if not isinstance(item, tuple):
            return item


async def _chunks(first, pieces: AsyncIterator, response_format: str) -> AsyncIterator[bytes]:
    """The stream's bytes: the WAV header (for wav), then each piece's samples as they come."""
    header_sent = response_format != "wav"
    item = first
    try:
        while isinstance(item, tuple):
            samples, sample_rate = item
            if not header_sent:
                header_sent = True
                yield audio_formats.streaming_wav_header(sample_rate)
            yield audio_formats.pcm16(samples)
            item = await pieces.__anext__()
        if not header_sent:  # nothing was streamed (the job made no audio): still a valid, empty WAV
            yield audio_formats.streaming_wav_header(item.sample_rate)
    finally:
        await pieces.aclose()  # the client went away: the job is cancelled


async def _sse(first, pieces: AsyncIterator, response_format: str, characters: int) -> AsyncIterator[bytes]:
    """OpenAI's speech events: ``speech.audio.delta`` (base64 audio), then ``speech.audio.done``."""
    try:
        async for chunk in _chunks(first, pieces, response_format):
            yield _event({"type": "speech.audio.delta", "audio": base64.b64encode(chunk).decode("ascii")})
    except ApiError as error:  # the status line is long gone: the failure travels as an event
        yield _event({"type": "error", **error.body()})
        return
    yield _event(
        {
            "type": "speech.audio.done",
            "usage": {"input_tokens": characters, "output_tokens": 0, "total_tokens": characters},
        }
    )


def _event(data: dict) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode("utf-8")


def _result_headers(result) -> dict[str, str]:
    headers = {
        "x-cosyvoice-seed": str(result.seed),
        "x-cosyvoice-sample-rate": str(result.sample_rate),
        "x-cosyvoice-duration": f"{result.duration_s:.3f}",
    }
    if result.output_path:
        headers["x-cosyvoice-file"] = Path(result.output_path).name
    return headers


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"the upload is larger than the limit of {limit // (1 << 20)} MB", code="too_large")
