"""The APIs' one link to the engine: every engine name they use is here.

Both public interfaces (the OpenAI-compatible HTTP API and the page's Gradio ``/synthesize``) build the
contract's :class:`~cosyvoice_mac.request.Request` where a request enters, inside :func:`contract_checks`,
and find voices and models, submit, follow and cancel through :class:`EngineLink`, so a change of the
engine's contract is a change of this module only. Errors come out as :class:`ApiError` with the HTTP
status the client should see. Following a job waits on its feed's ``arrived`` event, which the engine's
thread sets on the event loop (``loop.call_soon_threadsafe``): nothing polls.
"""

from __future__ import annotations

import asyncio
import math
import queue
from contextlib import contextmanager
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Iterator

import numpy as np

from cosyvoice_mac.api.errors import UNAVAILABLE_RETRY_AFTER_S, ApiError, bad_request, job_failure
from cosyvoice_mac.api.voice_door import VoiceDoor
from cosyvoice_mac.engine import EngineError, Job, JobResult, QueueFull
from cosyvoice_mac.engine import jobs as engine_jobs
from cosyvoice_mac.engine.host import ModelHost
from cosyvoice_mac.engine.messages import Cancelled, Done, EngineState, Progress
from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.preview import PREVIEW
from cosyvoice_mac.preview.labels import PREVIEW_LABEL
from cosyvoice_mac.request import Request

OPENAI_MODEL_ALIASES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")  # "whatever model is loaded"

# The contract's field names -> this API's body fields.
PARAMS = {
    "text": "input",
    "voice": "voice",
    "transcript": "prompt_text",
    "instruct": "instructions",
    "mode": "instructions",
    "seed": "seed",
    "speed": "speed",
    "trim": "trim",
    "loudness_lufs": "loudness_lufs",
    "prompt_audio": "prompt_audio",
    "source": "audio",  # the recording to convert, the conversion route's file 'audio'
}


@dataclass
class Ticket:
    """One submitted job, the event feed that follows it (``arrived`` is set on the event loop each time
    the engine puts an event in it), and what to do once it is over (``on_end``: e.g. remove the uploaded
    prompt it was spoken from)."""

    job_id: str
    feed: queue.Queue | None
    arrived: asyncio.Event | None = None
    on_end: Callable[[], None] | None = None
    recording: bool = False  # the voice is a recording sent with the request (not a saved voice)


@contextmanager
def contract_checks() -> Iterator[None]:
    """Around building a :class:`Request` where an API request enters: a broken rule (RequestError) becomes
    a 400 naming the API's own field for it."""
    try:
        yield
    except RequestError as error:
        raise _contract_error(error) from error


class EngineLink(VoiceDoor):
    """Owns nothing but the running estimate of a job's duration (for ``Retry-After``); the model host
    owns the engine, the engine owns the queue and the voice library."""

    def __init__(self, host: ModelHost):
        self.host = host
        self._job_seconds = 5.0

    # -- state -------------------------------------------------------------------------------------
    def _engine(self):
        engine = self.host.engine
        if engine is None:
            raise ApiError(
                503,
                "no model is running; install one (bash run.sh download cosyvoice3) or start the preview voice",
                code="model_unavailable",
                headers={"Retry-After": "30"},
            )
        return engine

    def check_ready(self, wait_for_model: bool = False) -> None:
        """503 while the model loads (unless the caller will wait for it) or after it failed to start."""
        state = self.host.status().get("state")
        if state in EngineState.LOADING and not wait_for_model:
            raise ApiError(
                503,
                "the model is loading; try again in a few seconds",
                code="model_loading",
                headers={"Retry-After": "5"},
            )
        if state in (EngineState.ERROR, EngineState.STOPPED, EngineState.CLOSED):
            reason = self.host.status().get("last_error") or "it is not running"
            raise ApiError(
                503, f"the model is not available: {reason}", code="model_unavailable", headers={"Retry-After": "30"}
            )

    @property
    def uses_preview(self) -> bool:
        current = self.host.current
        return current is not None and current.is_preview

    # -- models ------------------------------------------------------------------------------------
    def models(self) -> list[dict]:
        current = self.host.current
        workers = self.host.status().get("workers") or []  # what runs the loaded model: machine, engine, load
        listed = []
        for choice in self.host.choices():
            folder = choice.path
            created = int(folder.stat().st_mtime) if folder is not None and folder.exists() else 0
            listed.append(
                {
                    "id": PREVIEW if choice.is_preview else choice.name,
                    "object": "model",
                    "created": created,
                    "owned_by": "cosyvoice-mac",
                    "version": choice.version,
                    "loaded": current is not None and choice.name == current.name,
                    "preview": choice.is_preview,
                    **({"label": PREVIEW_LABEL} if choice.is_preview else {}),
                    **({"workers": workers} if current is not None and choice.name == current.name else {}),
                }
            )
        return listed

    def check_model(self, model: str) -> None:
        """404 for a name we do not know; 409 for an installed model that is not the loaded one."""
        if model in OPENAI_MODEL_ALIASES:
            return
        known = {entry["id"]: entry for entry in self.models()}
        if model not in known:
            names = ", ".join(list(known) + list(OPENAI_MODEL_ALIASES))
            raise ApiError(404, f"there is no model {model!r}; known: {names}", code="model_not_found", param="model")
        if not known[model]["loaded"]:
            loaded = next((name for name, entry in known.items() if entry["loaded"]), "none")
            raise ApiError(
                409,
                f"model {model!r} is installed but not loaded (the loaded one is {loaded!r}); "
                "switch it on the page, or ask for the loaded one",
                code="model_not_loaded",
                param="model",
            )

    # -- jobs --------------------------------------------------------------------------------------
    def submit(self, request: Request, interface: str, wait_for_model: bool = False, listen: bool = True) -> Ticket:
        """Queue a valid request as a job recorded with ``interface``: 429 when the queue is full, 503 while
        the model loads (with ``wait_for_model`` the job waits in the queue instead). ``listen`` gives the
        ticket an event feed for :meth:`follow` (opened before the job exists, so none is missed; call it
        on the event loop that will follow the ticket)."""
        engine = self._engine()
        self.check_ready(wait_for_model)
        job = Job(request, interface=interface)
        arrived = asyncio.Event() if listen else None
        feed = engine.subscribe(_waker(asyncio.get_running_loop(), arrived)) if listen else None
        try:
            engine.submit(job)
        except RequestError as error:  # a malformed inline tag: the input's 400, before the job is queued
            if feed is not None:
                engine.unsubscribe(feed)
            raise _contract_error(error) from error
        except EngineError as error:
            if feed is not None:
                engine.unsubscribe(feed)
            if isinstance(error, QueueFull):  # the queue's own words say when (the Gradio door shows only them)
                known = error.retry_after_s
                seconds = math.ceil(known) if known is not None else self.retry_after_s()
                raise ApiError(429, str(error), code="queue_full", headers={"Retry-After": str(seconds)}) from error
            raise ApiError(  # the engine is not running or its model is broken: not the request's fault
                503,
                str(error),
                code="model_unavailable",
                headers={"Retry-After": str(UNAVAILABLE_RETRY_AFTER_S)},
            ) from error
        return Ticket(job.job_id, feed, arrived, recording=request.voice.kind == "audio")

    def retry_after_s(self) -> int:
        """Seconds until a place in the queue is likely to free: about one job's duration."""
        return max(1, math.ceil(self._job_seconds))

    async def follow(self, ticket: Ticket) -> AsyncIterator[tuple[np.ndarray, int] | JobResult]:
        """Yield (samples, sample rate) for each streamed piece, then the JobResult. Raises ApiError when
        the job fails or is cancelled. Leaving the loop early (a client went away) cancels the job."""
        finished = False
        try:
            while True:
                ticket.arrived.clear()  # before looking: an event put after this sets it again
                try:
                    event = ticket.feed.get_nowait()
                except queue.Empty:
                    await ticket.arrived.wait()
                    continue
                if event.job_id != ticket.job_id:
                    continue
                if isinstance(event, Progress) and event.audio is not None:
                    yield np.asarray(event.audio, dtype=np.float32), int(event.sample_rate)
                elif event.terminal:
                    finished = True
                    yield self._outcome(event, ticket.recording)
                    return
        finally:
            if self.host.engine is not None:
                self.host.engine.unsubscribe(ticket.feed)
            if not finished:
                self.cancel(ticket.job_id)
            if ticket.on_end is not None:
                ticket.on_end()

    def run(self, request: Request, interface: str, timeout: float | None = None) -> JobResult:
        """Submit and wait, for the model too if it is loading (blocking: for callers on a worker thread,
        such as Gradio's)."""
        ticket = self.submit(request, interface, wait_for_model=True, listen=False)
        try:
            result = self._engine().result(ticket.job_id, timeout=timeout)
        except engine_jobs.JobFailed as failure:
            return self._outcome(failure.event, ticket.recording)
        except TimeoutError:
            self.cancel(ticket.job_id)
            raise ApiError(
                503, f"the job did not finish within {timeout:g} s; it was cancelled", code="timeout"
            ) from None
        return self._outcome(Done(ticket.job_id, result))

    def cancel(self, job_id: str) -> None:
        engine = self.host.engine
        if engine is not None:
            try:
                engine.cancel(job_id)
            except EngineError:  # already finished and forgotten
                pass

    def _outcome(self, event, recording: bool = False) -> JobResult:
        """The result of a job that ended in ``event``, or the ApiError its failure is (``recording``: the
        request's voice was a recording sent with it, so a fault of that audio names ``prompt_audio``)."""
        if isinstance(event, Done):
            seconds = event.result.timings.get("total")
            if seconds:
                self._job_seconds = 0.7 * self._job_seconds + 0.3 * float(seconds)
            return event.result
        if isinstance(event, Cancelled):
            raise ApiError(
                503, f"the job was cancelled: {event.message}", code="cancelled", headers={"Retry-After": "5"}
            )
        raise job_failure(event, self._param(event.field, recording))

    @staticmethod
    def _param(field: str | None, recording: bool) -> str | None:
        """The API's body field for the contract's ``field``: the prompt's recording is ``prompt_audio`` when
        it was uploaded with the request, else the saved ``voice`` it belongs to."""
        if field == "prompt_audio" and not recording:
            return "voice"
        return PARAMS.get(field, field)


def samples_of(result: JobResult) -> tuple[np.ndarray, int]:
    """A finished job's (N,) float32 samples and rate (read back from its saved WAV when not kept)."""
    return np.asarray(result.samples(), dtype=np.float32), result.sample_rate


def _waker(loop: asyncio.AbstractEventLoop, arrived: asyncio.Event) -> Callable[[], None]:
    """What the engine's thread calls after each event: set ``arrived`` on ``loop`` (never blocks)."""

    def wake() -> None:
        try:
            loop.call_soon_threadsafe(arrived.set)
        except RuntimeError:  # the loop has closed: nobody waits on this feed any more
            pass

    return wake


def _contract_error(error: RequestError) -> ApiError:
    """A 400 naming the failed check by the error's own ``field`` and ``code``."""
    return bad_request(str(error), error.code, PARAMS.get(error.field, error.field))
