"""Shared helpers for parity checks: where the vectors are, how to read them, what tolerance."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import torch
from safetensors.torch import load_file

REPO_ROOT = Path(__file__).resolve().parents[2]


def parity_dir() -> Path:
    """``COSYVOICE_PARITY_DIR`` or ``../shared/parity`` beside the checkout."""
    configured = os.environ.get("COSYVOICE_PARITY_DIR")
    return Path(configured) if configured else REPO_ROOT.parent / "shared" / "parity"


# From manifest.determinism.interpretation: fp32 re-implementation tolerances.
TOLERANCE = {
    "frontend": dict(atol=1e-4, rtol=1e-4),
    "mel": dict(atol=1e-4, rtol=1e-4),
    "flow": dict(atol=1e-4, rtol=1e-4),
    "llm_logits": dict(atol=1e-4, rtol=0.0),
    # rtol 1e-5 from the manifest, plus 1e-3 Hz absolute: f0 = |bias + w.x| cancels near 0 Hz at a few
    # frames, where the reference itself moves ~1e-4 Hz between thread counts (manifest determinism).
    "f0": dict(atol=1e-3, rtol=1e-5),
    "waveform": dict(atol=1e-3, rtol=0.0),
}


@dataclass
class ParityContext:
    """One model version's golden vectors: ``root`` is the parity dir, ``version`` e.g. 'cosyvoice3'."""

    root: Path
    version: str
    _cache: dict = field(default_factory=dict)

    @property
    def model_dir(self) -> Path:
        return self.root / f"{self.version}_tiny"

    @cached_property
    def manifest(self) -> dict:
        return json.loads((self.root / "manifest.json").read_text())

    def vectors(self, name: str) -> dict[str, torch.Tensor]:
        """``vectors/<name>.safetensors`` of this version (e.g. 'inputs', 'llm', 'flow', 'hift', 'e2e')."""
        if name not in self._cache:
            self._cache[name] = load_file(str(self.model_dir / "vectors" / f"{name}.safetensors"))
        return self._cache[name]

    def frontend_vectors(self) -> dict[str, torch.Tensor]:
        if "frontend" not in self._cache:
            self._cache["frontend"] = load_file(str(self.root / "frontend.safetensors"))
        return self._cache["frontend"]

    def file_entry(self, relative: str) -> dict:
        return self.manifest["files"][relative]


def assert_close(actual: torch.Tensor, expected: torch.Tensor, kind: str, what: str) -> float:
    """Compare at the manifest tolerance for ``kind``; return the max abs error (for reports)."""
    actual = actual.detach().to("cpu", expected.dtype)
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    error = (actual - expected).abs().max().item() if actual.numel() else 0.0
    tol = TOLERANCE[kind]
    ok = torch.allclose(actual, expected, atol=tol["atol"], rtol=tol["rtol"])
    assert ok, f"{what}: max abs error {error:.3g} exceeds {kind} tolerance {tol}"
    return error


def versions_in_manifest(root: Path) -> list[str]:
    manifest = json.loads((root / "manifest.json").read_text())
    found = {key.split("_tiny/")[0] for key in manifest["files"] if "_tiny/" in key}
    return sorted(found)
