"""What crosses a machine between the cluster's driver and its workers: plain dataclasses (and the engine's own
``Job`` and events), pickled by Ray. A voice travels as its recording, transcript and feature hash; a line
comes back as its samples and the facts its worker's engine recorded, never as a path on either disk. The
driver's side of packing (``packed``, ``job_files``: each file a job names travels as its bytes; ``model_ask``: the
app's model as every worker is asked to build it) is here too; the worker's side is ``job_actor.land``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cosyvoice_mac import __version__
from cosyvoice_mac.engine.jobs import Job
from cosyvoice_mac.engine.messages import Cancelled, Failed
from cosyvoice_mac.engine.worker import WorkerConfig
from cosyvoice_mac.preview import PREVIEW

FILE_KEYS = ("audio", "audio_path")  # where a task's args or a voice entry name a file on the driver's disk
# The header that ``Sidecar.new`` writes itself: a worker's sidecar facts travel without it.
SIDECAR_HEADER = ("file", "created", "sample_rate", "duration_s")


@dataclass(frozen=True)
class ModelAsk:
    """The model every worker runs and what the driver's flags say of building it. ``model`` is a folder name
    (looked up in the worker's own models folder; a path that exists there also works) or "preview"; what
    is left unsaid (device auto, precision, engine None) each worker decides for its own machine, as the app
    decides it locally. ``app_version``: a worker running another version refuses (the outputs would differ)."""

    model: str
    app_version: str
    device: str = "auto"
    dtype: str | None = None
    precision: dict = field(default_factory=dict)
    engine: str | None = None
    vocoder: str = "torch"


@dataclass(frozen=True)
class WorkerFacts:
    """One worker as the job sees it: its name (``host#slot``), its machine, and once loaded its device,
    engine and model, for the sidecars and the report."""

    name: str
    host: str
    slot: int
    pid: int
    device: str | None = None
    engine: str | None = None
    model: str | None = None
    threads: int | None = None

    def describe(self) -> str:
        built = ", ".join(part for part in (self.device, self.engine) if part)
        return f"{self.name} ({built})" if built else self.name


@dataclass(frozen=True)
class VoiceParcel:
    """A saved voice on its way to the workers: the recording's bytes (its file suffix says the format), the
    transcript, and the hash and model its features were cached under (a worker that has them cached for
    that model finds them by the hash; any other extracts them once from the recording)."""

    name: str
    recording: bytes
    suffix: str
    transcript: str | None
    audio_hash: str
    model_id: str | None

    def library_entry(self, recording_path: str) -> dict:
        """The entry the worker's runtime takes for a saved voice (``engine.voice_library``'s shape), its
        recording at ``recording_path`` on the worker's disk."""
        return {
            "name": self.name,
            "audio_hash": self.audio_hash,
            "model_id": self.model_id,
            "transcript": self.transcript,
            "audio_path": recording_path,
        }


@dataclass(frozen=True)
class LineMade:
    """A line a worker spoke: (N,) float32 samples as the local engine gives them back (its saved 16-bit
    file's), the rate, and the facts its engine recorded for the line's sidecar (header left out)."""

    job_id: str
    samples: np.ndarray
    sample_rate: int
    facts: dict
    worker: str


@dataclass(frozen=True)
class LineFailed:
    """A line a worker could not speak: the engine's own terminal event (Failed, with its fault and field, or
    Cancelled), so every door answers it as it answers a local failure."""

    job_id: str
    event: Failed | Cancelled
    worker: str


LineOutcome = LineMade | LineFailed


@dataclass(frozen=True)
class SourceParcel:
    """A recording to convert on its way to a worker: its file name (the sidecar's ``source``) and bytes."""

    name: str
    recording: bytes


# -- the app's queue on the cluster (``queue_worker.py`` <-> ``job_actor.py``) --------------------------------


@dataclass(frozen=True)
class FileParcel:
    """A file a job or task names on the driver's disk (an uploaded prompt, a saved voice's recording, a recording
    to convert), on its way to a worker: its name, bytes and their SHA-256 (where the worker keeps it)."""

    name: str
    data: bytes
    digest: str


@dataclass(frozen=True)
class RunParcel:
    """One job of the app's queue for a worker: the job and its sequence number (a cancel names it), its saved
    voice's library entry, the files the two name (driver path -> parcel), and whether it was cancelled already."""

    seq: int
    job: Job  # its paths the driver's
    voice_entry: dict | None
    files: dict[str, FileParcel]
    cancelled: bool = False


@dataclass(frozen=True)
class JobMade:
    """A job a worker finished: its Done event (the samples in ``result.audio``, no path of the worker's disk)
    and the facts its engine recorded for the sidecar (header left out), which the driver saves."""

    event: object  # engine.messages.Done
    facts: dict


def parcel_of(path: str) -> FileParcel:
    """The file at ``path`` (on the driver's disk) as it travels."""
    data = Path(path).read_bytes()
    return FileParcel(Path(path).name, data, hashlib.sha256(data).hexdigest()[:32])


def packed(value):
    """``value`` (a voice entry, a task's args) with each file it names on this disk (FILE_KEYS) as a FileParcel."""
    if isinstance(value, dict):
        return {key: _packed_item(key, item) for key, item in value.items()}
    if isinstance(value, list):
        return [packed(item) for item in value]
    return value


def _packed_item(key: str, item):
    if key in FILE_KEYS and isinstance(item, str) and Path(item).is_file():
        return parcel_of(item)
    return packed(item)


def job_files(job: Job) -> dict[str, FileParcel]:
    """The files ``job`` names on this disk (its voice's recording, the recording it converts), by path."""
    paths = [job.request.voice.audio, getattr(getattr(job.request, "source", None), "audio", None)]
    return {path: parcel_of(path) for path in paths if path and Path(path).is_file()}


def model_ask(config: WorkerConfig) -> ModelAsk:
    """What every worker runs: the app's model (its folder name, looked up in each worker's models folder, or
    the preview voice) with the app's build choices; what they leave open (auto) each worker decides."""
    options = dict(config.pipeline_kwargs)
    engine = options.pop("engine", None)
    options.pop("mlx_llm", None)  # each machine's own: its gate passes what its chip runs
    return ModelAsk(
        PREVIEW if config.model_dir is None else Path(config.model_dir).name,
        __version__,
        device=config.device,
        dtype=config.dtype,
        precision={key: value for key, value in options.items() if value},
        engine=None if engine in (None, "auto") else engine,
        vocoder="torch" if config.vocoder != "coreml" else f"coreml:{config.compute_units}",
    )
