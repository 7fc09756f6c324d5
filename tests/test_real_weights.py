"""Opt-in check with REAL weights: the words come back through ASR and the voice is the prompt's.

    COSYVOICE_REAL_MODEL_DIR=models/Fun-CosyVoice3-0.5B .venv/bin/python -m pytest tests/test_real_weights.py -v

Skipped (with the reason) unless ``COSYVOICE_REAL_MODEL_DIR`` names a real model folder: the suite's
other tests use random weights, whose speech is noise. Per mode (zero-shot, cross-lingual, instruct)
one English and one Chinese sentence are synthesised, offline and streamed. English must transcribe
back through the bundled Whisper tiny.en at under 10 % WER; Chinese at under 20 % character error
through the multilingual Whisper when it is in the ASR cache (else its words are not checked). Every
output's CAM++ speaker vector (the folder's campplus.onnx) must be closer to the prompt's than to
another voice's, and above ``MIN_SIMILARITY``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.signal import resample_poly

from cosyvoice_mac.engine import asr
from cosyvoice_mac.pipeline import CosyVoice
from cosyvoice_mac.pipeline.model_dir import ModelFolder, ModelFolderError

REAL_DIR = os.environ.get("COSYVOICE_REAL_MODEL_DIR", "")
PROMPT_TEXT = "Hello there, this is a short prompt for testing the voice."
SENTENCES = {
    "en": "The weather is lovely today, so we are going for a walk in the park.",
    "zh": "今天天气很好，我们去公园散步吧。",
}
MODES = {"zero_shot": {"prompt_text": PROMPT_TEXT}, "cross_lingual": {}, "instruct": {"instruct": "Speak calmly."}}
MAX_EN_WER = 0.10
MAX_ZH_CER = 0.20
MIN_SIMILARITY = 0.5  # CAM++ cosine; a different speaker is typically below 0.3


def _real_folder() -> Path:
    if not REAL_DIR:
        pytest.skip("set COSYVOICE_REAL_MODEL_DIR to a downloaded model folder to run the real-weights checks")
    try:
        return ModelFolder.open(REAL_DIR).path
    except ModelFolderError as error:
        pytest.skip(f"COSYVOICE_REAL_MODEL_DIR={REAL_DIR} is not a usable model folder: {error}")


@pytest.fixture(scope="module")
def model() -> CosyVoice:
    return CosyVoice.from_pretrained(_real_folder())


@pytest.fixture(scope="module")
def voices(model, make_speech):
    prompt = make_speech(PROMPT_TEXT, seconds=6.0, voice="en-us")
    other = make_speech(PROMPT_TEXT, seconds=6.0, voice="en-us+f3")
    return prompt, model.prepare_prompt(prompt, transcript=PROMPT_TEXT), model.prepare_prompt(other)


@pytest.fixture(scope="module")
def transcriber():
    return asr.Transcriber(asr.ModelStore(allow_download=False))


def _embedding(model: CosyVoice, audio: np.ndarray) -> torch.Tensor:
    wave16k = torch.from_numpy(resample_poly(audio, 2, 3).astype(np.float32))[None]
    return model.prompt_encoder.speaker_encoder.embedding(wave16k)[0]


def _similarity(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))


def _character_error_rate(reference: str, hypothesis: str) -> float:
    keep = lambda text: [c for c in text if c.strip() and c not in "，。！？,.!?"]  # noqa: E731
    return asr.word_error_rate(" ".join(keep(reference)), " ".join(keep(hypothesis)))


@pytest.mark.parametrize("stream", [False, True], ids=["offline", "streamed"])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("language", sorted(SENTENCES))
def test_words_come_back_and_the_voice_is_the_prompts(model, voices, transcriber, language, mode, stream):
    _, speaker, other = voices
    results = list(model.synthesize(SENTENCES[language], speaker=speaker, seed=1, stream=stream, **MODES[mode]))
    audio = np.concatenate([r.audio for r in results])
    assert np.isfinite(audio).all() and len(audio) > 24000
    samples = resample_poly(audio, 2, 3).astype(np.float32)
    if language == "en":
        heard = transcriber.transcribe(samples, sample_rate=16000)
        assert asr.word_error_rate(SENTENCES["en"], heard) < MAX_EN_WER, heard
    elif transcriber.store.cached_multilingual() is not None:
        heard = transcriber.transcribe(samples, sample_rate=16000, language="zh")
        assert _character_error_rate(SENTENCES["zh"], heard) < MAX_ZH_CER, heard
    voice = _embedding(model, audio)
    to_prompt, to_other = _similarity(voice, speaker.embedding[0]), _similarity(voice, other.embedding[0])
    assert to_prompt > MIN_SIMILARITY and to_prompt > to_other, (to_prompt, to_other)
