"""The UI-side engine: a bounded job queue in front of one model worker process.

Nothing here imports torch. The engine owns the queue, the task book and the voice library; its
:class:`~cosyvoice_mac.engine.supervisor.WorkerSupervisor` keeps the worker (starts, restarts, the
heartbeat watch, overruns) and feeds it one job at a time from its own thread.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from cosyvoice_mac.conversion_request import ConversionRequest
from cosyvoice_mac.engine import jobs
from cosyvoice_mac.engine.jobqueue import JobQueue, Listener, QueueEntry
from cosyvoice_mac.engine.jobs import EngineError, Job, JobResult, Task
from cosyvoice_mac.engine.messages import EngineState
from cosyvoice_mac.engine.qos import set_ui_thread_qos
from cosyvoice_mac.engine.supervisor import SupervisorLimits, WorkerSupervisor
from cosyvoice_mac.engine.tasks import TaskBook
from cosyvoice_mac.engine.voice_library import VoiceLibrary
from cosyvoice_mac.engine.voices import VoiceSaving
from cosyvoice_mac.engine.worker import WorkerConfig
from cosyvoice_mac.frontend.inline import parse_inline
from cosyvoice_mac.request import Request


class Engine(VoiceSaving):
    """Owns the job queue (at most ``max_queue`` waiting, one running), the task book, the voice library
    (``voices``: the page and the worker go through the engine, so one lock guards it) and the
    :class:`WorkerSupervisor` that keeps the model worker process.

    Listen with ``subscribe()`` (the one way). ``job_timeout_s`` cancels a job that runs longer; a job that
    ignores a cancel for ``cancel_grace_s`` gets its worker restarted; a worker whose heartbeat stops for
    ``liveness_timeout_s`` (stopped, wedged, swapped out) is killed and replaced, its running job failed with
    that reason. ``worker_factory`` makes what runs the jobs from the config (default: a worker process here;
    ``cluster.queue_worker`` offers a Ray cluster's workers instead, under the same queue).
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
        start_method: str = "auto",
        set_ui_qos: bool = True,
        liveness_timeout_s: float = 30.0,
        worker_factory: Callable[[WorkerConfig], object] | None = None,
    ):
        self.voices = VoiceLibrary(config.cache_dir)
        self._lock = threading.RLock()
        self.queue = JobQueue(max_queue, self._lock)
        self.tasks = TaskBook(self._lock)
        self.limits = SupervisorLimits(
            start_timeout_s, stop_timeout_s, cancel_grace_s, job_timeout_s, max_load_failures, liveness_timeout_s
        )
        self._supervisor = WorkerSupervisor(
            config, self.queue, self.tasks, self.voices, self._lock, self.limits, start_method, worker_factory
        )
        if set_ui_qos:
            set_ui_thread_qos()

    @property
    def config(self) -> WorkerConfig:
        """The settings the next worker starts with (the supervisor owns them; a change applies at the next
        (re)start, as a switch of engine on the page does)."""
        return self._supervisor.config

    @config.setter
    def config(self, config: WorkerConfig) -> None:
        self._supervisor.config = config

    @property
    def job_timeout_s(self) -> float | None:
        """Seconds a job may run before it is cancelled (None: no limit); a change applies to the running job."""
        return self.limits.job_timeout_s

    @job_timeout_s.setter
    def job_timeout_s(self, seconds: float | None) -> None:
        self.limits.job_timeout_s = seconds

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self, wait: bool = True, timeout: float | None = None) -> bool:
        """Start the worker; with ``wait``, block until it is ready (True) or failed/timed out (False)."""
        supervisor = self._supervisor
        with self._lock:
            if supervisor.closing:
                raise EngineError("the engine was closed; create a new one")
            ticket = supervisor.begin()
        return supervisor.wait(ticket, timeout) if wait else supervisor.state == EngineState.READY

    def restart(
        self, timeout: float | None = None, reason: str = "restart requested", device: str | None = None
    ) -> bool:
        """Stop the worker (cancelling a running job), start a new one, wait until it is ready.

        Overlapping calls share one restart. ``device`` replaces the device for new workers.
        True when the new worker is ready; False when it failed or ``timeout`` passed.
        """
        supervisor = self._supervisor
        with self._lock:
            if supervisor.thread is None or supervisor.closing:
                raise EngineError("the engine is not running; call start() first")
            if device is not None:
                supervisor.device_override = device
            ticket = supervisor.ask_restart(reason)
        return supervisor.wait(ticket, timeout)

    def close(self, timeout: float | None = None) -> None:
        """Cancel every job, stop the worker (politely, then by force), end the supervisor."""
        supervisor = self._supervisor
        with self._lock:
            if supervisor.closing:
                return
            supervisor.closing = True
            for running in list(self.queue.batch):
                if supervisor.worker is not None:
                    supervisor.worker.cancel(running.seq)  # so the polite stop below can succeed
                self.queue.finish(running, jobs.CANCELLED, "cancelled: the engine was shut down")
            self.queue.fail_waiting(jobs.CANCELLED, "cancelled: the engine was shut down")
            self.tasks.fail_all("the engine was shut down")
            if supervisor.restart is not None:
                supervisor.restart.resolve(False, "the engine was shut down")
        supervisor.stop(timeout)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- jobs ----------------------------------------------------------------------------------
    def submit(self, request: Request | ConversionRequest | Job) -> str:
        """Queue a request (built, so checked, by ``Request.build`` or ``ConversionRequest.build``); its job id.
        Raises QueueFull, EngineError, VoiceError for a saved voice the library does not hold (VoiceStyleUnknown:
        a style the voice has no recording of), or RequestError ("text", "markup_invalid") for a malformed inline
        tag, with its position (a style tag may name the saved voice's recordings too): every door's job is refused
        here before it waits in line, as the worker would refuse it after (``frontend.inline``)."""
        job = request if isinstance(request, Job) else Job(request)
        if not isinstance(job.request, (Request, ConversionRequest)):
            raise EngineError(f"submit takes a Request or a ConversionRequest, not {type(job.request).__name__}")
        voice, recordings = job.request.voice, ()
        if voice.kind == "saved":  # an unknown voice or style is refused before it waits in line
            recordings = self.voices.styled(voice.saved, voice.style)["recordings"]
        if isinstance(job.request, Request):
            parse_inline(job.request.text, (recording["style"] for recording in recordings))
        with self._lock:
            self._supervisor.check_usable()
            self.queue.add(job)
        return job.job_id

    def position(self, job_id: str) -> int | None:
        """0 while running, 1 for the next job to run, 2, ...; None once finished (or unknown)."""
        return self.queue.position(job_id)

    def line(self) -> list[QueueEntry]:
        """The running job and the waiting ones, in the order they run."""
        return self.queue.line()

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
                    if self._supervisor.worker is not None:
                        self._supervisor.worker.cancel(record.seq)
                return True
        return False

    def result(self, job_id: str, timeout: float | None = None) -> JobResult:
        """Wait for the job: its JobResult, or JobFailed / JobCancelled / TimeoutError."""
        return self.queue.result(job_id, timeout)

    def subscribe(self, wake: Callable[[], None] | None = None) -> Listener:
        """A Listener that receives every event (job and engine) from now on; drain it, then close it
        (or use it as a context manager around ``submit``). ``wake``: called after each event arrives."""
        return self.queue.subscribe(wake)

    def unsubscribe(self, subscriber: Listener) -> None:
        self.queue.unsubscribe(subscriber)

    def status(self) -> dict:
        """For the UI: state, model, version, device, fell_back, dtype, precision, memory, queue length, cache."""
        supervisor = self._supervisor
        with self._lock:
            worker = supervisor.worker_status.as_dict() if supervisor.worker_status is not None else {}
            cache = worker.get("cache") or {}
            running = self.queue.running
            return {
                "state": EngineState.UNRESPONSIVE if supervisor.not_answering() else supervisor.state,
                "silent_s": round(supervisor.silent_s, 1),
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
                        "mlx_llm",
                    )
                },
                "queue_length": len(self.queue.pending),
                "max_queue": self.queue.max_waiting,
                "running": running.job.job_id if running else None,
                "running_together": len(self.queue.batch),  # jobs spoken as one batch now (issue 47)
                "batch_lines": supervisor.batch_limit(),  # the most that may run together
                "cache": cache,
                "cache_hit_rate": cache.get("hit_rate", 0.0),
                "worker_pid": supervisor.worker.pid if supervisor.worker else None,
                # what runs the jobs: machine, device, engine and load (jobs running) of each (several: a cluster)
                "workers": supervisor.worker.describe(supervisor.worker_status, len(self.queue.batch))
                if supervisor.worker
                else [],
                "restarts": supervisor.restarts,
                "last_error": supervisor.last_error,
            }

    def run_task(self, kind: str, args: dict, timeout: float | None = None) -> dict:
        """Have the worker do a Task (between jobs, ahead of waiting ones): its result.

        Waits for the model to load first if it is loading. Raises TaskFailed (the worker's reason),
        TimeoutError past ``timeout`` s, or EngineError when the engine is closed or failed to start.
        """
        with self._lock:
            self._supervisor.check_usable()
            ticket = self.tasks.add(Task(kind, dict(args)))
        try:
            return self.tasks.wait(ticket, timeout)
        finally:
            self.tasks.forget(ticket)
