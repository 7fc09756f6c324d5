"""What one decoding step of the speech LM costs: operations, kernels, GPU-busy and wall time per token.

Used by :mod:`cosyvoice_mac.bench.measure` (a ``decode`` block per configuration) and ``bench/decode_step.py``
(the lean-step benchmark, which also runs these on an older tree for before/after figures, so
only the speech LM's long-standing public methods are used here).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time

import torch

from cosyvoice_mac.bench.opcount import count_decode_steps, prompt_embeddings
from cosyvoice_mac.device import synchronize

KERNEL_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def _device(lm) -> torch.device:
    return lm.speech_embedding.weight.device


def _forced_steps(lm, decoder, steps: int) -> None:
    """``steps`` tokens through the sampler with every stop id masked (the bench's forced decoding)."""
    sampler = lm.make_sampler(seed=0)
    stop_ids = sorted(lm.stop_ids)
    history: list[int] = []
    for _ in range(steps):
        history.append(sampler(decoder.logp, history, stop_ids))
        decoder.feed(history[-1])


@torch.inference_mode()
def seconds_per_token(lm, embeds: torch.Tensor, steps: int = 100, repeats: int = 3) -> dict:
    """Wall and CPU seconds per decoded token (sampler included, prefill excluded); medians of ``repeats``."""
    device = _device(lm)
    embeds = embeds.to(device=device, dtype=lm.speech_embedding.weight.dtype)
    wall, cpu = [], []
    for _ in range(repeats + 1):  # the first is a warm-up (kernels, graph captures)
        decoder = lm.start_decoding(embeds, steps + 1)
        synchronize(device)
        started, started_cpu = time.perf_counter(), time.process_time()
        _forced_steps(lm, decoder, steps)
        synchronize(device)
        wall.append((time.perf_counter() - started) / steps)
        cpu.append((time.process_time() - started_cpu) / steps)
    return {
        "wall_ms": 1e3 * statistics.median(wall[1:]),
        "cpu_ms": 1e3 * statistics.median(cpu[1:]),
        "cpu_ms_best": 1e3 * min(cpu[1:]),
        "wall_ms_runs": [1e3 * w for w in wall[1:]],
        "steps": steps,
    }


def dispatch_ops_per_token(lm, embeds: torch.Tensor | None = None, steps: int = 20) -> dict:
    """ATen operations per token, by scope (work / views), from :class:`cosyvoice_mac.bench.opcount.OpCounter`."""
    counter = count_decode_steps(lm, steps=steps, embeds=embeds)
    report = counter.report(divide_by=steps)
    layers = len(lm.backbone.layers)
    if "layer" in report:
        report["per_layer_work_by_op"] = {op: n / layers for op, n in report["layer"]["work_by_op"].items()}
    return report


@torch.inference_mode()
def cuda_kernels_per_token(lm, embeds: torch.Tensor, steps: int = 60) -> dict:
    """``torch.profiler`` over ``steps`` decoding steps: kernels, GPU-busy and wall time per token."""
    device = _device(lm)
    embeds = embeds.to(device=device, dtype=lm.speech_embedding.weight.dtype)
    warm = lm.start_decoding(embeds, steps + 1)
    _forced_steps(lm, warm, steps)  # every length bucket captured before the profile
    decoder = lm.start_decoding(embeds, steps + 1)
    profiled = cuda_profile(device, lambda: _forced_steps(lm, decoder, steps))
    return {
        "kernels_per_token": profiled["kernels"] / steps,
        "device_ops_per_token": profiled["device_ops"] / steps,
        "gpu_busy_ms_per_token": profiled["gpu_busy_ms"] / steps,
        "wall_ms_per_token": profiled["wall_ms"] / steps,
        "steps": steps,
        "graph_launches_per_token": profiled["graph_launches"] / steps,
    }


def cuda_profile(device: torch.device, function, kernel_events: list | None = None) -> dict:
    """``torch.profiler`` over one call of ``function``: CUDA kernels (and copies, sets) it ran, the
    milliseconds the GPU was busy with them, the wall milliseconds, and the graph launches.
    ``kernel_events`` (a list) receives the trace's kernel events (name, ``dur`` in microseconds)."""
    from torch.profiler import ProfilerActivity, profile

    synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        started = time.perf_counter()
        function()
        synchronize(device)
        wall = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as handle:
            events = json.load(handle).get("traceEvents", [])
    device_events = [e for e in events if e.get("cat") in KERNEL_CATEGORIES and "dur" in e]
    if kernel_events is not None:
        kernel_events.extend(e for e in device_events if e["cat"] == "kernel")
    return {
        "kernels": sum(1 for e in device_events if e["cat"] == "kernel"),
        "device_ops": len(device_events),
        "gpu_busy_ms": _union_us(device_events) / 1e3,
        "wall_ms": 1e3 * wall,
        "graph_launches": sum(1 for e in events if e.get("name") == "cudaGraphLaunch"),
    }


def _union_us(events: list[dict]) -> float:
    """Microseconds during which at least one of ``events`` ran (overlaps counted once)."""
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events)
    busy, end = 0.0, float("-inf")
    for start, stop in spans:
        if stop <= end:
            continue
        busy += stop - max(start, end)
        end = stop
    return busy


def decode_report(lm, steps: int = 60) -> dict:
    """The ``decode`` block of a benchmark report: ops per token everywhere, kernels on CUDA."""
    embeds = prompt_embeddings(lm)
    runner = getattr(lm, "decoding", None)
    report = {"mode": getattr(runner, "mode", "eager"), "dispatch": dispatch_ops_per_token(lm, embeds)["total"]}
    if _device(lm).type == "cuda":
        report["cuda"] = cuda_kernels_per_token(lm, embeds, steps)
    if runner is not None:
        report.update(runner.report())
    return report
