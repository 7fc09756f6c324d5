"""Behaviour of the HiFT vocoder that the parity vectors do not cover."""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from cosyvoice_mac.checkpoint import load_checkpoint
from cosyvoice_mac.config import ConfigError, read_yaml_config
from cosyvoice_mac.device import has_float64
from cosyvoice_mac.models.vocoder import (
    FixedUniformSourceNoise,
    GaussianSourceNoise,
    HiFT,
    HiFTConfig,
    RecordedSourceNoise,
    load_hift,
)
from cosyvoice_mac.models.vocoder import source as source_module
from cosyvoice_mac.models.vocoder.f0 import F0Predictor
from cosyvoice_mac.models.vocoder.layers import CausalUpsample, Snake
from cosyvoice_mac.models.vocoder.stft import ConvSTFT
from tests.parity.common import REPO_ROOT, parity_dir

PARITY = parity_dir()
VERSIONS = ("cosyvoice2", "cosyvoice3")
SAMPLES_PER_FRAME = 480


def tiny_files(version: str) -> tuple[Path, Path]:
    folder = PARITY / f"{version}_tiny"
    return folder / f"{version}.yaml", folder / "hift.pt"


def tiny_node(version: str) -> dict:
    return read_yaml_config(tiny_files(version)[0])["hift"]


@pytest.fixture(scope="module", params=VERSIONS)
def tiny(request) -> HiFT:
    return load_hift(*tiny_files(request.param))


def mel_frames(frames: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(seed)) - 4.0


# --- STFT pair ----------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [480, 4800, 19200 + 4])
def test_conv_stft_equals_torch_stft(length):
    stft = ConvSTFT(16, 4)
    signal = torch.randn(2, length, generator=torch.Generator().manual_seed(length))
    expected = torch.stft(signal, 16, 4, 16, window=torch.hann_window(16), center=True, return_complex=True)
    actual = stft.stft(signal)
    torch.testing.assert_close(actual, torch.cat([expected.real, expected.imag], dim=1), atol=5e-6, rtol=1e-6)


@pytest.mark.parametrize("frames", [121, 1201])
def test_conv_istft_equals_torch_istft(frames):
    stft = ConvSTFT(16, 4)
    spectrum = 3 * torch.randn(1, 18, frames, generator=torch.Generator().manual_seed(frames))
    expected = torch.istft(
        torch.complex(spectrum[:, :9], spectrum[:, 9:]), 16, 4, 16, window=torch.hann_window(16), center=True
    )
    torch.testing.assert_close(stft.istft(spectrum), expected, atol=2e-6, rtol=1e-6)


def test_stft_round_trip_restores_signal():
    stft = ConvSTFT(16, 4)
    signal = torch.randn(1, 4800, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(stft.istft(stft.stft(signal)), signal, atol=2e-6, rtol=0)


def test_stft_kernels_are_not_checkpoint_state(tiny):
    assert not any("kernel" in key or "window" in key for key in tiny.state_dict())


# --- layers -------------------------------------------------------------------------------------


def test_snake_is_bit_equal_to_the_reference_formula():
    snake = Snake(16)
    with torch.no_grad():
        snake.alpha.uniform_(0.2, 2.0, generator=torch.Generator().manual_seed(0))
        x = 3 * torch.randn(1, 16, 999, generator=torch.Generator().manual_seed(1))
        alpha = snake.alpha[None, :, None]
        assert torch.equal(snake(x), x + (1.0 / (alpha + 1e-9)) * torch.sin(x * alpha) ** 2)


@pytest.mark.parametrize(("kernel", "rate"), [(16, 8), (11, 5), (7, 3), (1, 1)])
def test_causal_upsample_equals_nearest_then_left_padded_conv(kernel, rate):
    layer = CausalUpsample(6, 5, kernel, rate)
    x = torch.randn(1, 6, 17, generator=torch.Generator().manual_seed(kernel))
    with torch.no_grad():
        upsampled = torch.nn.functional.interpolate(x, scale_factor=rate, mode="nearest")
        padded = torch.nn.functional.pad(upsampled, (kernel - 1, 0))
        expected = torch.nn.functional.conv1d(padded, layer.weight, layer.bias)
        torch.testing.assert_close(layer(x), expected, atol=2e-6, rtol=1e-5)


# --- config and weights -------------------------------------------------------------------------


def test_config_from_both_yaml_tags():
    v2, v3 = (HiFTConfig.from_yaml(tiny_node(version)) for version in VERSIONS)
    assert (v2.causal, v3.causal) == (False, True)
    assert v2.samples_per_frame == v3.samples_per_frame == SAMPLES_PER_FRAME
    assert (v2.base_channels, v2.f0_cond_channels, v2.sampling_rate) == (16, 16, 24000)
    assert v3.conv_pre_look_right == 4 and v3.upsample_kernel_sizes == (16, 11, 7)
    assert v3.resblock_dilation_sizes == ((1, 3, 5),) * 3


def test_config_rejects_unknown_vocoder_and_mismatched_predictor():
    node = tiny_node("cosyvoice3")
    with pytest.raises(ConfigError, match="supported vocoders"):
        HiFTConfig.from_yaml({**node, "_tag": "new:cosyvoice.hifigan.generator.Vocos"})
    with pytest.raises(ConfigError, match="CausalConvRNNF0Predictor"):
        HiFTConfig.from_yaml({**node, "f0_predictor": tiny_node("cosyvoice2")["f0_predictor"]})
    with pytest.raises(ConfigError, match="22050"):
        HiFTConfig.from_yaml({**node, "sampling_rate": 22050})


@pytest.mark.parametrize("version", VERSIONS)
def test_state_dict_keys_and_shapes_equal_folded_checkpoint(version):
    config_path, checkpoint = tiny_files(version)
    model = HiFT(HiFTConfig.from_yaml(read_yaml_config(config_path)["hift"]))
    state = load_checkpoint(checkpoint)
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == {k: tuple(v.shape) for k, v in state.items()}


# --- shapes, clamp, streaming -------------------------------------------------------------------


@pytest.mark.parametrize("frames", [1, 13, 50])
def test_output_is_480_samples_per_frame(tiny, frames):
    wav, source = tiny.inference(mel_frames(frames))
    assert wav.shape == (1, SAMPLES_PER_FRAME * frames) and wav.dtype == torch.float32
    assert source.shape == (1, 1, SAMPLES_PER_FRAME * frames)


def test_causal_streaming_call_holds_back_8_frames():
    model = load_hift(*tiny_files("cosyvoice3"))
    wav, source = model.inference(mel_frames(30), finalize=False)
    assert wav.shape == (1, SAMPLES_PER_FRAME * (30 - 8))
    assert source.shape == (1, 1, SAMPLES_PER_FRAME * (30 - 3))


def test_causal_streaming_output_is_a_prefix_of_the_final_output():
    model = load_hift(*tiny_files("cosyvoice3"))
    mel = mel_frames(60, seed=3)
    final, _ = model.inference(mel)
    for available in (20, 41):
        partial, _ = model.inference(mel[:, :, :available], finalize=False)
        torch.testing.assert_close(partial, final[:, : partial.shape[1]], atol=1e-5, rtol=0)


def test_output_is_clamped_to_audio_limit():
    model = load_hift(*tiny_files("cosyvoice2"))
    with torch.no_grad():
        model.conv_post.bias[:9] += 6.0  # magnitudes e^8 and more: far past the clamp
    wav, _ = model.inference(mel_frames(10))
    limit = torch.tensor(0.99)  # as float32, like the waveform
    assert wav.abs().max() == limit
    assert (wav.abs() == limit).float().mean() > 0.1  # many samples are clipped


def test_cache_source_replaces_the_start_of_the_source():
    model = load_hift(*tiny_files("cosyvoice2"))
    cache = torch.full((1, 1, 3840), 0.25)
    _, source = model.inference(mel_frames(20), cache_source=cache)
    assert torch.equal(source[:, :, :3840], cache)
    assert not torch.equal(source[:, :, 3840:7680], cache)


def test_gaussian_noise_is_reproducible_by_seed():
    model = load_hift(*tiny_files("cosyvoice2"))
    mel = mel_frames(12)
    first, _ = model.inference(mel, noise=GaussianSourceNoise(seed=7))
    again, _ = model.inference(mel, noise=GaussianSourceNoise(seed=7))
    other, _ = model.inference(mel, noise=GaussianSourceNoise(seed=8))
    assert torch.equal(first, again) and not torch.equal(first, other)


# --- bad input ----------------------------------------------------------------------------------


def test_bad_calls_raise_actionable_errors():
    v2, v3 = (load_hift(*tiny_files(version)) for version in VERSIONS)
    with pytest.raises(ValueError, match=r"\(1, 80, T\)"):
        v2.inference(torch.zeros(80, 10))
    with pytest.raises(ValueError, match="finalize=False"):
        v2.inference(mel_frames(20), finalize=False)
    with pytest.raises(ValueError, match="cache_source"):
        v3.inference(mel_frames(20), cache_source=torch.zeros(1, 1, 480))
    with pytest.raises(ValueError, match="cache_source must have shape"):
        v2.inference(mel_frames(2), cache_source=torch.zeros(1, 1, 3840))
    with pytest.raises(ValueError, match="at least 9 mel frames"):
        v3.inference(mel_frames(8), finalize=False)
    with pytest.raises(ValueError, match="recorded source noise has 100 samples"):
        v2.inference(mel_frames(2), noise=RecordedSourceNoise(torch.zeros(1, 100, 9)))


# --- fixed CosyVoice3 noise -------------------------------------------------------------------


def test_fixed_noise_reproduces_the_released_buffer_start():
    recipe = json.loads((PARITY / "manifest.json").read_text())["full_size"]["cosyvoice3_hift_fixed_noise"]
    first = FixedUniformSourceNoise().take(2)  # (1, 9, 2)
    torch.testing.assert_close(first[0].T, torch.tensor(recipe["sine_waves_first2x9"]), atol=0, rtol=0)


def test_fixed_noise_prefixes_agree_across_cache_growth():
    noise = FixedUniformSourceNoise()
    short = noise.take(1000).clone()
    longer = noise.take(30 * 24000 + 5)  # past the first 30 s block: regenerated from the saved state
    assert torch.equal(longer[:, :, :1000], short)
    assert noise.take(500).data_ptr() == longer.data_ptr()  # shorter calls reuse the cache


class LargeAllocations(TorchDispatchMode):
    """Counts distinct storages of at least ``min_bytes`` that ops return, and random fills of that size."""

    def __init__(self, min_bytes: int):
        super().__init__()
        self.min_bytes = min_bytes
        self.storages: set[int] = set()
        self.random_fills = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor) and tensor.untyped_storage().nbytes() >= self.min_bytes:
                self.storages.add(tensor.untyped_storage().data_ptr())
                self.random_fills += func.__name__.startswith(("uniform", "rand", "normal"))
        return out


def test_300_seconds_of_source_hold_the_noise_buffer_once_and_it_is_the_released_one():
    model = load_hift(*tiny_files("cosyvoice3"))
    frames = 15000  # 300 s: the whole upstream buffer
    f0 = torch.full((1, frames), 180.0)
    buffer_bytes = frames * SAMPLES_PER_FRAME * 9 * 4
    with torch.inference_mode(), LargeAllocations(buffer_bytes) as first_call:
        model.m_source(f0, model.default_noise)
    # the noise buffer and the excitation (computed in place): nothing copies or regenerates the noise
    assert first_call.random_fills == 1 and len(first_call.storages) == 2
    with torch.inference_mode(), LargeAllocations(buffer_bytes) as later_call:
        model.m_source(f0[:, :500], model.default_noise)
    assert later_call.random_fills == 0  # a shorter call slices the cached buffer
    recipe = json.loads((PARITY / "manifest.json").read_text())["full_size"]["cosyvoice3_hift_fixed_noise"]
    buffer = model.default_noise.take(frames * SAMPLES_PER_FRAME).transpose(1, 2)  # upstream layout
    assert buffer.is_contiguous()
    assert hashlib.sha256(buffer.numpy().tobytes()).hexdigest() == recipe["sine_waves_sha256"]


# --- precision and devices ----------------------------------------------------------------------


class Float64Ops(TorchDispatchMode):
    """Records float64 results, split by whether the f0 predictor was running."""

    def __init__(self):
        super().__init__()
        self.in_predictor = False
        self.inside: list[str] = []
        self.outside: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float64:
                (self.inside if self.in_predictor else self.outside).append(f"{func} on {tensor.device}")
        return out


def run_recording_float64(model: HiFT, mel: torch.Tensor) -> Float64Ops:
    recorder = Float64Ops()
    pre = model.f0_predictor.register_forward_pre_hook(lambda *_: setattr(recorder, "in_predictor", True))
    post = model.f0_predictor.register_forward_hook(lambda *_: setattr(recorder, "in_predictor", False))
    try:
        with recorder:
            model.inference(mel)
    finally:
        pre.remove()
        post.remove()
    return recorder


PHASE_SUM = "aten.cumsum.default on cpu"  # the phase integral's float64 sums (HarmonicSource.frame_phase)


def test_float64_only_in_the_cpu_f0_predictor_of_cosyvoice3_and_the_phase_sums():
    v2, v3 = (load_hift(*tiny_files(version)) for version in VERSIONS)
    assert run_recording_float64(v2, mel_frames(6)).inside == []
    assert run_recording_float64(v2, mel_frames(6)).outside == [PHASE_SUM]
    causal = run_recording_float64(v3, mel_frames(6))
    assert causal.inside, "CosyVoice3's f0 predictor should run in float64 on the CPU, as upstream"
    assert causal.outside == [PHASE_SUM]


def test_the_phase_sums_are_the_cpu_float32_cumsum_and_leave_a_device_without_float64(monkeypatch):
    """float64 sums rounded to float32 are what the CPU's float32 cumsum gives (the reference), whatever the
    f0; where the device has no float64 (MPS) the sums run on the CPU and the phase comes back on it."""
    source = load_hift(*tiny_files("cosyvoice3")).m_source
    generator = torch.Generator().manual_seed(3)
    f0 = torch.cat([torch.rand(1, 3000, generator=generator) * 400, torch.zeros(1, 40), torch.rand(1, 60) * 1e-3], 1)
    overtones = torch.arange(1, source.harmonics + 1, dtype=torch.float32)
    cycles = (f0[:, :, None] * overtones / source.sampling_rate) % 1
    reference = (torch.cumsum(cycles, dim=1) * 2 * math.pi).transpose(1, 2) * source.samples_per_frame
    assert torch.equal(source.frame_phase(f0), reference)
    assert has_float64(torch.device("cpu")) and has_float64(torch.device("cuda")) and has_float64("meta")
    assert not has_float64(torch.device("mps"))
    assert source.frame_phase(f0.to("meta")).device.type == "meta"  # computed on f0's own device
    monkeypatch.setattr(source_module, "has_float64", lambda device: False)
    with pytest.raises(NotImplementedError, match="meta"):  # without float64 it copies f0 to the host first
        source.frame_phase(f0.to("meta"))


def test_off_cpu_precision_path_creates_float64_only_for_the_phase_sums(monkeypatch):
    model = load_hift(*tiny_files("cosyvoice3"))
    cpu_result, _ = model.inference(mel_frames(6))
    # What runs on MPS/CUDA: the f0 predictor picks float32 for any non-CPU device.
    assert model.f0_predictor.compute_dtype(torch.device("meta")) == torch.float32
    monkeypatch.setattr(F0Predictor, "compute_dtype", lambda self, device: torch.float32)
    recorder = run_recording_float64(model, mel_frames(6))
    assert recorder.inside == [] and recorder.outside == [PHASE_SUM]
    float32_result, _ = model.inference(mel_frames(6))
    torch.testing.assert_close(float32_result, cpu_result, atol=1e-3, rtol=0)


def test_vocoder_sources_use_float64_only_on_cpu_only_lines():
    package = REPO_ROOT / "cosyvoice_mac" / "models" / "vocoder"
    offending = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sorted(package.glob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"torch\.float64|\.double\(\)|\.cuda\(\)|[\"'](cuda|mps)[\"']", line) and "cpu-only" not in line
    ]
    assert offending == []


def accelerator() -> torch.device | None:
    if torch.backends.mps.is_available():
        return torch.device("mps")
    if torch.cuda.is_available():
        return torch.device("cuda")
    return None


@pytest.mark.skipif(accelerator() is None, reason="needs an MPS or CUDA device")
@pytest.mark.parametrize("version", VERSIONS)
def test_runs_in_float32_on_an_accelerator_and_matches_cpu(version):
    model = load_hift(*tiny_files(version))
    mel = mel_frames(40)
    expected, _ = model.inference(mel, noise=GaussianSourceNoise(seed=1) if version == "cosyvoice2" else None)
    model.to(accelerator())
    wav, source = model.inference(mel, noise=GaussianSourceNoise(seed=1) if version == "cosyvoice2" else None)
    assert wav.device.type == accelerator().type and wav.dtype == torch.float32
    torch.testing.assert_close(wav.cpu(), expected, atol=2e-3, rtol=0)
