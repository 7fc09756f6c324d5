"""Inside the worker process: the pipeline, the speaker cache, device fallback and one job's run.

Where a job's speaker prompt comes from is ``prompt_source.py``; how its audio is finished and saved with
its sidecar is ``job_output.py``; what the worker gives back after each job is ``worker_memory.py``; how each
sentence is checked and retaken is ``takes.py``. Imported only by the worker (it imports torch and the models).
"""

from __future__ import annotations

import importlib
import re
import time
import traceback
from dataclasses import replace

import numpy as np
import torch

from cosyvoice_mac import device as device_policy
from cosyvoice_mac.engine import jobs, worker_tasks
from cosyvoice_mac.engine.batch_runner import batch_lines_of, run_jobs_together
from cosyvoice_mac.engine.cache import CacheStats, SpeakerCache
from cosyvoice_mac.engine.job_output import Attempt, job_result, low_memory_facts, precision_facts, save_result
from cosyvoice_mac.engine.jobs import Job
from cosyvoice_mac.engine.messages import (
    Cancelled,
    DeviceFallback,
    Done,
    Failed,
    Fault,
    Progress,
    Retrying,
    Started,
    TaskDone,
    TaskError,
    WorkerStatus,
)
from cosyvoice_mac.engine.prompt_source import PromptSource
from cosyvoice_mac.engine.takes import JobTakes, TakeChecker
from cosyvoice_mac.engine.worker_memory import collect_everything, release_memory
from cosyvoice_mac.errors import CosyVoiceError, InputError
from cosyvoice_mac.frontend.glossary import RequestGlossary, glossary_store
from cosyvoice_mac.pipeline.engines import engine_status, mlx_failure, release_engine_memory
from cosyvoice_mac.pipeline.types import SynthesisError
from cosyvoice_mac.request import Request, Voice
from cosyvoice_mac.versions import SAMPLE_RATE, SPECS

# Messages of errors that mean "this device cannot run this", not "this input is bad".
DEVICE_ERROR = re.compile(
    r"out of memory|\bmps\b|\bmetal\b|\bcuda\b|cudnn|cublas|hip error|device-side assert"
    r"|not (currently )?implemented for|unsupported on this device",
    re.IGNORECASE,
)
DEVICE_FAILURES_BEFORE_CPU = 2  # consecutive device errors that move the worker to the CPU for good
MIN_WARMUP_RMS = 1e-4


def is_device_error(error: BaseException) -> bool:
    """True for failures a CPU retry can fix: device out-of-memory, ops the device lacks, driver errors."""
    if isinstance(error, CosyVoiceError):  # ours: bad input or a known problem, never the device
        return False
    if isinstance(error, torch.OutOfMemoryError):
        return True
    if not isinstance(error, (RuntimeError, NotImplementedError, MemoryError, TypeError)):
        return False
    return DEVICE_ERROR.search(str(error)) is not None


def resolve_factory(path: str):
    """``"package.module:Class.method"`` -> the callable."""
    module_name, _, attribute_path = path.partition(":")
    target = importlib.import_module(module_name)
    for attribute in attribute_path.split("."):
        target = getattr(target, attribute)
    return target


def warmup_prompt(sample_rate: int = SAMPLE_RATE, seconds: float = 4.0) -> np.ndarray:
    """A voice-like test signal (gliding harmonic tone with syllable rhythm and a little noise)."""
    t = np.arange(int(sample_rate * seconds), dtype=np.float32) / sample_rate
    f0 = 140.0 + 20.0 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 12))
    rhythm = 0.3 + 0.7 * np.sin(2 * np.pi * 2.5 * t) ** 2
    noise = 0.01 * np.random.default_rng(0).standard_normal(t.shape[0])
    return (0.15 * voiced * rhythm + noise).astype(np.float32)


class WorkerRuntime:
    """Owns, inside the worker, the pipeline, the speaker cache (its PromptSource finds each job's prompt in
    it), the running job's saved-voice entry and glossary hits, and the device state (the home device,
    whether and why it fell back to the CPU)."""

    def __init__(self, config, send):
        self.config = config
        self.send = send
        self.cache = SpeakerCache(config.cache_dir, config.memory_cache_entries)
        self.prompts = PromptSource(self.cache)
        self.takes = TakeChecker()  # the recogniser loads on the first checked sentence
        self.glossary = RequestGlossary(glossary_store(config.cache_dir))
        self._glossary_hits: list[dict] = []  # the running job's glossary entries that matched (for its sidecar)
        self._voice_entry: dict | None = None  # the running job's saved voice, as the engine sent it
        self.factory = resolve_factory(config.pipeline_factory)
        self.pipeline = None
        self.home_device: torch.device | None = None
        self.fallback_reason: str | None = None
        self.vocoder, self.vocoder_reason = "torch", None  # which vocoder runs, and why not Core ML
        self.device_failures = 0
        self.jobs_run = 0
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)

    # -- loading -------------------------------------------------------------------------------
    def load(self, device: str | None = None) -> None:
        """Build the pipeline on ``device`` (default: the configured policy) and warm it up."""
        self.pipeline = self.factory(
            self.config.model_dir,
            device=device or self.config.device,
            dtype=self.config.dtype,
            **self.config.pipeline_kwargs,
        )
        if self.home_device is None:
            self.home_device = torch.device(self.pipeline.device)
        self._choose_vocoder()
        try:
            self.warm_up()
        except Exception as error:  # MLX cannot even warm up: PyTorch runs the model from the start
            if (reason := mlx_failure(self.pipeline, error)) is None:
                raise
            self.pipeline.use_torch_engine(reason)
            self.home_device = torch.device(self.pipeline.device)
            self.warm_up()

    def _choose_vocoder(self) -> None:
        """Swap in the Core ML vocoder when asked and possible; otherwise say why torch stays."""
        self.vocoder, self.vocoder_reason = "torch", None
        if self.config.vocoder != "coreml":
            return
        if self.pipeline.version not in SPECS:
            self.vocoder_reason = "the preview voice has no neural vocoder"
            return
        from cosyvoice_mac.coreml.runtime import load_vocoder

        vocoder, reason = load_vocoder("coreml", self.pipeline, self.config.compute_units)
        if vocoder is None:
            self.vocoder_reason = reason
            return
        self.pipeline.use_vocoder(vocoder)
        self.vocoder = f"coreml ({self.config.compute_units})"

    def warm_up(self) -> None:
        """One short synthesis; raises RuntimeError unless it gives finite, non-silent audio."""
        rate = self.pipeline.sample_rate
        speaker, _ = self.prompts.from_audio(self.pipeline, warmup_prompt(rate), rate, None)
        self.cache.stats, self.prompts.extractions = CacheStats(), 0  # count user requests only
        request = Request.build(self.config.warmup_text, Voice(prepared=speaker.audio_hash), seed=0)
        pieces = [result.audio for result in self.pipeline.run(request, speaker)]
        audio = np.concatenate(pieces).astype(np.float32) if pieces else np.zeros(0, np.float32)
        if audio.size == 0 or not np.isfinite(audio).all():
            raise RuntimeError(
                "the warm-up synthesis gave empty or non-finite audio; the model files "
                "may be damaged or the device is misbehaving (try device 'cpu')"
            )
        rms = float(np.sqrt(np.mean(np.square(audio))))
        if rms < MIN_WARMUP_RMS:
            raise RuntimeError(f"the warm-up synthesis was silent (RMS {rms:.2e}); the model files may be damaged")
        release_memory(self.pipeline.device)
        release_engine_memory(self.pipeline)  # MLX: the warm-up's buffers

    def _stay_on_cpu(self, reason: str) -> None:
        """Keep the (already moved) pipeline on the CPU for the rest of this worker's life."""
        self.fallback_reason = reason
        release_memory(self.home_device)
        self.send(DeviceFallback("cpu", reason, f"the model now runs on the CPU: {reason}"))

    # -- jobs ----------------------------------------------------------------------------------
    def run(self, job: Job, should_stop, voice_entry: dict | None = None) -> None:
        """Run one job and send its events; never raises for a job's own failure. ``voice_entry`` is the
        engine's library entry of the job's saved voice (the worker does not read the library itself)."""
        started = time.perf_counter()
        self.send(Started(job.job_id, str(self.pipeline.device)))
        if should_stop():  # cancelled while it was being handed over
            return self._finish(Cancelled(job.job_id))
        fallback, engine_note = None, None
        self._voice_entry = voice_entry
        try:
            try:
                outcome = self._attempt(job, should_stop)
                if self.pipeline.device == self.home_device:
                    self.device_failures = 0
            except Exception as error:
                engine_note = mlx_failure(self.pipeline, error)
                if engine_note is not None:  # MLX failed: PyTorch (MPS, then CPU) takes this and later jobs
                    outcome = self._torch_takes_over(job, should_stop, engine_note)
                else:
                    if not is_device_error(error) or self.pipeline.device.type == "cpu":
                        raise
                    fallback = f"{self.pipeline.device} failed with {type(error).__name__}: {str(error)[:300]}"
                    outcome = self._retry_on_cpu(job, should_stop, fallback)
        except InputError as error:  # the request's own fault: the field to change travels with it
            return self._finish(Failed(job.job_id, str(error), fault=Fault.INPUT, field=error.field))
        except CosyVoiceError as error:  # ours and explained, but not the input's fault (a model file, ...)
            return self._finish(Failed(job.job_id, str(error), fault=Fault.ENGINE))
        except Exception as error:
            message = f"synthesis failed: {type(error).__name__}: {error}"
            return self._finish(Failed(job.job_id, message, traceback.format_exc(limit=8), fault=Fault.ENGINE))
        if should_stop():
            return self._finish(Cancelled(job.job_id))
        self.deliver(job, outcome, started, fallback, engine_note)

    def run_batch(self, batch: list[Job], stops: list, voice_entries: list[dict | None]) -> None:
        """Run several jobs together (``engine/batch_runner.py``); each ends with its own event."""
        run_jobs_together(self, batch, stops, voice_entries)

    def deliver(self, job: Job, outcome: Attempt, started: float, fallback=None, engine_note=None, batch_size=1):
        """Send ``job``'s result made of ``outcome`` (saved with its sidecar where outputs are kept): ``fallback``
        says why it was retried on the CPU, ``engine_note`` why PyTorch took over from MLX, ``batch_size`` how
        many jobs it was spoken with (1: alone)."""
        outcome.timings["total"] = time.perf_counter() - started
        result = job_result(job, outcome, self.pipeline, fallback, engine_note, batch_size, self.config.outputs_dir)
        if self.config.outputs_dir:  # the glossary entries changed what was spoken (``text`` keeps the original)
            extra = {"glossary": self._glossary_hits, "post": result.post, "check": result.check}
            extra["batch_size"] = batch_size
            if outcome.styles:  # every recording of the voice that spoke: the content credentials name each
                extra["voice_hashes"] = [result.prompt_hash, *outcome.styles.values()]
            if job.is_conversion:  # what was re-spoken: the recording's hash and length
                extra = {"post": result.post, "source_hash": result.source_hash, "check": result.check}
                extra["source_duration_s"] = result.source_duration_s
            save_result(self.config.outputs_dir, job, result, self.pipeline, extra)
        self._finish(Done(job.job_id, result, "done" + (f" (retried on the CPU: {fallback})" if fallback else "")))

    def run_task(self, task: jobs.Task) -> None:
        """Run one Task and answer it; never raises (a failure is the answer)."""
        try:
            handler = worker_tasks.HANDLERS.get(task.kind)
            if handler is None:
                raise SynthesisError(f"unknown task {task.kind!r}")
            result = handler(self, task.args)
            event = TaskDone(task_id=task.task_id, result=result)
        except CosyVoiceError as error:
            event = TaskError(task_id=task.task_id, message=str(error))
        except Exception as error:  # the worker keeps serving jobs whatever one task does
            event = TaskError(
                task_id=task.task_id,
                message=f"{type(error).__name__}: {error}",
                traceback=traceback.format_exc(limit=8),
            )
        release_memory(self.pipeline.device, self.home_device)
        self.send(replace(event, status=self.status()))

    def _torch_takes_over(self, job, should_stop, reason):
        self.send(Retrying(job.job_id, "torch", reason, f"retrying this job on PyTorch because {reason}"))
        self.pipeline.use_torch_engine(reason)
        self.home_device = torch.device(self.pipeline.device)
        collect_everything()  # the MLX engine's objects were frozen with the model
        return self._attempt(job, should_stop)

    def _retry_on_cpu(self, job, should_stop, reason):
        self.device_failures += 1
        self.send(Retrying(job.job_id, "cpu", reason, f"retrying this job on the CPU because {reason}"))
        self.pipeline.to(torch.device("cpu"))
        release_memory(self.home_device)
        try:
            return self._attempt(job, should_stop)
        finally:
            if self.device_failures >= DEVICE_FAILURES_BEFORE_CPU:
                self._stay_on_cpu(f"{self.home_device} failed {self.device_failures} jobs in a row (last: {reason})")
            else:
                try:
                    self.pipeline.to(self.home_device)
                except Exception as error:  # the device cannot even hold the model again
                    self.pipeline.to(torch.device("cpu"))
                    self._stay_on_cpu(f"moving back to {self.home_device} failed: {error}")

    def _attempt(self, job: Job, should_stop) -> Attempt:
        """One try of ``job`` on the current device: a synthesis, or a voice conversion (no glossary: no text)."""
        request, self._glossary_hits, note, recording, styles = job.request, [], None, None, {}
        timings: dict[str, float] = {}
        clock = time.perf_counter()
        if job.is_conversion:  # decoded once, before the voice: a recording without speech fails at once
            recording = self.pipeline.decoded_source(request)
            timings["source"] = time.perf_counter() - clock
        else:
            request, self._glossary_hits, note = self.glossary.apply(request)
        speaker, source = self.prompts.for_request(self.pipeline, request, self._voice_entry)
        timings["prompt"] = time.perf_counter() - clock - timings.get("source", 0.0)
        clock = time.perf_counter()
        pieces = []
        takes = JobTakes() if TakeChecker.wanted(self.pipeline, request, job.is_conversion) else None
        if recording is not None:
            results = self.pipeline.run_conversion(request, speaker, should_stop, recording)
        else:
            styles = self.prompts.style_speakers(self.pipeline, request, self._voice_entry)
            results = self.pipeline.run(request, speaker, should_stop, styles)
        with self.takes.beside(self.pipeline, request, speaker, should_stop, takes, recording) as sentences:
            for made in results:
                for piece in sentences.add(made):  # checked (and retaken) beside the next sentence's synthesis
                    self._made(job, request, piece, pieces, timings)
                if should_stop():
                    break
            for piece in sentences.rest():
                self._made(job, request, piece, pieces, timings)
        timings["synthesis"] = time.perf_counter() - clock
        if note and pieces:
            pieces[-1] = replace(pieces[-1], notes=[*pieces[-1].notes, note])
        used = {style: prompt.audio_hash for style, prompt in styles.items()}
        attempt = Attempt(pieces, speaker, source, timings, request.mode, str(self.pipeline.device), recording)
        return attempt._replace(takes=takes, styles=used)

    def _made(self, job: Job, request, piece, pieces: list, timings: dict) -> None:
        """One sentence (or streamed chunk) done: kept, its stage times counted, the page told."""
        pieces.append(piece)
        for stage, seconds in piece.timings.items():
            timings[stage] = timings.get(stage, 0.0) + seconds
        self.send(
            Progress(
                job.job_id,
                piece.segment_index,
                piece.segment_count,
                piece.text,
                piece.mode,
                piece.duration_s,
                piece.is_final_chunk,
                piece.audio if request.stream else None,
                piece.sample_rate if request.stream else None,
            )
        )

    def _finish(self, event) -> None:
        """Free this job's memory, then send its terminal event with the worker status attached."""
        self.jobs_run += 1
        release_memory(self.pipeline.device, self.home_device)
        release_engine_memory(self.pipeline)
        self.send(replace(event, status=self.status()))

    def status(self) -> WorkerStatus:
        pipeline = self.pipeline
        try:
            memory = device_policy.memory_report(pipeline.device)
        except Exception:  # the device cannot report: show the process's memory only
            memory = device_policy.memory_report("cpu")
        stats = self.cache.stats
        return WorkerStatus(
            model=pipeline.model_id,
            version=pipeline.version,
            device=str(pipeline.device),
            home_device=str(self.home_device),
            dtype=str(pipeline.dtype).replace("torch.", ""),
            sample_rate=pipeline.sample_rate,
            fell_back=self.fallback_reason is not None,
            fallback_reason=self.fallback_reason,
            rss_bytes=memory.process_rss_bytes,
            device_allocated_bytes=memory.allocated_bytes,
            device_driver_bytes=memory.driver_allocated_bytes,
            cache_memory_hits=stats.memory_hits,
            cache_disk_hits=stats.disk_hits,
            cache_misses=stats.misses,
            feature_extractions=self.prompts.extractions,
            jobs_run=self.jobs_run,
            flow_prefix_builds=pipeline.flow_prefix_builds,
            vocoder=self.vocoder,
            vocoder_reason=self.vocoder_reason,
            **engine_status(pipeline),
            low_memory=low_memory_facts(pipeline),
            llm_weights=pipeline.llm_weights,
            precision=precision_facts(pipeline),
            batch_lines=batch_lines_of(pipeline),
        )
