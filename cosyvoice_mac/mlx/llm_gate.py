"""The quality gate's verdicts on the MLX LLM's precisions, and the one rule that picks among them.

Torch-free and mlx-free, so the page reads the same table the worker runs by: its menu offers the rows
that pass, and the status panel says which one runs and why. The rule is the PyTorch gate's
(``cosyvoice_mac.pipeline.gate``): top-25 agreement with fp32 of at least 95 %, on the golden vectors
(16-bit rows: the tiny golden LLM cannot be quantized, its layers are 8 wide) and on the full-size LLM
with random weights (``bench/mlx_quantization.py``, every row). MLX computes in its weights' dtype, so
fp16/bf16 are 16-bit arithmetic; int8/int4 quantize the transformer's Linear layers only (group size 64,
the best measured) and compute in float32.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cosyvoice_mac.settings import setting

LLM_PRECISION_ENV = setting("mlx_llm").env  # fp32 (default) | fp16 | bf16 | int8 | int4
AUTO = "auto"
NAMED_IN_SETTINGS = "settings"  # MlxLlmChoice.named_by for the page's menu (else the variable's name)
MLX_GATE_TEST = "tests/test_mlx_quantize.py::test_mlx_gate_rows_match_their_measurement"


@dataclass(frozen=True)
class MlxLlmRow:
    """One verdict: the LLM in ``choice`` passes or not; ``full_size`` is its measured top-25 agreement with
    fp32 on the full-size LLM (None for the reference itself); ``measured`` says where the figures come from."""

    choice: str
    passes: bool
    full_size: float | None
    measured: str
    test: str
    stage: str = "llm"
    devices: tuple[str, ...] = ("mlx",)


MLX_LLM_GATE: tuple[MlxLlmRow, ...] = (
    MlxLlmRow("fp32", True, None, "the reference precision (MLX parity)", "tests/test_parity_mlx.py"),
    MlxLlmRow("fp16", True, 0.995, "16-bit arithmetic: 99.5 % at full size (golden: 99.8 %)", MLX_GATE_TEST),
    MlxLlmRow("bf16", False, None, "bf16 arithmetic: below fp16 (golden: 98.7 %)", MLX_GATE_TEST),
    MlxLlmRow("int8", True, 0.955, "group 64: 95.5 % at full size, 98.0 % 128-wide", MLX_GATE_TEST),
    MlxLlmRow("int4", False, 0.412, "transformer layers only, group 64: 41.2 % at full size", MLX_GATE_TEST),
)
MLX_LLM_BY_SIZE = ("int4", "int8", "fp16", "bf16", "fp32")  # smallest weights first


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
            "full_size": row.full_size,
        }


def mlx_llm_row(choice: str) -> MlxLlmRow:
    for row in MLX_LLM_GATE:
        if row.choice == choice:
            return row
    raise KeyError(f"the MLX gate has no row for the LLM in {choice}")


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
    """fp32, or in the low-memory mode the smallest precision that passes the gate."""
    if not low_memory:
        return MlxLlmChoice("fp32", "reference", ram_bytes=ram_bytes)
    smallest = next(name for name in MLX_LLM_BY_SIZE if mlx_llm_row(name).passes)
    return MlxLlmChoice(smallest, "low_memory", ram_bytes=ram_bytes)
