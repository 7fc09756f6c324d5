"""Long-form jobs sent to the running app (``/v1/longform/*``), so their lines wait in its one queue.

The request goes with the CLI's header (``X-CosyVoice-Interface: cli``, set by ``cli.remote.AppClient``), so
every line's sidecar in the app's outputs/ says ``interface: cli``. The app answers with server-sent events:
``progress`` after each line (fed to the command's bar), then ``done`` naming the result's files, which are
downloaded to the command's own output (``--out`` stem, or the batch's ``--out-dir``). Ctrl-C closes the
connection: the app cancels the line in flight and keeps what it finished in its outputs/longform.
"""

from __future__ import annotations

import json
import sys
import zipfile
from io import BytesIO
from pathlib import Path

import httpx

from cosyvoice_mac.cli.common import EXIT_REFUSED, EXIT_TRY_LATER
from cosyvoice_mac.cli.remote import AppClient, AppError
from cosyvoice_mac.longform.progress import LongformResult, Progress
from cosyvoice_mac.paths import atomic_write
from cosyvoice_mac.settings import batch_name_for

LONGFORM_PATH = "/v1/longform"
FILES_PATH = f"{LONGFORM_PATH}/files"


def dialogue_in_app(app: AppClient, body: dict, out: Path, on_progress) -> LongformResult:
    """``body`` as ``/v1/longform/dialogue`` takes it; OUT.wav, OUT.json and OUT.timing.json (+ lines) here."""
    answer = _post(app, "dialogue", json=body)
    return _fetch_stem(app, _follow(app, answer, "lines", on_progress), out)


def dub_in_app(app: AppClient, srt: bytes, form: dict, out: Path, on_progress) -> LongformResult:
    answer = _post(app, "dub", data=_form(form), files={"file": ("subtitles.srt", srt)})
    return _fetch_stem(app, _follow(app, answer, "cues", on_progress), out)


def batch_in_app(app: AppClient, lines: bytes, kind: str, form: dict, out_dir: Path, on_progress) -> LongformResult:
    """The app makes the batch in its folder of the same name (a re-run resumes there); its zip is unpacked
    into ``out_dir`` and kept beside it, as a local run leaves them."""
    name = batch_name_for(out_dir.resolve().name)
    answer = _post(app, "batch", data=_form({**form, "name": name}), files={"file": (f"lines.{kind}", lines)})
    done = _follow(app, answer, "lines", on_progress)
    archive = out_dir.with_suffix(".zip")
    _download(app, f"{name}.zip", archive)
    _unpack(archive, out_dir)
    return LongformResult(
        "batch",
        None,
        (out_dir, archive),
        done["done"],
        done["total"],
        done["partial"],
        not_saved=_not_saved(done),
        flagged=done.get("flagged") or [],
        retaken=done.get("retaken") or [],
    )


def convert_batch_in_app(app: AppClient, items, skipped, form: dict, out_dir: Path, on_progress) -> LongformResult:
    """The recordings ``items`` (``longform.convert_batch.SourceItem``) uploaded and converted in the app's batch
    folder of ``out_dir``'s name (a re-run resumes there); its zip is unpacked into ``out_dir`` as for lines."""
    from cosyvoice_mac.request import MAX_BATCH_UPLOAD_BYTES

    size = sum(item.path.stat().st_size for item in items)
    if size > MAX_BATCH_UPLOAD_BYTES:
        raise AppError(
            f"the recordings come to {size / (1 << 20):.0f} MB; one batch sends at most "
            f"{MAX_BATCH_UPLOAD_BYTES >> 20} MB to the app. Split the folder, or add --local to convert here.",
            EXIT_REFUSED,
        )
    name = batch_name_for(out_dir.resolve().name)
    uploads = [("audio", (item.name, item.path.read_bytes())) for item in items]
    answer = _post(app, "batch", data=_form({**form, "name": name}), files=uploads)
    done = _follow(app, answer, "files", on_progress)
    archive = out_dir.with_suffix(".zip")
    _download(app, f"{name}.zip", archive)
    _unpack(archive, out_dir)
    report = done["report"] + [
        {"source": name, "file": None, "status": "not_audio", "reason": "not an audio file"} for name in skipped
    ]
    return LongformResult(
        "convert_batch",
        None,
        (out_dir, archive),
        done["done"],
        done["total"],
        done["partial"],
        report,
        not_saved=_not_saved(done),
    )


def _unpack(archive: Path, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(BytesIO(archive.read_bytes())) as files:
        for member in files.infolist():
            target = out_dir / Path(member.filename).name  # flat: the zip's folder is the batch's
            if not member.is_dir() and target.name:
                atomic_write(target, files.read(member))


def _form(fields: dict) -> dict:
    return {
        key: str(value).lower() if isinstance(value, bool) else str(value)
        for key, value in fields.items()
        if value is not None
    }


def _post(app: AppClient, kind: str, **content) -> httpx.Response:
    timeout = httpx.Timeout(30.0, read=None, write=120.0)
    built = app.http.build_request("POST", f"{LONGFORM_PATH}/{kind}", timeout=timeout, **content)
    answer = app.http.send(built, stream=True)
    if answer.status_code != 200:
        answer.read()
        answer.close()
        raise app.explain(answer)
    return answer


def _follow(app: AppClient, answer: httpx.Response, label: str, on_progress) -> dict:
    """Read the job's events to its end; the ``done`` event. Closing early (Ctrl-C) stops the job in the app."""
    try:
        for line in answer.iter_lines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[len("data:") :])
            if event["type"] == "progress":
                on_progress(Progress(event["done"], event["total"], event["elapsed_s"], label))
            elif event["type"] == "note":
                print(f"note: {event['message']}", file=sys.stderr)
            elif event["type"] == "error":
                raise app.explain_error(event.get("error") or event, _retry_after(event))
            elif event["type"] == "done":
                return event
    except httpx.TransportError as error:
        raise AppError(
            f"the connection to the app broke off ({type(error).__name__}: {error}); if the app is still running, "
            "try again",
            EXIT_TRY_LATER,
        ) from None
    finally:
        answer.close()
    raise AppError(f"the app at {app.url} ended the job without a result")


def _fetch_stem(app: AppClient, done: dict, out: Path) -> LongformResult:
    """The result's files, renamed from the app's stem to ``out``'s (the first file is the joined WAV)."""
    names, not_saved = done["files"], _not_saved(done)
    if not names:
        return LongformResult(
            done["kind"],
            None,
            (),
            done["done"],
            done["total"],
            done["partial"],
            done["report"],
            not_saved,
            flagged=done.get("flagged") or [],
            retaken=done.get("retaken") or [],
        )
    stem = Path(names[0]).stem
    out = Path(out)
    paths = []
    for name in names:
        target = out.parent / (out.name + name[len(stem) :] if name.startswith(stem) else name)
        _download(app, name, target)
        paths.append(target)
    return LongformResult(
        done["kind"],
        paths[0],
        tuple(paths),
        done["done"],
        done["total"],
        done["partial"],
        done["report"],
        not_saved,
        done.get("timestamps"),
        done.get("flagged") or [],
        done.get("retaken") or [],
    )


def _not_saved(done: dict) -> str | None:
    """Why the app could not keep the result in its outputs/ (None: it did), from its ``done`` event."""
    return None if done.get("saved", True) else done.get("warning") or "the app did not save the result"


def _retry_after(event: dict) -> str | None:
    seconds = event.get("retry_after")
    return None if seconds is None else str(seconds)


def _download(app: AppClient, name: str, target: Path) -> None:
    from cosyvoice_mac.paths import atomic_write

    answer = app.http.get(f"{FILES_PATH}/{name}", timeout=httpx.Timeout(30.0, read=300.0))
    if answer.status_code != 200:
        raise app.explain(answer)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, answer.content)
