"""Vocoders and converted packages shared by the Core ML tests (built once per test session).

CI has no real checkpoints: full-size vocoders get seeded random weights, rescaled so that their
signals look like speech (../shared/research/coreml.md 5.5): Snake alphas U(0.5, 1.5), f0 around
60 +- 60 Hz (a mix of voiced and unvoiced frames), log-magnitudes around -2 +- 1.5. Default
initialisation instead gives near-constant f0 and magnitudes that sit on the exp clamp.
"""

from __future__ import annotations

import atexit
import math
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from cosyvoice_mac.config import read_yaml_config
from cosyvoice_mac.models.vocoder import HiFT, HiFTConfig, load_hift
from cosyvoice_mac.pipeline.fullsize import official_config
from tests.parity.common import parity_dir

VERSIONS = ("cosyvoice3", "cosyvoice2")


def snr_db(reference, actual) -> float:
    """10 log10(sum ref^2 / sum (ref - actual)^2); inf when equal."""
    reference = np.asarray(reference, dtype=np.float64)
    actual = np.asarray(actual, dtype=np.float64)
    assert reference.shape == actual.shape, f"shape {actual.shape} != {reference.shape}"
    noise = float(((reference - actual) ** 2).sum())
    return math.inf if noise == 0 else 10 * math.log10(float((reference**2).sum()) / noise)


def tiny_dir(version: str) -> Path:
    return parity_dir() / f"{version}_tiny"


@lru_cache(maxsize=None)
def tiny_hift(version: str) -> HiFT:
    folder = tiny_dir(version)
    return load_hift(folder / f"{version}.yaml", folder / "hift.pt")


def tiny_node(version: str) -> dict:
    return read_yaml_config(tiny_dir(version) / f"{version}.yaml")["hift"]


def full_node(version: str) -> dict:
    return official_config(version)["hift"]


@lru_cache(maxsize=None)
def speechlike_hift(version: str, size: str = "full", seed: int = 0) -> HiFT:
    """A random-weight vocoder (``size`` 'full' or 'tiny' architecture) with speech-like signal levels."""
    node = full_node(version) if size == "full" else tiny_node(version)
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    hift = HiFT(HiFTConfig.from_yaml(node)).eval()
    with torch.no_grad():
        for name, parameter in hift.named_parameters():
            if name.endswith(".alpha"):
                parameter.copy_(torch.rand(parameter.shape, generator=generator) + 0.5)
        classifier = hift.f0_predictor.classifier
        _rescale_output(hift.f0_predictor, classifier, mean=60.0, std=60.0)
        _rescale_conv_post(hift, mean=-2.0, std=1.5)
    return hift


def speechlike_mel(frames: int, seed: int = 1) -> torch.Tensor:
    """A smooth random log-mel ``(1, 80, frames)`` in the range of real speech (about -11 .. 2)."""
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.randn(1, 80, frames // 4 + 2, generator=generator)
    mel = torch.nn.functional.interpolate(coarse, size=frames, mode="linear", align_corners=False)
    return mel * 2.0 - 5.0


def _probe_mel() -> torch.Tensor:
    return speechlike_mel(64, seed=99)


def _rescale_output(predictor, classifier, *, mean: float, std: float) -> None:
    with torch.inference_mode():
        x = predictor.condnet(_probe_mel())
        raw = classifier(x.transpose(1, 2))
    scale = std / max(raw.std().item(), 1e-6)
    classifier.weight.mul_(scale)
    classifier.bias.copy_((classifier.bias - raw.mean()) * scale + mean)


def _rescale_conv_post(hift: HiFT, *, mean: float, std: float) -> None:
    captured = {}
    handle = hift.conv_post.register_forward_hook(lambda module, args, out: captured.setdefault("out", out))
    mel = _probe_mel()
    source = torch.zeros(1, 1, mel.shape[-1] * hift.config.samples_per_frame)
    with torch.inference_mode():
        hift.decode(mel, source)
    handle.remove()
    bins = hift.config.n_fft // 2 + 1
    log_magnitude = captured["out"][:, :bins]
    scale = std / max(log_magnitude.std().item(), 1e-6)
    weight, bias = hift.conv_post.weight, hift.conv_post.bias
    weight[:bins].mul_(scale)
    bias[:bins].copy_((bias[:bins] - log_magnitude.mean()) * scale + mean)


_SCRATCH: list[Path] = []


def scratch_dir(prefix: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix=f"cosyvoice-coreml-{prefix}-"))
    _SCRATCH.append(folder)
    return folder


@atexit.register
def _cleanup() -> None:
    for folder in _SCRATCH:
        shutil.rmtree(folder, ignore_errors=True)


@lru_cache(maxsize=None)
def converted(
    version: str, size: str, precision: str, chunked: bool = True, chunk_frames: int = 128
) -> tuple[Path, dict]:
    """Convert once per session: (folder, manifest).

    ``size`` 'tiny' converts the parity model folder through the command line (so its fingerprint is
    the folder's ``hift.pt``); 'full' converts a speech-like random full-size vocoder in memory.
    """
    from cosyvoice_mac.coreml.convert import ConversionOptions, convert_hift, hift_fingerprint, read_manifest

    folder = scratch_dir(f"{version}-{size}-{precision}")
    options = ConversionOptions(precision=precision, chunked=chunked, chunk_frames=chunk_frames)
    if size == "tiny":
        from cosyvoice_mac.cli.coreml import main

        arguments = [
            "coreml",
            "convert",
            "--model",
            str(tiny_dir(version)),
            "--out",
            str(folder),
            "--precision",
            precision,
            "--shapes",
            "both" if chunked else "flexible",
            "--chunk-frames",
            str(chunk_frames),
        ]
        assert main(arguments) == 0, f"coreml convert {' '.join(arguments)} failed"
        return folder, read_manifest(folder, options)
    hift = speechlike_hift(version)
    return folder, convert_hift(
        hift,
        folder,
        fingerprint=hift_fingerprint(hift),
        config_node=full_node(version),
        options=options,
        log=lambda message: None,
    )


@lru_cache(maxsize=None)
def interpreter(package: Path):
    """The numpy MIL interpreter of a saved package (loading re-runs type inference: seconds)."""
    from tests.coreml.mil_interpreter import MILInterpreter

    return MILInterpreter(package)


def interpreter_factory(path: Path, compute_units: str):
    """A ``load_vocoder(model_factory=...)`` that runs packages with the numpy interpreter."""
    return interpreter(Path(path))
