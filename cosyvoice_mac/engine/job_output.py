"""Inside the worker: a finished job's audio as it is saved (post-processed as its request asks) and the
facts its result and sidecar record (``job_result``, ``save_result``).

Imported only by the worker (its runtime and batch runner); ``outputs.write_output`` writes the files.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from cosyvoice_mac.engine.jobs import Job, JobResult
from cosyvoice_mac.engine.outputs import OutputWriteError, write_output
from cosyvoice_mac.pipeline.backend import Backend
from cosyvoice_mac.pipeline.engines import engine_status
from cosyvoice_mac.pipeline.takes import Word
from cosyvoice_mac.pipeline.takes.captions import write_captions
from cosyvoice_mac.request import Request
from cosyvoice_mac.sound.post import PostReport, post_process

STREAMED_RAW_NOTE = "the streamed audio played as it was made; the saved file is the post-processed one"


class Attempt(NamedTuple):
    """What one try of a job produced, and where."""

    pieces: list
    speaker: object  # SpeakerPrompt or None
    cache_source: str  # "memory", "disk", "extracted" or "none"
    timings: dict
    mode: str
    device: str
    source: object = None  # a voice conversion's DecodedSource (its hash and length go in the sidecar)
    takes: object = None  # each sentence's checked takes (engine.takes.JobTakes), when the job is checked
    styles: dict = {}  # style -> the audio hash of the saved voice's recording its (style) tags spoke with


def finished_audio(request: Request, pieces: list, sample_rate: int) -> tuple[np.ndarray, PostReport]:
    """The job's whole audio (N,) float32, post-processed as ``request.post`` asks, and the report of it.

    Post-processing needs the whole waveform, so streamed chunks cannot have had it: the report then says
    that what played differs from the saved file. With nothing asked the samples are the pipeline's, untouched.
    """
    audio = np.concatenate([piece.audio for piece in pieces]).astype(np.float32) if pieces else np.zeros(0, np.float32)
    audio, report = post_process(audio, sample_rate, request.post)
    if request.stream and request.post.active:
        report.notes.append(STREAMED_RAW_NOTE)
    return audio, report


def job_result(
    job: Job,
    outcome: Attempt,
    pipeline: Backend,
    fallback: str | None,
    engine_note: str | None,
    batch_size: int,
    outputs_dir=None,
) -> JobResult:
    """``job``'s result made of ``outcome``: its whole audio post-processed and the facts the page and the sidecar
    show. ``fallback`` says why it was retried on the CPU, ``engine_note`` why PyTorch took over from MLX,
    ``batch_size`` how many jobs it was spoken with (1: alone). A checked job's takes are recorded in it (and kept
    in ``outputs_dir``, where outputs are kept)."""
    request, pieces, rate = job.request, outcome.pieces, pipeline.sample_rate
    audio, post = finished_audio(request, pieces, rate)
    source = outcome.source
    result = JobResult(
        job_id=job.job_id,
        audio=audio,
        sample_rate=rate,
        duration_s=audio.size / rate,
        text=request.text,
        mode=request.mode,
        seed=request.seed,
        speed=request.speed,
        model=pipeline.model_id,
        device=outcome.device,
        fell_back_to_cpu=fallback is not None,
        fallback_reason=fallback,
        prompt_hash=outcome.speaker.audio_hash if outcome.speaker is not None else None,
        cache_hit=outcome.cache_source in ("memory", "disk"),
        segment_count=len(pieces),
        timings={key: round(value, 4) for key, value in outcome.timings.items()},
        notes=list(dict.fromkeys(note for piece in pieces for note in piece.notes)),
        post=post.as_dict(),
        source_hash=source.content_hash if source is not None else None,
        source_duration_s=round(source.seconds, 3) if source is not None else None,
        batch_size=batch_size,
    )
    if engine_note is not None:
        result.notes.append(engine_note)
    result.notes += post.notes
    if outcome.takes is not None:
        outcome.takes.record(result, post.trimmed_start_ms / 1000, outputs_dir)
    return result


def save_result(outputs_dir, job: Job, result: JobResult, pipeline: Backend, extra: dict) -> None:
    """Write the result's WAV and sidecar in ``outputs_dir`` and point ``result`` at them; on a write error
    keep the samples in ``result`` and say why (the user still gets the sound). ``extra`` holds what only
    the runtime knows (the glossary entries that matched, the post-processing report)."""
    facts = {
        "id": job.job_id,
        **job.request.facts(),
        **extra,
        # the sampling settings used: the model's own where the request gave none (only the model knows them)
        **({"sampling": pipeline.sampling_used(job.request.sampling)} if isinstance(job.request, Request) else {}),
        "model": result.model,
        "version": pipeline.version,
        **engine_status(pipeline),
        "device": result.device,
        "fell_back_to_cpu": result.fell_back_to_cpu,
        "fallback_reason": result.fallback_reason,
        "prompt_hash": result.prompt_hash,
        "cache_hit": result.cache_hit,
        "timings": result.timings,
        "notes": result.notes,
        "low_memory": low_memory_facts(pipeline),
        "llm_weights": pipeline.llm_weights,
        "precision": precision_facts(pipeline),
        "interface": job.interface,
    }
    try:
        files = write_output(outputs_dir, job.job_id, result.audio, result.sample_rate, facts)
    except OutputWriteError as error:
        result.output_error = str(error)
        return
    result.output_path, result.sidecar_path = str(files.wav_path), str(files.sidecar_path)
    if files.unsigned:
        result.notes.append(files.unsigned)
    if result.words is not None:
        try:
            result.captions = write_captions(files.wav_path, [Word(**word) for word in result.words])
        except OSError as error:  # the audio is saved; the captions are a convenience
            result.notes.append(f"the captions could not be written: {error}")
    result.audio = None  # the page plays the file: the samples need not cross the pipe


def low_memory_facts(pipeline: Backend) -> dict | None:
    """The pipeline's low-memory mode and why (None for a backend without one, e.g. the preview)."""
    choice = pipeline.low_memory_choice
    return choice.as_dict() if choice is not None else None


def precision_facts(pipeline: Backend) -> dict | None:
    """What each stage runs in and why (``PrecisionPlan.as_dict``), for the status panel and the sidecar."""
    plan = pipeline.precision
    return plan.as_dict() if plan is not None else None
