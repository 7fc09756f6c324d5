"""What travels between the UI process and the model worker: jobs, events, results, commands.

Everything here is plain picklable data (str, numbers, dicts, numpy arrays) and this module
never imports torch, so the UI process can build jobs and read results without a model.
"""
from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# Job states; the last three are terminal.
QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
TERMINAL = (DONE, FAILED, CANCELLED)

# Event kinds about one job (job_id set).
EVENT_QUEUED = "queued"  # data: position
EVENT_POSITION = "position"  # data: position (1 = next to run)
EVENT_STARTED = "started"  # data: device
EVENT_PROGRESS = "progress"  # data: segment_index, segment_count, text, audio (streaming only)
EVENT_RETRY = "retry"  # data: device, reason (the job starts again on the CPU)
# Event kinds about the engine (job_id None).
EVENT_LOADING = "loading"
EVENT_READY = "ready"  # data: status of the new worker
EVENT_LOAD_FAILED = "load_failed"
EVENT_RESTARTING = "restarting"
EVENT_WORKER_DIED = "worker_died"
EVENT_DEVICE_FALLBACK = "device_fallback"  # data: device, reason
# Replies to a Task (job_id None; data: task_id, and result or nothing).
EVENT_TASK_DONE = "task_done"  # data: task_id, result (plain dict), status
EVENT_TASK_FAILED = "task_failed"  # message says why
# args: audio (file path), transcript, prepare_streaming -> audio_hash, model_id, duration_s, streaming_ready
TASK_EXTRACT_PROMPT = "extract_prompt"

MAX_TEXT_CHARS = 5000


class EngineError(RuntimeError):
    """A problem a user can act on (full queue, unknown job, engine not started); safe to show."""


class QueueFull(EngineError):
    """The job queue holds its maximum number of waiting jobs."""


class JobFailed(EngineError):
    """The job ended with an error; ``event`` is its terminal JobEvent."""

    def __init__(self, event: "JobEvent"):
        super().__init__(event.message)
        self.event = event


class JobCancelled(JobFailed):
    """The job was cancelled (by the caller, a restart, or a timeout) before it finished."""


def new_job_id() -> str:
    return uuid.uuid4().hex


@dataclass
class Job:
    """One synthesis request. The voice comes from ``prompt_audio`` (a file path, or mono samples
    at ``prompt_sample_rate``) or from a saved ``voice`` name; ``prompt_text`` is the prompt's
    transcript (zero-shot mode), ``instruct`` a style instruction (instruct mode)."""

    text: str
    prompt_audio: str | np.ndarray | None = None
    prompt_sample_rate: int | None = None
    prompt_text: str | None = None
    instruct: str | None = None
    voice: str | None = None
    seed: int | None = None
    speed: float = 1.0
    stream: bool = False
    interface: str | None = None  # who asked: "page", "api", "gradio_api" or "cli" (kept in the sidecar)
    job_id: str = field(default_factory=new_job_id)

    @property
    def mode(self) -> str:
        if self.instruct:
            return "instruct"
        return "zero_shot" if self.prompt_text else "cross_lingual"

    def validate(self) -> None:
        """Raise EngineError naming the bad field; cheap checks the UI can run before queueing."""
        if not isinstance(self.text, str) or not self.text.strip():
            raise EngineError("the text to speak is empty; type a sentence")
        if len(self.text) > MAX_TEXT_CHARS:
            raise EngineError(f"the text has {len(self.text)} characters; the limit is {MAX_TEXT_CHARS}")
        if self.prompt_audio is not None and self.voice:
            raise EngineError("give either prompt audio or a saved voice name, not both")
        if isinstance(self.prompt_audio, (str, Path)):
            if not Path(self.prompt_audio).is_file():
                raise EngineError(f"prompt audio file {self.prompt_audio} does not exist")
            self.prompt_audio = str(self.prompt_audio)
        elif isinstance(self.prompt_audio, np.ndarray):
            if not self.prompt_sample_rate or self.prompt_sample_rate <= 0:
                raise EngineError("prompt audio given as samples needs prompt_sample_rate (e.g. 16000)")
        elif self.prompt_audio is not None:
            raise EngineError(f"prompt audio must be a file path or a numpy array, not {type(self.prompt_audio).__name__}")
        if not (isinstance(self.speed, (int, float)) and math.isfinite(self.speed) and 0.25 <= self.speed <= 4.0):
            raise EngineError(f"speed {self.speed!r} is out of range; use a value between 0.25 and 4")
        if self.stream and self.speed != 1.0:
            raise EngineError(f"speed {self.speed:g} cannot be used while streaming; turn streaming off or use "
                              "speed 1.0")
        if self.seed is not None and not (isinstance(self.seed, int) and 0 <= self.seed < 2**63):
            raise EngineError(f"seed {self.seed!r} must be a non-negative integer")


@dataclass
class JobResult:
    """A finished job: the audio (always returned, even when saving it failed) and its facts."""

    job_id: str
    audio: np.ndarray  # (N,) float32
    sample_rate: int
    text: str
    mode: str
    seed: int
    speed: float
    model: str
    device: str
    fell_back_to_cpu: bool = False  # this job was retried on the CPU after a device error
    fallback_reason: str | None = None
    prompt_hash: str | None = None
    cache_hit: bool = False
    segment_count: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    output_path: str | None = None
    sidecar_path: str | None = None
    output_error: str | None = None  # why the files could not be written (audio still here)
    notes: list[str] = field(default_factory=list)  # what the user should know (preview voice, fallbacks)

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.sample_rate if self.sample_rate else 0.0


@dataclass
class JobEvent:
    """Something that happened to a job (``job_id``) or to the engine (``job_id`` None).

    Terminal job events: ``done`` (``result`` set), ``failed`` and ``cancelled`` (``message``
    says why, in words a user can act on)."""

    kind: str
    job_id: str | None = None
    message: str = ""
    data: dict = field(default_factory=dict)
    result: JobResult | None = None

    @property
    def terminal(self) -> bool:
        return self.job_id is not None and self.kind in TERMINAL


@dataclass
class Task:
    """A short piece of work for the worker that is not a synthesis, such as preparing a prompt voice's
    features before any generation. ``kind`` is one of the TASK_ names; ``args`` plain data. The worker
    runs it between jobs and answers with EVENT_TASK_DONE or EVENT_TASK_FAILED."""

    kind: str
    args: dict = field(default_factory=dict)
    task_id: str = field(default_factory=new_job_id)


@dataclass
class Command:
    """UI process -> worker. ``run`` carries a job and its sequence number (the cancel flag
    compares against it); ``task`` carries a Task; ``stop`` asks the worker to exit after the current job."""

    kind: str  # "run" | "task" | "stop"
    job: Job | None = None
    seq: int = 0
    task: Task | None = None
