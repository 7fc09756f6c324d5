"""The Python front door: ``load_model(...).convert(source=..., voice=...)`` yields the same result type as
``synthesize``, with the source's length, and says clearly what it cannot do."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile

from cosyvoice_mac import Voice, load_model
from cosyvoice_mac.errors import CosyVoiceError
from cosyvoice_mac.pipeline.types import SynthesisResult


@pytest.fixture(scope="module")
def model():
    return load_model("preview")


def test_convert_on_the_front_door_returns_synthesis_results(model, make_speech):
    source = make_speech("The birch canoe slid on the smooth planks.")
    voice = Voice.recording(make_speech("This is the voice I would like you to copy, please.", seconds=4.0))
    results = list(model.convert(source=str(source), voice=voice))
    assert results and all(isinstance(r, SynthesisResult) for r in results)
    assert all(r.mode == "voice_conversion" and r.seed == 0 for r in results)
    seconds = sum(r.duration_s for r in results)
    assert abs(seconds - soundfile.info(source).duration) < 0.05
    again = np.concatenate([r.audio for r in model.convert(source=str(source), voice=voice)])
    assert np.array_equal(np.concatenate([r.audio for r in results]), again)  # the same input, the same output


def test_a_saved_voice_needs_the_engine_and_bad_input_is_named(model, make_speech):
    source = str(make_speech("Glue the sheet to the dark blue background."))
    with pytest.raises(CosyVoiceError, match="through the engine"):
        list(model.convert(source=source, voice=Voice.saved_voice("Ada")))
    with pytest.raises(CosyVoiceError, match="does not exist"):
        list(model.convert(source="/no/such.wav", voice=Voice.builtin()))
    with pytest.raises(CosyVoiceError, match="speed"):
        list(model.convert(source=source, voice=Voice.builtin(), speed=5.0))
