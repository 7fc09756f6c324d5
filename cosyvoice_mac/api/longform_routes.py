"""Long-form work over HTTP: ``/v1/longform/{dialogue,dub,batch}``, ``/v1/glossary`` and result downloads.
A batch is either lines to speak (the file ``file``) or recordings to convert (several files ``audio`` and a
``voice``: each bad recording is reported in ``done``'s ``report`` by name and reason, the others go on).

A job's whole input is checked before the response starts (a bad line is a 400 naming it). The answer is
a stream of server-sent events: ``note`` first for what the job goes without (a damaged glossary is skipped,
never a failure), ``progress`` after every line (done, total, seconds left), then ``done`` with the result's
files (download them from ``/v1/longform/files/{name}``) or ``error`` (OpenAI's error shape: ``error.type``
says whether the request or the server was at fault). ``done`` says ``saved``: false (with ``warning``, the
reason) when outputs/ refused the files (a full disk, a read-only folder); they are then kept in a temporary
folder of the server, downloadable all the same. A client that disconnects stops the job between lines; what
was finished is kept, labelled partial.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import tempfile
import threading
from pathlib import Path
from typing import AsyncIterator

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from cosyvoice_mac.api.auth import ApiAccess
from cosyvoice_mac.api.engine_link import EngineLink
from cosyvoice_mac.api.errors import RESTART_RETRY_AFTER_S, ApiError, bad_request, job_failure, too_large
from cosyvoice_mac.engine.jobs import JobFailed
from cosyvoice_mac.engine.messages import Failed
from cosyvoice_mac.errors import CosyVoiceError, InputError, RequestError
from cosyvoice_mac.frontend.glossary import GlossaryEntry, GlossaryError, GlossaryStore, check_entries
from cosyvoice_mac.longform import LongformError, batch, convert_batch, dialogue, subtitles
from cosyvoice_mac.longform.files import ResultFiles, result_stem
from cosyvoice_mac.longform.runner import run_batch, run_dialogue, run_dub
from cosyvoice_mac.longform.speakers import EngineSpeak
from cosyvoice_mac.request import MAX_UPLOAD_BYTES, PostSettings, check_speed
from cosyvoice_mac.settings import batch_name, setting
from cosyvoice_mac.settings.fields import servable_file_name

LOG = logging.getLogger("cosyvoice_mac.api")
BATCH_PATH = "/v1/longform/batch"  # lines to speak (file) or recordings to convert (audio, several)
MAX_TEXT_FILE_BYTES = 2 << 20  # a script, subtitle or batch file is text: far below an audio upload


class PostBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    trim: bool = False
    loudness_lufs: float | None = None
    check: bool | None = None  # the take check for every line (None: as the server is set)


class DialogueBody(PostBody):
    script: str
    cast: dict[str, str] = Field(default_factory=dict, description="speaker tag -> saved voice name")
    pause_s: float = setting("pause").default
    per_line_files: bool = False
    seed: int | None = None


class GlossaryRow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str
    replacement: str
    language: str = "all"


class GlossaryBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entries: list[GlossaryRow]


def build_longform_router(
    link: EngineLink,
    access: ApiAccess,
    outputs_dir: Path,
    glossary: GlossaryStore,
    upload_limit_bytes: int = MAX_UPLOAD_BYTES,
) -> APIRouter:
    router = APIRouter(prefix="/v1", dependencies=[Depends(access.check)])
    folder = Path(outputs_dir) / "longform"
    unsaved = Path(tempfile.mkdtemp(prefix="cosyvoice-longform-unsaved-"))  # what outputs/ could not take

    def speak(request: Request, default_voice=None, check: bool | None = None) -> EngineSpeak:
        """Lines as engine jobs recorded with the interface that asked (``api``, or ``cli`` by its header)."""
        from cosyvoice_mac.api.routes import asking_interface  # the speech routes' rule, at the point of use

        interface = asking_interface(request)
        link.check_ready()
        entries, note = glossary.usable_entries()  # a damaged glossary is skipped, with a note, not a 500
        notes = (note,) if note else ()
        return EngineSpeak(link._engine(), entries, default_voice, interface=interface, notes=notes, check=check)

    @router.post("/longform/dialogue")
    async def longform_dialogue(body: DialogueBody, request: Request):
        lines = _checked(lambda: dialogue.parse_script(body.script), "script")
        known = [entry["name"] for entry in link.voices() if not entry.get("preview")]
        _checked(lambda: dialogue.check_cast(lines, body.cast, known), "cast")
        _checked(lambda: dialogue.check_pause(body.pause_s), "pause_s")  # a 400 now, not an error event after the 200
        post = _checked(lambda: PostSettings(body.trim, body.loudness_lufs), "loudness_lufs")
        speaker = speak(request, check=body.check)
        return _stream(
            request,
            speaker,
            lambda on_progress, should_stop: run_dialogue(
                body.script,
                body.cast,
                known,
                speaker,
                result_stem(folder, "dialogue"),
                pause_s=body.pause_s,
                seed=body.seed,
                per_line_files=body.per_line_files,
                post=post,
                on_progress=on_progress,
                should_stop=should_stop,
                files=ResultFiles(fallback=unsaved),
            ),
        )

    @router.post("/longform/dub")
    async def longform_dub(
        request: Request,
        subtitles_file: UploadFile = File(..., alias="file"),
        voice: str = Form(...),
        speed_limit: float = Form(setting("speed_limit").default),
        seed: int | None = Form(None),
        loudness_lufs: float | None = Form(None),
        check: bool | None = Form(None),
    ):
        data = await _read(subtitles_file)
        _checked(lambda: subtitles.parse_srt(data), "file")
        _checked(lambda: subtitles.check_speed_limit(speed_limit), "speed_limit")
        post = _checked(lambda: PostSettings(False, loudness_lufs), "loudness_lufs")
        name = link.find_voice(voice)
        speaker = speak(request, name, check)
        return _stream(
            request,
            speaker,
            lambda on_progress, should_stop: run_dub(
                data,
                name,
                speaker,
                result_stem(folder, "dub"),
                speed_limit=speed_limit,
                seed=seed,
                post=post,
                on_progress=on_progress,
                should_stop=should_stop,
                files=ResultFiles(fallback=unsaved),
            ),
        )

    @router.post(BATCH_PATH.removeprefix("/v1"))
    async def longform_batch(
        request: Request,
        lines_file: UploadFile | None = File(None, alias="file"),
        sources: list[UploadFile] | None = File(None, alias="audio"),
        voice: str | None = Form(None),
        name: str | None = Form(None),
        seed: int | None = Form(None),
        speed: float = Form(1.0),
        trim: bool = Form(False),
        loudness_lufs: float | None = Form(None),
        check: bool | None = Form(None),
    ):
        name = _checked(lambda: batch_name(name), "name")
        if (lines_file is None) == (not sources):
            raise bad_request(
                "send the lines to speak as the file 'file' (.txt or .csv), or the recordings to convert as one or "
                "more files 'audio', one of the two",
                "missing_field" if lines_file is None else "batch_ambiguous",
                "file",
            )
        post = _checked(lambda: PostSettings(trim, loudness_lufs), "loudness_lufs")
        if sources:
            return await conversion_batch(request, sources, voice, name, speed, post)
        if name is None:
            raise bad_request("name the batch with 'name' (its folder: a re-run resumes it)", "missing_field", "name")
        data, kind = await _read(lines_file), Path(lines_file.filename or "").suffix.lower().lstrip(".")
        _checked(lambda: batch.parse_batch(data, kind), "file")
        default = link.find_voice(voice) if voice else None
        speaker = speak(request, default, check)
        settings = {
            "model": link.host.current.name if link.host.current else None,
            "glossary": [entry.key for entry in speaker.glossary],
        }
        return _stream(
            request,
            speaker,
            lambda on_progress, should_stop: run_batch(
                data,
                kind,
                folder / "batches" / name,
                speaker,
                voice=default,
                settings=settings,
                seed=seed,
                post=post,
                on_progress=on_progress,
                should_stop=should_stop,
            ),
        )

    async def conversion_batch(request: Request, sources, voice, name, speed: float, post: PostSettings):
        """Every recording uploaded as ``audio`` re-spoken in ``voice``, in the batch folder ``name`` (a re-run
        with the same name resumes it; none: a new folder of its own); bad recordings are reported per file."""
        if voice is None:
            raise bad_request("name the voice to convert into with 'voice'", "missing_field", "voice")
        _checked(lambda: check_speed(speed, False), "speed")
        target = link.find_voice(voice)
        speaker = speak(request, target)  # a model that is not ready is a 503 before any upload is stored
        received = Path(tempfile.mkdtemp(prefix="cosyvoice-api-batch-"))
        try:
            paths = await _receive_sources(sources, received, upload_limit_bytes)
            items, skipped = _checked(lambda: convert_batch.plan_sources(paths), "audio")
        except BaseException:
            shutil.rmtree(received, ignore_errors=True)
            raise
        settings = {"model": link.host.current.name if link.host.current else None}
        where = folder / "batches" / (name or result_stem(folder, "convert").name)

        def job(on_progress, should_stop):
            try:
                return convert_batch.run_convert_batch(
                    items,
                    skipped,
                    where,
                    speaker.convert,
                    voice=target,
                    speed=speed,
                    settings=settings,
                    post=post,
                    on_progress=on_progress,
                    should_stop=should_stop,
                )
            finally:
                shutil.rmtree(received, ignore_errors=True)

        return _stream(request, speaker, job)

    @router.get("/longform/files/{name}")
    async def longform_file(name: str):
        candidates = (folder / name, folder / "batches" / name, unsaved / name) if servable_file_name(name) else ()
        matches = [path for path in candidates if path.is_file()]
        if not matches:
            raise ApiError(404, f"there is no long-form result named {name!r}", code="file_not_found", param="name")
        return FileResponse(matches[0])

    @router.get("/glossary")
    async def get_glossary():
        return {"object": "list", "data": [entry.__dict__ for entry in _entries(glossary)]}

    @router.put("/glossary")
    async def put_glossary(body: GlossaryBody):
        entries = _checked(
            lambda: check_entries([GlossaryEntry(r.key, r.replacement, r.language) for r in body.entries]), "entries"
        )
        saved = glossary.replace(entries)
        return {"object": "list", "data": [entry.__dict__ for entry in saved]}

    return router


def _entries(glossary: GlossaryStore):
    try:
        return glossary.entries()
    except GlossaryError as error:
        raise ApiError(500, str(error), code="glossary_unreadable") from error


def _checked(check, param: str):
    try:
        return check()
    except (LongformError, GlossaryError) as error:
        raise bad_request(str(error), "invalid_longform_input", param) from None
    except RequestError as error:  # a rule of the request contract (the post-processing settings)
        raise bad_request(str(error), error.code, error.field) from None


async def _receive_sources(uploads: list[UploadFile], folder: Path, limit: int) -> list[Path]:
    """The uploaded recordings saved in ``folder`` under their own names (folders dropped, a name taken twice
    numbered); 413 naming the file over ``limit``."""
    paths, taken = [], set()
    for index, upload in enumerate(uploads, start=1):
        given = Path((upload.filename or "").replace("\\", "/")).name.lstrip(".") or f"recording-{index}"
        name = given if given.casefold() not in taken else f"{Path(given).stem}-{index}{Path(given).suffix}"
        taken.add(name.casefold())
        path = folder / name
        with path.open("wb") as handle:
            await asyncio.to_thread(shutil.copyfileobj, upload.file, handle, 1 << 20)
        if path.stat().st_size > limit:
            raise too_large(f"the recording {given}", limit, param="audio")
        paths.append(path)
    return paths


async def _read(upload: UploadFile) -> bytes:
    data = await upload.read(MAX_TEXT_FILE_BYTES + 1)
    if len(data) > MAX_TEXT_FILE_BYTES:
        raise too_large("the file", MAX_TEXT_FILE_BYTES, param="file")
    return data


def _stream(request: Request, speaker: EngineSpeak, job) -> StreamingResponse:
    """Run ``job(on_progress, should_stop)`` on a thread; stream its progress and outcome as SSE."""
    return StreamingResponse(_events(request, speaker, job), media_type="text/event-stream")


async def _events(request: Request, speaker: EngineSpeak, job) -> AsyncIterator[bytes]:
    loop, updates, stop, outcome = asyncio.get_running_loop(), asyncio.Queue(), threading.Event(), {}

    def work():
        try:
            outcome["result"] = job(lambda p: loop.call_soon_threadsafe(updates.put_nowait, p), stop.is_set)
        except Exception as error:  # noqa: BLE001 - travels to the client as an error event
            outcome["error"] = error
        loop.call_soon_threadsafe(updates.put_nowait, None)

    thread = threading.Thread(target=work, name="cosyvoice-api-longform", daemon=True)
    thread.start()
    for note in speaker.notes:  # said first: what the whole job goes without
        yield _event("note", {"message": note})
    try:
        while True:
            try:
                progress = await asyncio.wait_for(updates.get(), timeout=0.5)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    raise asyncio.CancelledError
                continue
            if progress is None:
                break
            yield _event(
                "progress",
                {
                    "done": progress.done,
                    "total": progress.total,
                    "elapsed_s": round(progress.elapsed_s, 2),
                    "left_s": None if progress.left_s is None else round(progress.left_s, 1),
                },
            )
    finally:
        if thread.is_alive():  # the client went away: stop between lines, cancel the line in flight
            stop.set()
            speaker.stop()
    if "error" in outcome:
        failure = _failure(outcome["error"])
        LOG.warning("long-form job ended with an error (%s): %s", failure.code, failure.message)
        yield _event("error", {"message": failure.message, **failure.event()})
        return
    result = outcome["result"]
    saved = {"saved": True} if result.not_saved is None else {"saved": False, "warning": result.not_saved}
    yield _event(
        "done",
        {
            "kind": result.kind,
            "done": result.done,
            "total": result.total,
            "partial": result.stopped,
            "files": [Path(path).name for path in result.files],
            "report": result.report,
            "timestamps": result.timestamps,  # every word on the result's timeline (None: no line was timed)
            "flagged": result.flagged,  # "line 3: kept take 3 of 3: ..." for each line the check left flagged
            **saved,
        },
    )


def _failure(error: Exception) -> ApiError:
    """What ended a long job, as the ApiError a request would get for it (logged by the caller)."""
    if isinstance(error, JobFailed) and isinstance(error.event, Failed):
        return job_failure(error.event, error.event.field)
    if isinstance(error, JobFailed):  # cancelled: by a restart of the engine, or a Stop
        return ApiError(503, str(error), code="cancelled", headers={"Retry-After": str(RESTART_RETRY_AFTER_S)})
    if isinstance(error, InputError):
        return bad_request(str(error), "invalid_longform_input", error.field)
    if isinstance(error, CosyVoiceError):  # ours and explained: a full disk, an engine that is not running
        return ApiError(500, str(error), code="longform_failed")
    LOG.error("long-form job failed unexpectedly", exc_info=error)
    return ApiError(500, f"{type(error).__name__}: {error}", code="internal_error")


def _event(kind: str, data: dict) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data}, ensure_ascii=False)}\n\n".encode("utf-8")
