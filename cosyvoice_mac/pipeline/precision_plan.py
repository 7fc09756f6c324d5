"""Which dtype each stage runs in, and why: explicit choices first, then the measured ``auto`` pick.

* An explicit choice always wins and is never checked against the gate: ``llm_dtype`` (or the
  global ``dtype``, or ``$COSYVOICE_DTYPE``: the global dtype means the LLM) and ``flow_dtype``.
  The flow is never halved by the global dtype; it runs in float32 unless its dtype is named or
  ``auto`` picked a dtype the gate allows for it.
* ``precision="auto"`` (the default): each stage not named runs in the fastest candidate the gate
  allows on this device (:mod:`cosyvoice_mac.pipeline.gate`), by the probe's timings
  (:mod:`cosyvoice_mac.pipeline.probe`). A reduced precision must be ``MIN_GAIN`` times faster than
  float32 to be picked: its small error buys nothing otherwise.
* ``precision="float32"``: every stage not named runs in float32 (exact parity, no probe).
  ``$COSYVOICE_PRECISION`` sets the default (the test suite runs in float32 unless a test asks).
* Low-memory mode (LLM not named): the smallest LLM weights the gate allows (fp16 today).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from cosyvoice_mac.device import DTYPE_ENV, DeviceError
from cosyvoice_mac.pipeline import gate
from cosyvoice_mac.pipeline.precision import INT8
from cosyvoice_mac.settings import choices, setting

PRECISIONS = choices("precision")
PRECISION_ENV = setting("precision").env  # the default for ``precision``: auto unless set
MIN_GAIN = 1.05
LOW_MEMORY_LLM_ORDER = (INT8, "float16", "bfloat16")  # smallest weights first


@dataclass(frozen=True)
class StagePick:
    """One stage's dtype (a gate choice name), how it was chosen (explicit, auto, fixed, low-memory) and why."""

    stage: str
    choice: str
    source: str
    reason: str


@dataclass
class PrecisionPlan:
    """Owns the per-stage picks of one model load and the probe timings they came from."""

    llm: StagePick
    flow: StagePick
    vocoder: StagePick
    precision: str = "auto"
    timings: dict = field(default_factory=dict)
    from_cache: bool | None = None

    @property
    def llm_dtype(self) -> torch.dtype | str:
        return gate.as_dtype(self.llm.choice)

    @property
    def flow_dtype(self) -> torch.dtype:
        return gate.as_dtype(self.flow.choice)

    def picks(self) -> tuple[StagePick, ...]:
        return (self.llm, self.flow, self.vocoder)

    def summary(self) -> str:
        """One line per stage, e.g. ``flow bfloat16: 2.1x faster than float32 here, within the gate``."""
        return "; ".join(pick.reason for pick in self.picks())

    def as_dict(self) -> dict:
        """For the status panel, the sidecar and the benchmark."""
        return {
            "precision": self.precision,
            "probe_cached": self.from_cache,
            "timings": self.timings,
            **{
                pick.stage: {"dtype": pick.choice, "source": pick.source, "reason": pick.reason}
                for pick in self.picks()
            },
        }


def auto_pick(stage: str, timings: dict, device_type: str) -> StagePick:
    """The fastest candidate the gate allows on ``device_type`` by ``timings`` (seconds, or why it cannot run).

    float32 stays unless a reduced precision is ``MIN_GAIN`` times faster.
    """
    measured = {c: s for c, s in timings.items() if isinstance(s, (int, float)) and s > 0}
    candidates = gate.CANDIDATES[stage]
    allowed = [c for c in candidates if c in measured and gate.allowed(stage, c, device_type)]
    base = measured.get("float32")
    if not allowed:
        return StagePick(stage, "float32", "auto", f"{stage} float32: no other candidate is allowed and runs here")
    best = min(allowed, key=measured.get)
    if best != "float32" and (base is None or base / measured[best] < MIN_GAIN):
        best = "float32"
    faster = [
        f"{c} {base / measured[c]:.1f}x, {gate.refusal(stage, c, device_type)}"
        for c in candidates
        if c in measured
        and base
        and c != best
        and not gate.allowed(stage, c, device_type)
        and measured[c] < measured[best]
    ]
    if best == "float32":
        reason = f"{stage} float32: no candidate the gate allows is {MIN_GAIN:.2f}x faster here"
    elif base:
        reason = f"{stage} {best}: {base / measured[best]:.1f}x faster than float32 here, within the gate"
    else:
        reason = f"{stage} {best}: the fastest candidate within the gate that runs here"
    return StagePick(stage, best, "auto", reason + (f" (faster but refused: {'; '.join(faster)})" if faster else ""))


def plan_precision(
    device: torch.device,
    version: str,
    config: dict,
    qwen,
    *,
    precision: str | None = None,
    dtype: str | torch.dtype | None = None,
    llm_dtype: str | torch.dtype | None = None,
    flow_dtype: str | torch.dtype | None = None,
    low_memory: bool = False,
    reprobe: bool = False,
    cache_path: Path | None = None,
    timings: dict | None = None,
) -> PrecisionPlan:
    """The per-stage dtypes of one model load (see the module docstring for the rules).

    ``timings`` (stage -> choice -> seconds) skips the probe: figures measured elsewhere (bench/precision_probe.py).
    """
    precision = (precision or os.environ.get(PRECISION_ENV) or "auto").strip().lower()
    if precision not in PRECISIONS:
        raise DeviceError(f"precision {precision!r} is not known; choose one of {', '.join(PRECISIONS)}")
    named_llm = (
        llm_dtype if llm_dtype is not None else dtype if dtype is not None else os.environ.get(DTYPE_ENV) or None
    )
    explicit = {"llm": named_llm, "flow": flow_dtype}
    picks: dict[str, StagePick] = {}
    for stage, value in explicit.items():
        if value is not None:
            name = gate.choice_name(gate.parse_choice(value, stage))
            picks[stage] = StagePick(stage, name, "explicit", f"{stage} {name}: asked for")
    picks["vocoder"] = StagePick("vocoder", "float32", "fixed", "vocoder float32: HiFT runs only in float32")
    from_cache = None
    needs_probe = precision == "auto" and any(stage not in picks for stage in ("llm", "flow"))
    if needs_probe and timings is None:
        from cosyvoice_mac.pipeline.probe import cached_timings

        timings, from_cache = cached_timings(device, version, config, qwen, reprobe=reprobe, cache_path=cache_path)
    timings = timings or {}
    if "llm" not in picks and low_memory:
        order = tuple(c for c in LOW_MEMORY_LLM_ORDER if gate.allowed("llm", c, device.type))
        picks["llm"] = StagePick(
            "llm", order[0], "low-memory", f"llm {order[0]}: low-memory mode, the smallest LLM weights the gate allows"
        )
    for stage in ("llm", "flow"):
        if stage in picks:
            continue
        if precision == "auto":
            picks[stage] = auto_pick(stage, timings.get(stage, {}), device.type)
        else:
            picks[stage] = StagePick(stage, "float32", "fixed", f"{stage} float32: precision float32 asked for")
    return PrecisionPlan(
        llm=picks["llm"],
        flow=picks["flow"],
        vocoder=picks["vocoder"],
        precision=precision,
        timings=timings,
        from_cache=from_cache,
    )
