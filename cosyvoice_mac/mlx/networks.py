"""The three CosyVoice3 networks on MLX, built from a model folder (or at full size with random weights).

:class:`MlxNetworks` stands where :class:`cosyvoice_mac.pipeline.loading.Networks` stands, so the
pipeline runs it unchanged: each network takes and returns PyTorch CPU tensors. The LLM can be
quantized to 8 or 4 bits (``mlx.nn.quantize``, group size 64) or stored in 16 bits; flow and vocoder
stay float32.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import torch
from mlx.utils import tree_flatten, tree_map_with_path

from cosyvoice_mac.config import ConfigError
from cosyvoice_mac.mlx.convert import default_cache_dir
from cosyvoice_mac.mlx.flow import MlxFlow
from cosyvoice_mac.mlx.hift import MlxHiFT
from cosyvoice_mac.mlx.speech_lm import MlxSpeechLM
from cosyvoice_mac.models.flow import FlowConfig
from cosyvoice_mac.models.flow.dit import ROPE_BASE
from cosyvoice_mac.models.llm import Qwen2Config, SpeechLMConfig
from cosyvoice_mac.models.vocoder import HiFTConfig

LLM_PRECISION_ENV = "COSYVOICE_MLX_LLM"  # fp32 (default) | fp16 | bf16 | int8 | int4
LLM_PRECISIONS = {"fp32": None, "fp16": mx.float16, "bf16": mx.bfloat16, "int8": 8, "int4": 4}
QUANT_GROUP_SIZE = 64


class PipelineFlow:
    """The MLX flow as the pipeline sees a flow: ``config``, ``inference``, ``build_prefix`` and a
    ``parameters()`` whose first item tells the device and dtype of the tensors it takes (CPU, float32)."""

    def __init__(self, flow: MlxFlow):
        self.mlx = flow
        self.config = flow.config
        self.inference = flow.inference
        self.build_prefix = flow.build_prefix

    def parameters(self):
        yield torch.empty(0, dtype=torch.float32)


@dataclass
class MlxNetworks:
    """The three networks of one model on MLX (``llm`` quantized or not, ``flow``, ``hift``)."""

    llm: MlxSpeechLM
    flow: PipelineFlow
    hift: MlxHiFT
    llm_precision: str = "fp32"

    def to(self, device) -> "MlxNetworks":
        """MLX keeps its arrays on its own device (the GPU on a Mac); a PyTorch move does not apply."""
        return self

    def _modules(self) -> dict[str, nn.Module]:
        return {"llm": self.llm, "flow": self.flow.mlx, "hift": self.hift}

    def parameter_count(self) -> dict[str, int]:
        return {name: sum(a.size for _, a in tree_flatten(m.parameters())) for name, m in self._modules().items()}

    def parameter_bytes(self) -> dict[str, int]:
        return {name: sum(a.nbytes for _, a in tree_flatten(m.parameters())) for name, m in self._modules().items()}


def llm_precision(requested: str | None = None, low_memory: bool = False) -> str:
    """``requested``, else ``$COSYVOICE_MLX_LLM``, else fp32 (fp16 in low-memory mode, as PyTorch halves its
    LLM there); an unknown name is a ConfigError."""
    name = (requested or os.environ.get(LLM_PRECISION_ENV) or ("fp16" if low_memory else "fp32")).strip().lower()
    if name not in LLM_PRECISIONS:
        raise ConfigError(f"MLX LLM precision {name!r} is not one of {', '.join(LLM_PRECISIONS)}")
    return name


def quantize_llm(llm: MlxSpeechLM, bits: int, group_size: int = QUANT_GROUP_SIZE) -> list[str]:
    """Quantize in place every Linear/Embedding whose input width is a multiple of ``group_size``.

    Returns the paths left in float (the tiny test model's 8-wide layers cannot be grouped).
    """
    skipped: list[str] = []

    def eligible(path: str, module: nn.Module) -> bool:
        if not isinstance(module, (nn.Linear, nn.Embedding)):
            return False
        if module.weight.shape[-1] % group_size:
            skipped.append(path)
            return False
        return True

    nn.quantize(llm, group_size=group_size, bits=bits, class_predicate=eligible)
    mx.eval(llm.parameters())
    return skipped


def apply_llm_precision(llm: MlxSpeechLM, precision: str) -> MlxSpeechLM:
    setting = LLM_PRECISIONS[precision]
    if isinstance(setting, int):
        quantize_llm(llm, setting)
    elif setting is not None:
        llm.set_dtype(setting)
    llm.precision = precision
    return llm


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
    llm_config = SpeechLMConfig.from_yaml(config["llm"], qwen)
    flow_config, hift_config = FlowConfig.from_yaml(config["flow"]), HiFTConfig.from_yaml(config["hift"])
    if random_weights:
        llm, flow, hift = MlxSpeechLM(llm_config), MlxFlow(flow_config), MlxHiFT(hift_config)
        for index, module in enumerate((llm, flow, hift)):
            randomize(module, seed + index)
    else:
        llm = MlxSpeechLM.from_checkpoint(folder.file("llm.pt"), llm_config, cache_dir=cache)
        flow = MlxFlow.from_checkpoint(flow_config, folder.file("flow.pt"), cache_dir=cache)
        hift = MlxHiFT.from_checkpoint(hift_config, folder.file("hift.pt"), cache_dir=cache)
    chosen = llm_precision(precision, low_memory)
    return MlxNetworks(llm=apply_llm_precision(llm, chosen), flow=PipelineFlow(flow), hift=hift, llm_precision=chosen)
