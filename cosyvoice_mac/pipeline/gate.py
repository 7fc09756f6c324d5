"""The quality gate: which precision each stage may run in, decided by tests, never at run time.

This table is the one place the verdicts live. Each row names the test that justifies it
(``tests/test_precision_gate.py`` re-measures every row and fails when a verdict no longer holds):

* LLM: a reduced precision passes when its top-25 candidate sets agree with float32 on at least
  95 % of the recorded steps (teacher-forced and decoded) of every golden vector.
* Flow: passes when the mel stays finite and within relative error 1e-2 of float32, on every
  golden vector and on a full-size random-weight run.
* Vocoder: HiFT refuses 16-bit input (its Snake activations and phase need float32), so only
  float32 is a candidate.

``devices`` narrows a passing row to the device types where it may be picked by ``auto``; an
explicit choice (``--llm-dtype``, ``--flow-dtype``) is never refused by the gate.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cosyvoice_mac.device import DeviceError, select_dtype

# The MLX LLM's rows live with the MLX engine, torch-free (the page reads them): re-exported here.
from cosyvoice_mac.mlx.llm_gate import MIN_TOP_K_AGREEMENT, MLX_LLM_BY_SIZE, MLX_LLM_GATE, mlx_llm_row  # noqa: F401
from cosyvoice_mac.pipeline.precision import INT8

STAGES = ("llm", "flow", "vocoder")
EVERY_DEVICE = ("cpu", "cuda", "mps")
TOP_K = 25
MAX_RELATIVE_ERROR = 1e-2
GATE_TESTS = "tests/test_precision_gate.py"


@dataclass(frozen=True)
class GateRow:
    """One verdict: ``stage`` in ``choice`` passes (on ``devices``) or not, the figure measured, and its test."""

    stage: str
    choice: str
    passes: bool
    measured: str
    test: str
    devices: tuple[str, ...] = EVERY_DEVICE
    why_not_here: str = ""  # said where a passing row is not used on a device type


GATE: tuple[GateRow, ...] = (
    GateRow("llm", "float32", True, "the reference precision (parity)", "tests/test_parity.py"),
    GateRow(
        "llm",
        "float16",
        True,
        "top-25 sets agree on 98.7 % (v3) / 98.6 % (v2) of steps",
        f"{GATE_TESTS}::test_llm_row_matches_its_measurement",
    ),
    GateRow(
        "llm",
        "bfloat16",
        False,
        "top-25 sets agree on 86.5 % (v3) / 86.5 % (v2) of steps",
        f"{GATE_TESTS}::test_llm_row_matches_its_measurement",
    ),
    GateRow(
        "llm",
        INT8,
        False,
        "per-channel int8 (weights and text table): top-25 sets agree on 57 % (v3) / 75 % (v2) of steps",
        f"{GATE_TESTS}::test_llm_row_matches_its_measurement",
    ),
    GateRow("flow", "float32", True, "the reference precision (parity)", "tests/test_parity.py"),
    GateRow(
        "flow",
        "float16",
        True,
        "mel within 4.8e-4 (v3) / 6.5e-4 (v2) of float32; finite at full size",
        f"{GATE_TESTS}::test_flow_row_matches_its_measurement",
        devices=("cpu",),
        why_not_here="fp16 DiTs give NaN on GPUs for upstream users; name it with --flow-dtype to try",
    ),
    GateRow(
        "flow",
        "bfloat16",
        True,
        "mel within 3.9e-3 (v3) / 6.1e-3 (v2) of float32; finite at full size",
        f"{GATE_TESTS}::test_flow_row_matches_its_measurement",
    ),
    GateRow("vocoder", "float32", True, "the reference precision (parity)", "tests/test_parity.py"),
    GateRow(
        "vocoder",
        "float16",
        False,
        "HiFT refuses 16-bit mels (Snake and phase need float32)",
        f"{GATE_TESTS}::test_vocoder_runs_only_in_float32",
    ),
    GateRow(
        "vocoder",
        "bfloat16",
        False,
        "HiFT refuses 16-bit mels (Snake and phase need float32)",
        f"{GATE_TESTS}::test_vocoder_runs_only_in_float32",
    ),
)

CANDIDATES = {stage: tuple(row.choice for row in GATE if row.stage == stage) for stage in STAGES}


def gate_row(stage: str, choice: str) -> GateRow:
    for row in GATE:
        if row.stage == stage and row.choice == choice:
            return row
    raise KeyError(f"the gate has no row for {stage} {choice}")


def allowed(stage: str, choice: str, device_type: str) -> bool:
    """Whether ``auto`` may run ``stage`` in ``choice`` on ``device_type``."""
    row = gate_row(stage, choice)
    return row.passes and device_type in row.devices


def refusal(stage: str, choice: str, device_type: str) -> str:
    """Why ``auto`` may not pick ``choice`` for ``stage`` here ("" when it may)."""
    row = gate_row(stage, choice)
    if not row.passes:
        return f"outside the gate ({row.measured})"
    return "" if device_type in row.devices else f"not on {device_type} ({row.why_not_here})"


def choice_name(value: torch.dtype | str) -> str:
    """``torch.float16`` or ``"fp16"`` -> ``"float16"``; ``"int8"`` stays."""
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return INT8 if value.strip().lower() == INT8 else choice_name(select_dtype(value))


def parse_choice(value: torch.dtype | str, stage: str) -> torch.dtype | str:
    """A user's dtype for ``stage`` -> a torch dtype, or ``"int8"`` (LLM only); a clear error otherwise."""
    if isinstance(value, str) and value.strip().lower() == INT8:
        if stage != "llm":
            raise DeviceError(f"int8 is a choice for the LLM only; the {stage} runs in float32, float16 or bfloat16")
        return INT8
    return value if isinstance(value, torch.dtype) else select_dtype(value)


def as_dtype(choice: str) -> torch.dtype | str:
    """A gate choice name -> what ``build_networks`` takes (a torch dtype, or ``"int8"``)."""
    return INT8 if choice == INT8 else getattr(torch, choice)
