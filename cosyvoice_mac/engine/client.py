"""The UI-side engine: a bounded job queue in front of one model worker process.

Nothing here imports torch. A supervisor thread feeds the worker one job at a time, relays its
events, restarts it on request or when it dies, and stops jobs that overrun.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace

from cosyvoice_mac.engine import jobs
from cosyvoice_mac.engine.cache import VoiceLibrary
from cosyvoice_mac.engine.jobqueue import JobQueue, Listener
from cosyvoice_mac.engine.jobs import Command, EngineError, Job, JobResult, Task
from cosyvoice_mac.engine.messages import (
    Cancelled,
    DeviceFallback,
    Event,
    Failed,
    LoadFailed,
    Ready,
    Restarting,
    Started,
    TaskDone,
    TaskError,
    WorkerDied,
    WorkerStatus,
)
from cosyvoice_mac.engine.qos import set_ui_thread_qos
from cosyvoice_mac.engine.tasks import TaskBook
from cosyvoice_mac.engine.voices import VoiceSaving
from cosyvoice_mac.engine.worker import HEARTBEAT_S, WorkerConfig, WorkerProcess
from cosyvoice_mac.request import Request

POLL_S = 0.05
# A worker whose heartbeat has not moved for ``liveness_timeout_s`` (this many times that while it starts
# up, when imports and loading may hold it up) is killed and replaced; after a third of that the status
# says "not answering". No job is dispatched to a worker silent for DISPATCH_SILENCE_S: the pipe could block.
STARTUP_LIVENESS_FACTOR = 3.0
DISPATCH_SILENCE_S = 2.0


@dataclass
class _Restart:
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


class Engine(VoiceSaving):
    """Owns the model worker process, the job queue (at most ``max_queue`` waiting, one running) and the
    voice library (``voices``: the page and the worker go through the engine, so one lock guards it).

    Listen with ``subscribe()`` (the one way). ``job_timeout_s`` cancels a job that runs longer; a job that
    ignores a cancel for ``cancel_grace_s`` gets its worker restarted; a worker whose heartbeat stops for
    ``liveness_timeout_s`` (stopped, wedged, swapped out) is killed and replaced, its running job failed with
    that reason.
    """

    def __init__(
        self,
        config: WorkerConfig,
        *,
        max_queue: int = 16,
        start_timeout_s: float = 900.0,
        stop_timeout_s: float = 10.0,
        cancel_grace_s: float = 10.0,
        job_timeout_s: float | None = None,
        max_load_failures: int = 3,
        context: str = "spawn",
        set_ui_qos: bool = True,
        liveness_timeout_s: float = 30.0,
    ):
        self.config = config
        self.start_timeout_s, self.stop_timeout_s, self.cancel_grace_s = start_timeout_s, stop_timeout_s, cancel_grace_s
        self.job_timeout_s, self.max_load_failures, self.context = job_timeout_s, max_load_failures, context
        self.liveness_timeout_s = liveness_timeout_s
        self._silent_s = 0.0  # how long the worker has not answered, once that is worth saying
        self.voices = VoiceLibrary(config.cache_dir)
        self._lock = threading.RLock()
        self.queue = JobQueue(max_queue, self._lock)
        self.tasks = TaskBook(self._lock)
        self._worker: WorkerProcess | None = None
        self._state = "stopped"
        self._worker_status: WorkerStatus | None = None
        self._restart: _Restart | None = None
        self._load_failures = 0
        self._load_error: str | None = None
        self._last_error: str | None = None
        self._device_override: str | None = None
        self._restarts = 0
        self._closing = False
        self._supervisor: threading.Thread | None = None
        if set_ui_qos:
            set_ui_thread_qos()

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self, wait: bool = True, timeout: float | None = None) -> bool:
        """Start the worker; with ``wait``, block until it is ready (True) or failed/timed out (False)."""
        with self._lock:
            if self._closing:
                raise EngineError("the engine was closed; create a new one")
            if self._supervisor is None:
                self._restart, self._state = _Restart("starting"), "starting"
                self._supervisor = threading.Thread(target=self._supervise, name="cosyvoice-engine", daemon=True)
                self._supervisor.start()
            ticket = self._restart
        return self._await(ticket, timeout) if wait else self._state == "ready"

    def restart(
        self, timeout: float | None = None, reason: str = "restart requested", device: str | None = None
    ) -> bool:
        """Stop the worker (cancelling a running job), start a new one, wait until it is ready.

        Overlapping calls share one restart. ``device`` replaces the device for new workers.
        True when the new worker is ready; False when it failed or ``timeout`` passed.
        """
        with self._lock:
            if self._supervisor is None or self._closing:
                raise EngineError("the engine is not running; call start() first")
            if device is not None:
                self._device_override = device
            if self._restart is None or self._restart.done.is_set():
                self._restart = _Restart(reason)
            ticket = self._restart
        return self._await(ticket, timeout)

    def close(self, timeout: float | None = None) -> None:
        """Cancel every job, stop the worker (politely, then by force), end the supervisor."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            running = self.queue.running
            if running is not None:
                if self._worker is not None:
                    self._worker.cancel(running.seq)  # so the polite stop below can succeed
                self.queue.finish(running, jobs.CANCELLED, "cancelled: the engine was shut down")
            self.queue.fail_waiting(jobs.CANCELLED, "cancelled: the engine was shut down")
            self.tasks.fail_all("the engine was shut down")
            if self._restart is not None:
                self._restart.resolve(False, "the engine was shut down")
        if self._supervisor is not None:
            self._supervisor.join(timeout if timeout is not None else self.stop_timeout_s + 10)
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop(self.stop_timeout_s)
        self._state = "closed"

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- jobs ----------------------------------------------------------------------------------
    def submit(self, request: Request | Job) -> str:
        """Queue a request (built, so checked, by ``Request.build``); its job id. Raises QueueFull, EngineError,
        or VoiceError for a saved voice the library does not hold."""
        job = request if isinstance(request, Job) else Job(request)
        if not isinstance(job.request, Request):
            raise EngineError(f"submit takes a Request, not {type(job.request).__name__}")
        if job.request.voice.kind == "saved":
            self.voices.get(job.request.voice.saved)
        with self._lock:
            if self._closing or self._supervisor is None:
                raise EngineError("the engine is not running; call start() first")
            if self._state == "error":
                raise EngineError(f"the model is not available: {self._last_error}. Fix the cause and restart")
            self.queue.add(job)
        return job.job_id

    def position(self, job_id: str) -> int | None:
        """0 while running, 1 for the next job to run, 2, ...; None once finished (or unknown)."""
        return self.queue.position(job_id)

    def cancel(self, job_id: str) -> bool:
        """Cancel a waiting job now, or a running one at its next sentence/chunk; False if already over."""
        with self._lock:
            record = self.queue.get(job_id)
            if record.state == jobs.QUEUED:
                self.queue.remove_waiting(record, "cancelled before it started")
                return True
            if record.state == jobs.RUNNING:
                if record.cancel_requested_at is None:
                    record.cancel_requested_at = time.monotonic()
                    if self._worker is not None:
                        self._worker.cancel(record.seq)
                return True
        return False

    def result(self, job_id: str, timeout: float | None = None) -> JobResult:
        """Wait for the job: its JobResult, or JobFailed / JobCancelled / TimeoutError."""
        return self.queue.result(job_id, timeout)

    def subscribe(self) -> Listener:
        """A Listener that receives every event (job and engine) from now on; drain it, then close it
        (or use it as a context manager around ``submit``)."""
        return self.queue.subscribe()

    def unsubscribe(self, subscriber: Listener) -> None:
        self.queue.unsubscribe(subscriber)

    def status(self) -> dict:
        """For the UI: state, model, version, device, fell_back, dtype, precision, memory, queue length, cache."""
        with self._lock:
            worker = self._worker_status.as_dict() if self._worker_status is not None else {}
            cache = worker.get("cache") or {}
            running = self.queue.running
            not_answering = self._silent_s > 0 and self._state in ("ready", "starting", "restarting")
            return {
                "state": "unresponsive" if not_answering else self._state,
                "silent_s": round(self._silent_s, 1),
                **{
                    key: worker.get(key)
                    for key in (
                        "model",
                        "version",
                        "device",
                        "fell_back",
                        "fallback_reason",
                        "dtype",
                        "memory",
                        "jobs_run",
                        "feature_extractions",
                        "flow_prefix_builds",
                        "vocoder",
                        "vocoder_reason",
                        "engine",
                        "engine_reason",
                        "mlx_memory",
                        "precision",
                        "low_memory",
                        "llm_weights",
                    )
                },
                "queue_length": len(self.queue.pending),
                "running": running.job.job_id if running else None,
                "cache": cache,
                "cache_hit_rate": cache.get("hit_rate", 0.0),
                "worker_pid": self._worker.pid if self._worker else None,
                "restarts": self._restarts,
                "last_error": self._last_error,
            }

    def run_task(self, kind: str, args: dict, timeout: float | None = None) -> dict:
        """Have the worker do a Task (between jobs, ahead of waiting ones): its result.

        Waits for the model to load first if it is loading. Raises TaskFailed (the worker's reason),
        TimeoutError past ``timeout`` s, or EngineError when the engine is closed or failed to start.
        """
        with self._lock:
            if self._closing or self._supervisor is None:
                raise EngineError("the engine is not running; call start() first")
            if self._state == "error":
                raise EngineError(f"the model is not available: {self._last_error}. Fix the cause and restart")
            ticket = self.tasks.add(Task(kind, dict(args)))
        try:
            return self.tasks.wait(ticket, timeout)
        finally:
            self.tasks.forget(ticket)

    # -- supervisor thread ---------------------------------------------------------------------
    def _supervise(self) -> None:
        while not self._closing:
            try:
                self._supervise_once()
            except Exception as error:  # keep supervising: the UI must outlive any engine bug
                with self._lock:
                    self._last_error = f"engine supervisor error: {type(error).__name__}: {error}"
                time.sleep(POLL_S)

    def _supervise_once(self) -> None:
        ticket = self._restart
        if ticket is not None and not ticket.begun:
            self._do_restart(ticket)
        worker = self._worker
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
        if self._closing:
            return
        config = replace(self.config, device=self._device_override) if self._device_override else self.config
        self._load_error = None
        try:
            self._worker = WorkerProcess(config, self.context)
        except Exception as error:  # e.g. the OS refused a new process: no job can run
            self._give_up(f"the model process could not be started: {type(error).__name__}: {error}")

    def _give_up(self, message: str) -> None:
        with self._lock:
            self._state, self._last_error = "error", message
            self.queue.fail_waiting(jobs.FAILED, f"the model could not start: {message}")
            self.tasks.fail_all(f"the model could not start: {message}")
            if self._restart is not None:
                self._restart.resolve(False, message)
            self.queue.emit(LoadFailed(message))

    def _do_restart(self, ticket: _Restart) -> None:
        with self._lock:
            ticket.begun = True
            self._load_failures = 0
            old, running = self._worker, self.queue.running
            if self._state != "starting":
                self._state = "restarting"
            if old is not None:
                self._restarts += 1
                self.queue.emit(Restarting(ticket.reason))
            if running is not None and not running.acknowledged:
                self.queue.requeue_first(running)  # the old worker never began it: the new one runs it first
            elif running is not None:
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
            old.stop(self.stop_timeout_s)
        self._worker = None
        self._spawn()

    def _on_worker_event(self, event: Event) -> None:
        with self._lock:
            if getattr(event, "status", None) is not None:
                self._worker_status = event.status
            if isinstance(event, (TaskDone, TaskError)):
                self.tasks.answer(event)
                return
            if event.job_id is None:
                if isinstance(event, Ready):
                    self._state, self._load_failures, self._last_error = "ready", 0, None
                    if self._restart is not None:
                        self._restart.resolve(True, event.message)
                elif isinstance(event, LoadFailed):
                    self._load_error = event.message
                elif isinstance(event, DeviceFallback):
                    self._device_override = "cpu"  # later workers start where this one ended up
                self.queue.emit(event)
                return
            record = self.queue.running
            if record is None or record.job.job_id != event.job_id:
                return  # that job already ended here (cancelled by a restart or a timeout)
            if isinstance(event, Started):
                record.acknowledged = True
            if not event.terminal:
                self.queue.emit(event)
                return
            if record.timed_out and isinstance(event, Cancelled):
                event = Failed(event.job_id, f"stopped: the job ran longer than the limit of {self.job_timeout_s:g} s")
            self.queue.end(record, event)

    def _check_liveness(self, worker: WorkerProcess) -> bool:
        """Kill and replace a worker whose heartbeat stopped (True when it did)."""
        silent, beating = worker.silent_s()
        bound = self.liveness_timeout_s
        if not beating or self._state != "ready":
            bound *= STARTUP_LIVENESS_FACTOR
        with self._lock:
            # "Not answering" after a third of the bound, but never within two heartbeats: a gap that short is
            # only the beat's own period (and a busy machine's scheduling), not a worker in trouble.
            warn_after = max(bound / 3, 2 * HEARTBEAT_S)
            self._silent_s = silent if beating and silent > warn_after else 0.0  # a new process is only slow
        if silent <= bound:
            return False
        worker.process.kill()  # works on a stopped (SIGSTOP) process too
        self._on_worker_death(worker, f"stopped answering (no sign of life for {silent:.0f} s) and was killed")
        return True

    def _on_worker_death(self, worker: WorkerProcess, how: str | None = None) -> None:
        worker.process.join(1.0)
        how = how or worker.exit_description()
        worker.stop(0.0)
        with self._lock:
            self._worker, self._silent_s = None, 0.0
            self.tasks.fail_sent(f"the model process {how} during the task; try again")
            if self._closing:
                return
            if self._state != "ready":
                self._load_failures += 1
                message = self._load_error or f"the model process {how} while loading"
                self._last_error = message
                if self._load_failures >= self.max_load_failures:
                    self._give_up(message)
                    return
                self.queue.emit(WorkerDied(f"{message}; trying again"))
            else:
                message = f"the model process {how}"
                self._last_error, self._state = message, "restarting"
                self._restarts += 1
                running = self.queue.running
                if running is not None and running.acknowledged:
                    self.queue.finish(
                        running,
                        jobs.FAILED,
                        f"{message} while running this job; the engine "
                        "restarted it and kept the waiting jobs. Submit this job again to retry it.",
                    )
                elif running is not None:  # the worker never started it: it runs first on the next one
                    self.queue.requeue_first(running)
                self.queue.emit(WorkerDied(f"{message}; restarting it"))
                if self._restart is None or self._restart.done.is_set():
                    self._restart = _Restart(message, begun=True)
        time.sleep(min(2.0, 0.25 * self._load_failures))
        self._spawn()

    def _check_overruns(self) -> None:
        with self._lock:
            record, now = self.queue.running, time.monotonic()
            if record is None:
                return
            if (
                self.job_timeout_s
                and record.acknowledged
                and record.cancel_requested_at is None
                and now - record.sent_at > self.job_timeout_s
            ):
                record.timed_out, record.cancel_requested_at = True, now
                self._worker.cancel(record.seq)
                return
            if record.cancel_requested_at is None or now - record.cancel_requested_at <= self.cancel_grace_s:
                return
            why = f"ran longer than the limit of {self.job_timeout_s:g} s" if record.timed_out else "was cancelled"
            self.queue.finish(
                record,
                jobs.FAILED if record.timed_out else jobs.CANCELLED,
                f"the job {why} and did not stop within {self.cancel_grace_s:g} s, so the model process was restarted",
            )
            if self._restart is None or self._restart.done.is_set():
                self._restart = _Restart(f"job {record.job.job_id} did not stop")
            ticket = self._restart
        if not ticket.begun:
            self._do_restart(ticket)

    def _dispatch(self) -> None:
        with self._lock:
            if self._state != "ready" or self._worker is None or self._worker.silent_s()[0] > DISPATCH_SILENCE_S:
                return
            for ticket in self.tasks.take_unsent():
                try:
                    self._worker.send(Command("task", task=ticket.task))
                except OSError:  # the worker died just now: the next one gets it
                    self.tasks.unsend(ticket)
                    return
            record = self.queue.start_next()
            if record is None:
                return
            voice = record.job.request.voice
            try:
                entry = self.voices.get(voice.saved) if voice.kind == "saved" else None
            except EngineError as error:  # deleted while the job waited
                self.queue.finish(record, jobs.FAILED, str(error))
                return
            try:
                self._worker.send(Command("run", record.job, record.seq, voice_entry=entry))
            except OSError:  # the worker died just now; the death handler puts the job back
                pass

    def _await(self, ticket: _Restart, timeout: float | None) -> bool:
        return ticket.done.wait(self.start_timeout_s if timeout is None else timeout) and ticket.ok
