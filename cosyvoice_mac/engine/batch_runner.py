"""Several jobs spoken together in the worker: the engine's queue coalesced them (``jobqueue.start_batch``).

Each job keeps its own life: its own Started, Progress and terminal event, its own cancel flag, its own voice
and seed (so its tokens are the ones it gets alone: ``pipeline/batch.py``). A job whose voice or text is bad
fails alone, before or during the batch; a job cancelled while batched ends Cancelled at once and its lines
are dropped, the others go on; the batch stops only when every job in it was cancelled. Where the batch as a
whole fails (a device error, MLX giving way to PyTorch), each job not yet ended runs again alone, with
``WorkerRuntime.run``'s fallbacks. Imported only by the worker.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

from cosyvoice_mac.engine.job_output import Attempt
from cosyvoice_mac.engine.messages import Cancelled, Failed, Fault, Progress, Started
from cosyvoice_mac.engine.takes import JobTakes, TakeChecker
from cosyvoice_mac.errors import CosyVoiceError, InputError

if TYPE_CHECKING:
    from cosyvoice_mac.engine.jobs import Job


@dataclass
class _Member:
    """One job of the batch: what it asked, its voice, its glossary hits and the pieces made so far."""

    job: Job
    should_stop: Callable[[], bool]
    voice_entry: dict | None
    request: object = None
    speaker: object = None
    cache_source: str = "none"
    glossary_hits: list = field(default_factory=list)
    note: str | None = None
    pieces: list = field(default_factory=list)
    prompt_s: float = 0.0
    ended: bool = False


def batch_lines_of(pipeline) -> int:
    """The most jobs ``pipeline`` speaks together (``CosyVoice.batch_lines``); 1 where it speaks one at a time
    (the preview voice) or where the ``batch_lines`` setting is unusable (each job then says why)."""
    lines = getattr(pipeline, "batch_lines", None)
    if lines is None:
        return 1
    try:
        return lines()
    except InputError:
        return 1


def run_jobs_together(runtime, batch: list[Job], stops: list, voice_entries: list) -> None:
    """Run ``batch`` (non-streamed syntheses) as one batch on the pipeline of ``runtime`` (the worker's
    ``WorkerRuntime``, which calls this); never raises for a job."""
    if len(batch) == 1 or batch_lines_of(runtime.pipeline) == 1:
        for job, should_stop, entry in zip(batch, stops, voice_entries):
            runtime.run(job, should_stop, entry)
        return
    started = time.perf_counter()
    members = [_Member(job, stop, entry) for job, stop, entry in zip(batch, stops, voice_entries)]
    for member in members:
        runtime.send(Started(member.job.job_id, str(runtime.pipeline.device)))
    live = [member for member in members if _prepared(runtime, member)]
    if not live:
        return
    try:
        _speak(runtime, live)
    except Exception:  # the batch as a whole failed: each job still open runs alone, with run()'s fallbacks
        for member in live:
            if not member.ended:
                member.ended = True
                runtime.run(member.job, member.should_stop, member.voice_entry)
        return
    for member in live:
        if not member.ended:
            _deliver(runtime, member, started, len(live))


def _prepared(runtime, member: _Member) -> bool:
    """The job's request (glossary applied) and voice; False when it ended here (cancelled, or failed alone)."""
    job = member.job
    if member.should_stop():
        _end(runtime, member, Cancelled(job.job_id))
        return False
    clock = time.perf_counter()
    try:
        member.request, member.glossary_hits, member.note = runtime.glossary.apply(job.request)
        member.speaker, member.cache_source = runtime.prompts.for_request(
            runtime.pipeline, member.request, member.voice_entry
        )
    except InputError as error:
        _end(runtime, member, Failed(job.job_id, str(error), fault=Fault.INPUT, field=error.field))
        return False
    except CosyVoiceError as error:
        _end(runtime, member, Failed(job.job_id, str(error), fault=Fault.ENGINE))
        return False
    except Exception as error:
        message = f"synthesis failed: {type(error).__name__}: {error}"
        _end(runtime, member, Failed(job.job_id, message, traceback.format_exc(limit=8), fault=Fault.ENGINE))
        return False
    member.prompt_s = time.perf_counter() - clock
    return True


def _speak(runtime, live: list[_Member]) -> None:
    """The pipeline's batch over ``live``: each piece to its job, a line's error or a cancel ending its job alone."""

    def everyone_stopped() -> bool:
        return all(member.ended or member.should_stop() for member in live)

    requests = [member.request for member in live]
    speakers = [member.speaker for member in live]
    for index, outcome in runtime.pipeline.run_batch(requests, speakers, everyone_stopped, batch_size=len(live)):
        member = live[index]
        if member.ended:
            continue
        if member.should_stop():
            _end(runtime, member, Cancelled(member.job.job_id))
            continue
        if isinstance(outcome, InputError):  # bad input found late: this job fails, the batch goes on
            _end(runtime, member, Failed(member.job.job_id, str(outcome), fault=Fault.INPUT, field=outcome.field))
            continue
        member.pieces.append(outcome)
        runtime.send(
            Progress(
                member.job.job_id,
                outcome.segment_index,
                outcome.segment_count,
                outcome.text,
                outcome.mode,
                outcome.duration_s,
                outcome.is_final_chunk,
                None,
                None,
            )
        )


def _deliver(runtime, member: _Member, started: float, batch_size: int) -> None:
    member.ended = True
    if member.should_stop() or not member.pieces:
        runtime._finish(Cancelled(member.job.job_id))
        return
    timings: dict[str, float] = {"prompt": member.prompt_s}
    for piece in member.pieces:
        for stage, seconds in piece.timings.items():
            timings[stage] = timings.get(stage, 0.0) + seconds
    pieces, takes = _checked(runtime, member)
    if member.note:
        pieces[-1] = replace(pieces[-1], notes=[*pieces[-1].notes, member.note])
    device = str(runtime.pipeline.device)
    outcome = Attempt(pieces, member.speaker, member.cache_source, timings, member.request.mode, device)
    outcome = outcome._replace(takes=takes)
    runtime._glossary_hits = member.glossary_hits
    runtime.deliver(member.job, outcome, started, batch_size=batch_size)


def _checked(runtime, member: _Member) -> tuple[list, JobTakes | None]:
    """The job's sentences as the take check settles them (each checked, a failing one retaken alone with a new
    seed), when the job is checked; as made otherwise. A batch's checks come after its lines are made: the
    checking thread runs beside the synthesis only on the solo path."""
    request, pipeline = member.request, runtime.pipeline
    if not TakeChecker.wanted(pipeline, request, False):
        return list(member.pieces), None
    takes, pieces = JobTakes(), []
    with runtime.takes.beside(pipeline, request, member.speaker, member.should_stop, takes) as sentences:
        for made in member.pieces:
            pieces.extend(sentences.add(made))
        pieces.extend(sentences.rest())
    return pieces, takes


def _end(runtime, member: _Member, event) -> None:
    member.ended = True
    runtime._finish(event)
