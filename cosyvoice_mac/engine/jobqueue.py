"""The UI process's book of jobs: a bounded waiting line, the running job, finished jobs, listeners.

Listening has one form: ``subscribe()`` gives a Listener that receives every event from then on, and its
owner drains and closes it (an owner that cannot block a thread on it, such as an event loop, passes
``wake``: called after each event arrives). Nothing else buffers events: a finished job keeps only its
terminal event, made small (without the worker's status it carried; unsaved audio only for the newest
KEEP_AUDIO jobs), for at most KEEP_FINISHED jobs, so the book's memory is bounded however long the app runs.

The line is fair between the doors jobs come in by (the job's ``interface``: page, Gradio API, ``/v1``, CLI):
while several doors compete (a job waiting or running, or one refused lately), each is sure of its share of
the waiting places (``fair_share``) and takes more only while the others leave theirs unclaimed, so a flood
through one door cannot keep every place from another; a door alone may use them all.

Several non-streamed syntheses may run together, as one batch on the worker (issue 47: a decoding step reads
the LLM's weights once for all its lines). :meth:`JobQueue.start_batch` takes them from the head of the line:
only jobs that may share a batch (``batchable``), never past one that may not (no job overtakes an earlier one
that runs alone), and the doors' jobs in turn (a flood through one door fills a batch only where no other
door has a job waiting among them).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import queue
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable, Iterator

from cosyvoice_mac.engine import jobs
from cosyvoice_mac.engine.jobs import EngineError, Job, JobCancelled, JobFailed, JobResult, QueueFull
from cosyvoice_mac.engine.messages import Event, Fault, Queued, ending
from cosyvoice_mac.frontend.inline import tag_spans

KEEP_FINISHED = 64  # finished jobs remembered for result() / events() (~5 KB each: a soak of 150 reaches the bound)
KEEP_AUDIO = 8  # of those, the newest whose unsaved audio (a full disk) is kept for their callers
RECENT_RUNS = 20  # finished jobs whose running time estimates when a place frees up
DOOR_ACTIVE_S = 10.0  # a door refused this recently still competes for places (its client may be retrying)


@dataclass(frozen=True)
class QueueEntry:
    """One job in line as any front end may show it: 0 running, 1 next, ..."""

    job_id: str
    place: int
    interface: str | None
    text: str


@dataclass
class JobRecord:
    """One submitted job and what the UI process knows about it."""

    job: Job
    seq: int  # the worker's cancel flag compares against it
    state: str = jobs.QUEUED
    done: threading.Event = field(default_factory=threading.Event)
    terminal: Event | None = None
    sent_at: float | None = None
    acknowledged: bool = False  # the worker said "started"
    cancel_requested_at: float | None = None
    timed_out: bool = False
    queued_at: float = field(default_factory=time.monotonic)
    together: int = 1  # jobs it runs with, itself included (start_batch)


def batchable(job: Job) -> bool:
    """Whether ``job`` may run in a batch with others: a synthesis, not streamed (a stream's first audio would
    wait for the batch's lines; a voice conversion has its own path), spoken in one voice with no inline tags (a
    style's recording, a pause or a speed run is planned per segment, which only the solo path does)."""
    request = job.request
    if job.is_conversion or request.stream or getattr(request.voice, "style", None):
        return False
    return not tag_spans(request.text)


class JobQueue:
    """Owns the waiting jobs (FIFO, at most ``max_waiting``), the running ones (one, or a batch), the finished
    ones and the listeners of their events. Callers hold ``lock`` (re-entrant) around compound changes."""

    def __init__(self, max_waiting: int, lock: threading.RLock):
        if max_waiting < 1:
            raise ValueError(f"the queue must hold at least 1 waiting job, not {max_waiting}")
        self.max_waiting = max_waiting
        self.lock = lock
        self.pending: deque[JobRecord] = deque()
        self.batch: list[JobRecord] = []  # the jobs running now: one, a batch, or a cluster's side by side
        self._records: OrderedDict[str, JobRecord] = OrderedDict()
        self._seq = itertools.count(1)
        self._subscribers: list[Listener] = []
        self._run_seconds: deque[float] = deque(maxlen=RECENT_RUNS)
        self._door_refused: dict[str | None, float] = {}  # door -> when a job through it last found no place

    @property
    def running(self) -> JobRecord | None:
        """The first of the running jobs (None when none runs)."""
        return self.batch[0] if self.batch else None

    def _active_doors(self, now: float) -> set[str | None]:
        """Doors competing for places: those with a job waiting or running, or refused within DOOR_ACTIVE_S."""
        active = {record.job.interface for record in (*self.pending, *self.batch)}
        return active | {door for door, refused in self._door_refused.items() if now - refused <= DOOR_ACTIVE_S}

    def fair_share(self, door: str | None, now: float | None = None) -> int:
        """The waiting places ``door`` is sure of now: an equal share (rounded up) among the competing doors.
        It may take more while the other doors leave their own shares unclaimed."""
        now = time.monotonic() if now is None else now
        with self.lock:
            return max(1, math.ceil(self.max_waiting / len(self._active_doors(now) | {door})))

    def _refusal(self, door: str | None, now: float) -> str | None:
        """Why a job through ``door`` gets no place now (None: it gets one): the line is full, or the places
        left are the other competing doors' unclaimed shares."""
        free = self.max_waiting - len(self.pending)
        if free <= 0:
            return ""
        share = self.fair_share(door, now)
        held = {}
        for record in self.pending:
            held[record.job.interface] = held.get(record.job.interface, 0) + 1
        reserved = sum(max(0, share - held.get(other, 0)) for other in self._active_doors(now) - {door})
        if held.get(door, 0) >= share and free <= reserved:
            return f"; the {free} place(s) left are kept for requests from elsewhere"
        return None

    def add(self, job: Job) -> JobRecord:
        with self.lock:
            if job.job_id in self._records:
                raise EngineError(f"job id {job.job_id} was already submitted")
            now = time.monotonic()
            refusal = self._refusal(job.interface, now)
            if refusal is not None:
                self._door_refused[job.interface] = now
                retry = self.retry_after_s()
                position = len(self.pending) + 1
                raise QueueFull(
                    f"the queue is full ({self.max_waiting} jobs waiting, {len(self.batch)} "
                    f"running), so this job would have been number {position} in line{refusal}; try again "
                    + (f"in about {math.ceil(retry)} s" if retry is not None else "when one has finished"),
                    position=position,
                    retry_after_s=retry,
                )
            record = JobRecord(job=job, seq=next(self._seq))
            self._records[job.job_id] = record
            self.pending.append(record)
            self.emit(Queued(job.job_id, len(self.pending)))
            return record

    def retry_after_s(self) -> float | None:
        """When the running job should end and free a place: the median of recent running times, less
        what it ran already (at least 1 s); None before any job has finished."""
        with self.lock:
            if not self._run_seconds:
                return None
            typical = sorted(self._run_seconds)[len(self._run_seconds) // 2]
            ran = time.monotonic() - self.running.sent_at if self.running and self.running.sent_at else 0.0
            return max(1.0, typical - ran)

    def get(self, job_id: str) -> JobRecord:
        with self.lock:
            record = self._records.get(job_id)
        if record is None:
            raise EngineError(f"unknown job {job_id!r} (never submitted, or finished long ago)")
        return record

    def find(self, job_id: str | None) -> JobRecord | None:
        with self.lock:
            return self._records.get(job_id) if job_id else None

    def position(self, job_id: str) -> int | None:
        """0 while running, 1 for the next job to run, 2, ...; None once finished (or unknown)."""
        with self.lock:
            if any(record.job.job_id == job_id for record in self.batch):
                return 0
            for index, record in enumerate(self.pending):
                if record.job.job_id == job_id:
                    return index + 1
        return None

    def line(self) -> list[QueueEntry]:
        """The running job (place 0) and the waiting ones, in the order they run."""
        with self.lock:
            running = [QueueEntry(record.job.job_id, 0, record.job.interface, record.job.text) for record in self.batch]
            return running + [
                QueueEntry(record.job.job_id, place, record.job.interface, record.job.text)
                for place, record in enumerate(self.pending, start=1)
            ]

    def start_next(self) -> JobRecord | None:
        """Move the first waiting job to running (None if one runs already or none waits)."""
        started = self.start_batch(1)
        return started[0] if started else None

    def batch_candidates(self, limit: int, alongside: bool = False) -> list[JobRecord]:
        """The waiting jobs :meth:`start_batch` would start now (at most ``limit``): the first job, and while it is
        batchable, the batchable jobs behind it up to the first that is not, the doors taking turns (each door's
        own jobs in their order). None while jobs run, unless ``alongside`` (a cluster's worker with room)."""
        with self.lock:
            if (self.batch and not alongside) or not self.pending:
                return []
            head = self.pending[0]
            if limit <= 1 or not batchable(head.job):
                return [head]
            by_door: dict[str | None, deque[JobRecord]] = {}
            for record in self.pending:
                if not batchable(record.job):
                    break
                by_door.setdefault(record.job.interface, deque()).append(record)
            chosen: list[JobRecord] = []
            while len(chosen) < limit and by_door:
                for door in list(by_door):
                    chosen.append(by_door[door].popleft())
                    if not by_door[door]:
                        del by_door[door]
                    if len(chosen) == limit:
                        break
            return chosen

    def start_batch(self, limit: int, alongside: bool = False) -> list[JobRecord]:
        """Move the jobs of :meth:`batch_candidates` to running, together ([] if some run already, unless
        ``alongside``, or none waits)."""
        with self.lock:
            chosen = self.batch_candidates(limit, alongside)
            if not chosen:
                return []
            now = time.monotonic()
            for record in chosen:
                self.pending.remove(record)
                record.state, record.sent_at, record.together = jobs.RUNNING, now, len(chosen)
            self.batch.extend(chosen)
            self._announce_positions()
            return chosen

    def requeue_first(self, record: JobRecord) -> None:
        """Put a job the worker never started back at the head of the line."""
        with self.lock:
            if record in self.batch:
                self.batch.remove(record)
            record.state, record.sent_at, record.acknowledged = jobs.QUEUED, None, False
            self.pending.appendleft(record)
            self._announce_positions()

    def remove_waiting(self, record: JobRecord, message: str) -> None:
        with self.lock:
            self.pending.remove(record)
            self.finish(record, jobs.CANCELLED, message)
            self._announce_positions()

    def finish(
        self,
        record: JobRecord,
        kind: str,
        message: str,
        result: JobResult | None = None,
        fault: str = Fault.ENGINE,
        field: str | None = None,
    ) -> None:
        """End ``record`` with the terminal event the engine decided (once; later calls are ignored); a
        failure says whose ``fault`` it is (``messages.Fault``)."""
        self.end(record, ending(kind, record.job.job_id, message, result, fault, field))

    def end(self, record: JobRecord, terminal: Event) -> None:
        """End ``record`` with ``terminal`` (the worker's own, or one the engine made); once only."""
        with self.lock:
            if record.done.is_set():
                return
            if record in self.batch:
                self.batch.remove(record)
            if terminal.kind == jobs.DONE and record.sent_at is not None:
                self._run_seconds.append(time.monotonic() - record.sent_at)
            record.state = terminal.kind
            record.terminal = _kept(terminal)
            record.done.set()
            self.emit(terminal)  # listeners get it whole; the book keeps it small
            finished = [key for key, value in self._records.items() if value.done.is_set()]
            for key in finished[: max(0, len(finished) - KEEP_FINISHED)]:
                del self._records[key]
            for key in finished[max(0, len(finished) - KEEP_FINISHED) : max(0, len(finished) - KEEP_AUDIO)]:
                old = self._records[key]
                result = getattr(old.terminal, "result", None)
                if result is not None and result.audio is not None:
                    old.terminal = dataclasses.replace(old.terminal, result=dataclasses.replace(result, audio=None))

    def fail_waiting(self, kind: str, message: str, fault: str = Fault.ENGINE) -> None:
        with self.lock:
            for record in list(self.pending):
                self.finish(record, kind, message, fault=fault)
            self.pending.clear()

    # -- listening -----------------------------------------------------------------------------
    def emit(self, event: Event) -> None:
        with self.lock:
            for subscriber in self._subscribers:
                subscriber.put(event)

    def subscribe(self, wake: Callable[[], None] | None = None) -> "Listener":
        listener = Listener(self.unsubscribe, wake)
        with self.lock:
            self._subscribers.append(listener)
        return listener

    def unsubscribe(self, subscriber: "Listener") -> None:
        with self.lock:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)

    def result(self, job_id: str, timeout: float | None) -> JobResult:
        record = self.get(job_id)
        if not record.done.wait(timeout):
            raise TimeoutError(f"job {job_id} did not finish within {timeout} s")
        event = record.terminal
        if event.kind == jobs.DONE:
            return event.result
        raise (JobCancelled if event.kind == jobs.CANCELLED else JobFailed)(event)

    def _announce_positions(self) -> None:
        for index, record in enumerate(self.pending):
            self.emit(Queued(record.job.job_id, index + 1))


def _kept(terminal: Event) -> Event:
    """``terminal`` as the book keeps it: without the worker's status (the engine took what it needed from it
    when it arrived; it holds the whole precision plan and would be kept once per finished job)."""
    if getattr(terminal, "status", None) is not None:
        return dataclasses.replace(terminal, status=None)
    return terminal


class Listener(queue.Queue):
    """Every engine event from the moment it was made, in order, until ``close()``; its owner drains it.

    Use it as a context manager around ``submit`` so no event of the job is missed. ``wake`` is called
    (on the engine's thread, so it must not block) after every event put in, for an owner that waits on
    something other than this queue, e.g. an asyncio event set with ``loop.call_soon_threadsafe``.
    """

    def __init__(self, unsubscribe: Callable[["Listener"], None], wake: Callable[[], None] | None = None):
        super().__init__()
        self._unsubscribe, self._wake = unsubscribe, wake

    def put(self, item, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        if self._wake is not None:
            self._wake()

    def close(self) -> None:
        self._unsubscribe(self)

    def __enter__(self) -> "Listener":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def of(self, job_id: str, timeout: float | None = None) -> Iterator[Event]:
        """This job's events as they come, ending with its terminal one; TimeoutError past ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                event = self.get(timeout=remaining)
            except queue.Empty:
                raise TimeoutError(f"job {job_id} did not finish within {timeout} s") from None
            if event.job_id != job_id:
                continue
            yield event
            if event.terminal:
                return

    def wait_for(self, job_id: str, kinds, timeout: float | None = None) -> Event:
        """The first event of ``job_id`` whose kind is in ``kinds``; EngineError if the job ends first."""
        kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
        for event in self.of(job_id, timeout):
            if event.kind in kinds:
                return event
        raise EngineError(f"job {job_id} ended ({event.kind}: {event.message}) without a {'/'.join(kinds)} event")
