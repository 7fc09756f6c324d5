"""The MLX vocoder in bounded windows and, streaming, on the new frames only (as the PyTorch vocoder does).

Windows come from the PyTorch vocoder's rule (``models.vocoder.window``: each window's context is the
layers' reach), so windowed output equals the one-shot output to float rounding; a streamed chunk's
``first_frame`` decodes only the frames after it (plus their left context) instead of the whole mel again.
"""

from __future__ import annotations

import pytest

pytest.importorskip("mlx.core", reason="needs mlx (Linux: pip install 'mlx[cpu]')")

import mlx.core as mx  # noqa: E402
import torch  # noqa: E402

from cosyvoice_mac.mlx.hift import MlxHiFT, load_mlx_hift  # noqa: E402
from cosyvoice_mac.models.vocoder.window import context_frames  # noqa: E402
from tests.parity.common import parity_dir  # noqa: E402

SMALL_LIMIT = 120 * 100 + 1  # 100-frame windows
TOLERANCE = 2e-5


@pytest.fixture(scope="module")
def hift() -> MlxHiFT:
    folder = parity_dir() / "cosyvoice3_tiny"
    return load_mlx_hift(folder / "cosyvoice3.yaml", folder / "hift.pt")


def mel_frames(frames: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(seed)) - 4.0


@pytest.fixture
def decoded_frames(hift, monkeypatch):
    """Mel frames each decode call was given (the vocoder's expensive part)."""
    seen: list[int] = []
    real = MlxHiFT.decode

    def counting(self, mel, source, *, finalize=True):
        seen.append(mel.shape[1])
        return real(self, mel, source, finalize=finalize)

    monkeypatch.setattr(MlxHiFT, "decode", counting)
    return seen


@pytest.mark.parametrize("finalize", [True, False])
def test_windows_give_the_one_shot_output(hift, finalize, monkeypatch, decoded_frames):
    mel = mel_frames(420)
    monkeypatch.setattr(hift, "conv_limit", None)
    whole, whole_source = hift.inference(mel, finalize=finalize)
    monkeypatch.setattr(hift, "conv_limit", SMALL_LIMIT)
    decoded_frames.clear()
    windowed, windowed_source = hift.inference(mel, finalize=finalize)
    assert len(decoded_frames) > 3 and max(decoded_frames) * 120 + 1 <= SMALL_LIMIT
    torch.testing.assert_close(windowed, whole, atol=TOLERANCE, rtol=0)
    torch.testing.assert_close(windowed_source, whole_source, atol=0, rtol=0)


def test_a_streamed_chunk_decodes_only_its_new_frames(hift, decoded_frames):
    mel = mel_frames(300, seed=1)
    whole, _ = hift.inference(mel, finalize=False)
    first_frame = 200
    decoded_frames.clear()
    tail, _ = hift.inference(mel, finalize=False, first_frame=first_frame)
    torch.testing.assert_close(tail, whole[:, first_frame * 480 :], atol=TOLERANCE, rtol=0)
    left, _ = context_frames(hift.window_rules)
    assert decoded_frames == [mel.shape[2] - 3 - (first_frame - left)]  # before: all 297 frames again


def test_the_window_limit_bounds_the_mlx_peak(hift, monkeypatch):
    mel = mel_frames(600, seed=2)

    def peak_of(limit) -> int:
        monkeypatch.setattr(hift, "conv_limit", limit)
        mx.clear_cache()
        held = mx.get_active_memory()  # arrays other tests in this process still hold count in the peak too
        mx.reset_peak_memory()
        hift.inference(mel)
        return mx.get_peak_memory() - held

    assert peak_of(SMALL_LIMIT) < 0.6 * peak_of(None)
