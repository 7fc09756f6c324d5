"""The parity harness takes every case parameter from ``manifest.json`` ``case_params``, none from code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.parity import e2e
from tests.parity.common import REPO_ROOT, CaseParams, ManifestError, ParityContext, parity_dir

ROOT = parity_dir()
MANIFEST = json.loads((ROOT / "manifest.json").read_text())
VERSIONS = sorted(MANIFEST["case_params"])


def _context_with(tmp_path: Path, version: str, **changes) -> ParityContext:
    """A parity folder that is the shared one except for ``changes`` to this version's case_params."""
    manifest = json.loads(json.dumps(MANIFEST))
    manifest["case_params"][version].update(changes)
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    for entry in ROOT.iterdir():
        if entry.name != "manifest.json":
            (tmp_path / entry.name).symlink_to(entry)
    return ParityContext(tmp_path, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_case_params_are_read_and_consistent(version):
    params = ParityContext(ROOT, version).case_params
    block = MANIFEST["case_params"][version]
    assert params.e2e_text == block["e2e_text"] and params.ras_seed == block["ras_seed"]
    assert params.first_stream_hop_tokens == params.token_hop_len + params.prompt_token_pad


@pytest.mark.parametrize("version", VERSIONS)
def test_the_checks_use_the_manifest_text_not_their_own(version, tmp_path):
    """Another e2e text in the manifest makes the text-ids check fail: it compares what the manifest says."""
    ctx = _context_with(tmp_path, version, e2e_text="Goodbye moon.")
    with pytest.raises(AssertionError):
        e2e.check_text_ids(ctx)
    e2e.check_text_ids(ParityContext(ROOT, version))  # the shared manifest passes


def test_a_missing_or_contradictory_block_is_a_clear_error(tmp_path):
    with pytest.raises(ManifestError, match="no case_params for cosyvoice9"):
        CaseParams.from_manifest(MANIFEST, "cosyvoice9")
    block = dict(MANIFEST["case_params"][VERSIONS[0]], first_stream_hop_tokens=10)
    with pytest.raises(ManifestError, match="first_stream_hop_tokens"):
        CaseParams.from_manifest({"case_params": {"v": block}}, "v")
    block = dict(MANIFEST["case_params"][VERSIONS[0]])
    del block["ras_seed"]
    with pytest.raises(ManifestError, match="lacks ras_seed"):
        CaseParams.from_manifest({"case_params": {"v": block}}, "v")


def test_no_parity_file_restates_a_case_parameter():
    """The manifest's strings and seeds appear in no parity check or parity script as literals."""
    literals = set()
    for block in MANIFEST["case_params"].values():
        literals |= {block["e2e_text"], block["prompt_transcript"]} | ({block["instruct_prefix"]} - {""})
    seeds = {str(block[key]) for block in MANIFEST["case_params"].values() for key in ("e2e_seed", "ras_seed")}
    files = [
        *sorted((REPO_ROOT / "tests" / "parity").glob("*.py")),
        REPO_ROOT / "tests" / "test_parity.py",
        REPO_ROOT / "bench" / "parity_device.py",
    ]
    for path in files:
        text = path.read_text()
        assert not [literal for literal in literals if literal in text], path.name
        # a seed as a number of its own (the vectors' names such as ras_seed4321_tokens are data keys)
        assert not [seed for seed in seeds if re.search(rf"(?<![\w]){seed}(?![\w])", text)], path.name
