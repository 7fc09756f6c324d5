"""A saved voice's style recordings and voices files through ``/v1``:

- ``POST /v1/voices/{id}/styles`` (multipart ``style``, ``audio``, optional ``transcript``): one more
  recording of the voice, in a style (happy, whisper, car-noisy: one lowercase word, the inline tags' rule);
  409 when it has that style.
- ``DELETE /v1/voices/{id}/styles/{style}``: forget that recording.
- ``GET /v1/voices/{id}/export`` and ``GET /v1/voices/export`` (every saved voice): the voices file, a zip
  (its format and checked reader: ``voice_file.py``).
- ``POST /v1/voices/import`` (multipart ``file``): the voices in the file added, all or none (201 with the
  voices as saved, a taken name renamed, each with ``name_in_file`` and ``features_for``: the models whose
  cached features came with it); a bad file is a 400 (413 over the limits) whose code says why.
"""

from __future__ import annotations

import asyncio
import shutil

from fastapi import APIRouter, Depends, File, Form, UploadFile
from fastapi.responses import JSONResponse, Response

from cosyvoice_mac.api.auth import ApiAccess
from cosyvoice_mac.api.engine_link import EngineLink
from cosyvoice_mac.api.errors import bad_request
from cosyvoice_mac.api.routes import _receive_upload
from cosyvoice_mac.request import VOICE_FILE_LIMITS
from cosyvoice_mac.wire import VOICES_IMPORT_PATH, VOICES_PATH


def build_voice_file_router(link: EngineLink, access: ApiAccess, upload_limit_bytes: int) -> APIRouter:
    """The style and voices-file routes, behind the API key check like every /v1 route."""
    router = APIRouter(prefix=VOICES_PATH, dependencies=[Depends(access.check)])

    @router.post("/{voice_id}/styles")
    async def add_style(
        voice_id: str,
        style: str = Form(...),
        transcript: str | None = Form(None),
        audio: UploadFile | None = File(None),
    ):
        if audio is None:
            raise bad_request("send the style's recording as the file field 'audio'", "missing_field", "audio")
        folder, path = await _receive_upload(audio, upload_limit_bytes, "cosyvoice-api-style-")
        try:
            entry = await asyncio.to_thread(link.add_style, voice_id, style, str(path), transcript)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return JSONResponse(entry, status_code=201)

    @router.delete("/{voice_id}/styles/{style}")
    async def remove_style(voice_id: str, style: str):
        return link.remove_style(voice_id, style)

    @router.get("/export")
    async def export_all():
        return await _export(link, None)

    @router.get("/{voice_id}/export")
    async def export_one(voice_id: str):
        return await _export(link, voice_id)

    @router.post(VOICES_IMPORT_PATH.removeprefix(VOICES_PATH))
    async def import_file(file: UploadFile | None = File(None)):
        if file is None:
            raise bad_request("send the voices file as the multipart file field 'file'", "missing_field", "file")
        folder, path = await _receive_upload(file, VOICE_FILE_LIMITS.file_bytes, "cosyvoice-api-voices-")
        try:
            saved = await asyncio.to_thread(link.import_voices, str(path))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return JSONResponse({"object": "list", "data": saved}, status_code=201)

    return router


async def _export(link: EngineLink, reference: str | None) -> Response:
    data, file_name = await asyncio.to_thread(link.export_voices, reference)
    return Response(
        data, media_type="application/zip", headers={"Content-Disposition": f'attachment; filename="{file_name}"'}
    )
