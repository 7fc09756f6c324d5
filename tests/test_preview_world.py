"""WORLD conversion (cosyvoice_mac/preview/world_convert.py) and the seeded Piper graph, on real speech."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.preview import world_convert as wc

pyworld = pytest.importorskip("pyworld")


def _read(path):
    samples, rate = soundfile.read(path, dtype="float32")
    return samples, rate


@pytest.fixture(scope="module")
def low_voice(make_speech):
    return _read(make_speech("The birch canoe slid on the smooth planks near the river bank.", voice="en-us+m3"))


@pytest.fixture(scope="module")
def high_voice(make_speech):
    return _read(make_speech("Glue the sheet to the dark blue background before noon.", voice="en-us+f4"))


@pytest.fixture(scope="module")
def low_frames(low_voice):
    return wc.analyse(*low_voice)


def test_stats_vector_round_trip_and_bad_vectors(low_frames):
    stats = wc.voice_stats(low_frames, 22050)
    back = wc.VoiceStats.from_vector(stats.to_vector())
    assert back.valid_bands == stats.valid_bands
    assert back.log_f0_mean == pytest.approx(stats.log_f0_mean, abs=1e-5)
    np.testing.assert_allclose(back.band_std, stats.band_std, rtol=1e-5)
    assert stats.to_vector().shape == (wc.STATS_VECTOR_SIZE,)
    with pytest.raises(wc.ConversionError, match="84 finite numbers"):
        wc.VoiceStats.from_vector(np.zeros(10))
    broken = stats.to_vector()
    broken[3] = np.nan
    with pytest.raises(wc.ConversionError):
        wc.VoiceStats.from_vector(broken)


def test_pitch_statistics_tell_high_and_low_voices_apart(low_frames, high_voice):
    low = wc.voice_stats(low_frames, 22050)
    high = wc.voice_stats(wc.analyse(*high_voice), high_voice[1])
    assert 70 < low.f0_hz < 160 < high.f0_hz < 400


def test_band_limited_recordings_mark_their_upper_bands_invalid(low_voice):
    samples, rate = low_voice
    from scipy.signal import resample_poly

    narrow = resample_poly(samples, 160, 441).astype(np.float32)  # 22.05 kHz -> 8 kHz
    stats = wc.voice_stats(wc.analyse(narrow, 8000), 8000)
    full = wc.voice_stats(wc.analyse(samples, rate), rate)
    assert wc.band_centres()[stats.valid_bands - 1] <= 0.45 * 8000 < wc.band_centres()[stats.valid_bands]
    assert stats.valid_bands < full.valid_bands


def test_silence_has_no_voice_to_copy():
    quiet = np.random.default_rng(0).normal(0, 1e-4, 24000).astype(np.float32)
    with pytest.raises(wc.ConversionError, match="no voiced speech"):
        wc.voice_stats(wc.analyse(quiet, 24000))


def test_conversion_moves_pitch_to_the_target_and_keeps_length(low_voice, low_frames, high_voice):
    base = wc.BaseVoiceModel.measure(low_frames, low_voice[1])
    target = wc.voice_stats(wc.analyse(*high_voice), high_voice[1])
    converted = base.convert(low_frames, target, alpha=1.0)
    assert converted.dtype == np.float32 and np.isfinite(converted).all()
    assert len(converted) / wc.ANALYSIS_RATE == pytest.approx(len(low_voice[0]) / low_voice[1], abs=0.02)
    result = wc.voice_stats(wc.analyse(converted, wc.ANALYSIS_RATE))
    assert result.f0_hz == pytest.approx(target.f0_hz, rel=0.1)
    usable = slice(2, target.valid_bands)
    before = np.abs(base.stats.band_mean[usable] - target.band_mean[usable]).mean()
    after = np.abs(result.band_mean[usable] - target.band_mean[usable]).mean()
    assert after < 0.5 * before


def test_warp_estimate_recovers_a_known_formant_shift(low_voice, low_frames):
    base = wc.BaseVoiceModel.measure(low_frames, low_voice[1])
    for alpha in (0.9, 1.15):
        shifted = wc._warped(low_frames, alpha)
        target = wc.voice_stats(shifted, low_voice[1])
        assert base.estimate_warp(target) == pytest.approx(alpha, abs=0.03)


def test_seeded_piper_graph_has_no_unseeded_noise():
    onnx = pytest.importorskip("onnx")
    from cosyvoice_mac.preview.piper_tts import NOISE_BANK_SIZE, bundled_voice_paths, seeded_noise_graph

    graph, banks = seeded_noise_graph(bundled_voice_paths()[0])
    model = onnx.load_from_string(graph)
    assert not [node for node in model.graph.node if node.op_type.startswith("Random")]
    assert len(banks) == 2
    inputs = {value.name: value for value in model.graph.input}
    assert all(inputs[name].type.tensor_type.shape.dim[0].dim_value == NOISE_BANK_SIZE for name in banks)


def test_the_seeded_graph_is_rewritten_once_and_then_read_from_the_cache(tmp_path, monkeypatch):
    from cosyvoice_mac.preview import piper_tts

    monkeypatch.setenv("COSYVOICE_CACHE_DIR", str(tmp_path))
    voice_file = tmp_path / "voice.onnx"
    voice_file.write_bytes(piper_tts.bundled_voice_paths()[0].read_bytes())
    rewritten = piper_tts.seeded_noise_graph(voice_file)[0]
    assert piper_tts.kept_seeded_graph(voice_file) == rewritten
    (kept,) = (tmp_path / "preview").iterdir()

    def no_rewrite(path):
        raise AssertionError("rewrote a graph the cache holds")

    monkeypatch.setattr(piper_tts, "seeded_noise_graph", no_rewrite)
    assert piper_tts.kept_seeded_graph(voice_file) == rewritten  # the second start reads it

    monkeypatch.setattr(piper_tts, "REWRITE_VERSION", piper_tts.REWRITE_VERSION + 1)
    with pytest.raises(AssertionError, match="rewrote"):  # a newer rewrite never reads an older one's graph
        piper_tts.kept_seeded_graph(voice_file)
    monkeypatch.undo()
    monkeypatch.setenv("COSYVOICE_CACHE_DIR", str(tmp_path / "a-file"))
    (tmp_path / "a-file").write_text("not a folder")  # a cache that cannot be written: rewritten, no error
    assert piper_tts.kept_seeded_graph(voice_file) == rewritten


def test_a_speaker_from_the_kept_graph_speaks_as_the_rewritten_one(tmp_path, monkeypatch):
    from cosyvoice_mac.preview import piper_tts

    monkeypatch.setenv("COSYVOICE_CACHE_DIR", str(tmp_path))
    first = piper_tts.PiperSpeaker(threads=1)  # rewrites and keeps
    second = piper_tts.PiperSpeaker(threads=1)  # reads the kept graph
    assert first.bank_names == second.bank_names == ["noise_bank_0", "noise_bank_1"]
    a, b = (speaker.speak("The same words twice.", seed=3).samples for speaker in (first, second))
    assert np.array_equal(a, b)


def test_a_damaged_kept_graph_is_made_again(tmp_path, monkeypatch):
    from cosyvoice_mac.preview import piper_tts

    monkeypatch.setenv("COSYVOICE_CACHE_DIR", str(tmp_path))
    piper_tts.kept_seeded_graph(piper_tts.bundled_voice_paths()[0])
    (kept,) = (tmp_path / "preview").iterdir()
    good = kept.read_bytes()
    kept.write_bytes(good[: len(good) // 2])  # cut short on disk
    speaker = piper_tts.PiperSpeaker(threads=1)
    assert speaker.speak("Still speaking.", seed=1).samples.size > 0
    assert kept.read_bytes() == good
