"""Inside a Ray actor on a worker machine: this app's own worker code (``engine.runtime.WorkerRuntime``, the
code of the local engine's worker process) with the model built for THIS machine, speaking the groups of
lines the driver sends.

The one seam a group of lines goes through is :func:`speak_group`: today it runs the group's jobs one after
another, as the local worker does; batched synthesis (issue 47, ``WorkerRuntime.run_batch``) replaces its
body, and nothing else here changes. Ray wraps :class:`LineWorker` (``pool.py``); this module does not
import Ray, and imports torch only when the model loads.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

import psutil

from cosyvoice_mac import __version__
from cosyvoice_mac.cluster.wire import (
    SIDECAR_HEADER,
    LineFailed,
    LineMade,
    ModelAsk,
    SourceParcel,
    VoiceParcel,
    WorkerFacts,
)
from cosyvoice_mac.conversion_request import Recording
from cosyvoice_mac.engine.jobs import Job
from cosyvoice_mac.engine.messages import Done, Failed, Fault
from cosyvoice_mac.engine.qos import set_worker_thread_qos
from cosyvoice_mac.engine.worker import WorkerConfig, unset_worker_environment
from cosyvoice_mac.errors import CosyVoiceError
from cosyvoice_mac.paths import default_models_dir
from cosyvoice_mac.preview import PREVIEW, preview_available
from cosyvoice_mac.stored import read_json

SCRATCH_PREFIX = "cosyvoice-cluster-"  # + the worker's process id: a killed worker's folder is found and removed


def speak_group(runtime, jobs: list[Job], voice_entries: list[dict | None], should_stop) -> None:
    """THE SEAM: speak ``jobs`` (a group of lines) with this machine's engine; each job ends with its own
    terminal event through ``runtime.send``. Today one after another, exactly as the app's worker runs them
    (``WorkerRuntime.run``); issue 47's batched synthesis replaces this body with one
    ``runtime.run_batch(jobs, [should_stop] * len(jobs), voice_entries)``, which keeps each line's tokens."""
    for job, entry in zip(jobs, voice_entries):
        runtime.run(job, should_stop, entry)


class JobGlossary:
    """The driver's pronunciation glossary, sent with the job: the worker's engine applies it to every line
    (``RequestGlossary`` reads ``entries()``), so a line is spoken as the driver's machine would speak it."""

    def __init__(self, entries):
        self._entries = tuple(entries)

    def entries(self):
        return self._entries


def model_choice(ask: ModelAsk, models_dir: Path):
    """(``engine.host.ModelChoice`` of ``ask.model`` on this machine, None) or (None, why this machine cannot
    run it). Reads only folders: a machine without the model refuses before anything loads."""
    from cosyvoice_mac.engine.host import PREVIEW_CHOICE, ModelChoice
    from cosyvoice_mac.pipeline.model_dir import ModelFolderError, detect_version

    if ask.app_version != __version__:
        return None, f"runs cosyvoice-mac {__version__}, the driver {ask.app_version}: install one version everywhere"
    if ask.model == PREVIEW:
        if preview_available():
            return PREVIEW_CHOICE, None
        return None, "has no preview voice (its packages are not installed)"
    folder = Path(ask.model).expanduser()
    if not folder.is_dir():  # a path on the driver's disk: the same folder name in this machine's models/
        folder = models_dir / Path(ask.model).name
    if not folder.is_dir():
        return None, f"has no model folder {Path(ask.model).name!r} in {models_dir}: copy it there or download it"
    try:
        return ModelChoice(folder.name, folder, detect_version(folder)), None
    except ModelFolderError as error:
        return None, str(error)


def worker_config_for(ask: ModelAsk, choice, outputs_dir: Path, threads: int | None) -> WorkerConfig:
    """How this machine's worker runs ``choice``: the app's own rule (``ModelHost.worker_config``, as the CLI's
    local engine uses it), with the driver's flags and this machine's defaults for what they leave open."""
    from cosyvoice_mac.engine.host import HostConfig, ModelHost
    from cosyvoice_mac.mlx import requested_engine

    settings = HostConfig(
        models_dir=outputs_dir,  # unused: the model was found by ``model_choice``
        outputs_dir=outputs_dir,
        device=ask.device,
        dtype=ask.dtype,
        vocoder=ask.vocoder,
        precision=dict(ask.precision),
        engine=requested_engine(ask.engine),  # the flag, else this machine's $COSYVOICE_ENGINE, else auto
        preview=True,
        torch_threads=threads,
    )
    return ModelHost(settings).worker_config(choice)


def taken_from_scratch(result) -> tuple:
    """(samples, sidecar facts) of a result the worker's engine saved in the scratch folder, whose files are then
    removed: the samples are the saved 16-bit file's, as the local engine gives them back; the facts are the
    sidecar's without its header (the driver's ``write_output`` writes that)."""
    samples = result.samples()
    facts = {"seed": result.seed, "model": result.model, "device": result.device}  # the scratch refused it
    if result.sidecar_path:
        facts = {key: value for key, value in read_json(result.sidecar_path).items() if key not in SIDECAR_HEADER}
    for path in (result.sidecar_path, result.output_path, *(result.captions or {}).values()):
        if path:
            Path(path).unlink(missing_ok=True)
    return samples, facts


def remove_dead_workers_scratch() -> None:
    """Remove the scratch folders of this machine's workers that were killed (a worker that ends well removes
    its own): the folder's name holds its worker's process id."""
    for folder in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        pid = folder.name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


class LineWorker:
    """Owns, on one worker slot of one machine, the WorkerRuntime (the pipeline built for this machine), the
    job's voices (their recordings in a scratch folder of this machine), and which groups were cancelled.

    Its engine saves each line in the scratch folder as the local worker saves it in outputs/; the line's
    samples and sidecar facts go back to the driver and the files are removed, so only the driver keeps a
    line. Ray runs ``stop`` beside the groups sent (a thread each); the groups run one at a time."""

    def __init__(self, slot: int, slots_here: int):
        self.slots_here = slots_here
        remove_dead_workers_scratch()
        self.scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
        host = socket.gethostname()
        self.facts = WorkerFacts(f"{host}#{slot}", host, slot, os.getpid())
        self.runtime = None
        self.cache_dir: str | None = None  # the speaker cache's folder: None, this machine's own
        self.choice = None
        self.voices: dict[str, dict] = {}
        self.cancelled: set[int] = set()  # the numbers of the groups to stop
        self._ended: dict = {}  # job id -> its terminal event, while its group runs
        self._one_group = threading.Lock()

    def check(self, ask: ModelAsk) -> tuple[WorkerFacts, str | None]:
        """(this worker's facts, why it cannot run ``ask`` or None), before any model loads."""
        self.choice, refusal = model_choice(ask, default_models_dir())
        return self.facts, refusal

    def load(self, ask: ModelAsk, glossary) -> tuple[WorkerFacts, str | None]:
        """Build and warm up the model for this machine (after ``check``): (its facts, why it failed or None)."""
        os.environ.update(unset_worker_environment())  # before torch loads, as the local worker does
        from cosyvoice_mac.engine.runtime import WorkerRuntime
        from cosyvoice_mac.engine.worker_memory import keep_for_life
        from cosyvoice_mac.frontend.glossary import RequestGlossary

        # Always said: Ray starts an actor with OMP_NUM_THREADS=1, and the machine's cores are its workers' share.
        threads = max(1, (psutil.cpu_count(logical=False) or os.cpu_count() or 1) // self.slots_here)
        config = worker_config_for(ask, self.choice, self.scratch / "outputs", threads)
        config = replace(config, cache_dir=self.cache_dir)
        try:
            runtime = WorkerRuntime(config, self._receive)
            runtime.load()
        except Exception as error:  # said to the driver, which refuses the job before any line
            return self.facts, f"could not load {self.choice.name}: {str(error) or type(error).__name__}"
        runtime.glossary = RequestGlossary(JobGlossary(glossary))
        keep_for_life()
        self.runtime = runtime
        status = runtime.status()
        self.facts = replace(
            self.facts, device=status.device, engine=status.engine, model=status.model, threads=threads
        )
        return self.facts, None

    def take_voices(self, parcels: list[VoiceParcel]) -> dict[str, dict]:
        """Keep the job's voices (their recordings written to this machine's scratch folder) and make their
        features ready for the loaded model: name -> ``{"audio_hash", "cache"}`` or ``{"error": why}``."""
        folder = self.scratch / "voices"
        folder.mkdir(exist_ok=True)
        for parcel in parcels:
            path = folder / f"{parcel.audio_hash}{parcel.suffix}"
            path.write_bytes(parcel.recording)
            self.voices[parcel.name] = parcel.library_entry(str(path))
        entries = {parcel.name: self.voices[parcel.name] for parcel in parcels}
        with self._one_group:  # the runtime serves one caller at a time (a cancelled group may still be ending)
            try:
                return self.runtime.prompts.prepare_saved(self.runtime.pipeline, entries)
            except CosyVoiceError as error:
                return {name: {"error": str(error)} for name in entries}

    def speak_group(
        self, number: int, jobs: list[Job], sources: dict[str, SourceParcel] | None = None
    ) -> list[LineMade | LineFailed]:
        """Speak one group (``number``: its number, for ``stop``): an outcome per job, in order. ``sources``:
        job id -> the recording a conversion job re-speaks (written here for the group's time)."""
        with self._one_group:
            set_worker_thread_qos()  # the thread Ray runs this group on (macOS: user-initiated, as the local worker)
            self._ended = {}
            folder = self.scratch / f"sources-{number}"
            jobs = [self._here(job, (sources or {}).get(job.job_id), folder) for job in jobs]
            entries = [self.voices.get(job.request.voice.saved) if job.request.voice.saved else None for job in jobs]
            try:
                speak_group(self.runtime, jobs, entries, lambda: number in self.cancelled)
                return [self._outcome(job) for job in jobs]
            finally:
                shutil.rmtree(folder, ignore_errors=True)

    @staticmethod
    def _here(job: Job, parcel: SourceParcel | None, folder: Path) -> Job:
        """``job`` with its recording to convert on this machine's disk (under its own name, which the sidecar
        records); any other job as it came."""
        if parcel is None:
            return job
        path = folder / job.job_id / parcel.name
        path.parent.mkdir(parents=True)
        path.write_bytes(parcel.recording)
        return replace(job, request=replace(job.request, source=Recording(audio=str(path))))

    def stop(self, numbers: list[int]) -> None:
        """Cancel the groups of these ``numbers`` (one job's): a running line stops at its next sentence."""
        self.cancelled.update(numbers)

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _receive(self, event) -> None:
        """The runtime's events: a job's terminal one is kept for its outcome (progress stays here)."""
        if getattr(event, "terminal", False):
            self._ended[event.job_id] = replace(event, status=None)  # the worker status need not travel

    def _outcome(self, job: Job) -> LineMade | LineFailed:
        event = self._ended.pop(job.job_id, None)
        if event is None:
            event = Failed(job.job_id, "the worker ended the line without a result", fault=Fault.ENGINE)
        if not isinstance(event, Done):
            return LineFailed(job.job_id, event, self.facts.name)
        samples, facts = taken_from_scratch(event.result)
        if event.result.words is not None:  # the line's timed words travel with it (the driver writes no captions)
            facts["words"] = event.result.words
        return LineMade(job.job_id, samples, event.result.sample_rate, facts, self.facts.name)
