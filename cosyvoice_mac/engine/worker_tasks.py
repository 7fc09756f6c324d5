"""Inside the worker: what each kind of Task (``jobs.Task``) does, as functions of the worker's runtime.

Each takes the runtime (its pipeline and its PromptSource) and the task's args and returns the plain dict
that ``messages.TaskDone`` carries back; a CosyVoiceError is the task's answer for bad input.
"""

from __future__ import annotations

import time
from pathlib import Path

from cosyvoice_mac.engine import jobs
from cosyvoice_mac.pipeline.types import SynthesisError


def extract_prompt(runtime, args: dict) -> dict:
    """One recording's features (and, with ``prepare_streaming``, the voice's flow prefix)."""
    audio_path = args.get("audio")
    if not isinstance(audio_path, str) or not Path(audio_path).is_file():
        raise SynthesisError(f"the prompt audio file {audio_path} does not exist; upload it again")
    speaker, source = runtime.prompts.from_audio(runtime.pipeline, audio_path, None, args.get("transcript"))
    streaming_ready = bool(args.get("prepare_streaming")) and runtime.pipeline.prepare_streaming(speaker)
    return {
        "audio_hash": speaker.audio_hash,
        "model_id": runtime.pipeline.model_id,
        "source": source,
        "duration_s": float(speaker.duration_s),
        "streaming_ready": streaming_ready,
    }


def prepare_voices(runtime, args: dict) -> dict:
    """Several saved voices' features for the loaded model in one call (``PromptSource.prepare_saved``)."""
    entries = args.get("voices")
    if not isinstance(entries, dict) or not all(isinstance(entry, dict) for entry in entries.values()):
        raise SynthesisError("prepare_voices needs {name: library entry}")
    started = time.perf_counter()
    outcomes = runtime.prompts.prepare_saved(runtime.pipeline, entries)
    return {
        "voices": outcomes,
        "model_id": runtime.pipeline.model_id,
        "extracted": sum(outcome.get("cache") == "extracted" for outcome in outcomes.values()),
        "seconds": round(time.perf_counter() - started, 4),
    }


HANDLERS = {jobs.TASK_EXTRACT_PROMPT: extract_prompt, jobs.TASK_PREPARE_VOICES: prepare_voices}
