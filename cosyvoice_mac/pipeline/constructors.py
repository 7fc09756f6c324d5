"""What a :class:`~cosyvoice_mac.pipeline.cosyvoice.CosyVoice` is built from: an official model folder,
or the released architecture at full size with random weights.

Each function returns the keyword arguments of ``CosyVoice(...)``: the networks on their engine and
device, the precision plan, the text tokenizer and the prompt encoder. ``CosyVoice.from_pretrained``
and ``CosyVoice.random_full_size`` are the public doors (their docstrings list the options).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from cosyvoice_mac.device import limit_mps_memory, low_memory_choice, select_device
from cosyvoice_mac.frontend.speaker import RandomSpeakerEncoder, SpeakerEncoder
from cosyvoice_mac.frontend.speech_tokenizer import RandomSpeechTokenizer, SpeechTokenizer
from cosyvoice_mac.frontend.tokenizer import SpeechTextTokenizer
from cosyvoice_mac.models.llm import Qwen2Config
from cosyvoice_mac.pipeline.engines import build_for_engine
from cosyvoice_mac.pipeline.fullsize import official_config
from cosyvoice_mac.pipeline.loading import OnDemand, model_identity, qwen_config_for
from cosyvoice_mac.pipeline.model_dir import BLANK_EN, SPEECH_TOKENIZER_FILES, ModelFolder
from cosyvoice_mac.pipeline.precision_plan import PrecisionPlan, plan_precision
from cosyvoice_mac.pipeline.speaker import PromptEncoder
from cosyvoice_mac.pipeline.standins import ByteStandInTokenizer

Dtype = str | torch.dtype | None


@dataclass(frozen=True)
class LoadOptions:
    """The choices both constructors take (``CosyVoice.from_pretrained`` says what each means)."""

    low_memory: bool | None = None  # None: pick for this machine (folders) / off (random full size)
    llm_dtype: Dtype = None
    flow_dtype: Dtype = None
    engine: str | None = None
    mlx_llm: str | None = None  # the MLX LLM's precision (the page's setting); None or "auto": as the gate says
    precision: str | None = None
    reprobe: bool = False

    def planner(
        self, version: str, config: dict, qwen: Qwen2Config, dtype: Dtype, low_memory: bool
    ) -> Callable[[torch.device, str | None], PrecisionPlan]:
        """The precision plan on a device; ``forced`` (an engine's own need) overrides ``precision``."""

        def plan_for(on: torch.device, forced: str | None) -> PrecisionPlan:
            return plan_precision(
                on,
                version,
                config,
                qwen,
                precision=forced or self.precision,
                dtype=dtype,
                llm_dtype=self.llm_dtype,
                flow_dtype=self.flow_dtype,
                low_memory=low_memory,
                reprobe=self.reprobe,
            )

        return plan_for


def pretrained_parts(
    model_dir: str | Path,
    device: str | torch.device | None = "auto",
    dtype: Dtype = None,
    *,
    random_weights: bool = False,
    **options,
) -> dict:
    """``CosyVoice(...)``'s arguments for the official folder ``model_dir``; ``options`` are :class:`LoadOptions`."""
    opts = LoadOptions(**options)
    folder = ModelFolder.open(model_dir)
    target = _device(device)
    memory_mode = low_memory_choice(opts.low_memory)
    low = memory_mode.enabled  # None ("pick for this machine") is decided here, once
    limit_mps_memory(target)
    qwen = qwen_config_for(folder)
    networks, target, choice, plan = build_for_engine(
        opts.engine,
        folder.version,
        folder.config,
        folder,
        device_request=device,
        device=target,
        plan_for=opts.planner(folder.version, folder.config, qwen, dtype, low),
        random_weights=random_weights,
        low_memory=low,
        mlx_llm=opts.mlx_llm,
    )
    model_id = model_identity(folder, folder.version, random_weights)
    tokenizer_path = folder.file(SPEECH_TOKENIZER_FILES[folder.version])
    campplus_path = folder.file("campplus.onnx")
    # Low-memory mode: each session lives only while a new voice is encoded, and maps its weights from the file.
    # The frontends join the networks' accelerator where onnxruntime has its provider (frontend.onnx_session).
    on = target.type
    speech_tokenizer = OnDemand(
        lambda: SpeechTokenizer(tokenizer_path, map_weights=low, device_type=on), keep_loaded=not low
    )
    speaker_encoder = OnDemand(
        lambda: SpeakerEncoder(campplus_path, map_weights=low, device_type=on), keep_loaded=not low
    )
    if not low:  # load now, so a broken file is reported when the model loads
        speech_tokenizer.get(), speaker_encoder.get()
    return dict(
        version=folder.version,
        config=folder.config,
        networks=networks,
        tokenizer=SpeechTextTokenizer.from_dir(folder.file(BLANK_EN), folder.version),
        prompt_encoder=PromptEncoder(speech_tokenizer, speaker_encoder, fmax=_fmax(folder.config), model_id=model_id),
        device=target,
        plan=plan,
        model_id=model_id,
        folder=folder,
        low_memory=memory_mode,
        engine=choice,
    )


def random_full_size_parts(
    version: str = "cosyvoice3",
    device: str | torch.device | None = "auto",
    dtype: Dtype = None,
    *,
    seed: int = 0,
    **options,
) -> dict:
    """``CosyVoice(...)``'s arguments for ``version`` at full size with random weights and stand-in frontends."""
    opts = LoadOptions(**options)
    low = bool(opts.low_memory)  # never picked for the machine: a benchmark says what it measures
    config = official_config(version)
    target = _device(device)
    qwen = qwen_config_for(None)
    networks, target, choice, plan = build_for_engine(
        opts.engine,
        version,
        config,
        None,
        device_request=device,
        device=target,
        plan_for=opts.planner(version, config, qwen, dtype, low),
        random_weights=True,
        seed=seed,
        low_memory=low,
        mlx_llm=opts.mlx_llm,
    )
    model_id = model_identity(None, version, True)
    prompt_encoder = PromptEncoder(
        RandomSpeechTokenizer(seed=seed), RandomSpeakerEncoder(seed=seed), fmax=_fmax(config), model_id=model_id
    )
    return dict(
        version=version,
        config=config,
        networks=networks,
        tokenizer=ByteStandInTokenizer(),
        prompt_encoder=prompt_encoder,
        device=target,
        plan=plan,
        model_id=model_id,
        folder=None,
        low_memory=low,
        engine=choice,
    )


def _fmax(config: dict):
    return config.get("feat_extractor", {}).get("fmax")


def _device(device) -> torch.device:
    return device if isinstance(device, torch.device) else select_device(device)
