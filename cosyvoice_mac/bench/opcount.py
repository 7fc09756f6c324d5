"""Counting the device operations a piece of PyTorch code dispatches (kernels per decoded token).

At batch 1 a decoding step is bound by how many operations it launches, not by their arithmetic,
so the count is the number to watch on every device. :class:`OpCounter` is a
``TorchDispatchMode``: it sees every ATen operation below autograd, on any device, and sorts it
into *work* (an operation that reads or writes tensor data: a kernel on a GPU) and *views*
(operations that only make new tensor metadata: ``view``, ``select``, ``slice``, ``detach`` ...),
plus *allocations* (``empty``: no kernel). Module hooks attribute each operation to a scope
("layer", "norm", "head", "sampler" ...), so a report can say which layer costs what.
"""

from __future__ import annotations

import sys
from collections import Counter
from contextlib import contextmanager
from typing import Callable, Iterator

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

WORK, VIEW, ALLOCATION = "work", "view", "allocation"
# Aliasing or metadata-only operations that the schema does not mark as views.
_METADATA = {
    "aten.detach",
    "aten.alias",
    "aten.lift_fresh",
    "aten.sym_size",
    "aten.sym_stride",
    "aten.sym_numel",
    "aten.sym_storage_offset",
    "aten.is_same_size",
    "aten._reshape_alias",
    "prim.device",
    "prim.layout",
    "aten.dim",
    "aten.size",
    "aten.stride",
}
_ALLOCATIONS = {"aten.empty", "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided", "aten.empty_like"}


def op_kind(func) -> str:
    """``work``, ``view`` or ``allocation`` for one ATen operation overload."""
    name = str(func.overloadpacket) if hasattr(func, "overloadpacket") else str(func)
    if name in _ALLOCATIONS:
        return ALLOCATION
    if getattr(func, "is_view", False) or name in _METADATA:
        return VIEW
    return WORK


class OpCounter(TorchDispatchMode):
    """Owns the tally of one counted region: ``counts[scope][kind][op name]``.

    ``scope`` is the innermost active :meth:`scope` (``"other"`` outside every one).
    """

    def __init__(self):
        super().__init__()
        self.counts: dict[str, dict[str, Counter]] = {}
        self._scopes: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        scope = self._scopes[-1] if self._scopes else "other"
        kind = op_kind(func)
        name = str(func.overloadpacket).removeprefix("aten.")
        self.counts.setdefault(scope, {}).setdefault(kind, Counter())[name] += 1
        return func(*args, **(kwargs or {}))

    @contextmanager
    def scope(self, name: str) -> Iterator[None]:
        self._scopes.append(name)
        try:
            yield
        finally:
            self._scopes.pop()

    def watch(self, module: nn.Module, name: str) -> Callable[[], None]:
        """Attribute the operations of ``module``'s forward to scope ``name``; returns the remover."""

        def enter(*_):
            self._scopes.append(name)

        def leave(*_):
            self._scopes.pop()

        handles = [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
        return lambda: [handle.remove() for handle in handles]

    def watch_function(self, owner, attribute: str, name: str) -> Callable[[], None]:
        """Attribute the operations of function ``owner.<attribute>`` to scope ``name``; returns the remover."""
        function = getattr(owner, attribute)

        def scoped(*args, **kwargs):
            with self.scope(name):
                return function(*args, **kwargs)

        setattr(owner, attribute, scoped)
        return lambda: setattr(owner, attribute, function)

    def total(self, kind: str = WORK, scope: str | None = None) -> int:
        scopes = [scope] if scope is not None else list(self.counts)
        return sum(sum(self.counts.get(s, {}).get(kind, Counter()).values()) for s in scopes)

    def by_op(self, kind: str = WORK, scope: str | None = None) -> Counter:
        merged: Counter = Counter()
        for name, kinds in self.counts.items():
            if scope is None or name == scope:
                merged.update(kinds.get(kind, Counter()))
        return merged

    def report(self, divide_by: int = 1) -> dict:
        """Per scope: work / view / allocation totals and the work by op, each divided by ``divide_by``."""
        out = {}
        for name in sorted(self.counts):
            kinds = self.counts[name]
            out[name] = {
                kind: sum(kinds.get(kind, Counter()).values()) / divide_by for kind in (WORK, VIEW, ALLOCATION)
            }
            out[name]["work_by_op"] = {op: n / divide_by for op, n in sorted(kinds.get(WORK, Counter()).items())}
        out["total"] = {kind: self.total(kind) / divide_by for kind in (WORK, VIEW, ALLOCATION)}
        return out


def tiny_full_depth_qwen(**overrides):
    """A Qwen2 config of the released depth (24 layers, 14/2 heads) but tiny width (hidden 56, head 4).

    Its time per token is almost all framework overhead, the part that dominates on MPS; its op
    count equals the full-size model's (counts do not depend on width).
    """
    from cosyvoice_mac.models.llm import Qwen2Config

    sizes = dict(
        hidden_size=56,
        intermediate_size=112,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
        rope_theta=1e6,
        vocab_size=1000,
        max_position_embeddings=4096,
    )
    return Qwen2Config(**{**sizes, **overrides})


def random_tiny_speech_lm(version: str = "cosyvoice3", seed: int = 0, **overrides):
    """A random-weight SpeechLM on :func:`tiny_full_depth_qwen` (speech vocabulary 300 + extras)."""
    from cosyvoice_mac.models.llm import SpeechLM, SpeechLMConfig
    from cosyvoice_mac.versions import spec_for

    torch.manual_seed(seed)
    config = SpeechLMConfig(spec=spec_for(version), speech_token_size=300, qwen=tiny_full_depth_qwen(**overrides))
    model = SpeechLM(config).eval().requires_grad_(False)
    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, "weight") and module.weight is not None and module.weight.dim() == 1:
                module.weight.normal_(1.0, 0.1)  # non-trivial RMSNorm gains
    return model


def prompt_embeddings(model, prompt_speech: int = 80, text: int = 32) -> torch.Tensor:
    """(1, L, D) LM input for a request of ``text`` text ids and ``prompt_speech`` prompt tokens (the bench's sizes)."""
    generator = torch.Generator().manual_seed(1)
    speech = torch.randint(0, model.config.speech_token_size, (1, prompt_speech), generator=generator)
    ids = torch.randint(0, min(model.config.qwen.vocab_size, 1000), (1, text), generator=generator)
    from cosyvoice_mac.models.llm import ENDOFPROMPT_ID

    if model.config.spec.needs_endofprompt and model.config.qwen.vocab_size > ENDOFPROMPT_ID:
        ids[0, -1] = ENDOFPROMPT_ID
    elif model.config.spec.needs_endofprompt:  # a vocabulary too small for <|endofprompt|>: embed directly
        device = model.speech_embedding.weight.device
        return torch.cat(
            (
                model._special(model.sos),
                model.backbone.embed_tokens(ids.to(device)),
                model._special(model.task_id),
                model.speech_embedding(speech.to(device)),
            ),
            dim=1,
        )
    return model.build_prompt_embeddings(ids, ids[:, :0], speech)


@torch.inference_mode()
def count_decode_steps(model, steps: int = 20, warmup: int = 3, embeds: torch.Tensor | None = None) -> OpCounter:
    """Count ``steps`` forced decoding steps (sampler included: every stop id masked, as the bench).

    Scopes: ``layer`` (all decoder layers together), ``norm`` (the final RMSNorm), ``head`` (the
    speech decoder), ``sampler``, ``other`` (embedding lookup, RoPE rows, log-softmax, copies).
    """
    embeds = prompt_embeddings(model) if embeds is None else embeds
    sampler = model.make_sampler(seed=0)
    stop_ids = sorted(model.stop_ids)
    decoder = model.start_decoding(embeds, warmup + steps + 1)
    history: list[int] = []
    for _ in range(warmup):
        history.append(sampler(decoder.logp, history, stop_ids))
        decoder.feed(history[-1])
    counter = OpCounter()
    backbone = model.backbone
    removers = [counter.watch(layer, "layer") for layer in backbone.layers]
    step_module = sys.modules[type(backbone).__module__]
    if hasattr(step_module, "decode_layer"):  # the one-position step is a function, not a forward
        removers.append(counter.watch_function(step_module, "decode_layer", "layer"))
    removers += [counter.watch(backbone.norm, "norm"), counter.watch(model.llm_decoder, "head")]
    try:
        with counter:
            for _ in range(steps):
                with counter.scope("sampler"):
                    history.append(sampler(decoder.logp, history, stop_ids))
                decoder.feed(history[-1])
    finally:
        for remove in removers:
            remove()
    return counter
