"""A long job's answer over HTTP: the job runs on a thread and its progress and outcome stream to the client as
server-sent events (``note``, ``progress``, then ``done`` or ``error``; see ``longform_routes``). A client that
disconnects stops the job between lines and cancels the line in flight.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from pathlib import Path
from typing import AsyncIterator

from fastapi import Request
from fastapi.responses import StreamingResponse

from cosyvoice_mac.api.errors import RESTART_RETRY_AFTER_S, ApiError, bad_request, job_failure
from cosyvoice_mac.engine.jobs import JobFailed
from cosyvoice_mac.engine.messages import Failed
from cosyvoice_mac.errors import CosyVoiceError, InputError
from cosyvoice_mac.longform.speakers import EngineSpeak

LOG = logging.getLogger("cosyvoice_mac.api")


def stream_job(request: Request, speaker: EngineSpeak, job) -> StreamingResponse:
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
            "retaken": result.retaken,  # the lines a retake made again
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
