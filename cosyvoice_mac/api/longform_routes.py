"""Long-form work over HTTP: ``/v1/longform/{dialogue,dub,batch}``, ``/v1/glossary`` and result downloads.
A batch is either lines to speak (the file ``file``) or recordings to convert (several files ``audio`` and a
``voice``: each bad recording is reported in ``done``'s ``report`` by name and reason, the others go on).

A job's whole input is checked before the response starts (a bad line is a 400 naming it). "Retake these": a
dialogue's ``retake_from`` (a dub's form field too) names an earlier result (as ``done``'s ``files`` list it) whose
lines the take check left flagged; only those lines are made again, with new seeds, the others reused, and every
earlier take stays in outputs/; a batch's ``retake`` does the same for its folder. The answer is a stream of
server-sent events (``longform_events``): ``note`` first for what the job goes without (a damaged glossary is skipped,
never a failure), ``progress`` after every line (done, total, seconds left), then ``done`` with the result's
files (download them from ``/v1/longform/files/{name}``) or ``error`` (OpenAI's error shape: ``error.type``
says whether the request or the server was at fault). ``done`` says ``saved``: false (with ``warning``, the
reason) when outputs/ refused the files (a full disk, a read-only folder); they are then kept in a temporary
folder of the server, downloadable all the same. A client that disconnects stops the job between lines; what
was finished is kept, labelled partial.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.responses import FileResponse

from cosyvoice_mac.api.auth import ApiAccess
from cosyvoice_mac.api.engine_link import EngineLink
from cosyvoice_mac.api.errors import ApiError, bad_request, too_large
from cosyvoice_mac.api.longform_bodies import DialogueBody, GlossaryBody, sampling_form
from cosyvoice_mac.api.longform_events import stream_job
from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.frontend.glossary import GlossaryEntry, GlossaryError, GlossaryStore, check_entries
from cosyvoice_mac.longform import LongformError, batch, convert_batch, dialogue, subtitles
from cosyvoice_mac.longform.files import ResultFiles, result_stem
from cosyvoice_mac.longform.retakes import Retake
from cosyvoice_mac.longform.runner import run_batch, run_dialogue, run_dub
from cosyvoice_mac.longform.speakers import EngineSpeak
from cosyvoice_mac.request import MAX_UPLOAD_BYTES, PostSettings, Sampling, check_speed
from cosyvoice_mac.settings import batch_name, setting
from cosyvoice_mac.settings.fields import servable_file_name

BATCH_PATH = "/v1/longform/batch"  # lines to speak (file) or recordings to convert (audio, several)
MAX_TEXT_FILE_BYTES = 2 << 20  # a script, subtitle or batch file is text: far below an audio upload


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

    def retake_of(name: str | None) -> Retake | None:
        """The earlier result ``name`` (in outputs/longform) whose flagged lines a job makes again; None: none."""
        if name is None:
            return None
        if not servable_file_name(name) or not (folder / name).is_file():
            raise bad_request(f"there is no long-form result named {name!r} to retake", "file_not_found", "retake_from")
        return _checked(lambda: Retake.flagged_of(folder / name), "retake_from")

    @router.post("/longform/dialogue")
    async def longform_dialogue(body: DialogueBody, request: Request):
        lines = _checked(lambda: dialogue.parse_script(body.script), "script")
        known = [entry["name"] for entry in link.voices() if not entry.get("preview")]
        _checked(lambda: dialogue.check_cast(lines, body.cast, known), "cast")
        _checked(lambda: dialogue.check_pause(body.pause_s), "pause_s")  # a 400 now, not an error event after the 200
        post = _checked(lambda: PostSettings(body.trim, body.loudness_lufs), "loudness_lufs")
        sampling = _checked(body.sampling, "sampling")
        retake = retake_of(body.retake_from)
        speaker = speak(request, check=body.check)
        return stream_job(
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
                sampling=sampling,
                on_progress=on_progress,
                should_stop=should_stop,
                files=ResultFiles(fallback=unsaved),
                retake=retake,
            ),
        )

    @router.post("/longform/dub")
    async def longform_dub(
        request: Request,
        subtitles_file: UploadFile = File(..., alias="file"),
        voice: str = Form(...),
        style: str | None = Form(None),
        speed_limit: float = Form(setting("speed_limit").default),
        seed: int | None = Form(None),
        loudness_lufs: float | None = Form(None),
        sampling: Sampling = Depends(sampling_form),
        check: bool | None = Form(None),
        retake_from: str | None = Form(None),
    ):
        data = await _read(subtitles_file)
        _checked(lambda: subtitles.parse_srt(data), "file")
        _checked(lambda: subtitles.check_speed_limit(speed_limit), "speed_limit")
        post = _checked(lambda: PostSettings(False, loudness_lufs), "loudness_lufs")
        name = link.find_voice(voice)
        style = (style or "").strip() or None
        link.voice(name, style=style)  # a style the voice has no recording of: a 404 naming its styles, now
        retake = retake_of(retake_from)
        speaker = speak(request, name, check)
        return stream_job(
            request,
            speaker,
            lambda on_progress, should_stop: run_dub(
                data,
                name,
                speaker,
                result_stem(folder, "dub"),
                style=style,
                speed_limit=speed_limit,
                seed=seed,
                post=post,
                sampling=sampling,
                on_progress=on_progress,
                should_stop=should_stop,
                files=ResultFiles(fallback=unsaved),
                retake=retake,
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
        sampling: Sampling = Depends(sampling_form),
        check: bool | None = Form(None),
        retake: bool = Form(False),  # the lines the take check left flagged in the batch's folder, made again
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
        return stream_job(
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
                sampling=sampling,
                on_progress=on_progress,
                should_stop=should_stop,
                retake_flagged=retake,
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

        return stream_job(request, speaker, job)

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
