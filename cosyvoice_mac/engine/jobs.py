"""What travels between the UI process and the model worker: jobs, results, tasks, commands (the events
are in ``messages.py``).

Everything here is plain picklable data (str, numbers, dicts, numpy arrays) and this module
never imports torch, so the UI process can build jobs and read results without a model.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import numpy as np

from cosyvoice_mac.conversion_request import VOICE_CONVERSION, ConversionRequest
from cosyvoice_mac.errors import CosyVoiceError
from cosyvoice_mac.request import Request

# Job states; the last three are terminal.
QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
TERMINAL = (DONE, FAILED, CANCELLED)

# args: audio (file path), transcript, prepare_streaming -> audio_hash, model_id, duration_s, streaming_ready
TASK_EXTRACT_PROMPT = "extract_prompt"
# args: voices ({name: library entry}) -> voices ({name: {audio_hash, cache} or {error}}), model_id, extracted,
# seconds
TASK_PREPARE_VOICES = "prepare_voices"


class EngineError(CosyVoiceError, RuntimeError):
    """A problem a user can act on (full queue, unknown job, engine not started); safe to show."""


class QueueFull(EngineError):
    """The job queue holds its maximum number of waiting jobs. ``position`` is the place the refused job
    would have had (1 = next to run); ``retry_after_s`` when a place should free up, if known."""

    def __init__(self, message: str, position: int = 0, retry_after_s: float | None = None):
        super().__init__(message)
        self.position, self.retry_after_s = position, retry_after_s


class JobFailed(EngineError):
    """The job ended with an error; ``event`` is its terminal event (messages.Failed or Cancelled)."""

    def __init__(self, event):
        super().__init__(event.message)
        self.event = event


class JobCancelled(JobFailed):
    """The job was cancelled (by the caller, a restart, or a timeout) before it finished."""


def new_job_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Job:
    """One submitted request and the id the engine follows it by: a synthesis (``Request``) or a voice
    conversion (``ConversionRequest``), one queue for both. The request was validated where it was built
    (``Request.build`` / ``ConversionRequest.build``); nothing below checks it again."""

    request: Request | ConversionRequest
    job_id: str = field(default_factory=new_job_id)
    interface: str | None = None  # who asked: "page", "api", "gradio_api" or "cli" (kept in the sidecar)

    @property
    def text(self) -> str:
        return self.request.text

    @property
    def is_conversion(self) -> bool:
        return isinstance(self.request, ConversionRequest)


@dataclass
class JobResult:
    """A finished job's facts and where its audio is: ``output_path`` (the WAV the page plays). The samples
    cross the process boundary only when saving failed (``output_error`` says why): ``audio`` is then set,
    so the user still gets the sound."""

    job_id: str
    sample_rate: int
    duration_s: float
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
    output_error: str | None = None  # why the files could not be written (then ``audio`` holds the samples)
    audio: np.ndarray | None = None  # (N,) float32, only when there is no output file
    notes: list[str] = field(default_factory=list)  # what the user should know (preview voice, fallbacks)
    post: dict | None = None  # what post-processing did (``PostReport.as_dict``): trimmed ms, loudness, notes
    source_hash: str | None = None  # a voice conversion's recording: the hash of its 16 kHz samples
    source_duration_s: float | None = None  # ... and its length
    check: dict | None = None  # the take check (``engine.takes.JobTakes.as_dict``): status, each sentence's takes
    words: list[dict] | None = None  # each word of the text and its times in the audio: {word, start, end}
    captions: dict[str, str] | None = None  # the caption files beside the WAV: {"srt"|"vtt"|"json": path}

    @property
    def check_status(self) -> str | None:
        """passed, retaken or flagged (``/v1``'s X-CosyVoice-Check); None when the job was not checked."""
        return self.check["status"] if self.check else None

    batch_size: int = 1  # jobs spoken together with this one, itself included (1: alone)

    @property
    def is_conversion(self) -> bool:
        return self.mode == VOICE_CONVERSION

    def samples(self) -> np.ndarray:
        """The audio (N,) float32: the unsaved samples, else read back from the output WAV."""
        if self.audio is not None:
            return self.audio
        from cosyvoice_mac.sound.wav import read_samples

        return read_samples(self.output_path)


@dataclass
class Task:
    """A short piece of work for the worker that is not a synthesis, such as preparing a prompt voice's
    features before any generation. ``kind`` is one of the TASK_ names; ``args`` plain data. The worker
    runs it between jobs and answers with messages.TaskDone or messages.TaskFailed."""

    kind: str
    args: dict = field(default_factory=dict)
    task_id: str = field(default_factory=new_job_id)


@dataclass
class Command:
    """UI process -> worker. ``run`` carries a job and its sequence number (the cancel flag
    compares against it) and, for a saved voice, its library entry (the engine owns the library; the
    worker never reads it); ``batch`` carries several such runs, spoken together; ``task`` carries a Task;
    ``stop`` asks the worker to exit after the current job."""

    kind: str  # "run" | "batch" | "task" | "stop"
    job: Job | None = None
    seq: int = 0
    task: Task | None = None
    voice_entry: dict | None = None
    runs: list["Command"] = field(default_factory=list)  # "batch": one "run" command per job
