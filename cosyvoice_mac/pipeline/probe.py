"""The precision probe: how long each stage's dominant operation takes here, in each candidate dtype.

Which dtype is fastest depends on the processor (bf16 matrix units, fp16 conversions, memory
bandwidth), so it is measured, once per machine, in a few seconds:

* LLM: one decoding step's matrix-vector products at the Qwen2 config's real shapes (q/k/v, o,
  gate/up, down; the bytes are the same however they are fused), stored as each candidate stores
  them (:mod:`cosyvoice_mac.pipeline.precision`). On a CPU ``LLM_LAYERS`` layers, so the weights
  do not fit in the caches, as in the real model.
* Flow: one estimator call (classifier-free batch of two) over ``FLOW_FRAMES`` mel frames at the
  real block widths; on a CPU one repeated block instead of all of them.

On a GPU one layer's products, or one flow block, take as long as launching their kernels in
every dtype, so a shallow probe hides what 16 bits gain (it once found a bf16 flow under 1.05x on
an H200 whose whole bf16 flow was 1.3x faster). There the probe runs at the models' real depth, as
the stages really run: on CUDA with graphs on, the LLM's step products and the whole estimator call
replayed as CUDA graphs (as the decoder replays its steps and the flow its length buckets: eagerly
both would time the host's launches, the same in every dtype); else eagerly. Weights are drawn on
the device itself, so this stays within a second or two.

The timings are cached in ``<user cache>/precision-probe.json`` under a key made of the device,
the torch version, the CPU's flags and the model version; ``reprobe`` measures again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

from cosyvoice_mac.device import cuda_graphs_on, synchronize
from cosyvoice_mac.paths import atomic_write, user_cache_dir
from cosyvoice_mac.pipeline.gate import CANDIDATES, as_dtype
from cosyvoice_mac.pipeline.precision import (
    INT8,
    store_weights_in_half,
    store_weights_in_int8,
)
from cosyvoice_mac.stored import Field, read_json, typed_records

PROBE_FORMAT = 4  # bump when what is timed changes: older cached timings are then ignored
CACHE_FILE = "precision-probe.json"
LLM_LAYERS = 4
FLOW_FRAMES = 2 * (80 + 125)  # a 3 s prompt and a 5 s sentence, 2 mel frames a token
REPEATS = 5
FLOW_REPEATS = 1  # after the warm-up call: a whole block call is long enough to time once (a CPU)
GPU_FLOW_REPEATS = 3  # a whole estimator call on a GPU is tens of milliseconds: take the best of three
GRAPH_REPLAYS = 20  # LLM step graphs replayed per timing (one replay is a fraction of a millisecond)
FLOW_GRAPH_REPLAYS = 5  # estimator-call graphs replayed per timing (one replay is a few milliseconds)
GPU_ROUNDS = 2  # turns per candidate on a GPU (the first candidate once ran at a clock still rising from idle)
GIVE_UP_FACTOR = 3.0  # a candidate this much slower than float32 after one call is not timed further
Timings = dict[str, dict[str, float | str]]  # stage -> choice -> seconds, or why it could not run


def best_seconds(device: torch.device, function, repeats: int = REPEATS, clock=time.perf_counter) -> float:
    """The fastest of ``repeats`` calls of ``function`` after one warm-up call, by ``clock``."""
    function()
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        started = clock()
        function()
        synchronize(device)
        best = min(best, clock() - started)
    return best


def probe_clock(device: torch.device):
    """On the CPU this process's CPU time: what a candidate costs, even while other programs share the cores
    (wall time then measures them too). Elsewhere wall time, after the device has finished."""
    return time.process_time if device.type == "cpu" else time.perf_counter


# machine key ----------------------------------------------------------------------------------
def cpu_flags() -> str:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``, macOS ``sysctl``), or the processor name."""
    if sys.platform == "linux":
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
                for line in cpuinfo:
                    if line.startswith(("flags", "Features")):
                        return " ".join(sorted(line.split(":", 1)[1].split()))
        except OSError:
            pass
    if sys.platform == "darwin":
        try:
            done = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5, check=False
            )
            return done.stdout.strip() or platform.processor()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"cuda {torch.cuda.get_device_name(device)} sm{major}{minor}"
    return f"{device.type} {platform.machine()}"


def cache_key(device: torch.device, version: str, shapes: dict, flags: str | None = None) -> str:
    """Device, torch version, CPU flags, and the model version with a digest of the ``shapes`` timed."""
    flags = cpu_flags() if flags is None else flags
    shape_digest = hashlib.sha256(json.dumps(shapes, sort_keys=True, default=str).encode()).hexdigest()[:8]
    parts = [
        f"format {PROBE_FORMAT}",
        device_name(device),
        f"torch {torch.__version__}",
        f"cpu flags {hashlib.sha256(flags.encode()).hexdigest()[:16]}",
        f"{version} {shape_digest}",
    ]
    return " | ".join(parts)


def timed_shapes(config: dict, qwen) -> dict:
    """What the probe's shapes depend on: the LLM's layer sizes and the flow estimator's config."""
    return {"llm": llm_step_shapes(qwen), "flow": config["flow"]["decoder"]["estimator"]}


CACHE_ENTRY = {"timings": Field(("object",), required=True)}  # one entry of the timings cache, as read back


def default_cache_path() -> Path:
    return user_cache_dir() / CACHE_FILE


def read_cache(path: Path) -> dict:
    """This machine's probed timings by key; an entry without its timings is left out (probed again)."""
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return {}
    entries, _ = typed_records(data, CACHE_ENTRY, f"the probe's timings {path}")
    return entries


def write_cache(path: Path, key: str, timings: Timings, seconds: float) -> None:
    """Add this machine's timings to the cache file (atomically; a failure only costs a probe next time)."""
    entries = read_cache(path)
    entries[key] = {"timings": timings, "probe_s": round(seconds, 2), "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(entries, indent=1).encode("utf-8"))
    except OSError:
        pass


def cached_timings(
    device: torch.device, version: str, config: dict, qwen, *, reprobe: bool = False, cache_path: Path | None = None
) -> tuple[Timings, bool]:
    """(timings, whether they came from the cache): probe on a machine's first use or when asked."""
    path = cache_path or default_cache_path()
    key = cache_key(device, version, timed_shapes(config, qwen))
    entry = None if reprobe else read_cache(path).get(key)
    if isinstance(entry, dict) and isinstance(entry.get("timings"), dict):
        return entry["timings"], True
    started = time.perf_counter()
    timings = probe(device, config, qwen)
    write_cache(path, key, timings, time.perf_counter() - started)
    return timings, False


# timing -----------------------------------------------------------------------------------------
def probe(device: torch.device, config: dict, qwen) -> Timings:
    """Seconds of each stage's dominant operation in each candidate (or why a candidate cannot run)."""
    with torch.inference_mode(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return {"llm": _time_llm_candidates(device, qwen), "flow": _time_flow_candidates(device, config["flow"])}


def at_full_depth(device: torch.device) -> bool:
    """Whether the probe runs the models' real depth here: on GPUs, where a shallow probe times launches."""
    return device.type in ("cuda", "mps")


def llm_step_shapes(qwen) -> list[tuple[int, int]]:
    """(in, out) of one Qwen2 layer's matrix products at decoding."""
    attention = qwen.num_attention_heads * qwen.head_dim
    qkv = attention + 2 * qwen.num_key_value_heads * qwen.head_dim
    hidden, inner = qwen.hidden_size, qwen.intermediate_size
    return [(hidden, qkv), (attention, hidden), (hidden, 2 * inner), (inner, hidden)]


def stored_like_the_llm(layers: nn.Module, choice: str, device: torch.device) -> tuple[nn.Module, torch.dtype]:
    """``layers`` (float32 ``nn.Linear``s) stored as the LLM stores them in ``choice``; returns
    (module, input dtype)."""
    from cosyvoice_mac.pipeline.loading import llm_weights_only_in_half

    dtype = as_dtype(choice)
    if dtype == INT8:
        store_weights_in_int8(layers)
        return layers.to(device), torch.float32
    if llm_weights_only_in_half(device, dtype):
        store_weights_in_half(layers, dtype)
        return layers.to(device), torch.float32
    return layers.to(device=device, dtype=dtype), dtype


def as_run_here(device: torch.device, work, replays: int):
    """``work`` as the stages run it here: replayed as a CUDA graph ``replays`` times on CUDA with graphs on,
    else called once eagerly. Returns (callable, calls of ``work`` per call)."""
    if not cuda_graphs_on(device):
        return work, 1
    work()  # warm-up outside the capture (kernel loading, cuBLAS workspaces)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        work()

    def replayed():
        for _ in range(replays):
            graph.replay()

    return replayed, replays


def llm_step(device: torch.device, layers: nn.Module, rows: list[torch.Tensor]):
    """A callable that runs one step's products (``rows[i]`` through ``layers[i]``) as the decoder would here
    (:func:`as_run_here`). Returns (callable, steps per call)."""
    return as_run_here(device, lambda: [layer(row) for layer, row in zip(layers, rows)], GRAPH_REPLAYS)


def timed_in_turn(device: torch.device, prepare: dict, repeats: int = REPEATS) -> dict[str, float | str]:
    """Best seconds per call of each candidate: ``prepare[choice]()`` gives (callable, steps per call), made afresh
    for each turn. On a GPU every candidate takes ``GPU_ROUNDS`` turns, round-robin (a clock still rising
    from idle, or drifting, then favours none); one ``GIVE_UP_FACTOR`` times slower than float32 takes no more."""
    timings: dict[str, float | str] = {}
    for turn in range(GPU_ROUNDS if at_full_depth(device) else 1):
        for choice, make in prepare.items():
            current, base = timings.get(choice), timings.get("float32")
            if isinstance(current, str) or (turn and isinstance(base, float) and current > GIVE_UP_FACTOR * base):
                continue
            try:
                function, steps = make()
                seconds = best_seconds(device, function, repeats, clock=probe_clock(device)) / steps
            except (RuntimeError, TypeError, NotImplementedError) as error:
                timings[choice] = f"does not run here ({type(error).__name__}: {str(error)[:120]})"
                continue
            timings[choice] = seconds if current is None else min(current, seconds)
    return timings


def _time_llm_candidates(device: torch.device, qwen) -> dict[str, float | str]:
    full = at_full_depth(device)
    shapes = llm_step_shapes(qwen) * (qwen.num_hidden_layers if full else LLM_LAYERS)
    drawn_on = device if full else torch.device("cpu")  # a GPU draws its ~1.4 GB of weights in milliseconds
    weights = [torch.randn(out, inner, device=drawn_on) * inner**-0.5 for inner, out in shapes]

    def prepare(choice: str):
        layers = nn.ModuleList(
            nn.utils.skip_init(nn.Linear, inner, out, bias=False, device=drawn_on) for inner, out in shapes
        )
        for layer, weight in zip(layers, weights):
            layer.weight = nn.Parameter(weight, requires_grad=False)
        stored, dtype = stored_like_the_llm(layers, choice, device)
        return llm_step(device, stored, [torch.randn(1, inner, device=device, dtype=dtype) for inner, _ in shapes])

    return timed_in_turn(device, {choice: lambda choice=choice: prepare(choice) for choice in CANDIDATES["llm"]})


def probe_estimator(flow_node: dict, device: torch.device) -> nn.Module:
    """The flow's estimator at its real widths (random weights, made on ``device``): at full depth on a GPU,
    with one repeated block elsewhere (see :func:`at_full_depth`)."""
    from cosyvoice_mac.models.flow import FlowConfig
    from cosyvoice_mac.models.flow.dit import DiT, DiTConfig
    from cosyvoice_mac.models.flow.unet import CausalConditionalDecoder

    estimator = FlowConfig.from_yaml(flow_node).estimator
    if not at_full_depth(device):
        one_block = {"depth": 1} if isinstance(estimator, DiTConfig) else {"num_mid_blocks": 1}
        estimator = dataclasses.replace(estimator, **one_block)
    with device:  # drawn where it runs: the full-size DiT is 330 M weights
        return DiT(estimator) if isinstance(estimator, DiTConfig) else CausalConditionalDecoder(estimator)


def estimator_inputs(device: torch.device, dtype: torch.dtype, frames: int, batch: int = 2) -> dict:
    """Keyword inputs of one estimator call (random, never zeros: they can time faster than real data):
    ``x, mu, cond (B, 80, T)``, ``mask (B, 1, T)``, ``t (B,)`` float32, ``spks (B, 80)``."""

    def drawn(*shape):
        return torch.randn(*shape, device=device).to(dtype)

    return {
        "x": drawn(batch, 80, frames),
        "mask": torch.ones(batch, 1, frames, device=device, dtype=dtype),
        "mu": drawn(batch, 80, frames),
        "t": torch.full((batch,), 0.5, device=device),
        "spks": drawn(batch, 80),
        "cond": drawn(batch, 80, frames),
        "streaming": False,
    }


def _time_flow_candidates(device: torch.device, flow_node: dict) -> dict[str, float | str]:
    """One estimator call per candidate; a candidate whose matrix product alone is ``GIVE_UP_FACTOR``
    times slower than float32's is not run whole (fp16 on most CPUs: ~15x), its time is scaled."""
    estimator = probe_estimator(flow_node, device).eval()
    biggest = max((m for m in estimator.modules() if isinstance(m, nn.Linear)), key=lambda m: m.weight.numel())
    screen = {
        choice: _product_seconds(device, as_dtype(choice), 2 * FLOW_FRAMES, biggest.weight.shape)
        for choice in CANDIDATES["flow"]
    }

    def ratio(choice: str) -> float:
        return screen[choice] / screen["float32"] if isinstance(screen["float32"], float) else 1.0

    def prepare(choice: str):
        model = estimator.to(device=device, dtype=as_dtype(choice))  # in place: one estimator at a time
        inputs = estimator_inputs(device, as_dtype(choice), FLOW_FRAMES)
        return as_run_here(device, lambda: model(**inputs), FLOW_GRAPH_REPLAYS)

    whole = [
        c
        for c in CANDIDATES["flow"]
        if not isinstance(screen[c], str) and (c == "float32" or ratio(c) <= GIVE_UP_FACTOR)
    ]
    timed = timed_in_turn(
        device,
        {choice: lambda choice=choice: prepare(choice) for choice in whole},
        GPU_FLOW_REPEATS if at_full_depth(device) else FLOW_REPEATS,
    )
    timings: dict[str, float | str] = {}
    for choice in CANDIDATES["flow"]:
        if isinstance(screen[choice], str):
            timings[choice] = f"does not run here ({screen[choice]})"
        elif choice in timed:
            timings[choice] = timed[choice]
        elif isinstance(timed.get("float32"), float):
            timings[choice] = timed["float32"] * ratio(choice)
    return timings


def _product_seconds(device: torch.device, dtype: torch.dtype, rows: int, shape: torch.Size) -> float | str:
    try:
        weight = torch.randn(*shape).to(device=device, dtype=dtype)
        x = torch.randn(rows, shape[1]).to(device=device, dtype=dtype)
        return best_seconds(device, lambda: torch.nn.functional.linear(x, weight), 2, clock=probe_clock(device))
    except (RuntimeError, TypeError, NotImplementedError) as error:
        return f"{type(error).__name__}: {str(error)[:120]}"
