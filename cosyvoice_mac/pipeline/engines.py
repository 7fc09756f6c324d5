"""Building a model's networks on the engine that runs them: MLX (CosyVoice3 on Apple Silicon) or PyTorch.

The choice rule is :func:`cosyvoice_mac.mlx.choice.choose_engine`. MLX networks take and return CPU
tensors, so a pipeline on MLX reports the CPU as its PyTorch device; when MLX fails a job, PyTorch
networks are built in their place on the usual device policy (MPS, then CUDA, then CPU) and the
MLX ones are dropped, so the two never hold memory at once for longer than the switch.
"""

from __future__ import annotations

import gc

import torch

from cosyvoice_mac.device import select_device
from cosyvoice_mac.mlx.choice import MLX, TORCH, EngineChoice, choose_engine
from cosyvoice_mac.pipeline.loading import build_networks, qwen_config_for
from cosyvoice_mac.pipeline.model_dir import ModelFolder


def build_for_engine(
    engine: str | None,
    version: str,
    config: dict,
    folder: ModelFolder | None,
    *,
    device_request,
    device: torch.device,
    plan_for,
    random_weights: bool,
    seed: int = 0,
    low_memory: bool = False,
):
    """``(networks, pipeline device, EngineChoice, PrecisionPlan)`` for ``engine`` ('auto' | 'mlx' | 'torch' |
    None = env). ``plan_for(device, precision)`` gives the per-stage dtypes (precision None: as asked); the
    MLX engine keeps its own precision (``COSYVOICE_MLX_LLM``), so its plan is float32, never probed."""
    policy = device_request.type if isinstance(device_request, torch.device) else device_request
    choice = choose_engine(engine, version, policy)
    if choice.engine == MLX:
        from cosyvoice_mac.mlx.networks import build_mlx_networks

        networks = build_mlx_networks(
            config,
            qwen_config_for(folder),
            folder=folder,
            random_weights=random_weights,
            seed=seed,
            low_memory=low_memory,
        )
        return networks, torch.device("cpu"), choice, plan_for(torch.device("cpu"), "float32")
    plan = plan_for(device, None)
    networks = build_networks(
        config,
        qwen_config_for(folder),
        folder=folder,
        device=device,
        llm_dtype=plan.llm_dtype,
        flow_dtype=plan.flow_dtype,
        random_weights=random_weights,
        seed=seed,
        low_memory=low_memory,
    )
    return networks, device, choice, plan


def torch_takes_over(model, reason: str) -> None:
    """Swap ``model``'s MLX networks for PyTorch ones on the default device policy; keep ``reason``."""
    model.networks = None  # drop the MLX arrays before the PyTorch weights load
    gc.collect()
    from cosyvoice_mac.pipeline.precision_plan import plan_precision

    device = select_device("auto")
    qwen = qwen_config_for(model.folder)
    plan = plan_precision(device, model.version, model.config, qwen, low_memory=model.low_memory)
    model.networks = build_networks(
        model.config,
        qwen,
        folder=model.folder,
        device=device,
        llm_dtype=plan.llm_dtype,
        flow_dtype=plan.flow_dtype,
        random_weights=model.folder is None,
        low_memory=model.low_memory,
    )
    model.precision, model.dtype = plan, plan.llm_dtype
    model.vocoder = model.networks.hift
    model.device = device
    model.flow_prefixes.clear()
    model.engine = EngineChoice(TORCH, reason)


def engine_status(model) -> dict:
    """``{"engine": "mlx" | "torch", "engine_reason": why that engine (EngineChoice.reason)}`` of a pipeline,
    plus MLX's current and peak memory (bytes) while it runs on MLX."""
    choice = model.engine
    status = {"engine": choice.engine, "engine_reason": choice.reason}
    if choice.engine == MLX:
        import mlx.core as mx

        status["mlx_memory"] = {
            "active_bytes": mx.get_active_memory(),
            "peak_bytes": mx.get_peak_memory(),
            "cache_bytes": mx.get_cache_memory(),
            "device": str(mx.default_device()),
        }
    return status


def release_engine_memory(model) -> None:
    """After a job: hand MLX's buffer cache back (the counterpart of ``torch.mps.empty_cache()``)."""
    if engine_status(model)["engine"] == MLX:
        import mlx.core as mx

        mx.clear_cache()


def mlx_failure(model, error: BaseException) -> str | None:
    """Why PyTorch should take over ``model``'s job after ``error``, or None (not on MLX, or bad input
    that PyTorch would refuse the same way)."""
    from cosyvoice_mac.models.flow import FlowInputError
    from cosyvoice_mac.models.llm import SpeechLMInputError
    from cosyvoice_mac.pipeline.types import SynthesisError

    if engine_status(model)["engine"] != MLX or isinstance(error, (SynthesisError, FlowInputError, SpeechLMInputError)):
        return None
    return f"the MLX engine failed ({type(error).__name__}: {str(error)[:300]}); PyTorch runs this model now"


def network_dtypes(model) -> dict:
    """``{"llm_dtype", "flow_dtype"}`` names of the networks that run (MLX: the LLM's precision choice)."""
    networks = model.networks
    if engine_status(model)["engine"] == MLX:
        return {"llm_dtype": networks.llm_precision, "flow_dtype": "float32"}
    name = lambda module: str(next(module.parameters()).dtype).removeprefix("torch.")  # noqa: E731
    return {"llm_dtype": name(networks.llm.llm_decoder), "flow_dtype": name(networks.flow)}
