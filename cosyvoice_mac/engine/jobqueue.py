"""The UI process's book of jobs: a bounded waiting line, the running job, finished jobs, listeners.

Listening has one form: ``subscribe()`` gives a Listener that receives every event from then on, and its
owner drains and closes it (an owner that cannot block a thread on it, such as an event loop, passes
``wake``: called after each event arrives). Nothing else buffers events: a finished job keeps only its
terminal event (small: the result names the output file), for at most KEEP_FINISHED jobs.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable, Iterator

from cosyvoice_mac.engine import jobs
from cosyvoice_mac.engine.jobs import EngineError, Job, JobCancelled, JobFailed, JobResult, QueueFull
from cosyvoice_mac.engine.messages import Event, Queued, ending

KEEP_FINISHED = 500  # finished jobs remembered for result() / events()
RECENT_RUNS = 20  # finished jobs whose running time estimates when a place frees up


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


class JobQueue:
    """Owns the waiting jobs (FIFO, at most ``max_waiting``), the running one, the finished ones and
    the listeners of their events. Callers hold ``lock`` (re-entrant) around compound changes."""

    def __init__(self, max_waiting: int, lock: threading.RLock):
        if max_waiting < 1:
            raise ValueError(f"the queue must hold at least 1 waiting job, not {max_waiting}")
        self.max_waiting = max_waiting
        self.lock = lock
        self.pending: deque[JobRecord] = deque()
        self.running: JobRecord | None = None
        self._records: OrderedDict[str, JobRecord] = OrderedDict()
        self._seq = itertools.count(1)
        self._subscribers: list[Listener] = []
        self._run_seconds: deque[float] = deque(maxlen=RECENT_RUNS)

    def add(self, job: Job) -> JobRecord:
        with self.lock:
            if job.job_id in self._records:
                raise EngineError(f"job id {job.job_id} was already submitted")
            if len(self.pending) >= self.max_waiting:
                retry = self.retry_after_s()
                position = len(self.pending) + 1
                raise QueueFull(
                    f"the queue is full ({self.max_waiting} jobs waiting, {1 if self.running else 0} "
                    f"running), so this job would have been number {position} in line; try again "
                    + (f"in about {retry:.0f} s" if retry is not None else "when one has finished"),
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
            if self.running is not None and self.running.job.job_id == job_id:
                return 0
            for index, record in enumerate(self.pending):
                if record.job.job_id == job_id:
                    return index + 1
        return None

    def start_next(self) -> JobRecord | None:
        """Move the first waiting job to running (None if one runs already or none waits)."""
        with self.lock:
            if self.running is not None or not self.pending:
                return None
            record = self.pending.popleft()
            record.state, record.sent_at = jobs.RUNNING, time.monotonic()
            self.running = record
            self._announce_positions()
            return record

    def requeue_first(self, record: JobRecord) -> None:
        """Put a job the worker never started back at the head of the line."""
        with self.lock:
            if self.running is record:
                self.running = None
            record.state, record.sent_at, record.acknowledged = jobs.QUEUED, None, False
            self.pending.appendleft(record)
            self._announce_positions()

    def remove_waiting(self, record: JobRecord, message: str) -> None:
        with self.lock:
            self.pending.remove(record)
            self.finish(record, jobs.CANCELLED, message)
            self._announce_positions()

    def finish(self, record: JobRecord, kind: str, message: str, result: JobResult | None = None) -> None:
        """End ``record`` with the terminal event the engine decided (once; later calls are ignored)."""
        self.end(record, ending(kind, record.job.job_id, message, result))

    def end(self, record: JobRecord, terminal: Event) -> None:
        """End ``record`` with ``terminal`` (the worker's own, or one the engine made); once only."""
        with self.lock:
            if record.done.is_set():
                return
            if self.running is record:
                self.running = None
            if terminal.kind == jobs.DONE and record.sent_at is not None:
                self._run_seconds.append(time.monotonic() - record.sent_at)
            record.state = terminal.kind
            record.terminal = terminal
            record.done.set()
            self.emit(record.terminal)
            finished = [key for key, value in self._records.items() if value.done.is_set()]
            for key in finished[: max(0, len(finished) - KEEP_FINISHED)]:
                del self._records[key]

    def fail_waiting(self, kind: str, message: str) -> None:
        with self.lock:
            for record in list(self.pending):
                self.finish(record, kind, message)
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
