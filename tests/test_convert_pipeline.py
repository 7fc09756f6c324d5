"""Voice conversion on CosyVoice (tiny random-weight models): pieces cut at pauses, no drift, no clicks,
any rate or channel count, silence and noise refused, same input same output, streaming, MLX."""

from __future__ import annotations

from math import gcd

import numpy as np
import pytest
import soundfile
import torch
from scipy.signal import resample_poly

from cosyvoice_mac.conversion_request import Recording
from cosyvoice_mac.frontend.source_audio import MAX_PIECE_SAMPLES, TOKEN_SAMPLES, decode_source
from cosyvoice_mac.pipeline import CosyVoice, SynthesisError
from tests.fakes.onnx_models import make_tiny_model_dir
from tests.streamed_audio import assert_streams_like

SENTENCES = (
    "The birch canoe slid on the smooth planks.",
    "Glue the sheet to the dark blue background.",
    "It is easy to tell the depth of a well.",
    "These days a chicken leg is a rare dish.",
    "Rice is often served in round bowls.",
)
PAUSE_S = 0.7
OUT_PER_IN = 24000 / 16000
OUT_TOKEN = 960  # 24 kHz samples per speech token


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> CosyVoice:
    return CosyVoice.from_pretrained(make_tiny_model_dir("cosyvoice3", tmp_path_factory.mktemp("cv3")), device="cpu")


@pytest.fixture(scope="module")
def prompt(make_speech):
    return make_speech("Hello there, this is a short prompt for testing.", seconds=3.0)


def _at(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    divisor = gcd(rate, target)
    return resample_poly(samples, target // divisor, rate // divisor).astype(np.float32)


@pytest.fixture(scope="module")
def long_source(make_speech, tmp_path_factory):
    """~70 s of espeak sentences with 0.7 s pauses, at 16 kHz."""
    parts, total = [], 0.0
    pause = np.zeros(int(PAUSE_S * 16000), np.float32)
    while total < 70.0:
        for text in SENTENCES:
            speech, rate = soundfile.read(make_speech(text), dtype="float32")
            speech = _at(speech, rate, 16000)
            parts += [speech, pause]
            total += (len(speech) + len(pause)) / 16000
    path = tmp_path_factory.mktemp("long") / "long.wav"
    soundfile.write(path, np.concatenate(parts), 16000)
    return path


def test_a_70_s_source_converts_in_pieces_without_drift_or_clicks(model, prompt, long_source):
    source = decode_source(Recording(audio=str(long_source)))
    pieces = source.pieces
    assert source.seconds >= 70 and len(pieces) >= 3
    assert pieces[0].start == 0 and pieces[-1].end == source.wave_16k.shape[1]
    assert all(a.end == b.start for a, b in zip(pieces, pieces[1:]))  # contiguous: nothing lost, nothing twice
    assert all(p.samples <= MAX_PIECE_SAMPLES for p in pieces)
    assert all(p.samples % TOKEN_SAMPLES == 0 for p in pieces[:-1])
    wave = source.wave_16k[0].numpy()
    speech_rms = float(np.sqrt(np.mean(wave**2)))
    for cut in (p.start for p in pieces[1:]):  # every cut lies in a pause
        around = wave[cut - 800 : cut + 800]
        assert float(np.sqrt(np.mean(around**2))) < 0.05 * speech_rms

    results = list(model.convert(str(long_source), prompt))
    assert [r.segment_index for r in results] == list(range(len(pieces)))
    assert all(r.segment_count == len(pieces) and r.mode == "voice_conversion" for r in results)
    audio = np.concatenate([r.audio for r in results])
    assert np.isfinite(audio).all()
    assert abs(len(audio) - len(wave) * OUT_PER_IN) <= OUT_TOKEN * len(pieces)
    for result, piece in zip(results, pieces):  # each piece's length is its own: no drift
        assert abs(len(result.audio) - piece.samples * OUT_PER_IN) <= OUT_TOKEN
        assert abs(result.speech_token_count * OUT_TOKEN - piece.samples * OUT_PER_IN) <= OUT_TOKEN
    for join in np.cumsum([len(r.audio) for r in results])[:-1]:
        local = audio[join - 480 : join + 480]
        rms = float(np.sqrt(np.mean(local**2)))
        assert abs(float(audio[join]) - float(audio[join - 1])) <= 5 * rms + 1e-6
        # both sides meet at silence (a random model's noise would pass the jump bound by chance alone)
        assert audio[join - 1] == 0.0 and audio[join] == 0.0 and float(np.abs(local).max()) > 0.0


@pytest.mark.parametrize(("rate", "channels"), [(8000, 1), (48000, 2), (44100, 2)])
def test_any_rate_mono_or_stereo_converts_to_the_source_length(model, prompt, make_speech, tmp_path, rate, channels):
    speech, speech_rate = soundfile.read(make_speech(SENTENCES[0]), dtype="float32")
    samples = _at(speech, speech_rate, rate)
    if channels == 2:
        samples = np.stack([samples, 0.5 * samples], axis=1)
    path = tmp_path / f"source-{rate}-{channels}.wav"
    soundfile.write(path, samples, rate)
    results = list(model.convert(str(path), prompt))
    audio = np.concatenate([r.audio for r in results])
    assert results[0].sample_rate == 24000 and np.isfinite(audio).all()
    assert abs(len(audio) - len(samples) / rate * 24000) <= OUT_TOKEN


def test_samples_in_stereo_convert_like_their_file(model, prompt, make_speech):
    speech, rate = soundfile.read(make_speech(SENTENCES[1]), dtype="float32")
    from_file = np.concatenate([r.audio for r in model.convert(str(make_speech(SENTENCES[1])), prompt)])
    stereo = np.stack([speech, speech], axis=1)
    from_samples = np.concatenate([r.audio for r in model.convert(stereo, prompt, sample_rate=rate)])
    assert np.allclose(from_file, from_samples, atol=1e-5)


def test_same_input_same_output_streaming_or_not(model, prompt, make_speech):
    source = str(make_speech(SENTENCES[2]))
    first = np.concatenate([r.audio for r in model.convert(source, prompt)])
    again = np.concatenate([r.audio for r in model.convert(source, prompt)])
    assert np.array_equal(first, again)
    chunks = list(model.convert(source, prompt, stream=True))
    assert len(chunks) > 1 and chunks[-1].is_final_chunk
    streamed = np.concatenate([c.audio for c in chunks])
    assert len(streamed) == len(first) and np.isfinite(streamed).all()
    assert_streams_like([c.audio for c in chunks], first)  # the same wave, chunk by chunk, not only as long


def test_speed_stretches_the_output(model, prompt, make_speech):
    source = str(make_speech(SENTENCES[3]))
    normal = np.concatenate([r.audio for r in model.convert(source, prompt)])
    fast = np.concatenate([r.audio for r in model.convert(source, prompt, speed=2.0)])
    assert abs(len(fast) - len(normal) / 2) <= 1


def test_silence_and_noise_are_refused_with_their_sentence(model, prompt, tmp_path):
    silent = tmp_path / "silent.wav"
    soundfile.write(silent, np.zeros(48000, np.float32), 16000)
    with pytest.raises(SynthesisError, match="silent"):
        list(model.convert(str(silent), prompt))
    noise = tmp_path / "noise.wav"
    soundfile.write(noise, 0.3 * np.random.default_rng(0).standard_normal(48000).astype(np.float32), 16000)
    with pytest.raises(SynthesisError, match="no speech to convert"):
        list(model.convert(str(noise), prompt))


def test_the_tokens_come_from_the_prompts_own_tokenizer_path(model, prompt, make_speech, monkeypatch):
    seen = []
    tokenizer = model.prompt_encoder.speech_tokenizer
    original = tokenizer.tokens

    def counting(wave):
        seen.append(wave.shape)
        return original(wave)

    monkeypatch.setattr(tokenizer, "tokens", counting)
    source = make_speech(SENTENCES[4])
    list(model.convert(str(source), prompt))
    piece = decode_source(Recording(audio=str(source))).pieces[0]
    assert seen.count((1, piece.samples)) == 1  # the source's one piece went through PromptEncoder.speech_tokens
    seen.clear()
    model.prepare_prompt(prompt)
    assert len(seen) == 1  # as the prompt does


def test_stop_ends_a_long_conversion_between_pieces(model, prompt, long_source):
    done = []
    results = model.convert(str(long_source), prompt, should_stop=lambda: len(done) >= 1)
    for result in results:
        done.append(result)
    assert len(done) == 1


def test_cosyvoice3_on_mlx_converts_like_pytorch(tmp_path, model, prompt, make_speech, monkeypatch):
    mx = pytest.importorskip("mlx.core")
    cleared = []
    original_clear = mx.clear_cache
    monkeypatch.setattr(mx, "clear_cache", lambda: cleared.append(1) or original_clear())
    on_mlx = CosyVoice.from_pretrained(make_tiny_model_dir("cosyvoice3", tmp_path / "mlx"), device="cpu", engine="mlx")
    assert on_mlx.engine.engine == "mlx"
    source = str(make_speech(SENTENCES[0]))
    ours = np.concatenate([r.audio for r in model.convert(source, prompt)])
    theirs = np.concatenate([r.audio for r in on_mlx.convert(source, prompt)])
    assert cleared, "MLX's buffer cache is handed back after each piece, as between sentences"
    assert len(ours) == len(theirs)
    assert float(np.abs(ours - theirs).max()) < 2e-2
    assert_streams_like([r.audio for r in on_mlx.convert(source, prompt, stream=True)], theirs)


def test_cosyvoice2_converts_too(tmp_path, prompt, make_speech):
    v2 = CosyVoice.from_pretrained(make_tiny_model_dir("cosyvoice2", tmp_path / "cv2"), device="cpu")
    source = str(make_speech(SENTENCES[1]))
    first = np.concatenate([r.audio for r in v2.convert(source, prompt)])
    assert np.array_equal(first, np.concatenate([r.audio for r in v2.convert(source, prompt)]))
    chunks = [r.audio for r in v2.convert(source, prompt, stream=True)]
    assert len(chunks) > 1 and all(np.isfinite(chunk).all() for chunk in chunks)
    assert_streams_like(chunks, first, min_correlation=0.95)  # CosyVoice2's chunks follow the whole closely
    assert torch.is_tensor(v2.prepare_prompt(prompt).speech_tokens)
