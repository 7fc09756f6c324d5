"""The low-memory mode loads the speech tokenizer for each call (``OnDemand(keep_loaded=False)``); a long
recording to convert is many calls, one per piece, and must cost one load for the whole conversion, released
again before the flow runs, with the same tokens (and so the same audio) as when the tokenizer stays loaded."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.pipeline import CosyVoice
from cosyvoice_mac.pipeline.loading import OnDemand
from tests.fakes.onnx_models import make_tiny_model_dir

SENTENCES = ("The birch canoe slid on the smooth planks.", "Glue the sheet to the dark blue background.")


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> CosyVoice:
    return CosyVoice.from_pretrained(make_tiny_model_dir("cosyvoice3", tmp_path_factory.mktemp("cv3")), device="cpu")


@pytest.fixture(scope="module")
def long_source(make_speech, tmp_path_factory):
    """~40 s of sentences with 0.6 s pauses at 22.05 kHz: two pieces for the tokenizer's 30 s window."""
    parts, total, rate = [], 0.0, None
    while total < 40.0:
        for text in SENTENCES:
            speech, rate = soundfile.read(make_speech(text), dtype="float32")
            parts += [speech, np.zeros(int(0.6 * rate), np.float32)]
            total += len(speech) / rate + 0.6
    path = tmp_path_factory.mktemp("long") / "long.wav"
    soundfile.write(path, np.concatenate(parts), rate)
    return path


@pytest.mark.parametrize("stream", [False, True])
def test_a_long_recording_loads_the_low_memory_tokenizer_once(model, make_speech, long_source, stream):
    speaker = model.prepare_prompt(make_speech("Hello there, this is a short prompt.", seconds=3.0))
    kept = list(model.convert(str(long_source), speaker, stream=stream))
    tokenizer = model.prompt_encoder.speech_tokenizer
    counted = OnDemand(lambda: tokenizer, keep_loaded=False, name="speech tokenizer")
    model.prompt_encoder.speech_tokenizer = counted
    try:
        results = list(model.convert(str(long_source), speaker, stream=stream))
    finally:
        model.prompt_encoder.speech_tokenizer = tokenizer
    assert results[0].segment_count >= 2  # several pieces, each tokenised
    assert counted.loads == 1 and not counted.loaded  # one load for all of them, released at the end
    audio = np.concatenate([r.audio for r in results])
    assert np.array_equal(audio, np.concatenate([r.audio for r in kept])) and np.abs(audio).max() > 0.01  # not silent
