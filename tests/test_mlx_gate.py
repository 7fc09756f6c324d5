"""The MLX LLM gate's rows against the measurement they copy: ``bench/mlx_gate.py``'s JSON, kept in bench/results.

Each row has its test: its verdict, figure, group size and the LLM it was judged on are the JSON's; a row
the JSON fails is refused (never offered, never the low-memory pick) with its figure in the refusal; a
quantised row runs at the group size that measured best. The low-memory default is the best precision that
passes. Reading a JSON file: no MLX, no model.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from cosyvoice_mac.mlx import llm_gate

ROOT = Path(__file__).resolve().parents[1]
MEASUREMENT = json.loads((ROOT / llm_gate.MLX_GATE_JSON).read_text(encoding="utf-8"))
EIGHT_GIB = 8 * 2**30
SIZE_RANK = {"int4": 0, "int8": 1, "fp16": 2, "bf16": 2, "fp32": 3}


def measured_figures(row: llm_gate.MlxLlmRow) -> dict:
    name = f"{row.choice}@{row.group_size}" if row.group_size else row.choice
    return MEASUREMENT["models"][row.judged_on]["rows"][name]


def test_the_measurement_is_the_gates_rule_on_every_precision_the_app_offers():
    assert MEASUREMENT["rule"] == {"metric": "top25_same_set", "min": llm_gate.MIN_TOP_K_AGREEMENT, "top_k": 25}
    assert set(MEASUREMENT["verdicts"]) == {row.choice for row in llm_gate.MLX_LLM_GATE}
    reduced = MEASUREMENT["models"]["reduced"]["rows"]
    assert {f"int{bits}@{group}" for bits in (8, 4) for group in (32, 64, 128)} | {"fp32", "fp16", "bf16"} == set(
        reduced
    )
    for name, figures in reduced.items():  # every measured row carries the token and audio figures too
        if name != "fp32":
            assert {"token_agreement", "mel_error", "wave_error", "top25_overlap"} <= set(figures), name


@pytest.mark.parametrize("row", llm_gate.MLX_LLM_GATE, ids=lambda row: row.choice)
def test_each_row_is_its_measurement(row):
    verdict = MEASUREMENT["verdicts"][row.choice]
    assert (row.passes, row.agreement, row.judged_on, row.group_size) == (
        verdict["passes"],
        verdict["top25_same_set"],
        verdict["judged_on"],
        verdict["group_size"],
    ), f"the gate's {row.choice} row does not copy {llm_gate.MLX_GATE_JSON}: {verdict}"
    if row.agreement is None:  # the reference
        assert row.choice == "fp32" and row.passes and llm_gate.refusal("fp32") == ""
        return
    figures = measured_figures(row)
    assert figures["top25_same_set"] == row.agreement and figures["passes"] == row.passes
    assert row.passes == (row.agreement >= llm_gate.MIN_TOP_K_AGREEMENT)
    if row.group_size:  # chosen by measurement: the best share of 32, 64 and 128 (a tie: overlap, then size)
        shares = {
            int(name.partition("@")[2]): (figures["top25_same_set"], figures["top25_overlap"])
            for name, figures in MEASUREMENT["models"]["reduced"]["rows"].items()
            if name.startswith(f"{row.choice}@")
        }
        assert set(shares) == {32, 64, 128}
        best = max(shares, key=lambda group: (*shares[group], group))
        assert row.group_size == best == llm_gate.group_size(row.choice)
    if row.passes:
        assert llm_gate.refusal(row.choice) == "" and row.choice in llm_gate.offered()
    else:
        refusal = llm_gate.refusal(row.choice)
        assert f"{100 * row.agreement:.1f} %" in refusal and "outside the gate" in refusal, refusal
        assert row.choice not in llm_gate.offered()
        assert llm_gate.gate_choice(low_memory=True).precision != row.choice


def test_the_low_memory_default_is_the_best_precision_that_passes():
    verdicts = MEASUREMENT["verdicts"]
    passing = [name for name, verdict in verdicts.items() if verdict["passes"]]
    best = min(passing, key=lambda name: (SIZE_RANK[name], -(verdicts[name]["top25_same_set"] or 1.0)))
    picked = llm_gate.gate_choice(low_memory=True, ram_bytes=EIGHT_GIB)
    assert (picked.precision, picked.why) == (best, "low_memory")
    assert llm_gate.gate_choice(low_memory=False).precision == "fp32"
    if best == "fp32":  # the note names each refused row with its figure
        reason = picked.reason()
        assert "no smaller precision passes the gate" in reason
        for name, verdict in verdicts.items():
            if not verdict["passes"]:
                assert f"{100 * verdict['top25_same_set']:.1f} %" in reason, name


def test_the_low_memory_rule_takes_the_smallest_passing_weights_then_the_higher_agreement(monkeypatch):
    def table(**changes) -> tuple[llm_gate.MlxLlmRow, ...]:
        """The measured table with ``changes``; every other reduced row fails."""
        rows = (dataclasses.replace(row, passes=row.choice == "fp32") for row in llm_gate.MLX_LLM_GATE)
        return tuple(dataclasses.replace(row, **changes.get(row.choice, {})) for row in rows)

    monkeypatch.setattr(
        llm_gate,
        "MLX_LLM_GATE",
        table(fp16={"passes": True, "agreement": 0.96}, bf16={"passes": True, "agreement": 0.97}),
    )
    assert llm_gate.gate_choice(low_memory=True).precision == "bf16"  # as small as fp16, agrees more
    monkeypatch.setattr(
        llm_gate,
        "MLX_LLM_GATE",
        table(
            fp16={"passes": True, "agreement": 0.99}, int8={"passes": True, "agreement": 0.95}, int4={"passes": False}
        ),
    )
    picked = llm_gate.gate_choice(low_memory=True)
    assert picked.precision == "int8" and "the smallest precision within the gate" in picked.reason()
    assert llm_gate.offered() == ("auto", "fp32", "fp16", "int8")
