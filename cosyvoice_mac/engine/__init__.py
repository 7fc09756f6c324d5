"""The inference engine: one model worker process behind a bounded job queue.

The UI process uses :class:`Engine` (no torch import); the worker process owns the pipeline,
the speaker cache and the device. See ``client.py`` for the API, ``supervisor.py`` for keeping the
worker alive and ``worker.py`` for the process.
"""

from cosyvoice_mac.engine.cache import SpeakerCache
from cosyvoice_mac.engine.client import Engine
from cosyvoice_mac.engine.jobs import (
    EngineError,
    Job,
    JobCancelled,
    JobFailed,
    JobResult,
    QueueFull,
    Task,
)
from cosyvoice_mac.engine.messages import Event, WorkerStatus
from cosyvoice_mac.engine.outputs import OutputWriteError, write_output
from cosyvoice_mac.engine.tasks import TaskFailed
from cosyvoice_mac.engine.transcriber import TranscriberProcess, TranscriptionFailed
from cosyvoice_mac.engine.voice_library import VoiceError, VoiceExists, VoiceLibrary
from cosyvoice_mac.engine.voice_rules import VoiceStyleUnknown
from cosyvoice_mac.engine.worker import WorkerConfig

__all__ = [
    "Engine",
    "EngineError",
    "Event",
    "Job",
    "JobCancelled",
    "JobFailed",
    "JobResult",
    "OutputWriteError",
    "QueueFull",
    "SpeakerCache",
    "Task",
    "TaskFailed",
    "TranscriberProcess",
    "TranscriptionFailed",
    "VoiceError",
    "VoiceExists",
    "VoiceLibrary",
    "VoiceStyleUnknown",
    "WorkerConfig",
    "WorkerStatus",
    "write_output",
]
