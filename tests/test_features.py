"""Behaviour of the prompt-audio frontend that the golden vectors do not cover."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
import soundfile
import torch
from onnx import TensorProto, helper, numpy_helper

from cosyvoice_mac.checkpoint import CheckpointError
from cosyvoice_mac.config import ConfigError
from cosyvoice_mac.frontend.features import PromptMelConfig, kaldi_fbank, prompt_mel, whisper_log_mel
from cosyvoice_mac.frontend.prompt import align_prompt, load_wav
from cosyvoice_mac.frontend.resample import resample
from cosyvoice_mac.frontend.speaker import RandomSpeakerEncoder, SpeakerEncoder, normalised_fbank
from cosyvoice_mac.frontend.speech_tokenizer import RandomSpeechTokenizer, SpeechTokenizer
from cosyvoice_mac.pipeline.types import SynthesisError
from tests.fakes.onnx_models import make_tiny_model_dir, write_fake_campplus, write_fake_speech_tokenizer
from tests.parity.common import parity_dir

RATES = (8000, 16000, 22050, 24000, 44100, 48000)


def _tone(sample_rate: int, seconds: float = 1.0, freq: float = 440.0) -> torch.Tensor:
    t = torch.arange(int(sample_rate * seconds)) / sample_rate
    return torch.sin(2 * math.pi * freq * t)[None]


@pytest.fixture(scope="module")
def prompt16k() -> torch.Tensor:
    return load_wav(parity_dir() / "prompt.wav", 16000)


@pytest.fixture(scope="module")
def fake_tokenizer_path(tmp_path_factory):
    return write_fake_speech_tokenizer(tmp_path_factory.mktemp("onnx") / "speech_tokenizer_v3.onnx", vocab_size=512)


@pytest.fixture(scope="module")
def fake_campplus_path(tmp_path_factory):
    return write_fake_campplus(tmp_path_factory.mktemp("onnx") / "campplus.onnx")


def _initializer(path, name: str) -> np.ndarray:
    model = onnx.load(str(path))
    return next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == name)


# --- resampling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("orig", RATES)
@pytest.mark.parametrize("target", (16000, 24000))
def test_resample_keeps_an_in_band_tone(orig, target):
    resampled = resample(_tone(orig), orig, target)
    assert resampled.shape == (1, target) and resampled.dtype == torch.float32
    edge = target // 20  # the filter sees zeros beyond the ends
    expected = _tone(target)
    assert (resampled[:, edge:-edge] - expected[:, edge:-edge]).abs().max() < 3e-3


@pytest.mark.parametrize("orig, middle", [(8000, 22050), (22050, 16000), (44100, 48000), (48000, 16000)])
def test_resample_round_trip(orig, middle):
    tone = _tone(orig, freq=300.0)
    back = resample(resample(tone, orig, middle), middle, orig)
    edge = orig // 20
    assert back.shape == tone.shape
    assert (back[:, edge:-edge] - tone[:, edge:-edge]).abs().max() < 3e-3


def test_resample_removes_content_above_the_new_nyquist():
    aliased = resample(_tone(16000, freq=6000.0), 16000, 8000)  # 6 kHz cannot exist at 8 kHz
    assert aliased[:, 400:-400].pow(2).mean().sqrt() < 0.02


def test_resample_lengths_shapes_and_identity():
    wave = torch.randn(2, 3, 1001)
    assert resample(wave, 44100, 16000).shape == (2, 3, math.ceil(1001 * 16000 / 44100))
    assert resample(wave, 22050, 24000).shape == (2, 3, math.ceil(1001 * 24000 / 22050))
    assert resample(wave, 16000, 16000) is wave
    with pytest.raises(TypeError):
        resample(torch.zeros(1, 100, dtype=torch.int16), 16000, 8000)
    with pytest.raises(ValueError):
        resample(wave, 0, 16000)


# --- spectral features --------------------------------------------------------------------------


@pytest.mark.parametrize("samples", (16000, 16123, 401, 721))
def test_feature_shapes_follow_the_frame_arithmetic(samples):
    wave = 0.1 * torch.randn(1, samples, generator=torch.Generator().manual_seed(samples))
    assert whisper_log_mel(wave).shape == (1, 128, samples // 160)
    assert kaldi_fbank(wave).shape == (1 + (samples - 400) // 160, 80)
    if samples > 720:  # the prompt mel reflect-pads 720 samples
        assert prompt_mel(wave, 8000).shape == (1, samples // 480, 80)


def test_features_of_silence_are_finite():
    silence16k, silence24k = torch.zeros(1, 16000), torch.zeros(1, 24000)
    outputs = [
        whisper_log_mel(silence16k),
        kaldi_fbank(silence16k),
        normalised_fbank(silence16k),
        prompt_mel(silence24k, 8000),
        prompt_mel(silence24k, None),
    ]
    for output in outputs:
        assert output.dtype == torch.float32 and torch.isfinite(output).all()


def test_prompt_mel_depends_on_fmax():
    wave24k = load_wav(parity_dir() / "prompt.wav", 24000)
    v2, v3 = prompt_mel(wave24k, 8000), prompt_mel(wave24k, None)
    assert not torch.allclose(v2, v3)


def test_cached_filters_serve_inference_mode_and_autograd_callers():
    wave = 0.1 * torch.randn(1, 3200, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        inside = resample(wave, 32000, 12000)  # the only use of this rate pair: fills the cache
    outside = resample(wave.clone().requires_grad_(True), 32000, 12000)
    assert outside.requires_grad and torch.equal(outside.detach(), inside)


def test_features_reject_bad_input():
    for bad in (torch.zeros(2, 16000), torch.zeros(16000), torch.zeros(1, 16000, dtype=torch.int16)):
        for extract in (whisper_log_mel, kaldi_fbank):
            with pytest.raises((ValueError, TypeError)):
                extract(bad)
    with pytest.raises(ValueError, match="400 samples"):
        kaldi_fbank(torch.zeros(1, 399))


def test_prompt_mel_config_from_yaml():
    node = {"_tag": "name:matcha.utils.audio.mel_spectrogram", "n_fft": 1920, "fmax": 8000, "unknown": 1}
    assert PromptMelConfig.from_yaml(node) == PromptMelConfig(fmax=8000)
    with pytest.raises(ConfigError, match="center"):
        PromptMelConfig.from_yaml({"center": True})


# --- audio loading and alignment ----------------------------------------------------------------


def test_load_wav_mixes_channels_and_resamples(tmp_path):
    left, right = _tone(44100, 0.5)[0], 0.5 * _tone(44100, 0.5, freq=300.0)[0]
    path = tmp_path / "stereo.wav"
    soundfile.write(path, torch.stack([left, right], dim=1).numpy(), 44100, subtype="FLOAT")
    loaded = load_wav(path, 16000)
    assert loaded.shape == (1, 8000) and loaded.dtype == torch.float32
    assert torch.allclose(loaded, resample(((left + right) / 2)[None], 44100, 16000), atol=1e-6)


def test_load_wav_refuses_low_rates_and_missing_files(tmp_path):
    path = tmp_path / "phone.wav"
    soundfile.write(path, np.zeros(8000, dtype=np.int16), 8000)
    with pytest.raises(SynthesisError, match="8000 Hz"):
        load_wav(path, 16000)
    with pytest.raises(SynthesisError, match="cannot read"):
        load_wav(tmp_path / "missing.wav", 16000)


@pytest.mark.parametrize(
    "tokens, frames, kept",
    [(75, 150, 75), (75, 151, 75), (75, 140, 70), (70, 160, 70), (0, 10, 0)],
)
def test_align_prompt(tokens, frames, kept):
    token_ids = torch.arange(tokens)[None]
    mel = torch.randn(1, frames, 80)
    aligned_tokens, aligned_mel = align_prompt(token_ids, mel)
    assert torch.equal(aligned_tokens, token_ids[:, :kept])
    assert torch.equal(aligned_mel, mel[:, : 2 * kept])


def test_align_prompt_rejects_bad_shapes():
    with pytest.raises(ValueError):
        align_prompt(torch.zeros(75, dtype=torch.long), torch.zeros(1, 150, 80))


# --- ONNX wrappers through the fake models ------------------------------------------------------


def test_speech_tokenizer_runs_the_onnx_graph(fake_tokenizer_path, prompt16k):
    tokens = SpeechTokenizer(fake_tokenizer_path, vocab_size=512).tokens(prompt16k)
    mel = whisper_log_mel(prompt16k)
    assert tokens.shape == (1, mel.shape[2] // 4) and tokens.dtype == torch.int64
    assert 0 <= tokens.min() and tokens.max() < 512
    pooled = mel[0, :, : 4 * tokens.shape[1]].reshape(128, -1, 4).mean(-1)  # (128, T // 4)
    expected = (pooled.T.numpy() @ _initializer(fake_tokenizer_path, "projection")).argmax(-1)
    assert (tokens[0].numpy() == expected).mean() > 0.95


def test_speech_tokenizer_finds_inputs_by_position(tmp_path, prompt16k):
    path = write_fake_speech_tokenizer(tmp_path / "renamed.onnx", vocab_size=512, input_names=("x.1", "onnx::len"))
    renamed = SpeechTokenizer(path, intra_op_threads=2).tokens(prompt16k)
    default = SpeechTokenizer(write_fake_speech_tokenizer(tmp_path / "default.onnx", vocab_size=512)).tokens(prompt16k)
    assert torch.equal(renamed, default)


def test_speech_tokenizer_enforces_the_30_second_limit(fake_tokenizer_path):
    tokenizer = SpeechTokenizer(fake_tokenizer_path)
    assert tokenizer.tokens(torch.zeros(1, 30 * 16000)).shape == (1, 750)
    with pytest.raises(SynthesisError, match="at most 30 s"):
        tokenizer.tokens(torch.zeros(1, 30 * 16000 + 1))
    with pytest.raises(SynthesisError, match="too short"):
        tokenizer.tokens(torch.zeros(1, 300))


def test_speech_tokenizer_checks_files_and_vocab(tmp_path, fake_tokenizer_path, prompt16k):
    with pytest.raises(CheckpointError, match="missing"):
        SpeechTokenizer(tmp_path / "speech_tokenizer_v2.onnx")
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"not an onnx model")
    with pytest.raises(CheckpointError, match="cannot load"):
        SpeechTokenizer(corrupt)
    highest = int(SpeechTokenizer(fake_tokenizer_path).tokens(prompt16k).max())
    with pytest.raises(CheckpointError, match="same model version"):
        SpeechTokenizer(fake_tokenizer_path, vocab_size=highest).tokens(prompt16k)


def test_speaker_encoder_feeds_the_normalised_fbank(fake_campplus_path, prompt16k):
    embedding = SpeakerEncoder(fake_campplus_path).embedding(prompt16k)
    assert embedding.shape == (1, 192) and embedding.dtype == torch.float32
    features = normalised_fbank(prompt16k).numpy()
    summary = np.concatenate([features.max(0), np.sqrt((features**2).mean(0))])
    weight, bias = (_initializer(fake_campplus_path, name) for name in ("weight", "bias"))
    np.testing.assert_allclose(embedding[0].numpy(), np.tanh(summary @ weight + bias), atol=1e-5)


def test_speaker_encoder_rejects_a_model_of_the_wrong_size(tmp_path, prompt16k):
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "T", 80])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "T", 80])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "identity.onnx"))
    with pytest.raises(CheckpointError, match="192-d"):
        SpeakerEncoder(tmp_path / "identity.onnx").embedding(prompt16k)
    with pytest.raises(SynthesisError, match="too short"):
        SpeakerEncoder(tmp_path / "identity.onnx").embedding(torch.zeros(1, 100))


def test_stand_ins_are_deterministic_functions_of_the_audio(prompt16k):
    other = 0.5 * torch.roll(prompt16k, 8000, dims=1)
    tokenizer, encoder = RandomSpeechTokenizer(vocab_size=512), RandomSpeakerEncoder()
    assert tokenizer.is_stand_in and encoder.is_stand_in
    assert not SpeechTokenizer.is_stand_in and not SpeakerEncoder.is_stand_in
    tokens = tokenizer.tokens(prompt16k)
    assert tokens.shape == (1, 75) and tokens.dtype == torch.int64 and 0 <= tokens.min() and tokens.max() < 512
    assert torch.equal(tokens, RandomSpeechTokenizer(vocab_size=512).tokens(prompt16k))
    assert not torch.equal(tokens, tokenizer.tokens(other))
    embedding = encoder.embedding(prompt16k)
    assert embedding.shape == (1, 192) and embedding.dtype == torch.float32
    assert torch.equal(embedding, RandomSpeakerEncoder().embedding(prompt16k))
    assert not torch.allclose(embedding, encoder.embedding(other))
    with pytest.raises(SynthesisError, match="at most 30 s"):
        tokenizer.tokens(torch.zeros(1, 31 * 16000))


@pytest.mark.parametrize("version", ("cosyvoice2", "cosyvoice3"))
def test_make_tiny_model_dir_has_the_official_layout(tmp_path, version, prompt16k):
    model_dir = make_tiny_model_dir(version, tmp_path / version)
    names = {path.name for path in model_dir.iterdir()}
    tokenizer_file = f"speech_tokenizer_v{version[-1]}.onnx"
    assert {
        f"{version}.yaml",
        "llm.pt",
        "flow.pt",
        "hift.pt",
        "CosyVoice-BlankEN",
        "campplus.onnx",
        tokenizer_file,
    } <= names
    assert "vectors" not in names
    assert (model_dir / "CosyVoice-BlankEN" / "tokenizer.json").is_file()
    tokens = SpeechTokenizer(model_dir / tokenizer_file, vocab_size=512).tokens(prompt16k)
    assert tokens.shape == (1, 75)
    assert SpeakerEncoder(model_dir / "campplus.onnx").embedding(prompt16k).shape == (1, 192)
