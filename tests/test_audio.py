"""Loading voice prompts: containers, resampling, trimming, normalising, hashing, errors."""

from __future__ import annotations

import struct

import audioread
import numpy as np
import pytest
import soundfile
import torch
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from cosyvoice_mac.frontend.prompt_audio import LoadedAudio, load_audio
from cosyvoice_mac.sound import limits
from cosyvoice_mac.sound.problems import AudioInputError

SENTENCE = "The quick brown fox jumps over the lazy dog, and then it runs away."
PROPERTY_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def speech(make_speech):
    """(samples float32 (N,), 22050) of about four seconds of English speech."""
    samples, rate = soundfile.read(make_speech(SENTENCE), dtype="float32")
    return samples, rate


def _write(path, samples, rate, **kwargs):
    soundfile.write(path, samples, rate, **kwargs)
    return path


def _tail_is_silent(loaded: LoadedAudio) -> bool:
    tail = loaded.wave[0, -round(limits.TAIL_SECONDS * loaded.sample_rate) :]
    return bool((tail == 0).all())


@pytest.mark.parametrize(
    ("suffix", "options"),
    [(".wav", {"subtype": "PCM_16"}), (".flac", {}), (".ogg", {}), (".mp3", {})],
)
def test_common_containers_load_as_mono_float32_speech(tmp_path, speech, suffix, options):
    samples, rate = speech
    path = _write(tmp_path / f"voice{suffix}", samples, rate, **options)
    loaded = load_audio(path)
    assert loaded.sample_rate == 16000 and loaded.source_sample_rate == rate
    assert loaded.wave.dtype == torch.float32 and loaded.wave.shape[0] == 1
    assert abs(loaded.seconds - len(samples) / rate) < 0.6  # trimmed a little, 0.2 s tail added
    assert loaded.wave.abs().max() <= limits.NORMALIZED_PEAK + 1e-6
    assert _tail_is_silent(loaded)


def test_same_pcm_in_two_containers_hashes_the_same(tmp_path, speech):
    samples, rate = speech
    wav = load_audio(_write(tmp_path / "a.wav", samples, rate, subtype="PCM_16"))
    flac = load_audio(_write(tmp_path / "a.flac", samples, rate, subtype="PCM_16"))
    stereo = load_audio(_write(tmp_path / "b.wav", np.stack([samples, samples], 1), rate, subtype="PCM_16"))
    assert wav.content_hash == flac.content_hash == stereo.content_hash
    assert torch.equal(wav.wave, flac.wave)


def test_hash_depends_on_the_recording_not_on_load_options(tmp_path, speech, make_speech):
    samples, rate = speech
    path = _write(tmp_path / "a.wav", samples, rate, subtype="PCM_16")
    plain = load_audio(path, trim_silence=False, normalize=False)
    assert load_audio(path, 24000).content_hash == load_audio(path).content_hash == plain.content_hash
    other = load_audio(make_speech("A different sentence said by the same voice."))
    assert other.content_hash != plain.content_hash
    louder = load_audio(_write(tmp_path / "loud.wav", samples * 0.5, rate, subtype="PCM_16"))
    assert louder.content_hash != plain.content_hash


def test_stereo_48k_becomes_mono_at_the_requested_rate(tmp_path, speech):
    samples, rate = speech
    path = tmp_path / "stereo.flac"
    at_48k = load_audio(_write(tmp_path / "m.wav", samples, rate), 48000, trim_silence=False, normalize=False)
    left = at_48k.wave[0].numpy()
    _write(path, np.stack([left, np.zeros_like(left)], 1), 48000)
    loaded = load_audio(path, 24000, trim_silence=False, normalize=False)
    assert loaded.sample_rate == 24000 and loaded.source_sample_rate == 48000
    assert loaded.wave.shape == (1, -(-len(left) // 2))
    assert abs(loaded.wave.abs().max().item() - 0.5 * np.abs(left).max()) < 0.02  # mean of the two channels


def test_leading_and_trailing_silence_is_trimmed(tmp_path, speech):
    samples, rate = speech
    silence = np.zeros(int(1.5 * rate), np.float32)
    tight = load_audio(_write(tmp_path / "tight.wav", samples, rate))
    padded_path = _write(tmp_path / "padded.wav", np.concatenate([silence, samples, silence]), rate)
    padded = load_audio(padded_path)
    assert abs(padded.seconds - tight.seconds) < 0.03
    untrimmed = load_audio(padded_path, trim_silence=False)
    assert abs(untrimmed.seconds - (len(samples) / rate + 3.0 + limits.TAIL_SECONDS)) < 0.01


def test_16k_and_24k_loads_keep_the_same_span(tmp_path, speech):
    samples, rate = speech
    silence = np.zeros(rate, np.float32)
    path = _write(tmp_path / "padded.wav", np.concatenate([silence, samples, silence]), rate)
    at_16k, at_24k = load_audio(path, 16000), load_audio(path, 24000)
    assert abs(at_16k.seconds - at_24k.seconds) < 1e-3


def test_loud_audio_is_scaled_to_0_8_and_quiet_audio_is_left_alone(tmp_path, speech):
    samples, rate = speech
    loud = samples / np.abs(samples).max() * 0.99
    quiet = samples / np.abs(samples).max() * 0.3
    loud_loaded = load_audio(_write(tmp_path / "loud.wav", loud, rate, subtype="FLOAT"))
    assert loud_loaded.wave.abs().max().item() == pytest.approx(0.8, abs=1e-6)
    quiet_path = _write(tmp_path / "quiet.wav", quiet, rate, subtype="FLOAT")
    quiet_loaded = load_audio(quiet_path)
    untouched = load_audio(quiet_path, normalize=False)
    assert torch.equal(quiet_loaded.wave[:, : untouched.wave.shape[1]], untouched.wave)
    assert quiet_loaded.wave.shape[1] - untouched.wave.shape[1] == round(limits.TAIL_SECONDS * 16000)


def _no_platform_decoder(monkeypatch):
    raw_only = [backend for backend in audioread.available_backends() if backend.__name__ == "RawAudioFile"]
    monkeypatch.setattr(audioread, "available_backends", lambda: raw_only)


def _bad_file(kind, tmp_path, make_speech, monkeypatch):
    """A file that must be refused for reason ``kind``."""
    if kind == "not_audio":
        (path := tmp_path / "notes.wav").write_text("these are my notes, not a recording\n")
    elif kind == "empty":
        (path := tmp_path / "empty.wav").write_bytes(b"")
    elif kind == "empty_wav":
        path = _write(tmp_path / "no_frames.wav", np.zeros(0, np.float32), 22050)
    elif kind == "silent":
        path = _write(tmp_path / "silent.wav", np.zeros(3 * 22050, np.float32), 22050)
    elif kind == "too_short":
        path = make_speech(SENTENCE, seconds=0.6)
    elif kind == "too_long":
        path = make_speech(SENTENCE, seconds=31.0)
    elif kind == "missing":
        path = tmp_path / "missing.wav"
    elif kind == "folder":
        (path := tmp_path / "folder.wav").mkdir()
    elif kind == "low_sample_rate":
        path = make_speech(SENTENCE, sample_rate=8000)
    elif kind == "odd_sample_rate":
        samples, _ = soundfile.read(make_speech(SENTENCE), dtype="float32")
        path = _write(tmp_path / "odd.wav", samples, 44101)
    elif kind == "no_decoder":
        _no_platform_decoder(monkeypatch)
        (path := tmp_path / "memo.m4a").write_bytes(b"\x00\x00\x00\x20ftypM4A " + bytes(200))
    elif kind == "nan":
        samples = np.full(22050 * 2, np.nan, np.float32)
        path = _write(tmp_path / "nan.wav", samples, 22050, subtype="FLOAT")
    return path


@pytest.mark.parametrize(
    ("kind", "problem", "advice"),
    [
        ("not_audio", "not_audio", "Export the recording as WAV"),
        ("empty", "empty", "0 bytes"),
        ("empty_wav", "no_samples", "no audio samples"),
        ("silent", "silent", "Check the microphone"),
        ("too_short", "too_short", "at least 1 s"),
        ("too_long", "too_long", "at most 29.8 s"),
        ("missing", "missing", "does not exist"),
        ("folder", "unreadable", "is a folder"),
        ("low_sample_rate", "low_rate", "16 kHz or higher"),
        ("odd_sample_rate", "odd_rate", "standard rate"),
        ("no_decoder", "no_decoder", "Install ffmpeg"),
        ("nan", "invalid_samples", "NaN"),
    ],
)
def test_unusable_audio_gets_a_specific_error_a_user_can_act_on(
    tmp_path, make_speech, monkeypatch, kind, problem, advice
):
    path = _bad_file(kind, tmp_path, make_speech, monkeypatch)
    with pytest.raises(AudioInputError) as raised:
        load_audio(path)
    assert raised.value.problem == problem
    assert path.name in str(raised.value)
    assert advice in str(raised.value)


def test_limits_can_be_turned_off(make_speech):
    loaded = load_audio(make_speech(SENTENCE, seconds=0.6), min_seconds=None)
    assert 0.3 < loaded.seconds < 1.0


class _FakePlatformDecoder:
    """What audioread hands back: interleaved little-endian int16 buffers."""

    def __init__(self, pcm: np.ndarray, rate: int):
        self.pcm, self.samplerate, self.channels = pcm, rate, pcm.shape[1]
        self.duration = pcm.shape[0] / rate

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __iter__(self):
        data = self.pcm.astype("<i2").tobytes()
        return iter([data[i : i + 4096] for i in range(0, len(data), 4096)])


def test_m4a_goes_through_the_platform_decoder_and_hashes_like_the_wav(tmp_path, monkeypatch, speech):
    samples, rate = speech
    wav = load_audio(_write(tmp_path / "voice.wav", samples, rate, subtype="PCM_16"))
    pcm16 = np.round(samples * 32768).clip(-32768, 32767).astype(np.int16)
    decoder = _FakePlatformDecoder(np.stack([pcm16, pcm16], 1), rate)
    monkeypatch.setattr(audioread, "available_backends", lambda: [_FakePlatformDecoder])
    monkeypatch.setattr(audioread, "audio_open", lambda path: decoder)
    (m4a_path := tmp_path / "voice.m4a").write_bytes(b"\x00\x00\x00\x20ftypM4A " + bytes(64))
    m4a = load_audio(m4a_path)
    assert m4a.content_hash == wav.content_hash
    assert torch.equal(m4a.wave, wav.wave)


def _wav_header(rate: int, channels: int, bits: int) -> bytes:
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * block, block, bits)
    return b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVEfmt " + struct.pack("<I", 16) + fmt + b"data"


@PROPERTY_SETTINGS
@given(
    body=st.binary(max_size=4096),
    repeat=st.integers(1, 40),
    suffix=st.sampled_from([".wav", ".flac", ".ogg", ".mp3", ".m4a", ".bin"]),
    header=st.sampled_from([b"", b"RIFF", b"fLaC", b"OggS", b"ID3", b"\xff\xfb", _wav_header(16000, 1, 16)]),
)
@example(body=bytes(range(256)) * 16, repeat=40, suffix=".wav", header=_wav_header(16000, 1, 16))  # must load
@example(body=bytes(4096), repeat=40, suffix=".wav", header=_wav_header(16000, 1, 16))  # silent: refused
def test_random_bytes_give_audio_or_our_error(tmp_path, body, repeat, suffix, header):
    path = tmp_path / f"random{suffix}"
    path.write_bytes(header + body * repeat)
    pcm = np.frombuffer(body[: len(body) // 2 * 2], dtype="<i2")
    # A 16-bit WAV header before 1.5 s or more of loud random samples is a recording (of noise): it must load.
    must_load = (
        header == _wav_header(16000, 1, 16)
        and len(body) * repeat >= 2 * 16000 * 1.5
        and len(body) % 2 == 0
        and pcm.size >= 64
        and float(np.abs(pcm.astype(np.float32)).max()) > 1000
    )
    try:
        loaded = load_audio(path)
    except AudioInputError as error:
        event(f"refused: {error.problem}")
        assert not must_load, f"a loud 16-bit WAV of {len(body) * repeat} bytes was refused: {error}"
        return
    event("loaded")
    assert isinstance(loaded, LoadedAudio) and torch.isfinite(loaded.wave).all()


@PROPERTY_SETTINGS
@given(
    seconds=st.floats(0.0, 2.5),
    rate=st.sampled_from([16000, 22050, 24000, 44100, 48000, 8000, 44101]),
    amplitude=st.sampled_from([0.0, 1e-5, 0.05, 1.0, 4.0]),
    subtype=st.sampled_from(["PCM_16", "FLOAT"]),
    seed=st.integers(0, 2**32 - 1),
    trim=st.booleans(),
)
@example(seconds=2.0, rate=24000, amplitude=0.05, subtype="PCM_16", seed=1, trim=True)  # must load
@example(seconds=2.0, rate=8000, amplitude=0.05, subtype="PCM_16", seed=1, trim=True)  # must be refused
def test_random_length_arrays_give_audio_or_our_error(tmp_path, seconds, rate, amplitude, subtype, seed, trim):
    samples = (np.random.default_rng(seed).standard_normal(int(seconds * rate)) * amplitude).astype(np.float32)
    path = _write(tmp_path / "array.wav", samples, rate, subtype=subtype)
    # The oracle, from the limits alone: clearly long enough, loud enough and of a usable rate must load;
    # digital silence, a rate below the features' band or clearly too short must be refused.
    must_load = (
        rate in (16000, 22050, 24000, 44100, 48000) and amplitude in (0.05, 1.0) and seconds >= limits.MIN_SECONDS + 0.1
    )
    must_refuse = amplitude == 0.0 or rate < limits.MIN_SOURCE_SAMPLE_RATE or seconds < limits.MIN_SECONDS - 0.25
    try:
        loaded = load_audio(path, 24000, trim_silence=trim)
    except AudioInputError as error:
        event(f"refused: {error.problem}")
        assert not must_load, f"{seconds:.2f} s of noise at {rate} Hz, amplitude {amplitude} was refused: {error}"
        return
    event("loaded")
    assert not must_refuse, f"{seconds:.2f} s at {rate} Hz, amplitude {amplitude} was accepted"
    assert loaded.wave.dtype == torch.float32 and loaded.wave.shape[0] == 1
    assert torch.isfinite(loaded.wave).all()
    assert loaded.wave.abs().max() <= limits.NORMALIZED_PEAK + 1e-6
    assert limits.MIN_SECONDS <= loaded.seconds <= limits.MAX_SECONDS
