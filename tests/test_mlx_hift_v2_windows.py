"""CosyVoice2's MLX vocoder in bounded windows and from a first frame, as CosyVoice3's MLX vocoder and the
PyTorch vocoder decode (``models.vocoder.window``'s plan, :meth:`cosyvoice_mac.mlx.hift.MlxHiFT.decode_windows`).

The vocoder is non-causal: a window needs context on both sides, which the plan derives from the layers'
reach (transposed-conv upsampler, same-padded convs, the STFT pair's edges). The source (phase, noise) is
computed once for the whole call, so a window's output is the one-shot output's up to float rounding:
``TOLERANCE`` is the CosyVoice3 MLX and the PyTorch window tests' bound (a convolution's sums may be
ordered differently over a shorter input, as Metal's algorithms are picked by size); measured on mlx-cpu
here: 0 (bit-equal) for the windows, the first-frame tail and the source.
"""

from __future__ import annotations

import pytest

pytest.importorskip("mlx.core", reason="needs mlx (Linux: pip install 'mlx[cpu]')")

import mlx.core as mx  # noqa: E402
import torch  # noqa: E402

from cosyvoice_mac.mlx.convert import to_mlx  # noqa: E402
from cosyvoice_mac.mlx.hift import LOW_MEMORY_CONV_WINDOW, MLX_CONV_WINDOW, MlxHiFT, load_mlx_hift  # noqa: E402
from cosyvoice_mac.models.vocoder import GaussianSourceNoise, HiFT, load_hift  # noqa: E402
from cosyvoice_mac.models.vocoder.window import context_frames  # noqa: E402
from tests.parity.common import assert_close, parity_dir  # noqa: E402

TINY = parity_dir() / "cosyvoice2_tiny"
SMALL_LIMIT = 120 * 100 + 1  # 100-frame windows
TOLERANCE = 2e-5
STEP = 480


@pytest.fixture(scope="module")
def hift() -> MlxHiFT:
    return load_mlx_hift(TINY / "cosyvoice2.yaml", TINY / "hift.pt")


def mel_frames(frames: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(seed)) - 4.0


def noise(seed: int = 5) -> GaussianSourceNoise:
    return GaussianSourceNoise(seed=seed)


@pytest.fixture
def decoded_frames(monkeypatch):
    """Mel frames each decode call was given (the vocoder's expensive part)."""
    seen: list[int] = []
    real = MlxHiFT.decode

    def counting(self, mel, source, **options):
        seen.append(mel.shape[1])
        return real(self, mel, source, **options)

    monkeypatch.setattr(MlxHiFT, "decode", counting)
    return seen


def test_the_default_window_is_the_mlx_one(hift):
    assert hift.conv_limit == MLX_CONV_WINDOW  # ~10.9 s per window, as CosyVoice3's MLX vocoder


@pytest.mark.parametrize("cached_source", [False, True])
def test_windows_give_the_one_shot_output(hift, monkeypatch, decoded_frames, cached_source):
    mel = mel_frames(420)
    cache = torch.linspace(-0.5, 0.5, 8 * STEP).reshape(1, 1, -1) if cached_source else None
    monkeypatch.setattr(hift, "conv_limit", None)
    whole, whole_source = hift.inference(mel, noise=noise(), cache_source=cache)
    assert decoded_frames == [420]
    monkeypatch.setattr(hift, "conv_limit", SMALL_LIMIT)
    decoded_frames.clear()
    windowed, windowed_source = hift.inference(mel, noise=noise(), cache_source=cache)
    assert len(decoded_frames) > 3 and max(decoded_frames) * 120 + 1 <= SMALL_LIMIT  # before: [420]
    assert windowed.shape == whole.shape == (1, STEP * 420)
    torch.testing.assert_close(windowed_source, whole_source, atol=0, rtol=0)
    torch.testing.assert_close(windowed, whole, atol=TOLERANCE, rtol=0)


def test_windows_give_the_torch_vocoders_output(hift, monkeypatch):
    mel = mel_frames(300, seed=3)
    monkeypatch.setattr(hift, "conv_limit", SMALL_LIMIT)
    ours, _ = hift.inference(mel, noise=noise())
    with torch.inference_mode():
        expected, _ = load_hift(TINY / "cosyvoice2.yaml", TINY / "hift.pt").inference(mel, noise=noise())
    assert_close(ours, expected, "waveform", "windowed MLX CosyVoice2 vocoder against the torch one")


def test_a_first_frame_decodes_only_the_frames_after_it_and_their_context(hift, decoded_frames):
    mel = mel_frames(300, seed=1)
    whole, whole_source = hift.inference(mel, noise=noise())
    first_frame = 200
    decoded_frames.clear()
    tail, tail_source = hift.inference(mel, noise=noise(), first_frame=first_frame)
    with torch.device("meta"):
        left, _ = context_frames(HiFT(hift.config))  # the torch vocoder's reach, from its layers
    assert decoded_frames == [300 - (first_frame - left)]  # before: all 300 frames again, then sliced
    assert tail.shape == (1, STEP * 100) and tail_source.shape == (1, 1, STEP * 100)
    torch.testing.assert_close(tail_source, whole_source[..., first_frame * STEP :], atol=0, rtol=0)
    torch.testing.assert_close(tail, whole[:, first_frame * STEP :], atol=TOLERANCE, rtol=0)
    with pytest.raises(ValueError, match="cache_source is for whole calls"):
        hift.inference(mel, cache_source=torch.zeros(1, 1, STEP), first_frame=first_frame)
    with pytest.raises(ValueError, match="first_frame must be in 0..300"):
        hift.inference(mel, first_frame=301)


def test_the_window_limit_bounds_the_mlx_peak(hift, monkeypatch):
    mel = mel_frames(600, seed=2)

    def peak_of(limit) -> int:
        monkeypatch.setattr(hift, "conv_limit", limit)
        mx.clear_cache()
        held = mx.get_active_memory()  # arrays other tests in this process still hold count in the peak too
        mx.reset_peak_memory()
        hift.inference(mel, noise=noise())
        return mx.get_peak_memory() - held

    # mlx-cpu: 0.22 (11.8 of 54.1 MB); 0.598 while the source's excitation was built whole (CI's 0.61 failed)
    # (bench/results/issue44_suite/session5_mlx_vocoder_peak.json)
    assert peak_of(SMALL_LIMIT) < 0.35 * peak_of(None)


def source_peak(hift, frames: int) -> int:
    f0 = hift.f0_predictor(to_mlx(mel_frames(frames, seed=6)).transpose(0, 2, 1))
    mx.eval(f0)
    mx.clear_cache()
    held = mx.get_active_memory()
    mx.reset_peak_memory()
    mx.eval(hift.m_source(f0, noise()))
    return mx.get_peak_memory() - held


def test_the_source_is_excited_in_chunks_so_its_peak_barely_grows_with_length(hift):
    """Only the one-channel source is kept whole; its ``harmonics``-channel excitation (~40 float32 per sample
    over its intermediates) is built per chunk. Measured on mlx-cpu: 5.5 MB at 600 frames, 6.6 MB at 1200; whole,
    42.6 and 85.3 MB (bench/results/issue44_suite/session5_mlx_vocoder_peak.json)."""
    short, long = source_peak(hift, 600), source_peak(hift, 1200)
    assert long - short < 4 * (600 * STEP * 4)  # the kept source's 2.3 MB of growth and its concatenation


def test_a_strided_view_becomes_an_mlx_array_of_its_own_size():
    base = torch.randn(1, 9, 100_000)
    mx.clear_cache()
    held = mx.get_active_memory()
    mx.reset_peak_memory()
    view = to_mlx(base[:, :, 1000:2000])  # mx.array of the numpy view would copy the base's whole span (3.6 MB)
    mx.eval(view)
    assert mx.get_peak_memory() - held <= 2 * view.nbytes
    assert view.tolist() == base[:, :, 1000:2000].tolist()


def test_the_low_memory_window_applies_to_cosyvoice2(decoded_frames, monkeypatch):
    """The low-memory load sets the smaller window on either version's vocoder; CosyVoice2's now obeys it."""
    from cosyvoice_mac.mlx.networks import build_mlx_networks
    from cosyvoice_mac.pipeline.loading import qwen_config_for
    from cosyvoice_mac.pipeline.model_dir import ModelFolder

    memory_before, cache_before = mx.get_memory_limit(), mx.set_cache_limit(0)
    mx.set_cache_limit(cache_before)
    try:
        folder = ModelFolder.open(TINY)
        networks = build_mlx_networks(
            folder.config, qwen_config_for(folder), folder=folder, precision="fp32", low_memory=True, cache_dir=None
        )
    finally:
        mx.set_memory_limit(memory_before)
        mx.set_cache_limit(cache_before)
    frames = LOW_MEMORY_CONV_WINDOW // 120 + 50  # one window more than the low-memory limit holds
    networks.hift.inference(mel_frames(frames, seed=4), noise=noise())
    assert networks.hift.conv_limit == LOW_MEMORY_CONV_WINDOW
    assert len(decoded_frames) == 2 and max(decoded_frames) * 120 + 1 <= LOW_MEMORY_CONV_WINDOW  # before: [323]
