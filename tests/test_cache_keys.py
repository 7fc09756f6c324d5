"""The keys that keep one voice's features apart from another's: the speaker cache's per-model disk
folder and the worker's memo from a recording's exact input to its decoded audio's hash.

Each test here is the one that fails when its key loses a part (a constant model key; a memo keyed
by the sample bytes alone), which no other test noticed.
"""

from __future__ import annotations

import numpy as np
import torch

from cosyvoice_mac.engine.cache import SpeakerCache
from cosyvoice_mac.engine.prompt_source import PromptSource
from cosyvoice_mac.pipeline.types import SpeakerPrompt

AUDIO_HASH = "ab" * 32


def _prompt(model_id: str, fill: float) -> SpeakerPrompt:
    return SpeakerPrompt(
        speech_tokens=torch.full((1, 4), int(fill), dtype=torch.int64),
        mel=torch.full((1, 8, 80), fill),
        embedding=torch.full((1, 192), fill),
        audio_hash=AUDIO_HASH,
        model_id=model_id,
        duration_s=1.0,
    )


def test_two_models_keep_their_own_disk_entry_for_one_recording(tmp_path):
    writer = SpeakerCache(tmp_path, memory_entries=0)
    assert writer.put(_prompt("cosyvoice3:/models/a", 1.0))
    assert writer.put(_prompt("cosyvoice2:/models/b", 2.0))

    reader = SpeakerCache(tmp_path, memory_entries=0)  # a new worker: nothing in memory
    second, source = reader.lookup("cosyvoice2:/models/b", AUDIO_HASH)
    assert source == "disk" and float(second.embedding[0, 0]) == 2.0
    first, source = reader.lookup("cosyvoice3:/models/a", AUDIO_HASH)  # still there after the other's lookup
    assert source == "disk" and float(first.embedding[0, 0]) == 1.0
    assert reader.paths("cosyvoice3:/models/a", AUDIO_HASH) != reader.paths("cosyvoice2:/models/b", AUDIO_HASH)


class _CountingPipeline:
    """Just what PromptSource asks of a pipeline: its model id and a prompt from decoded audio."""

    model_id = "test-model"

    def __init__(self):
        self.prepared = 0

    def prepare_prompt(self, decoded, sample_rate=None, transcript=None):
        self.prepared += 1
        return _prompt(self.model_id, float(self.prepared))


def _speechlike(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)
    return (0.3 * envelope * np.sin(2 * np.pi * 180 * t) * (1 + 0.3 * np.sin(2 * np.pi * 1100 * t))).astype(np.float32)


def test_the_same_samples_at_two_rates_are_two_voices(tmp_path):
    source = PromptSource(SpeakerCache(tmp_path, memory_entries=4))
    pipeline = _CountingPipeline()
    samples = _speechlike(3.0, 24000)
    at_24k, _ = source.from_audio(pipeline, samples, 24000, None)
    at_16k, _ = source.from_audio(pipeline, samples, 16000, None)  # the same bytes, 1.5x longer and lower
    assert source.extractions == 2
    assert at_24k.audio_hash != at_16k.audio_hash


def test_the_same_bytes_as_another_shape_or_dtype_are_other_voices(tmp_path):
    source = PromptSource(SpeakerCache(tmp_path, memory_entries=4))
    pipeline = _CountingPipeline()
    mono = _speechlike(3.0, 16000)
    stereo = mono.reshape(-1, 2)  # the same bytes read as two channels of half the length
    hashes = {source.from_audio(pipeline, mono, 16000, None)[0].audio_hash}
    hashes.add(source.from_audio(pipeline, stereo, 16000, None)[0].audio_hash)
    as_int16 = mono.view(np.int16)  # the same bytes as twice as many 16-bit samples
    hashes.add(source.from_audio(pipeline, as_int16, 16000, None)[0].audio_hash)
    assert source.extractions == 3 and len(hashes) == 3


def test_a_recording_seen_twice_is_decoded_and_extracted_once(tmp_path):
    source = PromptSource(SpeakerCache(tmp_path, memory_entries=4))
    pipeline = _CountingPipeline()
    samples = _speechlike(3.0, 24000)
    first, _ = source.from_audio(pipeline, samples, 24000, "hello")
    again, where = source.from_audio(pipeline, samples.copy(), 24000, "hello")
    assert source.extractions == 1 and where == "memory" and again.audio_hash == first.audio_hash
