"""The floor of each stage on this machine: how fast it could possibly be, measured, not assumed.

* LLM: decoding one token reads every weight matrix (and the KV cache) once, so a token takes at
  least ``bytes read / memory bandwidth``. Bandwidth is measured by summing a 512 MiB tensor.
* Flow: ``n_timesteps`` estimator calls on a batch of two (classifier-free guidance), each
  ``~2 x parameters x frames`` FLOPs plus attention; counted by ``torch.utils.flop_counter`` on one
  real call, divided by the measured rate of a large matrix multiply in the flow's dtype.

``x_floor`` = measured / floor: 1.0 is the floor, 2.0 is half as fast as it could be. On a CPU
``cpu_x_floor`` compares the stage's CPU seconds with ``floor x threads`` core-seconds, which
stays meaningful when other processes share the cores (wall time then does not).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from cosyvoice_mac.pipeline.probe import best_seconds, estimator_inputs

BANDWIDTH_BYTES = 512 * 2**20
MATMUL_DIM = 1024
REPEATS = 10


def _attention_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """``Q K^T`` and ``P V`` of one attention call (the CPU flash kernel is missing from torch's table)."""
    batch, heads, queries, depth = query_shape
    keys, value_depth = key_shape[-2], value_shape[-1]
    return 2 * batch * heads * queries * keys * (depth + value_depth)


_EXTRA_FLOPS = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _attention_flops}


@torch.inference_mode()
def memory_bandwidth(device: torch.device) -> float:
    """Bytes per second this process reads from memory (best of a few sums of a 512 MiB tensor)."""
    data = torch.ones(BANDWIDTH_BYTES // 4, device=device)
    return BANDWIDTH_BYTES / best_seconds(device, lambda: data.sum(), REPEATS)


@torch.inference_mode()
def matmul_rate(device: torch.device, dtype: torch.dtype, rows: int) -> float:
    """FLOP/s of a ``(rows, 1024) x (1024, 2048)`` matrix product in ``dtype`` (the flow's shapes)."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(rows, MATMUL_DIM, generator=generator).to(device=device, dtype=dtype)
    w = torch.randn(2 * MATMUL_DIM, MATMUL_DIM, generator=generator).to(device=device, dtype=dtype)
    return 2 * rows * MATMUL_DIM * 2 * MATMUL_DIM / best_seconds(device, lambda: F.linear(a, w), REPEATS)


def llm_bytes_per_token(llm: nn.Module, positions: int) -> int:
    """Bytes one decoding step reads: every parameter except the embedding tables, plus the KV cache."""
    embedding_ids = {id(p) for m in llm.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    tables = [m for m in llm.modules() if type(m).__name__ in ("HalfStoredEmbedding", "Int8Embedding")]
    embedding_ids |= {id(t) for m in tables for t in (*m.parameters(), *m.buffers())}
    tensors = [*llm.parameters(), *llm.buffers()]  # int8 weights and their scales are buffers
    weights = sum(t.numel() * t.element_size() for t in tensors if id(t) not in embedding_ids)
    qwen = llm.config.qwen
    element = llm.backbone.norm.weight.element_size()
    cache = 2 * qwen.num_hidden_layers * qwen.num_key_value_heads * qwen.head_dim * positions * element
    return weights + cache


@torch.inference_mode()
def flow_flops(flow: nn.Module, frames: int) -> int:
    """FLOPs of one whole flow inference over ``frames`` mel frames (all Euler steps, CFG batch 2)."""
    weight = next(flow.decoder.estimator.parameters())  # inputs in the estimator's dtype (bf16 flows too)
    with FlopCounterMode(display=False, custom_mapping=_EXTRA_FLOPS) as counter:
        flow.decoder.estimator(**estimator_inputs(weight.device, weight.dtype, frames))
    return counter.get_total_flops() * flow.decoder.config.n_timesteps


def machine_rates(device: torch.device, dtype: torch.dtype, frames: int, earlier: dict | None = None) -> dict:
    """Memory bandwidth and ``dtype`` matmul rate now, or the ``earlier`` ones where those were higher.

    The benchmark measures in the parent process before a configuration runs and again in the
    child after its timed runs, and keeps the best, so that a busy moment is less likely to pass
    for the machine's capability (and the child's peak memory never includes the probes).
    """
    rates = {"memory_bandwidth": memory_bandwidth(device), "matmul": matmul_rate(device, dtype, rows=2 * frames)}
    return {key: max(value, (earlier or {}).get(key, 0.0)) for key, value in rates.items()}


def floors(model, tokens: int, median: dict, rates: dict | None = None) -> dict:
    """Per stage: the floor in seconds, how it was computed, and measured / floor."""
    llm, flow = model.networks.llm, model.networks.flow
    device = next(flow.parameters()).device
    prompt_tokens = int(median["prompt_tokens"])
    frames = 2 * (prompt_tokens + tokens)
    flow_dtype = next(flow.decoder.estimator.parameters()).dtype
    rates = machine_rates(device, flow_dtype, frames, rates)
    bandwidth = rates["memory_bandwidth"]
    positions = 2 + int(median["text_tokens"]) + prompt_tokens + tokens // 2  # the average over the decode
    per_token = llm_bytes_per_token(llm, positions)
    flops = flow_flops(flow, frames)
    rate = rates["matmul"]
    llm_floor = tokens * per_token / bandwidth
    flow_floor = flops / rate
    threads = torch.get_num_threads() if device.type == "cpu" else None

    def cpu_ratio(stage: str, floor: float):
        # CPU seconds against the floor's core-seconds: what a machine shared with other work still shows
        return median[f"{stage}_cpu_s"] / (floor * threads) if threads else None

    return {
        "memory_bandwidth_gb_s": bandwidth / 1e9,
        "matmul_gflop_s": rate / 1e9,
        "llm": {
            "floor_s": llm_floor,
            "bytes_per_token": per_token,
            "x_floor": median["llm_s"] / llm_floor,
            "cpu_x_floor": cpu_ratio("llm", llm_floor),
            "how": "tokens x bytes read per token / memory bandwidth",
        },
        "flow": {
            "floor_s": flow_floor,
            "flops": flops,
            "x_floor": median["flow_s"] / flow_floor,
            "cpu_x_floor": cpu_ratio("flow", flow_floor),
            "how": f"counted FLOPs ({frames} frames, CFG batch 2, all steps) / matmul rate in {flow_dtype}",
        },
    }
