"""Bounded-window vocoding: no conv axis over the MPS limit, and windows give the one-shot output.

The policy is on for MPS by default (``conv_limit="auto"``); here it is forced on for the CPU by
setting ``conv_limit``, so the same code path runs. Windowed output equals the one-shot output to
float rounding for both vocoders (the context comes from the layers' reach, no cross-fade).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cosyvoice_mac.device import MPS_CONV_LIMIT, conv_length_limit
from cosyvoice_mac.models.vocoder import GaussianSourceNoise, load_hift
from cosyvoice_mac.models.vocoder.layers import CausalUpsample
from cosyvoice_mac.models.vocoder.window import context_frames, plan_windows
from cosyvoice_mac.pipeline import CosyVoice
from cosyvoice_mac.pipeline.types import SpeakerPrompt
from tests.fakes.onnx_models import make_tiny_model_dir
from tests.parity.common import parity_dir

VERSIONS = ("cosyvoice2", "cosyvoice3")
STEP = 480
FLOAT_TOLERANCE = 2e-5  # the existing causal prefix test's bound: conv algorithms differ by length
SMALL_LIMIT = 120 * 100 + 1  # 100-frame windows: many windows on a short mel keeps the test fast


def hift_for(version: str):
    folder = parity_dir() / f"{version}_tiny"
    return load_hift(folder / f"{version}.yaml", folder / "hift.pt")


def mel_frames(frames: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(seed)) - 4.0


def noise_for(version: str, seed: int = 5):
    return GaussianSourceNoise(seed=seed) if version == "cosyvoice2" else None


_CONVOLUTIONS = {"conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "convolution", "_convolution"}


class ConvShapes(TorchDispatchMode):
    """Records every aten convolution: its output shape and, for a transposed one, its input shape."""

    def __init__(self):
        super().__init__()
        self.checked: list[tuple[str, tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in _CONVOLUTIONS:  # in inference mode torch dispatches conv1d itself, not its decomposition
            transposed = "transpose" in name or (name == "convolution" and bool(args[6]))
            self.checked.append(("conv_transpose output" if transposed else "conv output", tuple(out.shape)))
            if transposed:
                self.checked.append(("conv_transpose input", tuple(args[0].shape)))
        return out

    def limited(self) -> list[tuple[str, tuple[int, ...]]]:
        """The shapes MPS checks (a transposed conv's output is exempt: it runs as a conv's input gradient)."""
        return [(kind, shape) for kind, shape in self.checked if kind != "conv_transpose output"]

    def longest(self) -> int:
        return max(max(shape) for _, shape in self.limited())

    def over(self, limit: int) -> list[tuple[str, tuple[int, ...]]]:
        return [(kind, shape) for kind, shape in self.limited() if max(shape) > limit]


def test_the_limit_is_on_for_mps_only():
    assert conv_length_limit(torch.device("mps")) == MPS_CONV_LIMIT == 65536
    assert conv_length_limit(torch.device("cpu")) is None and conv_length_limit(torch.device("cuda")) is None


@pytest.mark.parametrize("version", VERSIONS)
def test_windows_equal_one_shot_on_a_long_mel(version):
    hift = hift_for(version)
    mel = mel_frames(1300, seed=1)  # 26 s: three windows at the MPS limit
    one_shot, source = hift.inference(mel, noise=noise_for(version))
    hift.conv_limit = MPS_CONV_LIMIT
    with ConvShapes() as shapes:
        windowed, windowed_source = hift.inference(mel, noise=noise_for(version))
    assert len(plan_windows(1300, 1300, 0, MPS_CONV_LIMIT, hift)) == 3
    assert not shapes.over(MPS_CONV_LIMIT) and shapes.longest() > 60000  # near the limit, never past it
    assert windowed.shape == one_shot.shape == (1, STEP * 1300)
    torch.testing.assert_close(windowed_source, source, atol=0, rtol=0)
    torch.testing.assert_close(windowed, one_shot, atol=FLOAT_TOLERANCE, rtol=0)


MPS_MISSING = None if torch.backends.mps.is_available() else "needs MPS (macOS on Apple Silicon)"


@pytest.mark.mac
@pytest.mark.skipif(MPS_MISSING is not None, reason=MPS_MISSING or "")
@pytest.mark.parametrize("version", VERSIONS)
def test_on_mps_the_auto_limit_vocodes_a_long_mel_in_windows_like_the_cpu(version):
    """On the device the limit is for: ``conv_limit="auto"`` is MPS's 65536, no conv is longer, and the wave is
    the CPU's one-shot wave (to the rounding of another device's kernels)."""
    mel = mel_frames(1300, seed=1)  # 26 s: one shot would pass the limit
    on_cpu, _ = hift_for(version).inference(mel, noise=noise_for(version))
    hift = hift_for(version).to("mps")
    with ConvShapes() as shapes:
        on_mps, _ = hift.inference(mel.to("mps"), noise=noise_for(version))
    assert not shapes.over(MPS_CONV_LIMIT) and shapes.longest() > 60000
    on_mps = on_mps.cpu()
    assert on_mps.shape == on_cpu.shape and torch.isfinite(on_mps).all()
    correlation = torch.corrcoef(torch.stack([on_mps[0], on_cpu[0]]))[0, 1]
    assert correlation > 0.99 and (on_mps - on_cpu).abs().max() < 1e-2


@pytest.mark.parametrize("version", VERSIONS)
def test_many_small_windows_equal_one_shot(version):
    hift = hift_for(version)
    mel = mel_frames(437, seed=2)
    one_shot, _ = hift.inference(mel, noise=noise_for(version))
    hift.conv_limit = SMALL_LIMIT
    windowed, _ = hift.inference(mel, noise=noise_for(version))
    assert len(plan_windows(437, 437, 0, SMALL_LIMIT, hift)) > 5
    torch.testing.assert_close(windowed, one_shot, atol=FLOAT_TOLERANCE, rtol=0)


def test_causal_streaming_call_in_windows_and_from_a_first_frame_equals_one_shot():
    hift = hift_for("cosyvoice3")
    mel = mel_frames(300, seed=3)
    one_shot, _ = hift.inference(mel, finalize=False)
    hift.conv_limit = SMALL_LIMIT
    windowed, _ = hift.inference(mel, finalize=False)
    torch.testing.assert_close(windowed, one_shot, atol=FLOAT_TOLERANCE, rtol=0)
    tail, tail_source = hift.inference(mel, finalize=False, first_frame=200)
    assert tail_source.shape == (1, 1, STEP * (300 - 3 - 200))
    torch.testing.assert_close(tail, one_shot[:, STEP * 200 :], atol=FLOAT_TOLERANCE, rtol=0)


def test_a_first_frame_decodes_only_its_context():
    hift = hift_for("cosyvoice3")
    left, _ = context_frames(hift)
    with ConvShapes() as shapes:
        hift.inference(mel_frames(400), finalize=False, first_frame=300)
    stft_rate = 120
    assert shapes.longest() <= stft_rate * (400 - 3 - 300 + left) + 1  # not the 400 frames of the whole mel


@pytest.mark.parametrize("version", VERSIONS)
def test_context_bounds_the_decoders_reach(version):
    """A change to one mel frame moves no decoder output beyond the computed context (same source)."""
    hift = hift_for(version)
    left, right = context_frames(hift)
    mel = mel_frames(200, seed=4)
    _, source = hift.inference(mel, noise=noise_for(version))
    base = hift.decode(mel, source)
    nudged = mel.clone()
    nudged[:, :, 100] += 3.0
    changed = ((hift.decode(nudged, source) - base).abs() > 0).nonzero()[:, 1] // STEP
    # Input frame 100 reaches outputs [100 - right, 100 + left]: outputs read `left` frames back.
    assert 100 - right <= changed.min() and changed.max() <= 100 + left
    assert changed.max() - 100 > left / 2  # the bound is not loose by more than a factor of two


@pytest.mark.parametrize("version", VERSIONS)
def test_a_60_second_sentence_runs_no_conv_over_the_limit(version, tmp_path):
    """The pipeline's flow + vocoder for 60 s of speech (1500 tokens), with the MPS policy forced on."""
    model = CosyVoice.from_pretrained(make_tiny_model_dir(version, tmp_path), device="cpu")
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, model.networks.flow.config.vocab_size, (1500,), generator=generator).tolist()
    speaker = _speaker(model)
    seconds = len(tokens) * 2 * STEP / 24000
    assert math.isclose(seconds, 60.0)
    with ConvShapes() as unbounded:
        model._tokens_to_wave(tokens[:300], speaker, 1.0, {}, None, [])
    model.networks.hift.conv_limit = MPS_CONV_LIMIT
    with ConvShapes() as shapes:
        wave = model._tokens_to_wave(tokens, speaker, 1.0, {}, None, [])
    assert wave.shape == (int(seconds * 24000),) and np.isfinite(wave).all()
    assert not shapes.over(MPS_CONV_LIMIT), shapes.over(MPS_CONV_LIMIT)[:3]
    # Without the policy the same path exceeds the limit already at 12 s (300 tokens).
    assert unbounded.over(MPS_CONV_LIMIT)


def _speaker(model) -> SpeakerPrompt:
    frames = 50
    return SpeakerPrompt(
        speech_tokens=torch.zeros(1, frames // 2, dtype=torch.long),
        mel=torch.randn(1, frames, 80, generator=torch.Generator().manual_seed(1)) - 4.0,
        embedding=torch.randn(1, 192, generator=torch.Generator().manual_seed(2)),
        audio_hash="test",
        model_id=model.model_id,
    )


def test_causal_upsample_kernels_are_built_at_load_not_per_call(monkeypatch):
    hift = hift_for("cosyvoice3")
    builds = []
    original = CausalUpsample.transposed_kernel
    monkeypatch.setattr(CausalUpsample, "transposed_kernel", lambda self: builds.append(1) or original(self))
    hift.inference(mel_frames(20))
    hift.inference(mel_frames(30))
    assert builds == []  # built by load_hift already
    # A new checkpoint (copied into the weights in place) rebuilds them, and the output follows.
    fresh = hift_for("cosyvoice3")
    builds.clear()
    state = {key: value * 1.5 if key.startswith("ups.") else value for key, value in hift.state_dict().items()}
    fresh.load_state_dict(state)
    assert len(builds) == len(hift.ups)
    reference = hift_for("cosyvoice3")
    for up in reference.ups:
        up.weight.data = up.weight.data * 1.5  # a new tensor: rebuilt on the next call
        up.bias.data = up.bias.data * 1.5
    torch.testing.assert_close(fresh.inference(mel_frames(20))[0], reference.inference(mel_frames(20))[0])
