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


class ManifestError(AssertionError):
    """The manifest lacks, or contradicts itself on, a case parameter the checks need."""


@dataclass(frozen=True)
class CaseParams:
    """One version's ``case_params`` block of the manifest: the request the reference made the vectors with.

    Read from the manifest only, never restated in the checks. The first streaming hop of the
    reference completes the prompt to whole ``token_hop_len`` chunks; ``__post_init__`` checks the
    manifest's stored figures against that rule, so a changed manifest cannot silently disagree.
    """

    e2e_text: str
    prompt_transcript: str
    e2e_seed: int
    ras_seed: int
    prompt_speech_tokens: int
    token_hop_len: int
    pre_lookahead_len: int
    prompt_token_pad: int
    first_stream_hop_tokens: int
    stream_chunk1_tokens: int
    instruct_prefix: str

    @classmethod
    def from_manifest(cls, manifest: dict, version: str) -> "CaseParams":
        block = manifest.get("case_params", {}).get(version)
        if block is None:
            raise ManifestError(f"manifest.json has no case_params for {version}: regenerate the parity vectors")
        missing = [name for name in cls.__dataclass_fields__ if name not in block]
        if missing:
            raise ManifestError(f"manifest case_params.{version} lacks {', '.join(missing)}")
        return cls(**{name: block[name] for name in cls.__dataclass_fields__})

    def __post_init__(self):
        hop, prompt = self.token_hop_len, self.prompt_speech_tokens
        expected_pad = -(-prompt // hop) * hop - prompt
        if self.prompt_token_pad != expected_pad:
            raise ManifestError(f"prompt_token_pad {self.prompt_token_pad} != ceil(P/hop)*hop - P = {expected_pad}")
        if self.first_stream_hop_tokens != hop + self.prompt_token_pad:
            raise ManifestError(f"first_stream_hop_tokens {self.first_stream_hop_tokens} != token_hop_len + pad")
        if self.stream_chunk1_tokens != self.first_stream_hop_tokens + self.pre_lookahead_len:
            raise ManifestError(f"stream_chunk1_tokens {self.stream_chunk1_tokens} != first hop + look-ahead")

    @property
    def prompt_prefix_tokens(self) -> int:
        """Whole prompt chunks before the first hop's chunk: what a cached flow prefix may hold."""
        return (self.prompt_speech_tokens + self.prompt_token_pad) - self.token_hop_len


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

    @cached_property
    def case_params(self) -> CaseParams:
        return CaseParams.from_manifest(self.manifest, self.version)

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
    expected = expected.detach().cpu()  # either side may come from the device under test
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


def one_version_copy(source: Path, version: str, folder: Path) -> Path:
    """A parity folder holding ``version`` only: its manifest lists that version's files and parameters alone,
    the files are links to ``source``'s."""
    manifest = json.loads((source / "manifest.json").read_text())
    manifest["files"] = {
        name: facts
        for name, facts in manifest["files"].items()
        if "_tiny/" not in name or name.startswith(f"{version}_tiny/")
    }
    manifest["case_params"] = {version: manifest["case_params"][version]}
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps(manifest))
    for entry in source.iterdir():
        if entry.name != "manifest.json" and not (entry.name.endswith("_tiny") and entry.name != f"{version}_tiny"):
            (folder / entry.name).symlink_to(entry)
    return folder
