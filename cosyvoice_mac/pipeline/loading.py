"""Build the three networks (LLM, flow, vocoder) from a model folder or from official sizes.

Weights are read on the CPU, weight norm folded, then moved once to the target device/dtype.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from cosyvoice_mac.checkpoint import load_checkpoint, load_strict
from cosyvoice_mac.models.flow import Flow, FlowConfig
from cosyvoice_mac.models.llm import Qwen2Config, SpeechLM, SpeechLMConfig
from cosyvoice_mac.models.vocoder import HiFT, HiFTConfig
from cosyvoice_mac.pipeline.fullsize import QWEN2_0_5B
from cosyvoice_mac.pipeline.model_dir import BLANK_EN, ModelFolder

UNUSED_LLM_KEYS = ("llm.model.lm_head.weight",)  # tied to embed_tokens, never used for speech


@dataclass
class Networks:
    """The three networks of one model, already on their device."""

    llm: SpeechLM
    flow: Flow
    hift: HiFT

    def to(self, device: torch.device) -> "Networks":
        for module in (self.llm, self.flow, self.hift):
            module.to(device)
        return self

    def parameter_count(self) -> dict[str, int]:
        return {name: sum(p.numel() for p in getattr(self, name).parameters())
                for name in ("llm", "flow", "hift")}


def qwen_config_for(folder: ModelFolder | None) -> Qwen2Config:
    if folder is None:
        known = {field.name for field in dataclasses.fields(Qwen2Config)}
        return Qwen2Config(**{key: value for key, value in QWEN2_0_5B.items() if key in known})
    return Qwen2Config.from_json(folder.file(f"{BLANK_EN}/config.json"))


def build_networks(
    config: dict,
    qwen: Qwen2Config,
    *,
    folder: ModelFolder | None,
    device: torch.device,
    llm_dtype: torch.dtype = torch.float32,
    flow_dtype: torch.dtype = torch.float32,
    random_weights: bool = False,
    seed: int = 0,
) -> Networks:
    """Construct the networks from plain-data ``config``; load ``folder``'s weights unless random.

    ``random_weights`` must be asked for explicitly: it builds the same shapes with seeded
    random initialisation (benchmarks); it never stands in for a missing checkpoint.
    """
    if not random_weights and folder is None:
        raise ValueError("a model folder is needed unless random_weights=True is asked for")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        llm = SpeechLM(SpeechLMConfig.from_yaml(config["llm"], qwen))
        flow = Flow(FlowConfig.from_yaml(config["flow"]))
        hift = HiFT(HiFTConfig.from_yaml(config["hift"]))
    if not random_weights:
        _load(llm, folder, "llm.pt", ignore=UNUSED_LLM_KEYS)
        _load(flow, folder, "flow.pt")
        _load(hift, folder, "hift.pt")
    networks = Networks(llm=llm.eval(), flow=flow.eval(), hift=hift.eval())
    llm.to(device=device, dtype=llm_dtype)
    flow.to(device=device, dtype=flow_dtype)
    hift.to(device=device)
    return networks


def _load(module: nn.Module, folder: ModelFolder, name: str, ignore=()) -> None:
    state = load_checkpoint(folder.file(name), hub_repo=folder.hub_repo)
    load_strict(module, state, source=str(folder.path / name), ignore=ignore)


def model_identity(folder: ModelFolder | None, version: str, random_weights: bool) -> str:
    """A short stable id: folder name plus a fingerprint of checkpoint sizes and mtimes.

    The speaker cache keys on it, so replacing a checkpoint invalidates cached prompts.
    """
    if folder is None or random_weights:
        return f"{version}-random-weights"
    stats = []
    for name in ("llm.pt", "flow.pt", "hift.pt", f"{version}.yaml"):
        path: Path = folder.path / name
        if path.exists():
            stat = path.stat()
            stats.append((name, stat.st_size, int(stat.st_mtime)))
    digest = hashlib.sha256(json.dumps(stats).encode()).hexdigest()[:10]
    return f"{folder.name}-{digest}"
