"""Inside the worker process: the pipeline, the speaker cache, device fallback and one job's run.

Imported only by the worker (it imports torch and the models).
"""
from __future__ import annotations

import ctypes
import gc
import hashlib
import importlib
import random
import re
import sys
import time
import traceback
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from cosyvoice_mac import device as device_policy
from cosyvoice_mac.engine import jobs
from cosyvoice_mac.engine.cache import CacheStats, SpeakerCache, VoiceError, VoiceLibrary
from cosyvoice_mac.engine.jobs import Job, JobEvent, JobResult
from cosyvoice_mac.engine.outputs import OutputWriteError, write_output
from cosyvoice_mac.pipeline.types import SynthesisError

# Messages of errors that mean "this device cannot run this", not "this input is bad".
DEVICE_ERROR = re.compile(
    r"out of memory|\bmps\b|\bmetal\b|\bcuda\b|cudnn|cublas|hip error|device-side assert"
    r"|not (currently )?implemented for|unsupported on this device",
    re.IGNORECASE,
)
DEVICE_FAILURES_BEFORE_CPU = 2  # consecutive device errors that move the worker to the CPU for good
MIN_WARMUP_RMS = 1e-4
HASH_MEMO_ENTRIES = 256


def is_device_error(error: BaseException) -> bool:
    """True for failures a CPU retry can fix: device out-of-memory, ops the device lacks, driver errors."""
    if isinstance(error, SynthesisError):
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


def prompt_content_hash(audio_input, sample_rate: int | None) -> str:
    """The speaker-cache key of a prompt: audio.py's hash of its decoded mono 16 kHz samples
    (before trimming), so the same recording in any container or upload maps to one entry."""
    from cosyvoice_mac import audio
    from cosyvoice_mac.frontend.resample import resample

    try:
        if isinstance(audio_input, np.ndarray):
            samples = np.asarray(audio_input, dtype=np.float32)
            if samples.ndim == 2:  # (N, channels), as microphones deliver it
                samples = samples.mean(axis=1)
            wave = torch.from_numpy(np.ascontiguousarray(samples.reshape(1, -1)))
            rate = int(sample_rate)
        else:
            wave, rate = audio.decode_audio(audio_input)
    except audio.AudioInputError as error:
        raise SynthesisError(str(error)) from error
    return audio.audio_content_hash(resample(wave, rate, audio.TOKENIZER_SAMPLE_RATE))


def warmup_prompt(sample_rate: int = 24000, seconds: float = 4.0) -> np.ndarray:
    """A voice-like test signal (gliding harmonic tone with syllable rhythm and a little noise)."""
    t = np.arange(int(sample_rate * seconds), dtype=np.float32) / sample_rate
    f0 = 140.0 + 20.0 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 12))
    rhythm = 0.3 + 0.7 * np.sin(2 * np.pi * 2.5 * t) ** 2
    noise = 0.01 * np.random.default_rng(0).standard_normal(t.shape[0])
    return (0.15 * voiced * rhythm + noise).astype(np.float32)


def release_memory(*devices: torch.device) -> None:
    """Collect garbage, give cached device blocks back, and (glibc) return freed heap pages to the OS."""
    gc.collect()
    for device in {str(d) for d in devices if d is not None}:
        try:
            device_policy.empty_cache(device)
        except Exception:  # hygiene must never fail a job (e.g. a device whose runtime is gone)
            pass
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass


class Attempt(NamedTuple):
    """What one try of a job produced, and where."""

    pieces: list
    speaker: object  # SpeakerPrompt or None
    cache_source: str  # "memory", "disk", "extracted" or "none"
    timings: dict
    mode: str
    device: str


class WorkerRuntime:
    """Owns, inside the worker, the pipeline, the speaker cache, the named voices and the device
    state (the home device, whether and why it fell back to the CPU)."""

    def __init__(self, config, send):
        self.config = config
        self.send = send
        self.cache = SpeakerCache(config.cache_dir, config.memory_cache_entries)
        self.voices = VoiceLibrary(config.cache_dir)
        self.factory = resolve_factory(config.pipeline_factory)
        self.pipeline = None
        self.home_device: torch.device | None = None
        self.fallback_reason: str | None = None
        self.vocoder, self.vocoder_reason = "torch", None  # which vocoder runs, and why not Core ML
        self.device_failures = 0
        self.feature_extractions = 0
        self.jobs_run = 0
        self._hash_memo: OrderedDict[str, str] = OrderedDict()
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)

    # -- loading -------------------------------------------------------------------------------
    def load(self, device: str | None = None) -> None:
        """Build the pipeline on ``device`` (default: the configured policy) and warm it up."""
        self.pipeline = self.factory(self.config.model_dir, device=device or self.config.device,
                                     dtype=self.config.dtype, random_weights=self.config.random_weights,
                                     **self.config.pipeline_kwargs)
        if self.home_device is None:
            self.home_device = torch.device(self.pipeline.device)
        self._choose_vocoder()
        self.warm_up()

    def _choose_vocoder(self) -> None:
        """Swap in the Core ML vocoder when asked and possible; otherwise say why torch stays."""
        self.vocoder, self.vocoder_reason = "torch", None
        if self.config.vocoder != "coreml":
            return
        if getattr(self.pipeline, "version", None) not in ("cosyvoice2", "cosyvoice3"):
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
        speaker, _ = self._prompt_from_audio(warmup_prompt(rate), rate, transcript=None)
        self.cache.stats, self.feature_extractions = CacheStats(), 0  # count user requests only
        pieces = [result.audio for result in self.pipeline.synthesize(
            self.config.warmup_text, speaker=speaker, seed=0)]
        audio = np.concatenate(pieces).astype(np.float32) if pieces else np.zeros(0, np.float32)
        if audio.size == 0 or not np.isfinite(audio).all():
            raise RuntimeError("the warm-up synthesis gave empty or non-finite audio; the model files "
                               "may be damaged or the device is misbehaving (try device 'cpu')")
        rms = float(np.sqrt(np.mean(np.square(audio))))
        if rms < MIN_WARMUP_RMS:
            raise RuntimeError(f"the warm-up synthesis was silent (RMS {rms:.2e}); the model files may be damaged")
        release_memory(self.pipeline.device)

    def _stay_on_cpu(self, reason: str) -> None:
        """Keep the (already moved) pipeline on the CPU for the rest of this worker's life."""
        self.fallback_reason = reason
        release_memory(self.home_device)
        self.send(JobEvent(jobs.EVENT_DEVICE_FALLBACK, data={"device": "cpu", "reason": reason},
                           message=f"the model now runs on the CPU: {reason}"))

    # -- prompts -------------------------------------------------------------------------------
    def _content_hash(self, audio_input, sample_rate) -> str:
        """prompt_content_hash, remembered by the input's exact bytes: decoding and resampling a
        prompt costs a good part of a second, reading and hashing its bytes a millisecond."""
        if isinstance(audio_input, np.ndarray):
            raw = hashlib.sha256(np.ascontiguousarray(audio_input).tobytes())
            raw.update(f"{audio_input.dtype}{audio_input.shape}{sample_rate}".encode())
        else:
            raw = hashlib.sha256(Path(audio_input).read_bytes()) if Path(audio_input).is_file() else None
        if raw is None:
            return prompt_content_hash(audio_input, sample_rate)  # let it explain the missing file
        digest = raw.hexdigest()
        if digest not in self._hash_memo:
            self._hash_memo[digest] = prompt_content_hash(audio_input, sample_rate)
            while len(self._hash_memo) > HASH_MEMO_ENTRIES:
                self._hash_memo.popitem(last=False)
        self._hash_memo.move_to_end(digest)
        return self._hash_memo[digest]

    def _prompt_from_audio(self, audio_input, sample_rate, transcript):
        """(SpeakerPrompt, cache source): features come from the cache unless this recording is new."""
        key = self._content_hash(audio_input, sample_rate)

        def extract():
            self.feature_extractions += 1
            return self.pipeline.prepare_prompt(audio_input, sample_rate=sample_rate, transcript=transcript)

        return self.cache.get_or_extract(self.pipeline.model_id, key, extract, transcript)

    def _voice_entry(self, job: Job) -> dict | None:
        if not job.voice:
            return None
        try:
            return self.voices.get(job.voice)
        except VoiceError as error:
            raise SynthesisError(str(error)) from error

    def _prompt_for(self, job: Job, voice: dict | None, transcript: str | None):
        """(SpeakerPrompt or None, cache source) for the job's saved voice or prompt audio."""
        if voice is not None:
            if voice["model_id"] == self.pipeline.model_id:
                prompt, source = self.cache.lookup(voice["model_id"], voice["audio_hash"])
                if prompt is not None:
                    return replace(prompt, transcript=transcript), source
            if voice.get("audio_path"):
                return self._prompt_from_audio(voice["audio_path"], None, transcript)
            raise SynthesisError(f"the saved voice {job.voice!r} has no cached features for this model and "
                                 "no stored audio; upload its prompt audio again and save it under that name")
        if job.prompt_audio is not None:
            return self._prompt_from_audio(job.prompt_audio, job.prompt_sample_rate, transcript)
        if hasattr(self.pipeline, "stock_speaker"):  # a backend with a voice of its own (the preview)
            return self.pipeline.stock_speaker(), "stock"
        return None, "none"

    # -- jobs ----------------------------------------------------------------------------------
    def run(self, job: Job, should_stop) -> None:
        """Run one job and send its events; never raises for a job's own failure."""
        started = time.perf_counter()
        self.send(JobEvent(jobs.EVENT_STARTED, job.job_id, data={"device": str(self.pipeline.device)}))
        if should_stop():  # cancelled while it was being handed over
            return self._finish(JobEvent(jobs.CANCELLED, job.job_id, message="cancelled"))
        seed = job.seed if job.seed is not None else random.randrange(2**31)
        fallback = None
        try:
            try:
                outcome = self._attempt(job, seed, should_stop)
                if self.pipeline.device == self.home_device:
                    self.device_failures = 0
            except Exception as error:
                if not is_device_error(error) or self.pipeline.device.type == "cpu":
                    raise
                fallback = f"{self.pipeline.device} failed with {type(error).__name__}: {str(error)[:300]}"
                outcome = self._retry_on_cpu(job, seed, should_stop, fallback)
        except SynthesisError as error:
            return self._finish(JobEvent(jobs.FAILED, job.job_id, message=str(error)))
        except Exception as error:
            detail = traceback.format_exc(limit=8)
            message = f"synthesis failed: {type(error).__name__}: {error}"
            return self._finish(JobEvent(jobs.FAILED, job.job_id, message=message, data={"traceback": detail}))
        if should_stop():
            return self._finish(JobEvent(jobs.CANCELLED, job.job_id, message="cancelled"))
        pieces = outcome.pieces
        audio = np.concatenate([piece.audio for piece in pieces]).astype(np.float32) if pieces else np.zeros(0, np.float32)
        outcome.timings["total"] = time.perf_counter() - started
        result = JobResult(
            job_id=job.job_id, audio=audio, sample_rate=self.pipeline.sample_rate, text=job.text, mode=outcome.mode,
            seed=seed, speed=job.speed, model=self.pipeline.model_id, device=outcome.device,
            fell_back_to_cpu=fallback is not None, fallback_reason=fallback,
            prompt_hash=outcome.speaker.audio_hash if outcome.speaker is not None else None,
            cache_hit=outcome.cache_source in ("memory", "disk"), segment_count=len(pieces),
            timings={key: round(value, 4) for key, value in outcome.timings.items()},
            notes=list(dict.fromkeys(note for piece in pieces for note in getattr(piece, "notes", ()))),
        )
        self._save(job, result)
        self._finish(JobEvent(jobs.DONE, job.job_id, result=result,
                              message="done" + (f" (retried on the CPU: {fallback})" if fallback else "")))

    def run_task(self, task: jobs.Task) -> None:
        """Run one Task and answer it; never raises (a failure is the answer)."""
        try:
            if task.kind != jobs.TASK_EXTRACT_PROMPT:
                raise SynthesisError(f"unknown task {task.kind!r}")
            audio_path = task.args.get("audio")
            if not isinstance(audio_path, str) or not Path(audio_path).is_file():
                raise SynthesisError(f"the prompt audio file {audio_path} does not exist; upload it again")
            speaker, source = self._prompt_from_audio(audio_path, None, task.args.get("transcript"))
            streaming_ready = bool(task.args.get("prepare_streaming")) and hasattr(self.pipeline, "prepare_streaming")
            if streaming_ready:
                self.pipeline.prepare_streaming(speaker)
            result = {"audio_hash": speaker.audio_hash, "model_id": self.pipeline.model_id, "source": source,
                      "duration_s": float(speaker.duration_s), "streaming_ready": streaming_ready}
            event = JobEvent(jobs.EVENT_TASK_DONE, data={"task_id": task.task_id, "result": result})
        except SynthesisError as error:
            event = JobEvent(jobs.EVENT_TASK_FAILED, message=str(error), data={"task_id": task.task_id})
        except Exception as error:  # the worker keeps serving jobs whatever one task does
            event = JobEvent(jobs.EVENT_TASK_FAILED, message=f"{type(error).__name__}: {error}",
                             data={"task_id": task.task_id, "traceback": traceback.format_exc(limit=8)})
        release_memory(self.pipeline.device, self.home_device)
        event.data["status"] = self.status()
        self.send(event)

    def _retry_on_cpu(self, job, seed, should_stop, reason):
        self.device_failures += 1
        self.send(JobEvent(jobs.EVENT_RETRY, job.job_id, data={"device": "cpu", "reason": reason},
                           message=f"retrying this job on the CPU because {reason}"))
        self.pipeline.to(torch.device("cpu"))
        release_memory(self.home_device)
        try:
            return self._attempt(job, seed, should_stop)
        finally:
            if self.device_failures >= DEVICE_FAILURES_BEFORE_CPU:
                self._stay_on_cpu(f"{self.home_device} failed {self.device_failures} jobs in a row (last: {reason})")
            else:
                try:
                    self.pipeline.to(self.home_device)
                except Exception as error:  # the device cannot even hold the model again
                    self.pipeline.to(torch.device("cpu"))
                    self._stay_on_cpu(f"moving back to {self.home_device} failed: {error}")

    def _attempt(self, job: Job, seed: int, should_stop) -> "Attempt":
        """One try of ``job`` on the current device."""
        voice = self._voice_entry(job)
        transcript = job.prompt_text
        if voice is not None and transcript is None and not job.instruct:
            transcript = voice.get("transcript")  # a saved voice with its words speaks zero-shot
        mode = "instruct" if job.instruct else ("zero_shot" if transcript else "cross_lingual")
        timings: dict[str, float] = {}
        clock = time.perf_counter()
        speaker, source = self._prompt_for(job, voice, transcript)
        timings["prompt"] = time.perf_counter() - clock
        clock = time.perf_counter()
        pieces = []
        for piece in self.pipeline.synthesize(job.text, prompt_text=transcript, instruct=job.instruct, seed=seed,
                                              speed=job.speed, speaker=speaker, stream=job.stream,
                                              should_stop=should_stop):
            pieces.append(piece)
            for stage, seconds in piece.timings.items():
                timings[stage] = timings.get(stage, 0.0) + seconds
            data = {"segment_index": piece.segment_index, "segment_count": piece.segment_count,
                    "text": piece.text, "duration_s": piece.duration_s, "is_final_chunk": piece.is_final_chunk}
            if job.stream:
                data["audio"], data["sample_rate"] = piece.audio, piece.sample_rate
            self.send(JobEvent(jobs.EVENT_PROGRESS, job.job_id, data=data))
            if should_stop():
                break
        timings["synthesis"] = time.perf_counter() - clock
        return Attempt(pieces, speaker, source, timings, mode, str(self.pipeline.device))

    def _save(self, job: Job, result: JobResult) -> None:
        if not self.config.outputs_dir:
            return
        facts = {"id": job.job_id, "text": job.text, "mode": result.mode, "instruct": job.instruct,
                 "prompt_text": job.prompt_text, "voice": job.voice, "seed": result.seed, "speed": result.speed,
                 "model": result.model, "version": getattr(self.pipeline, "version", None),
                 "device": result.device, "fell_back_to_cpu": result.fell_back_to_cpu,
                 "fallback_reason": result.fallback_reason, "prompt_hash": result.prompt_hash,
                 "cache_hit": result.cache_hit, "timings": result.timings, "notes": result.notes,
                 "interface": job.interface}
        try:
            files = write_output(self.config.outputs_dir, job.job_id, result.audio, result.sample_rate, facts)
        except OutputWriteError as error:
            result.output_error = str(error)
            return
        result.output_path, result.sidecar_path = str(files.wav_path), str(files.sidecar_path)

    def _finish(self, event: JobEvent) -> None:
        """Free this job's memory, then send its terminal event with the worker status attached."""
        self.jobs_run += 1
        release_memory(self.pipeline.device, self.home_device)
        event.data["status"] = self.status()
        self.send(event)

    def status(self) -> dict:
        pipeline = self.pipeline
        try:
            memory = device_policy.memory_report(pipeline.device)
        except Exception:  # the device cannot report: show the process's memory only
            memory = device_policy.memory_report("cpu")
        return {
            "model": pipeline.model_id, "version": getattr(pipeline, "version", None),
            "device": str(pipeline.device), "home_device": str(self.home_device),
            "fell_back": self.fallback_reason is not None, "fallback_reason": self.fallback_reason,
            "dtype": str(getattr(pipeline, "dtype", None)).replace("torch.", ""),
            "sample_rate": pipeline.sample_rate,
            "memory": {"rss_bytes": memory.process_rss_bytes, "device_allocated_bytes": memory.allocated_bytes,
                       "device_driver_bytes": memory.driver_allocated_bytes},
            "cache": self.cache.stats.as_dict(), "feature_extractions": self.feature_extractions,
            "jobs_run": self.jobs_run,
            "flow_prefix_builds": getattr(getattr(pipeline, "flow_prefixes", None), "builds", 0),
            "vocoder": self.vocoder, "vocoder_reason": self.vocoder_reason,
        }

