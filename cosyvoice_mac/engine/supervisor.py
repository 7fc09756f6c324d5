"""The model worker's keeper: one thread that (re)starts the worker process, watches its heartbeat,
replaces it when it dies or wedges, stops jobs that overrun, and feeds it one job or task at a time.

Nothing here imports torch. The engine (:mod:`.client`) owns the job queue, the task book and the voice
library and shares its lock; every change of state here happens under that lock.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable

from cosyvoice_mac.engine import jobs
from cosyvoice_mac.engine.jobqueue import JobQueue, JobRecord, batchable
from cosyvoice_mac.engine.jobs import Command, EngineError
from cosyvoice_mac.engine.messages import (
    Cancelled,
    DeviceFallback,
    EngineState,
    Event,
    Failed,
    Fault,
    LoadFailed,
    Ready,
    Restarting,
    Started,
    TaskDone,
    TaskError,
    WorkerDied,
    WorkerStatus,
)
from cosyvoice_mac.engine.tasks import TaskBook
from cosyvoice_mac.engine.voice_library import VoiceLibrary
from cosyvoice_mac.engine.worker import HEARTBEAT_S, WorkerConfig, WorkerProcess

POLL_S = 0.05
# A worker whose heartbeat has not moved for ``liveness_timeout_s`` (this many times that while it starts
# up, when imports and loading may hold it up) is killed and replaced; after a third of that the status
# says "not answering". No job is dispatched to a worker silent for DISPATCH_SILENCE_S: the pipe could block.
STARTUP_LIVENESS_FACTOR = 3.0
DISPATCH_SILENCE_S = 2.0
# How long a batchable job at the head of the line waits for others to join its batch (issue 47): a long-form
# job hands its lines over together, well within it; a lone request loses no more than this.
COALESCE_WAIT_S = 0.05


@dataclass
class Restart:
    """One (re)start of the worker; every caller that asks while it is unresolved shares it."""

    reason: str
    begun: bool = False
    ok: bool = False
    message: str = ""
    done: threading.Event = field(default_factory=threading.Event)

    def resolve(self, ok: bool, message: str) -> None:
        if not self.done.is_set():
            self.ok, self.message = ok, message
            self.done.set()


@dataclass
class SupervisorLimits:
    """How long the supervisor waits for each thing (seconds), and how often a load may fail in a row."""

    start_timeout_s: float = 900.0
    stop_timeout_s: float = 10.0
    cancel_grace_s: float = 10.0
    job_timeout_s: float | None = None
    max_load_failures: int = 3
    liveness_timeout_s: float = 30.0


class WorkerSupervisor:
    """Owns the worker process and what is known of it: ``state`` (an ``EngineState`` name), its last
    ``worker_status``, the pending ``restart``, the load failures in a row, the ``last_error``, the device later
    workers start on and the ``restarts`` count.
    """

    def __init__(
        self,
        config: WorkerConfig,
        queue: JobQueue,
        tasks: TaskBook,
        voices: VoiceLibrary,
        lock: threading.RLock,
        limits: SupervisorLimits,
        start_method: str = "auto",
        worker_factory: Callable[[WorkerConfig], WorkerProcess] | None = None,
    ):
        self.config, self.queue, self.tasks, self.voices = config, queue, tasks, voices
        self.lock, self.limits, self.start_method = lock, limits, start_method
        # What runs the jobs: a worker process on this machine, or a stand-in with its interface (the workers of
        # a Ray cluster, ``cluster.queue_worker``); the queue, its rules and this keeper stay the same.
        self.worker_factory = worker_factory or partial(WorkerProcess, start_method=start_method)
        self.worker: WorkerProcess | None = None
        self.state = EngineState.STOPPED
        self.worker_status: WorkerStatus | None = None
        self.restart: Restart | None = None
        self.load_failures = 0
        self.load_error: str | None = None
        self.last_error: str | None = None
        self.device_override: str | None = None
        self.restarts = 0
        self.silent_s = 0.0  # how long the worker has not answered, once that is worth saying
        self.closing = False
        self.thread: threading.Thread | None = None

    # -- asked by the engine (under its lock) --------------------------------------------------
    def begin(self) -> Restart:
        """Start the supervising thread once; the ticket of the first start (or of the restart pending)."""
        if self.thread is None:
            self.restart, self.state = Restart("starting"), EngineState.STARTING
            self.thread = threading.Thread(target=self._supervise, name="cosyvoice-engine", daemon=True)
            self.thread.start()
        return self.restart

    def ask_restart(self, reason: str) -> Restart:
        """The pending restart ticket, or a new one for ``reason``."""
        if self.restart is None or self.restart.done.is_set():
            self.restart = Restart(reason)
        return self.restart

    def check_usable(self) -> None:
        """EngineError unless the engine runs and its model is not known to be broken."""
        if self.closing or self.thread is None:
            raise EngineError("the engine is not running; call start() first")
        if self.state == EngineState.ERROR:
            raise EngineError(f"the model is not available: {self.last_error}. Fix the cause and restart")

    def wait(self, ticket: Restart, timeout: float | None) -> bool:
        """True once ``ticket``'s worker is ready; False when it failed or ``timeout`` (else start_timeout_s) passed."""
        return ticket.done.wait(self.limits.start_timeout_s if timeout is None else timeout) and ticket.ok

    def not_answering(self) -> bool:
        return self.silent_s > 0 and self.state in (EngineState.READY, *EngineState.LOADING)

    def stop(self, timeout: float | None) -> None:
        """After ``closing`` was set: end the thread, then stop the worker (politely, then by force)."""
        if self.thread is not None:
            self.thread.join(timeout if timeout is not None else self.limits.stop_timeout_s + 10)
        worker, self.worker = self.worker, None
        if worker is not None:
            self._stop_worker(worker)
        self.state = EngineState.CLOSED

    def _stop_worker(self, worker: WorkerProcess) -> None:
        """Politely once it has loaded (a job's files may be being written); at once while it still loads: it reads
        no command before it is ready, so a polite stop only waited out stop_timeout_s, and it holds no work yet."""
        worker.stop(self.limits.stop_timeout_s if worker.loaded else 0.0)

    # -- the supervising thread -----------------------------------------------------------------
    def _supervise(self) -> None:
        while not self.closing:
            try:
                self._supervise_once()
            except Exception as error:  # keep supervising: the UI must outlive any engine bug
                with self.lock:
                    self.last_error = f"engine supervisor error: {type(error).__name__}: {error}"
                time.sleep(POLL_S)

    def _supervise_once(self) -> None:
        ticket = self.restart
        if ticket is not None and not ticket.begun:
            self._do_restart(ticket)
        worker = self.worker
        if worker is None:
            time.sleep(POLL_S)
            return
        try:
            received, gone = worker.receive(POLL_S), False
        except (EOFError, OSError):
            received, gone = [], True
        for event in received:
            self._on_worker_event(event)
        if gone or not worker.alive():
            self._on_worker_death(worker)
            return
        if self._check_liveness(worker):
            return
        self._check_overruns()
        self._dispatch()

    def _spawn(self) -> None:
        if self.closing:
            return
        config = replace(self.config, device=self.device_override) if self.device_override else self.config
        self.load_error = None
        try:
            self.worker = self.worker_factory(config)
        except Exception as error:  # e.g. the OS refused a new process: no job can run
            self._give_up(f"the model process could not be started: {type(error).__name__}: {error}")

    def _give_up(self, message: str) -> None:
        with self.lock:
            self.state, self.last_error = EngineState.ERROR, message
            self.queue.fail_waiting(jobs.FAILED, f"the model could not start: {message}", Fault.UNAVAILABLE)
            self.tasks.fail_all(f"the model could not start: {message}")
            if self.restart is not None:
                self.restart.resolve(False, message)
            self.queue.emit(LoadFailed(message))

    def _do_restart(self, ticket: Restart) -> None:
        with self.lock:
            ticket.begun = True
            self.load_failures = 0
            old = self.worker
            if self.state != EngineState.STARTING:
                self.state = EngineState.RESTARTING
            if old is not None:
                self.restarts += 1
                self.queue.emit(Restarting(ticket.reason))
            for running in list(reversed(self.queue.batch)):  # reversed: those put back keep their order
                if not running.acknowledged:
                    self.queue.requeue_first(running)  # the old worker never began it: the new one runs it first
                    continue
                if old is not None:
                    old.cancel(running.seq)  # lets the polite stop below succeed
                self.queue.finish(
                    running,
                    jobs.CANCELLED,
                    f"cancelled because the engine restarted ({ticket.reason}) "
                    "before this job finished; nobody pressed Stop. Submit it again to run it",
                )
            self.tasks.fail_sent(f"interrupted because the engine restarted ({ticket.reason}); try again")
        if old is not None:
            self._stop_worker(old)
        self.worker = None
        self._spawn()

    def _on_worker_event(self, event: Event) -> None:
        with self.lock:
            if getattr(event, "status", None) is not None:
                self.worker_status = event.status
            if isinstance(event, (TaskDone, TaskError)):
                self.tasks.answer(event)
                return
            if event.job_id is None:
                if isinstance(event, Ready):
                    self.state, self.load_failures, self.last_error = EngineState.READY, 0, None
                    if self.worker is not None:
                        self.worker.loaded = True
                    if self.restart is not None:
                        self.restart.resolve(True, event.message)
                elif isinstance(event, LoadFailed):
                    self.load_error = event.message
                elif isinstance(event, DeviceFallback):
                    self.device_override = "cpu"  # later workers start where this one ended up
                self.queue.emit(event)
                return
            record = next((each for each in self.queue.batch if each.job.job_id == event.job_id), None)
            if record is None:
                return  # that job already ended here (cancelled by a restart or a timeout)
            if isinstance(event, Started):
                record.acknowledged = True
            if not event.terminal:
                self.queue.emit(event)
                return
            if record.timed_out and isinstance(event, Cancelled):
                limit = self.limits.job_timeout_s
                message = f"stopped: the job ran longer than the limit of {limit:g} s"
                event = Failed(event.job_id, message, fault=Fault.TIMEOUT)
            self.queue.end(record, event)

    def _check_liveness(self, worker: WorkerProcess) -> bool:
        """Kill and replace a worker whose heartbeat stopped (True when it did)."""
        silent, beating = worker.silent_s()
        bound = self.limits.liveness_timeout_s
        if not beating or self.state != EngineState.READY:
            bound *= STARTUP_LIVENESS_FACTOR
        with self.lock:
            # "Not answering" after a third of the bound, but never within two heartbeats: a gap that short is
            # only the beat's own period (and a busy machine's scheduling), not a worker in trouble.
            warn_after = max(bound / 3, 2 * HEARTBEAT_S)
            self.silent_s = silent if beating and silent > warn_after else 0.0  # a new process is only slow
        if silent <= bound:
            return False
        worker.kill()  # works on a stopped (SIGSTOP) process too
        self._on_worker_death(worker, f"stopped answering (no sign of life for {silent:.0f} s) and was killed")
        return True

    def _on_worker_death(self, worker: WorkerProcess, how: str | None = None) -> None:
        worker.join(1.0)
        how = how or worker.exit_description()
        worker.stop(0.0)
        with self.lock:
            self.worker, self.silent_s = None, 0.0
            self.tasks.fail_sent(f"the model process {how} during the task; try again")
            if self.closing:
                return
            if self.state != EngineState.READY:
                self.load_failures += 1
                message = self.load_error or f"the model process {how} while loading"
                self.last_error = message
                if self.load_failures >= self.limits.max_load_failures:
                    self._give_up(message)
                    return
                self.queue.emit(WorkerDied(f"{message}; trying again"))
            else:
                message = f"the model process {how}"
                self.last_error, self.state = message, EngineState.RESTARTING
                self.restarts += 1
                for running in list(reversed(self.queue.batch)):  # reversed: those put back keep their order
                    if running.acknowledged:
                        self.queue.finish(
                            running,
                            jobs.FAILED,
                            f"{message} while running this job; the engine "
                            "restarted it and kept the waiting jobs. Submit this job again to retry it.",
                            fault=Fault.RESTARTED,
                        )
                    else:  # the worker never started it: it runs first on the next one
                        self.queue.requeue_first(running)
                self.queue.emit(WorkerDied(f"{message}; restarting it"))
                if self.restart is None or self.restart.done.is_set():
                    self.restart = Restart(message, begun=True)
        time.sleep(min(2.0, 0.25 * self.load_failures))
        self._spawn()

    def _check_overruns(self) -> None:
        with self.lock:
            batch = list(self.queue.batch)
        for record in batch:
            if self._check_overrun(record):
                return

    def _check_overrun(self, record: JobRecord) -> bool:
        """Ask a running job that overran its limit to stop; restart the worker when a stop was not obeyed
        within the grace (True then)."""
        limits = self.limits
        with self.lock:
            now = time.monotonic()
            if record.done.is_set():
                return False
            if (
                limits.job_timeout_s
                and record.acknowledged
                and record.cancel_requested_at is None
                and now - record.sent_at > limits.job_timeout_s
            ):
                record.timed_out, record.cancel_requested_at = True, now
                self.worker.cancel(record.seq)
                return False
            # a batched job sees its cancel at the batch's next round, which speaks a sentence of every job in it
            grace = limits.cancel_grace_s * record.together
            if record.cancel_requested_at is None or now - record.cancel_requested_at <= grace:
                return False
            why = f"ran longer than the limit of {limits.job_timeout_s:g} s" if record.timed_out else "was cancelled"
            self.queue.finish(
                record,
                jobs.FAILED if record.timed_out else jobs.CANCELLED,
                f"the job {why} and did not stop within {grace:g} s, so the model process was restarted",
                fault=Fault.TIMEOUT,
            )
            ticket = self.ask_restart(f"job {record.job.job_id} did not stop")
        if not ticket.begun:
            self._do_restart(ticket)
        return True

    def _dispatch(self) -> None:
        with self.lock:
            if self.state != EngineState.READY or self.worker is None or self.worker.silent_s()[0] > DISPATCH_SILENCE_S:
                return
            for ticket in self.tasks.take_unsent():
                try:
                    self.worker.send(Command("task", task=ticket.task))
                except OSError:  # the worker died just now: the next one gets it
                    self.tasks.unsend(ticket)
                    return
            # A worker process runs one batch at a time; a cluster runs one beside another while a worker has room.
            alongside = self.worker.runs_alongside
            if alongside and self.worker.room() < 1:
                return
            limit = self.batch_limit()
            waiting = self.queue.batch_candidates(limit, alongside)
            if not waiting:
                return
            head = waiting[0]
            if batchable(head.job) and len(waiting) < limit and time.monotonic() - head.queued_at < COALESCE_WAIT_S:
                return  # others may join its batch within the bounded wait
            runs = []
            for record in self.queue.start_batch(limit, alongside):
                voice = record.job.request.voice
                try:
                    entry = self.voices.styled(voice.saved, voice.style) if voice.kind == "saved" else None
                except EngineError as error:  # deleted (or its style removed) while the job waited: it fails alone
                    self.queue.finish(record, jobs.FAILED, str(error), fault=Fault.INPUT, field="voice")
                    continue
                runs.append(Command("run", record.job, record.seq, voice_entry=entry))
            if not runs:
                return
            try:
                self.worker.send(runs[0] if len(runs) == 1 else Command("batch", runs=runs))
            except OSError:  # the worker died just now; the death handler puts the jobs back
                pass

    def batch_limit(self) -> int:
        """How many jobs may run together: the worker's batch size (``batch_lines``, or what its device suits),
        1 before it has said or where its backend speaks one request at a time."""
        status = self.worker_status
        return max(1, getattr(status, "batch_lines", 1) or 1) if status is not None else 1
