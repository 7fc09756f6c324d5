"""The quality gate's verdicts on the MLX LLM's precisions, and the one rule that picks among them.

Torch-free and mlx-free, so the page reads the same table the worker runs by: its menu offers the rows
that pass, and the status panel says which one runs and why. Every row is a measurement:
``bench/mlx_gate.py`` measures each precision against fp32 on MLX and keeps its JSON (``MLX_GATE_JSON``);
the rows below copy its verdicts, figures and group sizes, and tests/test_mlx_gate.py checks each row
against that file. The rule is the PyTorch gate's (``cosyvoice_mac.pipeline.gate``): the share of steps
(teacher-forced and decoded) whose top-25 candidate sets equal fp32's is at least 95 %. 16-bit rows are
judged on the golden tiny LLM, as the PyTorch gate judges its rows; the quantised rows cannot run there
(its layers are 8 wide, MLX groups at least 32 weights), so they are judged on a full-width CosyVoice3 LLM
of 2 layers with random weights, at the group size (32, 64 or 128) that measured best. As measured
(2026-12-07, MLX 0.32.4's CPU backend) no precision but fp32 passes: fp16 94.8 % and bf16 70.5 % on the
golden LLM (its top-25 boundary holds near-ties that 16-bit arithmetic swaps), int8 46.8 % and int4 0 %
on the full-width one, so the low-memory mode runs fp32 too. MLX computes in
its weights' dtype, so fp16/bf16 are 16-bit arithmetic; int8/int4 quantize the transformer's Linear
layers only and compute in float32.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cosyvoice_mac.settings import setting

MIN_TOP_K_AGREEMENT = 0.95  # the PyTorch gate's LLM rule (pipeline.gate reads it from here)
LLM_PRECISION_ENV = setting("mlx_llm").env  # fp32 (default) | fp16 | bf16 | int8 | int4
AUTO = "auto"
NAMED_IN_SETTINGS = "settings"  # MlxLlmChoice.named_by for the page's menu (else the variable's name)
MLX_GATE_JSON = "bench/results/mlx_gate/mlx_gate.json"  # the measurement the rows copy
MLX_GATE_TEST = "tests/test_mlx_gate.py::test_each_row_is_its_measurement"
JUDGED_ON = {
    "reference": "the reference",
    "golden_tiny": "the golden tiny CosyVoice3 LLM",
    "reduced": "a full-width CosyVoice3 LLM of 2 layers, random weights",
}


@dataclass(frozen=True)
class MlxLlmRow:
    """One verdict: the LLM in ``choice`` passes or not; ``agreement`` is the measured share of steps whose
    top-25 sets equal fp32's (None for the reference itself), on the LLM ``judged_on`` names; ``group_size``
    is a quantised row's group (0 otherwise)."""

    choice: str
    passes: bool
    agreement: float | None
    judged_on: str
    test: str
    group_size: int = 0
    stage: str = "llm"
    devices: tuple[str, ...] = ("mlx",)

    @property
    def measured(self) -> str:
        """The figure in words, for logs, refusals and the sidecar."""
        if self.agreement is None:
            return "the reference precision (MLX parity)"
        groups = f", groups of {self.group_size}" if self.group_size else ""
        return (
            f"top-25 sets equal fp32's on {100 * self.agreement:.1f} % of steps "
            f"({JUDGED_ON[self.judged_on]}{groups}; the gate needs {100 * MIN_TOP_K_AGREEMENT:.0f} %)"
        )


MLX_LLM_GATE: tuple[MlxLlmRow, ...] = (
    MlxLlmRow("fp32", True, None, "reference", "tests/test_parity_mlx.py"),
    MlxLlmRow("fp16", False, 0.948, "golden_tiny", MLX_GATE_TEST),
    MlxLlmRow("bf16", False, 0.7052, "golden_tiny", MLX_GATE_TEST),
    MlxLlmRow("int8", False, 0.4682, "reduced", MLX_GATE_TEST, group_size=32),
    MlxLlmRow("int4", False, 0.0, "reduced", MLX_GATE_TEST, group_size=32),
)
MLX_LLM_BY_SIZE = ("int4", "int8", "fp16", "bf16", "fp32")  # smallest weights first (fp16 and bf16: as large)
_SIZE_RANK = {"int4": 0, "int8": 1, "fp16": 2, "bf16": 2, "fp32": 3}


@dataclass(frozen=True)
class MlxLlmChoice:
    """The precision the MLX LLM runs in and why: ``why`` is ``reference`` (fp32 by default), ``low_memory``
    (the smallest that passes, on a machine of ``ram_bytes``) or ``named`` (by ``named_by``: the page's
    setting or ``$COSYVOICE_MLX_LLM``; an explicit choice is never refused)."""

    precision: str
    why: str
    named_by: str = ""
    ram_bytes: int | None = None

    @property
    def row(self) -> MlxLlmRow:
        return mlx_llm_row(self.precision)

    def reason(self) -> str:
        """The reason in English (logs, the sidecar); the page words it from the fields."""
        row = self.row
        if self.why == "named":
            verdict = "within" if row.passes else "outside"
            by = "the engine settings" if self.named_by == NAMED_IN_SETTINGS else self.named_by
            return f"MLX LLM {self.precision}: named by {by} ({verdict} the gate: {row.measured})"
        if self.why == "low_memory":
            if row.agreement is None:
                return f"MLX LLM {self.precision}: no smaller precision passes the gate ({refusals()})"
            return f"MLX LLM {self.precision}: the smallest precision within the gate ({row.measured})"
        return f"MLX LLM {self.precision}: the reference precision"

    def as_dict(self) -> dict:
        """Plain data for the status message (the page is torch- and mlx-free)."""
        row = self.row
        return {
            "precision": self.precision,
            "why": self.why,
            "named_by": self.named_by,
            "ram_bytes": self.ram_bytes,
            "passes": row.passes,
            "agreement": row.agreement,
        }


def mlx_llm_row(choice: str) -> MlxLlmRow:
    for row in MLX_LLM_GATE:
        if row.choice == choice:
            return row
    raise KeyError(f"the MLX gate has no row for the LLM in {choice}")


def group_size(choice: str) -> int:
    """The group size a quantised precision runs with: its row's, chosen by measurement."""
    size = mlx_llm_row(choice).group_size
    if not size:
        raise KeyError(f"the MLX gate's {choice} row is not a quantised one")
    return size


def refusal(choice: str) -> str:
    """Why ``auto`` and the page's menu never pick ``choice`` ("" when the gate passes it), with its figure."""
    row = mlx_llm_row(choice)
    return "" if row.passes else f"{choice} is outside the gate: {row.measured}"


def refusals() -> str:
    """Every refused row's reason, for the low-memory mode's note when none smaller than fp32 passes."""
    return "; ".join(reason for reason in map(refusal, MLX_LLM_BY_SIZE) if reason)


def offered() -> tuple[str, ...]:
    """What the page's menu offers: ``auto`` and each precision that passes the gate (largest first)."""
    return (AUTO, *(name for name in reversed(MLX_LLM_BY_SIZE) if mlx_llm_row(name).passes))


def choose_mlx_llm(low_memory: bool, requested: str | None = None, ram_bytes: int | None = None) -> MlxLlmChoice:
    """The MLX LLM's precision: ``requested`` (the page's setting; ``auto``/None: none), else
    ``$COSYVOICE_MLX_LLM``, else the gate's (:func:`gate_choice`). A name outside the table is left to
    ``mlx.llm_precision.llm_precision`` to refuse."""
    name = (requested or "").strip().lower()
    if name and name != AUTO:
        return MlxLlmChoice(name, "named", NAMED_IN_SETTINGS, ram_bytes)
    if named := (os.environ.get(LLM_PRECISION_ENV) or "").strip().lower():
        return MlxLlmChoice(named, "named", LLM_PRECISION_ENV, ram_bytes)
    return gate_choice(low_memory, ram_bytes)


def gate_choice(low_memory: bool, ram_bytes: int | None = None) -> MlxLlmChoice:
    """fp32, or in the low-memory mode the best precision that passes the gate: the smallest weights, and of
    two as small the higher agreement (fp32 when no smaller one passes)."""
    if not low_memory:
        return MlxLlmChoice("fp32", "reference", ram_bytes=ram_bytes)
    passing = [row for row in MLX_LLM_GATE if row.passes]
    best = min(passing, key=lambda row: (_SIZE_RANK[row.choice], -(row.agreement or 1.0)))
    return MlxLlmChoice(best.choice, "low_memory", ram_bytes=ram_bytes)
