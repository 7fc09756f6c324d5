"""``POST /v1/audio/voice-conversion``: a recording re-spoken in a saved voice (or in the voice of a second
recording sent with it), its words and timing kept, through the page's queue, saved with its sidecar.

Multipart fields: ``audio`` (the recording to convert: any length up to the reader's limit, mono or stereo,
8 kHz or more; the upload limit applies), ``voice`` (a saved voice's id or name, or ``preview``) or the file
``prompt_audio`` (3-30 s of the target voice), ``response_format`` (as ``/v1/audio/speech``; ``wav`` by
default), ``speed``, ``stream`` (``pcm`` or ``wav`` as it is made), ``trim`` / ``loudness_lufs`` and an
optional ``model`` (checked as ``/v1/audio/speech`` checks it). Errors have OpenAI's shape, as every route's.
The uploads live in this server's temporary folders only while the job lasts.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass

from fastapi import APIRouter, Depends, File, Form, UploadFile
from fastapi import Request as HttpRequest

from cosyvoice_mac.api import audio_formats
from cosyvoice_mac.api.auth import ApiAccess
from cosyvoice_mac.api.engine_link import EngineLink, contract_checks
from cosyvoice_mac.api.errors import bad_request
from cosyvoice_mac.api.routes import STREAM_FORMATS, _answer, _receive_upload, asking_interface
from cosyvoice_mac.conversion_request import ConversionRequest
from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.request import PostSettings
from cosyvoice_mac.sound.source_check import inspect_source
from cosyvoice_mac.wire import CONVERSION_PATH


@dataclass(frozen=True)
class ConversionAnswer:
    """What the shared answer needs to know of the request's form: its audio format, streamed as audio."""

    response_format: str
    stream_format: str = "audio"


def build_convert_router(link: EngineLink, access: ApiAccess, upload_limit_bytes: int) -> APIRouter:
    """The voice-conversion route, behind the API key check like every /v1 route."""
    router = APIRouter(prefix="/v1", dependencies=[Depends(access.check)])

    @router.post(CONVERSION_PATH.removeprefix("/v1"))
    async def voice_conversion(
        http: HttpRequest,
        audio: UploadFile | None = File(None),
        voice: str | None = Form(None),
        prompt_audio: UploadFile | None = File(None),
        model: str | None = Form(None),
        response_format: str = Form("wav"),
        speed: float = Form(1.0),
        stream: bool = Form(False),
        stream_format: str = Form("audio"),
        trim: bool = Form(False),
        loudness_lufs: float | None = Form(None),
    ):
        if stream_format not in STREAM_FORMATS:
            raise bad_request(
                f"stream_format {stream_format!r} is not supported; use one of {', '.join(STREAM_FORMATS)}",
                "unsupported_stream_format",
                "stream_format",
            )
        stream = stream or stream_format == "sse"  # as on the speech route: sse is a stream
        _check_form(audio, voice, prompt_audio, response_format, stream, trim, loudness_lufs)
        if model:
            link.check_model(model)
        name = link.find_voice(voice) if voice is not None else None
        folders = []
        try:
            folder, source = await _receive_upload(audio, upload_limit_bytes, "cosyvoice-api-source-")
            folders.append(folder)
            check = await asyncio.to_thread(inspect_source, source)
            if not check.ok:
                raise bad_request(check.sentence, f"audio_{check.problem}", "audio")
            recording = None
            if prompt_audio is not None:
                folder, recording = await _receive_upload(prompt_audio, upload_limit_bytes, "cosyvoice-api-prompt-")
                folders.append(folder)
                await asyncio.to_thread(link.check_recording, str(recording), "prompt_audio")
            target = link.voice(name, recording=str(recording) if recording is not None else None)
            try:
                with contract_checks():
                    request = ConversionRequest.build(
                        str(source), target, speed=speed, stream=stream, post=PostSettings(trim, loudness_lufs)
                    )
            except RequestError as error:  # the source's own rules name the upload's field
                raise bad_request(str(error), error.code, "audio") from error
            ticket = link.submit(request, asking_interface(http))
        except BaseException:
            for folder in folders:
                shutil.rmtree(folder, ignore_errors=True)
            raise
        ticket.on_end = lambda: [shutil.rmtree(folder, ignore_errors=True) for folder in folders]
        return await _answer(link, ticket, request, ConversionAnswer(response_format, stream_format), http)

    return router


def _check_form(audio, voice, prompt_audio, response_format: str, stream: bool, trim: bool, loudness) -> None:
    """400s for what the form itself gets wrong, before any upload is read."""
    if audio is None:
        raise bad_request("send the recording to convert as the multipart file 'audio'", "missing_field", "audio")
    if (voice is None) == (prompt_audio is None):
        raise bad_request(
            "name the target voice with 'voice' (a saved voice's id or name) or send its recording as the file "
            "'prompt_audio', one of the two",
            "voice_ambiguous" if voice is not None else "missing_field",
            "voice",
        )
    if response_format not in audio_formats.FORMATS:
        raise bad_request(
            f"response_format {response_format!r} is not supported; use one of {', '.join(audio_formats.FORMATS)}",
            "unsupported_response_format",
            "response_format",
        )
    if stream and response_format not in audio_formats.STREAMABLE:
        raise bad_request(
            f"streaming sends {' or '.join(audio_formats.STREAMABLE)}; {response_format} comes whole: leave stream off",
            "unsupported_stream_response_format",
            "response_format",
        )
    if stream and (trim or loudness is not None):
        raise bad_request(
            "trim and loudness_lufs need the whole audio, so a stream cannot have them; leave stream off",
            "post_stream",
            "loudness_lufs" if loudness is not None else "trim",
        )
