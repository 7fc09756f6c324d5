"""How a job's lines move over the cluster: in groups, each worker kept busy, a lost worker's groups given to
the others, the job stopped everywhere at once.

Each worker has at most ``pool.GROUPS_IN_FLIGHT`` groups in flight (one speaking, one waiting, so it never waits
for the driver); the next group goes to whichever worker answers first. A group whose worker dies
(the actor killed, its machine gone) goes back to the head of the line and is sent to another worker; the
lines a worker returns are only outcomes here, and only the driver saves a line, so a line is saved once
however often it was sent. The driver's own thread drives all of it, while it waits for a line.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass, field

from cosyvoice_mac.cluster import ClusterError, ClusterStopped, said_by
from cosyvoice_mac.cluster.pool import GROUPS_IN_FLIGHT, Worker, WorkerPool
from cosyvoice_mac.cluster.wire import LineFailed, LineMade, LineOutcome, SourceParcel
from cosyvoice_mac.engine.jobs import Job
from cosyvoice_mac.engine.messages import Failed, Fault

GROUPS_PER_WORKER = 4  # a job's lines are cut into about this many groups per worker, for an even spread
MAX_GROUP_LINES = 8
MAX_TRIES = 3  # a group lost with this many workers fails its lines instead of taking another down
POLL_S = 0.25  # how often a wait looks at Stop


def group_size(lines: int, workers: int) -> int:
    """Lines per group: about GROUPS_PER_WORKER groups per worker (an even spread, and a lost worker takes
    little back), at most MAX_GROUP_LINES (what a worker speaks in one batch)."""
    return max(1, min(MAX_GROUP_LINES, math.ceil(lines / max(1, workers * GROUPS_PER_WORKER))))


@dataclass
class Group:
    """Lines that travel together, and how many workers were lost while speaking them."""

    jobs: list[Job]
    sources: dict[str, SourceParcel] = field(default_factory=dict)  # job id -> the recording it converts
    tries: int = 0


@dataclass
class LostWorker:
    """A worker that died during the job: who, why, and how many lines it took back to the others."""

    name: str
    reason: str
    lines_resent: int


class Dispatcher:
    """Owns a job's lines on the cluster: the groups waiting, the groups in flight on each worker (and so each
    worker's load), the outcomes not yet asked for, what each worker made, and the workers lost."""

    def __init__(self, pool: WorkerPool):
        import ray

        self._ray = ray
        self.pool = pool
        self.waiting: deque[Group] = deque()
        self.in_flight: dict[object, tuple[Worker, Group, int]] = {}  # ref -> (worker, group, its number)
        self.outcomes: dict[str, LineOutcome] = {}
        self.made: dict[str, int] = {worker.name: 0 for worker in pool.workers}  # lines, by worker
        self.lost: dict[str, LostWorker] = {}  # by worker name
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # ``stop`` reads the groups in flight from another thread

    # -- what the job asks -------------------------------------------------------------------------------
    def send(self, jobs: list[Job], first: bool = False, sources: dict[str, SourceParcel] | None = None) -> None:
        """Queue ``jobs`` in groups (``first``: ahead of the waiting ones: a line asked for out of turn);
        ``sources``: job id -> the recording a conversion job re-speaks, which travels with its group."""
        size, sources = group_size(len(jobs), len(self.pool.alive())), sources or {}
        groups = [
            Group(part, {job.job_id: sources[job.job_id] for job in part if job.job_id in sources})
            for part in (jobs[start : start + size] for start in range(0, len(jobs), size))
        ]
        if first:
            self.waiting.extendleft(reversed(groups))
        else:
            self.waiting.extend(groups)

    def outcome(self, job_id: str) -> LineOutcome:
        """Wait for ``job_id``'s outcome (sent with ``send``), moving every line meanwhile. ClusterStopped once
        ``stop`` was called; ClusterError when no worker is left."""
        while job_id not in self.outcomes:
            if self._stopping.is_set():
                raise ClusterStopped("stopped: the lines on the cluster were cancelled")
            self._fill()
            if not self.in_flight:
                raise ClusterError(f"line {job_id[:8]} was never sent to the cluster")  # a bug of the caller
            ready, _ = self._ray.wait(list(self.in_flight), num_returns=1, timeout=POLL_S)
            for ref in ready:
                self._collect(ref)
        return self.outcomes.pop(job_id)

    def load(self) -> dict[str, int]:
        """Lines sent to each live worker and not yet answered (the status panel's load)."""
        with self._lock:
            flying = list(self.in_flight.values())
        return {
            worker.name: sum(len(group.jobs) for owner, group, _ in flying if owner is worker)
            for worker in self.pool.alive()
        }

    def forget(self) -> None:
        """The job needs no more lines: drop the waiting groups and cancel those in flight."""
        self.waiting.clear()
        self.outcomes.clear()
        self._cancel_in_flight()

    def stop(self) -> None:
        """Stop the job everywhere (from any thread: Ctrl-C's): every worker cancels this job's groups at the
        next sentence, and the wait for a line ends with ClusterStopped."""
        self._stopping.set()
        self._cancel_in_flight()

    # -- moving lines -----------------------------------------------------------------------------------
    def _fill(self) -> None:
        """Send waiting groups to the live workers with room, the least busy first."""
        workers = self.pool.alive()
        if not workers and self.waiting:
            lost = ", ".join(f"{lost.name} ({lost.reason})" for lost in self.lost.values())
            raise ClusterError(f"every worker of the cluster was lost ({lost}); the lines made so far are kept")
        busy = {worker.name: 0 for worker in workers}
        for worker, _, _ in self.in_flight.values():
            busy[worker.name] = busy.get(worker.name, 0) + 1
        while self.waiting:
            free = [worker for worker in workers if busy[worker.name] < GROUPS_IN_FLIGHT]
            if not free:
                return
            worker = min(free, key=lambda candidate: busy[candidate.name])
            group, number = self.waiting.popleft(), self.pool.next_group_number()
            ref = worker.handle.speak_group.remote(number, group.jobs, group.sources)
            with self._lock:
                self.in_flight[ref] = (worker, group, number)
            busy[worker.name] += 1

    def _collect(self, ref) -> None:
        with self._lock:
            worker, group, _ = self.in_flight.pop(ref)
        errors = self._ray.exceptions
        try:
            answers = self._ray.get(ref)
        except errors.RayTaskError as error:  # the worker's own code raised: a bug there, not a lost worker
            cause = said_by(error, last=True)
            for job in group.jobs:
                event = Failed(job.job_id, f"the worker {worker.name} failed on this line: {cause}", fault=Fault.ENGINE)
                self.outcomes[job.job_id] = LineFailed(job.job_id, event, worker.name)
            return
        except errors.RayError as error:  # the actor died, or its machine left with the answer
            self._lose(worker, error, len(group.jobs))
            self._resend(group)
            return
        for answer in answers:
            self.outcomes[answer.job_id] = answer
            self.made[worker.name] += isinstance(answer, LineMade)

    def _lose(self, worker: Worker, error: Exception, lines: int) -> None:
        if worker.name in self.lost:  # its other groups in flight come back the same way
            self.lost[worker.name].lines_resent += lines
            return
        reason = said_by(error, limit=200)
        self.lost[worker.name] = LostWorker(worker.name, reason, lines)
        self.pool.lose(worker)

    def _resend(self, group: Group) -> None:
        group.tries += 1
        if group.tries >= MAX_TRIES:
            message = f"{group.tries} workers were lost while speaking this line; it was not made"
            for job in group.jobs:
                self.outcomes[job.job_id] = LineFailed(
                    job.job_id, Failed(job.job_id, message, fault=Fault.RESTARTED), ""
                )
            return
        self.waiting.appendleft(group)

    def _cancel_in_flight(self) -> None:
        """Have each worker cancel this job's groups it holds (never another job's)."""
        with self._lock:
            numbers: dict[str, tuple[Worker, list[int]]] = {}
            for worker, _, number in self.in_flight.values():
                numbers.setdefault(worker.name, (worker, []))[1].append(number)
        for worker, held in numbers.values():
            if worker.alive:
                try:
                    worker.handle.stop.remote(held)
                except Exception:  # a worker that is going away stops anyway
                    pass
