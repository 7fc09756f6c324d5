"""The gate table's rows, each re-measured: a verdict that no longer holds fails here.

LLM rows: top-25 candidate sets against the fp32 reference on every recorded step (teacher-forced
and decoded) of every golden vector. Flow rows: finite mel within 1e-2 of fp32 on every golden
vector and on a full-size random-weight run. Vocoder rows: HiFT refuses 16-bit mels.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from cosyvoice_mac.models.flow import Flow, FlowConfig
from cosyvoice_mac.pipeline import gate
from cosyvoice_mac.pipeline.fullsize import official_config
from cosyvoice_mac.pipeline.precision import INT8
from tests.test_precision import (
    _context,
    _forced_decoding_logp,
    _networks,
    _relative_error,
    _top_k_agreement,
)

VERSIONS = ("cosyvoice3", "cosyvoice2")
ROOT = Path(__file__).resolve().parents[1]


def llm_agreement(version: str, choice: str) -> float:
    """Share of recorded steps (teacher-forced and forced decoding) whose top-25 sets equal the reference's."""
    ctx = _context(version)
    llm = _networks(ctx, llm_dtype=gate.as_dtype(choice)).llm
    vectors = ctx.vectors("llm")
    teacher_forced = llm.teacher_forced_logits(vectors["lm_input_embeds"])[0]
    decoded = _forced_decoding_logp(llm, ctx)
    agreeing = (
        _top_k_agreement(teacher_forced, vectors["logits_teacher_forced"][0]) * teacher_forced.shape[0]
        + _top_k_agreement(decoded, vectors["incremental_logp_forced"]) * decoded.shape[0]
    )
    return agreeing / (teacher_forced.shape[0] + decoded.shape[0])


def golden_mel_error(version: str, choice: str) -> float:
    """Relative error of the flow's mel in ``choice`` against the fp32 reference (inf when not finite)."""
    ctx = _context(version)
    flow = _networks(ctx, flow_dtype=gate.as_dtype(choice)).flow
    inputs = ctx.vectors("inputs")
    mel = flow.inference(
        inputs["flow_tokens"], inputs["prompt_speech_token"], inputs["prompt_feat"], inputs["embedding"]
    )
    return _relative_error(mel, ctx.vectors("flow")["mel_nonstream"]) if torch.isfinite(mel).all() else float("inf")


def _rows(stage: str, reduced_only: bool = True) -> list[gate.GateRow]:
    return [row for row in gate.GATE if row.stage == stage and not (reduced_only and row.choice == "float32")]


@pytest.mark.parametrize("row", _rows("llm"), ids=lambda row: row.choice)
def test_llm_row_matches_its_measurement(row):
    shares = {version: llm_agreement(version, row.choice) for version in VERSIONS}
    passes = all(share >= gate.MIN_TOP_K_AGREEMENT for share in shares.values())
    assert passes == row.passes, f"llm {row.choice}: top-25 agreement {shares}, table says passes={row.passes}"


@pytest.mark.parametrize("row", _rows("flow"), ids=lambda row: row.choice)
def test_flow_row_matches_its_measurement(row):
    errors = {version: golden_mel_error(version, row.choice) for version in VERSIONS}
    passes = all(error < gate.MAX_RELATIVE_ERROR for error in errors.values())
    assert passes == row.passes, f"flow {row.choice}: mel relative errors {errors}, table says passes={row.passes}"


@pytest.mark.parametrize("version", VERSIONS)
def test_flow_rows_hold_at_full_size(version):
    """The full-size flow (random weights, 1.3 GB in fp32) in each passing reduced precision: finite, within 1e-2."""
    torch.manual_seed(0)
    flow = Flow(FlowConfig.from_yaml(official_config(version)["flow"])).eval()
    # 2 of the sampler's 10 steps: each step runs the whole full-width estimator, where an overflow or a drift
    # shows, and the second starts from the first's reduced-precision output (the 10 steps' error is the tiny rows'
    # measurement above); 10 cost ~100 s of CPU here in fp16/bf16, 4 about 45 s for both versions.
    flow.decoder.config.n_timesteps = 2
    generator = torch.Generator().manual_seed(0)
    prompt_tokens, tokens = 10, 10  # short: fp16 arithmetic is ~15x slower than fp32 on most CPUs
    inputs = (
        torch.randint(0, flow.config.vocab_size, (1, tokens), generator=generator),
        torch.randint(0, flow.config.vocab_size, (1, prompt_tokens), generator=generator),
        torch.randn(1, 2 * prompt_tokens, 80, generator=generator),
        torch.randn(1, 192, generator=generator),
    )
    with torch.inference_mode():
        reference = flow.inference(*inputs)
        assert torch.isfinite(reference).all()
        for row in _rows("flow"):
            if not row.passes:
                continue
            mel = flow.to(gate.as_dtype(row.choice)).inference(*inputs)
            flow.float()
            assert torch.isfinite(mel).all(), f"full-size {version} flow in {row.choice}: non-finite mel"
            error = _relative_error(mel, reference)
            assert error < gate.MAX_RELATIVE_ERROR, (
                f"full-size {version} flow in {row.choice}: relative error {error:.2e}"
            )


@pytest.mark.parametrize("row", _rows("vocoder"), ids=lambda row: row.choice)
def test_vocoder_runs_only_in_float32(row):
    ctx = _context("cosyvoice3")
    hift = _networks(ctx).hift
    mel = ctx.vectors("flow")["mel_nonstream"]
    assert torch.isfinite(hift.inference(mel)[0]).all()
    with pytest.raises((TypeError, ValueError, RuntimeError), match="float32"):
        hift.to(gate.as_dtype(row.choice)).inference(mel.to(gate.as_dtype(row.choice)))
    assert not row.passes


def test_every_row_names_a_test_that_exists():
    for row in gate.GATE:
        path, _, name = row.test.partition("::")
        source = (ROOT / path).read_text(encoding="utf-8")
        if name:
            names = {node.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef)}
            assert name in names, f"{row.stage} {row.choice}: {row.test} does not exist"


def test_the_table_has_one_row_per_stage_and_candidate_and_float32_always_passes():
    keys = [(row.stage, row.choice) for row in gate.GATE]
    assert len(keys) == len(set(keys))
    assert set(gate.CANDIDATES) == set(gate.STAGES)
    assert INT8 in gate.CANDIDATES["llm"] and INT8 not in gate.CANDIDATES["flow"]
    for stage in gate.STAGES:
        assert gate.allowed(stage, "float32", "cpu") and gate.allowed(stage, "float32", "mps")
    assert not gate.allowed("flow", "float16", "mps") and "NaN" in gate.refusal("flow", "float16", "mps")
    assert "outside the gate" in gate.refusal("llm", "bfloat16", "cpu")
