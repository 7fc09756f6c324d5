"""The three networks of CosyVoice2 or 3 on MLX, built from a model folder (or at full size with random weights).

:class:`MlxNetworks` stands where :class:`cosyvoice_mac.pipeline.loading.Networks` stands, so the
pipeline runs it unchanged: each network takes and returns PyTorch CPU tensors. The LLM's precision
(``mlx.llm_precision``: 16-bit, or its transformer layers quantized to 8 or 4 bits) is evaluated at load
and cached as it runs (``mlx.llm_weights``). The low-memory mode keeps the LLM's text table off MLX's
arrays (a memory map of the cached weights), stores the flow's transformer blocks in fp16 (its token front
end's ``flow.STORED_IN_HALF`` rule; float32 arithmetic) and decodes the vocoder in smaller windows; MLX's memory and
cache limits come from the machine (``mlx.memory``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import torch
from mlx.utils import tree_flatten, tree_map_with_path

from cosyvoice_mac.mlx.convert import default_cache_dir
from cosyvoice_mac.mlx.flow import STORED_IN_HALF, MlxFlow, store_in_half
from cosyvoice_mac.mlx.hift import LOW_MEMORY_CONV_WINDOW, MlxHiFT
from cosyvoice_mac.mlx.llm_gate import MlxLlmChoice
from cosyvoice_mac.mlx.llm_precision import (  # noqa: F401 (re-exported: the bench and tests name them here)
    LLM_PRECISION_ENV,
    LLM_PRECISIONS,
    apply_llm_precision,
    cast_evaluated,
    llm_precision,
    quantize_llm,
    read_dtype,
)
from cosyvoice_mac.mlx.llm_weights import keep_table_on_host, load_llm
from cosyvoice_mac.mlx.memory import MlxMemoryLimits, apply_memory_limits, release_cache
from cosyvoice_mac.mlx.speech_lm import MlxSpeechLM
from cosyvoice_mac.models.flow import FlowConfig
from cosyvoice_mac.models.flow.dit import ROPE_BASE
from cosyvoice_mac.models.llm import Qwen2Config, SpeechLMConfig
from cosyvoice_mac.models.vocoder import HiFTConfig


class PipelineFlow:
    """The MLX flow as the pipeline sees a flow: ``config``, ``inference``, ``build_prefix``,
    ``first_chunk_recording_prefix`` and a ``parameters()`` whose first item tells the device and dtype of the
    tensors it takes (CPU, float32)."""

    def __init__(self, flow: MlxFlow):
        self.mlx = flow
        self.config = flow.config
        self.inference = flow.inference
        self.build_prefix = flow.build_prefix
        self.first_chunk_recording_prefix = flow.first_chunk_recording_prefix

    def parameters(self):
        yield torch.empty(0, dtype=torch.float32)


@dataclass
class MlxNetworks:
    """The three networks of one model on MLX (``llm`` quantized or not, ``flow``, ``hift``)."""

    llm: MlxSpeechLM
    flow: PipelineFlow
    hift: MlxHiFT
    llm_precision: str = "fp32"
    memory_limits: MlxMemoryLimits | None = None  # what MLX may use on this machine (None: MLX's defaults)
    llm_choice: MlxLlmChoice | None = None  # why this precision (named, or the gate's), for the status panel
    flow_storage: str = "float32"  # "float16" in the low-memory mode: the DiT blocks (it computes in float32)

    def to(self, device) -> "MlxNetworks":
        """MLX keeps its arrays on its own device (the GPU on a Mac); a PyTorch move does not apply."""
        return self

    def _modules(self) -> dict[str, nn.Module]:
        return {"llm": self.llm, "flow": self.flow.mlx, "hift": self.hift}

    def parameter_count(self) -> dict[str, int]:
        return {name: sum(a.size for _, a in tree_flatten(m.parameters())) for name, m in self._modules().items()}

    def parameter_bytes(self) -> dict[str, int]:
        return {name: sum(a.nbytes for _, a in tree_flatten(m.parameters())) for name, m in self._modules().items()}


def randomize(module: nn.Module, seed: int) -> None:
    """Seeded random weights for benchmarks: matrices N(0, 1/fan_in), biases 0, gains and Snake alpha 1,
    the DiT's rotary frequencies as the model defines them."""
    key = [mx.random.key(seed)]

    def value(path: str, array: mx.array) -> mx.array:
        if path.endswith("inv_freq"):
            return 1.0 / (ROPE_BASE ** (mx.arange(0, 2 * array.shape[0], 2).astype(mx.float32) / (2 * array.shape[0])))
        if array.ndim == 1:
            return mx.zeros_like(array) if path.endswith("bias") else mx.ones_like(array)
        key[0], draw = mx.random.split(key[0])
        fan_in = int(np.prod(array.shape[1:]))
        return mx.random.normal(array.shape, dtype=array.dtype, key=draw) * (fan_in**-0.5)

    module.update(tree_map_with_path(value, module.parameters()))
    mx.eval(module.parameters())


def build_mlx_networks(
    config: dict,
    qwen: Qwen2Config,
    *,
    folder=None,
    random_weights: bool = False,
    seed: int = 0,
    precision: str | None = None,
    low_memory: bool = False,
    cache_dir: Path | None | str = "default",
) -> MlxNetworks:
    """MLX networks from plain-data ``config`` and ``folder``'s checkpoints (or seeded random weights)."""
    if not random_weights and folder is None:
        raise ValueError("a model folder is needed unless random_weights=True is asked for")
    cache = default_cache_dir() if cache_dir == "default" else cache_dir
    limits = apply_memory_limits(low_memory)
    chosen = llm_precision(precision)
    llm_config = SpeechLMConfig.from_yaml(config["llm"], qwen)
    flow_config, hift_config = FlowConfig.from_yaml(config["flow"]), HiFTConfig.from_yaml(config["hift"])
    flow_half = mx.float16 if low_memory else None  # the flow's blocks stored in fp16, computing in float32
    half_keys = STORED_IN_HALF[flow_config.front]  # which blocks: its token front end's rule
    if random_weights:
        llm, flow, hift = MlxSpeechLM(llm_config), MlxFlow(flow_config), MlxHiFT(hift_config)
        for index, module in enumerate((llm, flow, hift)):
            randomize(module, seed + index)
        llm = apply_llm_precision(llm, chosen)
        if low_memory:
            keep_table_on_host(llm)
        if flow_half is not None:
            store_in_half(flow, half_keys, flow_half)
    else:
        llm_weights = folder.file(folder.llm_file)  # llm.rl.pt where asked for, as the status and sidecar say
        # Cached as it runs (quantised once); read in 16 bits unless fp32: the fp32 LLM never exists whole.
        llm = load_llm(llm_weights, llm_config, chosen, cache_dir=cache, host_table=low_memory)
        flow = MlxFlow.from_checkpoint(
            flow_config, folder.file("flow.pt"), dtype=flow_half, dtype_keys=half_keys, cache_dir=cache
        )
        hift = MlxHiFT.from_checkpoint(hift_config, folder.file("hift.pt"), cache_dir=cache)
    if low_memory:
        hift.conv_limit = LOW_MEMORY_CONV_WINDOW
    release_cache()  # the conversion's freed buffers
    return MlxNetworks(
        llm=llm,
        flow=PipelineFlow(flow),
        hift=hift,
        llm_precision=chosen,
        memory_limits=limits,
        flow_storage="float16" if low_memory else "float32",
    )
