"""The MLX LLM's precisions: their names, and turning an fp32 LLM into one of them, evaluated.

An MLX stream belongs to the thread that made it (mlx >= 0.31.2), so a cast or a quantisation left lazy
can only be evaluated on the thread that asked for it: the first streamed request, decoded on another
thread, would fail with "There is no Stream(cpu, 0) in current thread". Every change here is evaluated
before it returns, one parameter at a time, so the fp32 copy is freed as it goes (the peak stays near
the fp32 size instead of fp32 + fp16).
"""

from __future__ import annotations

import os

import mlx.core as mx
import mlx.nn as nn

from cosyvoice_mac.config import ConfigError
from cosyvoice_mac.mlx.llm_gate import LLM_PRECISION_ENV, group_size

LLM_PRECISIONS = {"fp32": None, "fp16": mx.float16, "bf16": mx.bfloat16, "int8": 8, "int4": 4}
TRANSFORMER_LAYERS = "backbone.layers."  # what quantisation touches: never the tables or the head


def llm_precision(requested: str | None = None) -> str:
    """``requested``, else ``$COSYVOICE_MLX_LLM``, else fp32; an unknown name is a ConfigError. (The pipeline
    names one: ``cosyvoice_mac.mlx.llm_gate.choose_mlx_llm``'s.)"""
    name = (requested or os.environ.get(LLM_PRECISION_ENV) or "fp32").strip().lower()
    if name not in LLM_PRECISIONS:
        raise ConfigError(f"MLX LLM precision {name!r} is not one of {', '.join(LLM_PRECISIONS)}")
    return name


def storage_dtype(precision: str) -> mx.Dtype | None:
    """The float dtype the weights can be read in for ``precision`` (16-bit ones), else None (fp32)."""
    setting = LLM_PRECISIONS[precision]
    return setting if isinstance(setting, mx.Dtype) else None


def cast_evaluated(module: nn.Module, dtype: mx.Dtype) -> None:
    """Cast every float parameter of ``module`` to ``dtype`` in place, each evaluated before the next is cast
    (no list of all the old arrays is held, so each fp32 buffer is freed as soon as its copy exists)."""
    for _, owner in module.named_modules():
        for name in [key for key, value in owner.items() if isinstance(value, mx.array)]:
            if mx.issubdtype(owner[name].dtype, mx.floating) and owner[name].dtype != dtype:
                cast = owner[name].astype(dtype)
                mx.eval(cast)
                owner[name] = cast


def quantize_llm(llm: nn.Module, bits: int, group: int) -> list[str]:
    """Quantize in place the Linear layers of the transformer (``backbone.layers``) whose input width is a
    multiple of ``group`` (the gate's group size for the precision: ``llm_gate.group_size``), layer by layer
    (each widened to float32 first, so scales and arithmetic are float32 even when the weights were read in
    fp16, and evaluated before the next). The text table is
    stored in fp16; the rest (norms, the speech table, the ``llm_decoder`` head: quantising the head cost
    most of the agreement, it ranks the very candidates the sampler draws from) is float32.

    Returns the transformer layers left in float (the tiny test model's 8-wide layers cannot be grouped).
    """
    skipped: list[str] = []

    def eligible(path: str, module: nn.Module) -> bool:
        if isinstance(module, nn.Linear) and not quantizable(module, group):
            skipped.append(path)
        return quantizable(module, group)

    for index, layer in enumerate(llm.backbone.layers):
        cast_evaluated(layer, mx.float32)
        nn.quantize(
            layer,
            group_size=group,
            bits=bits,
            class_predicate=lambda path, module: eligible(f"{TRANSFORMER_LAYERS}{index}.{path}", module),
        )
        mx.eval(layer.parameters())
    cast_evaluated(llm.backbone.embed_tokens, mx.float16)  # a few rows read per sentence, cast on lookup
    for name, module in llm.children().items():
        if name != "backbone":
            cast_evaluated(module, mx.float32)
    cast_evaluated(llm.backbone.norm, mx.float32)
    return skipped


def quantizable(module: nn.Module, group: int) -> bool:
    """Whether a transformer layer's ``module`` is quantized: a Linear whose input width ``group`` divides."""
    return isinstance(module, nn.Linear) and module.weight.shape[-1] % group == 0


def read_dtype(precision: str) -> mx.Dtype | None:
    """The dtype the LLM's weights are read in for ``precision``: 16 bits for every precision but fp32 (a
    quantized one widens each layer just before it is quantized), so the fp32 LLM never exists whole."""
    return storage_dtype(precision) or (mx.float16 if isinstance(LLM_PRECISIONS[precision], int) else None)


def apply_llm_precision(llm: nn.Module, precision: str) -> nn.Module:
    """``llm`` in ``precision`` (a name of LLM_PRECISIONS), every weight evaluated; sets ``llm.precision``."""
    setting = LLM_PRECISIONS[precision]
    if isinstance(setting, int):
        quantize_llm(llm, setting, group_size(precision))
    elif setting is not None:
        cast_evaluated(llm, setting)
    llm.precision = precision
    return llm
