"""Build the three networks (LLM, flow, vocoder) from a model folder or from official sizes.

The LLM and the flow (2 GB and 1.3 GB in float32) are built on the ``meta`` device, so no
memory is allocated and no random initialisation runs. With a model folder their parameters
then *are* the checkpoint's memory-mapped tensors (``load_state_dict(assign=True)``): on the CPU
in float32 nothing is copied, and the OS may drop the pages again under memory pressure. A
device or dtype change converts one part (a decoder layer) at a time and hands the copied tensors'
file pages back (:mod:`cosyvoice_mac.pipeline.assign`), so two copies of a weight never stay.
With random weights (benchmarks) each module is materialised, initialised by its own
``reset_parameters()`` and converted in turn.
HiFT (83 MB, with non-persistent STFT buffers) is built the ordinary way.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from cosyvoice_mac.checkpoint import load_checkpoint, load_strict
from cosyvoice_mac.device import text_embedding_on_host
from cosyvoice_mac.heap import return_freed_heap
from cosyvoice_mac.models.flow import Flow, FlowConfig
from cosyvoice_mac.models.flow.dit import RotaryEmbedding
from cosyvoice_mac.models.llm import Qwen2Config, SpeechLM, SpeechLMConfig
from cosyvoice_mac.models.llm.qwen2 import Qwen2RMSNorm
from cosyvoice_mac.models.vocoder import HiFT, HiFTConfig
from cosyvoice_mac.pipeline.assign import Converter, assign_checkpoint, convert_own_tensors
from cosyvoice_mac.pipeline.fullsize import QWEN2_0_5B
from cosyvoice_mac.pipeline.model_dir import BLANK_EN, ModelFolder
from cosyvoice_mac.pipeline.precision import (
    HALF_DTYPES,
    INT8,
    halved_modules,
    store_weights_in_half,
    store_weights_in_int8,
)

UNUSED_LLM_KEYS = ("llm.model.lm_head.weight",)  # tied to embed_tokens, never used for speech


@dataclass
class Networks:
    """The three networks of one model, already on their device."""

    llm: SpeechLM
    flow: Flow
    hift: HiFT

    def to(self, device: torch.device) -> Networks:
        for module in (self.llm, self.flow, self.hift):
            module.to(device)
        return self

    def parameter_count(self) -> dict[str, int]:
        return {name: sum(p.numel() for p in getattr(self, name).parameters()) for name in ("llm", "flow", "hift")}

    def parameter_bytes(self) -> dict[str, int]:
        """Bytes of each network's parameters and buffers (int8 weights and their scales are buffers)."""
        return {
            name: sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))
            for name, module in (("llm", self.llm), ("flow", self.flow), ("hift", self.hift))
        }


def qwen_config_for(folder: ModelFolder | None) -> Qwen2Config:
    if folder is None:
        known = {field.name for field in dataclasses.fields(Qwen2Config)}
        return Qwen2Config(**{key: value for key, value in QWEN2_0_5B.items() if key in known})
    return Qwen2Config.from_json(folder.file(f"{BLANK_EN}/config.json"))


def llm_weights_only_in_half(device: torch.device, llm_dtype: torch.dtype | str) -> bool:
    """True when a 16-bit ``llm_dtype`` means 16-bit *storage* with float32 arithmetic.

    That is the CPU's case: its 16-bit matrix products are slow (no bf16/fp16 matrix units on
    most x86 chips), but reading half the bytes per token is what decoding is limited by.
    """
    return device.type == "cpu" and llm_dtype in HALF_DTYPES


# Flow layers whose weight dtype the flow code reads as its compute dtype: they stay unhalved.
FLOW_DTYPE_ANCHORS = (
    "spk_embed_affine_layer",  # Flow.inference
    "decoder.estimator.time_embed",  # DiT: first parameter (CFM) and the time MLP's input dtype
    "decoder.estimator.time_mlp",  # U-Net: first parameter (CFM)
    "decoder.estimator.proj_out",  # DiT.forward
)
LOW_MEMORY_FLOW_STORAGE = torch.float16


def build_networks(
    config: dict,
    qwen: Qwen2Config,
    *,
    folder: ModelFolder | None,
    device: torch.device,
    llm_dtype: torch.dtype | str = torch.float32,
    flow_dtype: torch.dtype = torch.float32,
    random_weights: bool = False,
    seed: int = 0,
    low_memory: bool = False,
) -> Networks:
    """Construct the networks from plain-data ``config``; load ``folder``'s weights unless random.

    ``random_weights`` must be asked for explicitly: it builds the same shapes with seeded
    random initialisation (benchmarks); it never stands in for a missing checkpoint.
    On the CPU a 16-bit ``llm_dtype`` stores the LLM's matrices in 16 bits and computes in
    float32 (:func:`llm_weights_only_in_half`); elsewhere it is the LLM's compute dtype.
    ``llm_dtype="int8"`` stores the LLM's linear layers as weight-only int8 (float32 arithmetic).
    ``low_memory`` also stores the flow's matrices in fp16 (computing in ``flow_dtype``): 0.67 GB
    less for CosyVoice3, for a few per cent more flow time. With a folder it also leaves the text
    table as the checkpoint's memory-mapped float32 tensor (:class:`HostTextEmbedding`): a sentence
    reads a few dozen of its 151936 rows, so only those pages become resident (a copy would be
    0.27 GB in fp16).
    """
    if not random_weights and folder is None:
        raise ValueError("a model folder is needed unless random_weights=True is asked for")
    int8 = llm_dtype == INT8
    llm_storage = torch.float16 if int8 else llm_dtype if llm_weights_only_in_half(device, llm_dtype) else None
    flow_storage = LOW_MEMORY_FLOW_STORAGE if low_memory and flow_dtype not in HALF_DTYPES else None
    llm_compute = torch.float32 if llm_storage else llm_dtype
    table_stays_mapped = low_memory and not random_weights

    def finish_llm() -> None:  # before the flow is built, so the wide LLM and the flow never coexist
        if int8:  # innermost parents first, handing freed pages back after each: the 16-bit copy never piles up
            for parent in reversed(list(llm.modules())):
                if any(isinstance(child, (nn.Linear, nn.Embedding)) for child in parent.children()):
                    store_weights_in_int8(parent)
                    return_freed_heap()
        elif llm_storage:
            store_weights_in_half(llm, llm_storage)
        return_freed_heap()

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with torch.device("meta"):
            llm = SpeechLM(SpeechLMConfig.from_yaml(config["llm"], qwen))
            flow = Flow(FlowConfig.from_yaml(config["flow"]))
        hift = HiFT(HiFTConfig.from_yaml(config["hift"]))
        table = llm.backbone.embed_tokens
        on_host = frozenset({id(table)} if text_embedding_on_host(device) or table_stays_mapped else ())
        llm_convert = _converter(
            device, llm_compute, llm_storage, halved_modules(llm) - on_host if llm_storage else set(), on_host
        )

        def finish_table() -> None:  # before any 16-bit or int8 swap, which then leaves the host table alone
            if on_host:
                llm.backbone.embed_tokens = HostTextEmbedding(table, device, llm_compute)

        flow_convert = _converter(
            device, flow_dtype, flow_storage, halved_modules(flow, FLOW_DTYPE_ANCHORS) if flow_storage else set()
        )
        if random_weights:
            _materialise_random(llm, llm_convert)
            finish_table()
            finish_llm()
            _materialise_random(flow, flow_convert)
    if not random_weights:
        assign_checkpoint(llm, folder, folder.llm_file, llm_convert, ignore=UNUSED_LLM_KEYS)
        finish_table()
        finish_llm()
        assign_checkpoint(flow, folder, "flow.pt", flow_convert)
        _load_small(hift, folder, "hift.pt")
    if flow_storage:
        store_weights_in_half(flow, flow_storage, compute=flow_dtype, keep=FLOW_DTYPE_ANCHORS)
    networks = Networks(
        llm=llm.eval().requires_grad_(False),
        flow=flow.eval().requires_grad_(False),
        hift=hift.eval().requires_grad_(False),
    )
    hift.to(device=device)
    return_freed_heap()
    return networks


class HostTextEmbedding(nn.Module):
    """Owns the LLM's text-embedding table in host memory, in the checkpoint's dtype, while the rest of
    the LLM is on the device and in its compute dtype.

    ``(1, L)`` ids -> ``(1, L, D)`` embeddings on the device, in the compute dtype. The table (151936 x
    896: 0.55 GB in float32) is read once per sentence for a few dozen rows, so on MPS it need not take
    unified memory from the device's share, and loaded from a folder it stays the memory-mapped file
    (never copied, only the rows read become resident). ``.to()`` changes only the zero-size ``anchor``
    that says where results go and in what dtype; the state-dict key stays ``embed_tokens.weight``.
    """

    def __init__(self, embedding: nn.Embedding, device: torch.device, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.weight = embedding.weight
        self.register_buffer("anchor", torch.empty(0, device=device, dtype=dtype), persistent=False)

    def _apply(self, fn, recurse=True):
        self.anchor = fn(self.anchor)  # the table stays on the CPU
        return self

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids.to(self.weight.device), self.weight).to(self.anchor)


# per-tensor conversion ---------------------------------------------------------------------------------
def _converter(
    device: torch.device,
    compute: torch.dtype,
    storage: torch.dtype | None,
    halved: set[int],
    on_host: frozenset[int] = frozenset(),
) -> Converter:
    """Each tensor to ``device``: ``halved`` weights in ``storage``, floats in ``compute``; ``on_host`` modules'
    tensors stay on the CPU as they are (no copy of a memory-mapped table)."""

    def convert(module: nn.Module, name: str, tensor: torch.Tensor) -> torch.Tensor:
        if id(module) in on_host:
            return tensor.to(device="cpu")
        if isinstance(module, RotaryEmbedding) or not tensor.is_floating_point():  # RoPE frequencies stay fp32
            return tensor.to(device=device)
        dtype = storage if name == "weight" and id(module) in halved else compute
        return tensor.to(device=device, dtype=dtype)

    return convert


# materialising --------------------------------------------------------------------------------
def _materialise_random(module: nn.Module, convert: Converter) -> None:
    """Give every meta tensor of ``module`` random values (the modules' own init), one module at a time."""
    for sub in module.modules():
        own = [t for t in (*sub._parameters.values(), *sub._buffers.values()) if t is not None]
        if not any(t.is_meta for t in own):
            continue
        if isinstance(sub, RotaryEmbedding):  # a buffer computed at construction: build a real one
            sub.inv_freq = RotaryEmbedding(sub.inv_freq.shape[0] * 2).inv_freq
            convert_own_tensors(sub, convert)
            continue
        sub.to_empty(device="cpu", recurse=False)
        with torch.no_grad():
            if isinstance(sub, Qwen2RMSNorm):
                sub.weight.fill_(1.0)
            elif hasattr(sub, "reset_parameters"):
                sub.reset_parameters()
            else:  # e.g. relative-position biases: small values keep the random network finite
                for tensor in sub._parameters.values():
                    nn.init.normal_(tensor, std=0.02)
                if sub._buffers:
                    raise TypeError(f"no random initialisation known for the buffers of {type(sub).__name__}")
        convert_own_tensors(sub, convert)


def _load_small(module: nn.Module, folder: ModelFolder, name: str) -> None:
    state = load_checkpoint(folder.file(name), hub_repo=folder.hub_repo)
    load_strict(module, state, source=str(folder.path / name))


class OnDemand:
    """Owns how to build one frontend model (an ONNX session) and, while it is loaded, the model.

    It is built when a prompt first needs it. ``keep_loaded=False`` (low-memory mode) releases it
    again after every call, so the ~1 GB speech tokenizer is resident only while a new prompt is
    encoded; cached voices never load it. Attribute access is passed through to the model.
    """

    def __init__(self, factory: Callable[[], object], *, keep_loaded: bool = True, name: str = "frontend model"):
        self._factory = factory
        self._model = None
        self.keep_loaded = keep_loaded
        self.name = name
        self.loads = 0  # how many times the model was built (tests and memory reports read it)
        self._holds = 0  # open ``held()`` blocks: while any is open, calls do not release the model

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def get(self):
        if self._model is None:
            self._model = self._factory()
            self.loads += 1
        return self._model

    def release(self) -> None:
        """Drop the model (it is built again when next needed)."""
        self._model = None

    @contextmanager
    def held(self):
        """The model, kept loaded for the block: many calls (every piece of a long recording to convert) cost
        one load; on leaving, released as after one call when ``keep_loaded`` is off."""
        self._holds += 1
        try:
            yield self.get()
        finally:
            self._holds -= 1
            if not self._holds and not self.keep_loaded:
                self.release()

    def __getattr__(self, attribute: str):
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        value = getattr(self.get(), attribute)
        if self.keep_loaded or self._holds or not callable(value):
            return value

        def call_then_release(*args, **kwargs):
            try:
                return value(*args, **kwargs)
            finally:
                self.release()

        return call_then_release


def model_identity(folder: ModelFolder | None, version: str, random_weights: bool) -> str:
    """A short stable id: folder name plus a fingerprint of checkpoint sizes and mtimes.

    The speaker cache keys on it, so replacing a checkpoint invalidates cached prompts.
    """
    if folder is None or random_weights:
        return f"{version}-random-weights"
    stats = []
    for name in (folder.llm_file, "flow.pt", "hift.pt", f"{version}.yaml"):
        path: Path = folder.path / name
        if path.exists():
            stat = path.stat()
            stats.append((name, stat.st_size, int(stat.st_mtime)))
    digest = hashlib.sha256(json.dumps(stats).encode()).hexdigest()[:10]
    return f"{folder.name}-{digest}"
