"""What the preview engine is for, measured: intelligible speech (ASR round trip) that sounds more like the
prompt than the stock Piper voice does (resemblyzer speaker embeddings, bundled weights).

Prompt voices come from Debian's synthesisers: flite's recorded-speaker voices when flite is installed
(``apt-get install flite``), espeak-ng variants otherwise and in addition.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
import soundfile

pytest.importorskip("piper")
pytest.importorskip("pyworld")
pytest.importorskip("faster_whisper")
resemblyzer = pytest.importorskip("resemblyzer")

from cosyvoice_mac.engine.asr import ModelStore, Transcriber, word_error_rate  # noqa: E402
from cosyvoice_mac.preview.backend import PreviewVoice  # noqa: E402

SENTENCE = "Please call Stella and ask her to bring these things with her from the store."
PROMPT_TEXT = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."
FLITE_VOICES = ("slt", "rms", "kal16")
ESPEAK_VOICES = ("en-us+f3", "en-us+m3")
ESPEAK_ONLY_VOICES = ("en-us+f3", "en-us+m3", "en-us+f4", "en+m7")
MIN_SIMILARITY_GAIN = 0.08
MAX_WER = 0.15


@pytest.fixture(scope="module")
def prompts(make_speech, tmp_path_factory):
    """name -> prompt WAV of a distinct synthetic speaker (at least four)."""
    found = {}
    flite = shutil.which("flite")
    if flite:
        folder = tmp_path_factory.mktemp("flite")
        for name in FLITE_VOICES:
            path = folder / f"{name}.wav"
            subprocess.run([flite, "-voice", name, "-t", PROMPT_TEXT, "-o", str(path)], check=True, timeout=60)
            found[f"flite-{name}"] = path
    for name in ESPEAK_VOICES if flite else ESPEAK_ONLY_VOICES:
        found[f"espeak-{name}"] = make_speech(PROMPT_TEXT, voice=name)
    assert len(found) >= 4
    return found


@pytest.fixture(scope="module")
def outputs(prompts):
    """name -> (converted 24 kHz output, prompt path), plus the unconverted Piper take of SENTENCE."""
    voice = PreviewVoice.from_pretrained(None)
    converted = {}
    for name, path in prompts.items():
        results = list(voice.synthesize(SENTENCE, prompt_audio=path, seed=5))
        converted[name] = np.concatenate([result.audio for result in results])
    raw = voice.english.speak(SENTENCE, seed=5)
    return converted, raw


@pytest.fixture(scope="module")
def transcriber():
    return Transcriber(ModelStore(allow_download=False))


def test_round_trip_words_survive_the_conversion(outputs, transcriber):
    converted, _ = outputs
    rates = {name: word_error_rate(SENTENCE, transcriber.transcribe(wave, 24000)) for name, wave in converted.items()}
    print("WER per prompt voice:", rates)
    assert max(rates.values()) < MAX_WER, rates


def test_output_sounds_closer_to_its_prompt_than_stock_piper(outputs, prompts):
    from resemblyzer import VoiceEncoder, preprocess_wav

    converted, raw = outputs
    encoder = VoiceEncoder("cpu", verbose=False)
    raw_embedding = encoder.embed_utterance(preprocess_wav(raw.samples, source_sr=raw.sample_rate))
    gains = {}
    for name, wave in converted.items():
        prompt, rate = soundfile.read(prompts[name], dtype="float32")
        target = encoder.embed_utterance(preprocess_wav(prompt, source_sr=rate))
        output = encoder.embed_utterance(preprocess_wav(wave, source_sr=24000))
        gains[name] = float(np.dot(output, target) - np.dot(raw_embedding, target))
    print("similarity gain per prompt voice:", gains)
    assert np.mean(list(gains.values())) >= MIN_SIMILARITY_GAIN, gains
    assert sum(gain > 0 for gain in gains.values()) >= len(gains) - 1, gains
