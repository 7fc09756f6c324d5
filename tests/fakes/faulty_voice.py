"""A test backend whose takes are real speech with the faults users report, one fault per take in a given order.

``FaultyVoice`` is ``FakeCosyVoice`` (tones for anything else, e.g. the warm-up) that says ``text`` with the
recording it was given (``speech``: a WAV of ``first`` alone and one of the whole ``text``), spoiled as the
next entry of ``faults`` says, one entry per take:

* ``good``      the whole text, as recorded
* ``drop``      only the first sentence (the rest of the text is skipped)
* ``repeat``    the whole text, then its first half again (the model looped)
* ``truncate``  cut in the middle of a loud sound in the second half (the ending lost)
* ``noise``     white noise as long as the good take

When the list runs out, takes are good.
"""

from __future__ import annotations

import numpy as np
import soundfile

from cosyvoice_mac.frontend.resample import resample
from cosyvoice_mac.pipeline.takes import NoRecogniser
from cosyvoice_mac.pipeline.types import SAMPLE_RATE, SynthesisResult
from tests.fakes.fake_pipeline import FakeCosyVoice

FAULTY_FACTORY = "tests.fakes.faulty_voice:FaultyVoice.from_pretrained"


class NoRecogniserHere:
    """The machine without a recogniser for the text's language: only the recogniser-free checks judge."""

    def hear(self, audio, sample_rate, language):
        raise NoRecogniser("no recogniser in this test")


def _read(path: str) -> np.ndarray:
    import torch

    samples, rate = soundfile.read(path, dtype="float32")
    return resample(torch.from_numpy(samples)[None], rate, SAMPLE_RATE)[0].numpy()


def spoil(audio: np.ndarray, first: np.ndarray, fault: str) -> np.ndarray:
    if fault == "drop":
        return first
    if fault == "repeat":
        return np.concatenate([audio, audio[: len(audio) // 2]])
    if fault == "truncate":
        frame = SAMPLE_RATE // 50
        loud = np.abs(audio[: len(audio) // frame * frame]).reshape(-1, frame).mean(axis=1)
        return audio[: (len(loud) // 2 + int(np.argmax(loud[len(loud) // 2 :]))) * frame]
    if fault == "noise":
        return (0.1 * np.random.default_rng(len(audio)).standard_normal(len(audio))).astype(np.float32)
    return audio


class FaultyVoice(FakeCosyVoice):
    """Says ``text`` with recorded speech, each take spoiled by the next of ``faults``; ``seeds`` records each
    take's seed."""

    def __init__(self, *args, text="", speech=None, first=None, faults=(), **settings):
        super().__init__(*args, **settings)
        self.text, self.faults, self.seeds = text, list(faults), []
        self.speech = speech
        self.audio = _read(speech) if speech else np.zeros(0, np.float32)
        self.first = _read(first) if first else self.audio

    def stock_speaker(self):
        """Its own voice (it stands in for the preview voice, whose requests name no recording): the speech's."""
        return self.prepare_prompt(self.speech) if self.speech else None

    def run(self, request, speaker=None, should_stop=None, style_speakers=None):
        if request.text != self.text:
            return super().run(request, speaker, should_stop, style_speakers)
        fault = self.faults.pop(0) if self.faults else "good"
        self.seeds.append(request.seed)
        audio = np.clip(spoil(self.audio, self.first, fault), -0.99, 0.99).astype(np.float32)
        piece = SynthesisResult(audio, SAMPLE_RATE, len(audio) // 960, 0.01, self.text, 0, 1, seed=request.seed)
        return iter([piece])
