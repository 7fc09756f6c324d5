"""The engine's messages: one frozen dataclass per event kind, and the worker's status.

They cross the process boundary (worker -> engine) and reach listeners in the UI process; every field
is named and typed here, so no reader depends on dict keys documented in comments. ``kind`` is each
class's stable name (what ``isinstance`` says, as a string for logs and tests). Torch-free.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np

from cosyvoice_mac.engine.jobs import CANCELLED, DONE, FAILED, JobResult


class EngineState:
    """The names of the engine's states: ``Engine.status()["state"]``, what the page, ``/v1`` and the CLI read.

    The supervisor moves between the first six; ``UNRESPONSIVE`` is said instead of its state while the worker
    does not answer. ``LOADING``: a model is being loaded, so a job may wait for it.
    """

    STOPPED = "stopped"  # never started
    STARTING = "starting"  # the first worker loads its model
    READY = "ready"
    RESTARTING = "restarting"  # a later worker loads (a crash, a model or device change)
    ERROR = "error"  # the model failed to load too often: fix the cause and restart
    CLOSED = "closed"
    UNRESPONSIVE = "unresponsive"
    LOADING = (STARTING, RESTARTING)
    ALL = (READY, STARTING, RESTARTING, ERROR, STOPPED, CLOSED, UNRESPONSIVE)


@dataclass(frozen=True)
class WorkerStatus:
    """What the worker reports about itself: the model, where it runs, its memory and its cache."""

    model: str
    version: str
    device: str
    home_device: str
    dtype: str
    sample_rate: int
    fell_back: bool = False
    fallback_reason: str | None = None
    rss_bytes: int = 0
    device_allocated_bytes: int | None = None
    device_driver_bytes: int | None = None
    cache_memory_hits: int = 0
    cache_disk_hits: int = 0
    cache_misses: int = 0
    feature_extractions: int = 0
    jobs_run: int = 0
    flow_prefix_builds: int = 0
    vocoder: str = "torch"
    vocoder_reason: str | None = None
    engine: str = "torch"  # "mlx" or "torch" (pipeline/engines.py)
    engine_reason: str | None = None  # why this engine: what auto went by, or why the one asked for cannot run
    mlx_memory: dict | None = None  # active/peak/cache bytes while MLX runs
    frontend_providers: dict | None = None  # onnxruntime provider of the speech tokenizer and CAM++
    low_memory: dict | None = None  # low-memory mode: enabled, and why (device.LowMemoryChoice)
    llm_weights: str | None = None  # llm.pt, or llm.rl.pt when asked for
    precision: dict | None = None  # what each stage runs in and why (pipeline.precision_plan)
    mlx_llm: dict | None = None  # the MLX LLM precision that runs and why (mlx.llm_gate.MlxLlmChoice)
    batch_lines: int = 1  # jobs the worker speaks together at most (batch_lines setting, or its device's)

    def as_dict(self) -> dict:
        """The status panel's view (memory and cache grouped as the panel shows them)."""
        lookups = self.cache_memory_hits + self.cache_disk_hits + self.cache_misses
        hits = self.cache_memory_hits + self.cache_disk_hits
        plain = asdict(self)
        for key in (
            "rss_bytes",
            "device_allocated_bytes",
            "device_driver_bytes",
            "cache_memory_hits",
            "cache_disk_hits",
            "cache_misses",
        ):
            plain.pop(key)
        return {
            **plain,
            "memory": {
                "rss_bytes": self.rss_bytes,
                "device_allocated_bytes": self.device_allocated_bytes,
                "device_driver_bytes": self.device_driver_bytes,
            },
            "cache": {
                "memory_hits": self.cache_memory_hits,
                "disk_hits": self.cache_disk_hits,
                "misses": self.cache_misses,
                "hit_rate": round(hits / lookups, 4) if lookups else 0.0,
            },
        }


class Event:
    """Base of every message. ``job_id`` is None for events about the engine itself."""

    kind: ClassVar[str] = ""

    @property
    def terminal(self) -> bool:
        """True for the last event of a job (done, failed, cancelled)."""
        return False


# -- about one job ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Queued(Event):
    """The job waits; ``position`` 1 runs next. Sent again whenever its place changes."""

    kind: ClassVar[str] = "queued"
    message: ClassVar[str] = ""
    job_id: str
    position: int


@dataclass(frozen=True)
class Started(Event):
    kind: ClassVar[str] = "started"
    message: ClassVar[str] = ""
    job_id: str
    device: str


@dataclass(frozen=True)
class Progress(Event):
    """One sentence done, or (streaming) one more chunk; ``audio`` (N,) float32 only when streaming."""

    kind: ClassVar[str] = "progress"
    message: ClassVar[str] = ""
    job_id: str
    segment_index: int
    segment_count: int
    text: str
    mode: str
    duration_s: float
    is_final_chunk: bool = True
    audio: np.ndarray | None = None
    sample_rate: int | None = None


@dataclass(frozen=True)
class Retrying(Event):
    """The job starts again on the CPU because the device failed (``reason``)."""

    kind: ClassVar[str] = "retry"
    job_id: str
    device: str
    reason: str
    message: str = ""


class Ending(Event):
    """The last event of a job: done, failed or cancelled."""

    @property
    def terminal(self) -> bool:
        return True


@dataclass(frozen=True)
class Done(Ending):
    kind: ClassVar[str] = DONE
    job_id: str
    result: JobResult
    message: str = "done"
    status: WorkerStatus | None = None


class Fault:
    """Whose fault a failed job is: every door answers each the same way (``api/errors.py`` as an HTTP
    status, ``cli/common.py`` as an exit code), never by reading the message."""

    INPUT = "input"  # the request cannot be served as asked: ``Failed.field`` names what to change
    ENGINE = "engine"  # the model failed on it (a bug, a device failure): not the user's doing
    RESTARTED = "restarted"  # the model process died or was replaced while running it: the same job works again
    TIMEOUT = "timeout"  # it ran past the server's time limit for one job
    UNAVAILABLE = "unavailable"  # the model could not start: nothing runs until that is fixed
    ALL = (INPUT, ENGINE, RESTARTED, TIMEOUT, UNAVAILABLE)
    RETRYABLE = (RESTARTED,)  # the same request, sent again once the engine is back, is expected to work


@dataclass(frozen=True)
class Failed(Ending):
    """The job ended with an error; ``message`` says why in words a user can act on, ``fault`` whose fault
    it is (a ``Fault`` name) and, for an input fault, ``field`` the request's field to change (the contract's
    names: "text", "voice", "transcript", "instruct", ..., and "prompt_audio" for the voice's recording).
    ``traceback`` only for a failure nobody expected (a bug), for the log."""

    kind: ClassVar[str] = FAILED
    job_id: str
    message: str
    traceback: str | None = None
    status: WorkerStatus | None = None
    fault: str = Fault.ENGINE
    field: str | None = None

    @property
    def retryable(self) -> bool:
        return self.fault in Fault.RETRYABLE


@dataclass(frozen=True)
class Cancelled(Ending):
    kind: ClassVar[str] = CANCELLED
    job_id: str
    message: str = "cancelled"
    status: WorkerStatus | None = None


# -- about the engine -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Notice(Event):
    """Something that happened to the engine, told in ``message``; each subclass names what."""

    job_id: ClassVar[None] = None
    message: str


class Loading(Notice):
    kind = "loading"


class LoadFailed(Notice):
    kind = "load_failed"


class Restarting(Notice):
    kind = "restarting"


class WorkerDied(Notice):
    kind = "worker_died"


@dataclass(frozen=True)
class Ready(Notice):
    kind: ClassVar[str] = "ready"
    status: WorkerStatus


@dataclass(frozen=True)
class DeviceFallback(Event):
    """The worker now runs on ``device`` for good (its home device kept failing)."""

    kind: ClassVar[str] = "device_fallback"
    job_id: ClassVar[None] = None
    device: str
    reason: str
    message: str = ""


@dataclass(frozen=True)
class TaskDone(Event):
    kind: ClassVar[str] = "task_done"
    job_id: ClassVar[None] = None
    message: ClassVar[str] = ""
    task_id: str
    result: dict
    status: WorkerStatus | None = None


@dataclass(frozen=True)
class TaskError(Event):
    """The worker could not do the task (``tasks.TaskFailed`` is what the caller then raises)."""

    kind: ClassVar[str] = "task_failed"
    job_id: ClassVar[None] = None
    task_id: str
    message: str
    traceback: str | None = None
    status: WorkerStatus | None = None


TERMINAL_KINDS = {DONE: Done, FAILED: Failed, CANCELLED: Cancelled}


def ending(
    kind: str,
    job_id: str,
    message: str,
    result: JobResult | None = None,
    fault: str = Fault.ENGINE,
    field: str | None = None,
) -> Event:
    """The terminal event of ``kind`` the engine itself decides (a restart, a timeout, a cancel); a failure
    says whose ``fault`` it is (and the ``field`` of an input fault)."""
    if kind == DONE:
        return Done(job_id, result, message)
    if kind == FAILED:
        return Failed(job_id, message, fault=fault, field=field)
    return TERMINAL_KINDS[kind](job_id, message)
