"""Building a model's networks on the engine that runs them: MLX (Apple Silicon) or PyTorch.

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
    mlx_llm: str | None = None,
):
    """``(networks, pipeline device, EngineChoice, PrecisionPlan)`` for ``engine`` ('auto' | 'mlx' | 'torch' |
    None = env). ``plan_for(device, precision)`` gives the per-stage dtypes (precision None: as asked); the
    MLX engine keeps its own LLM precision (``mlx_llm``, the page's setting, else ``COSYVOICE_MLX_LLM``, else
    the MLX gate's), so its plan is float32, never probed."""
    policy = device_request.type if isinstance(device_request, torch.device) else device_request
    choice = choose_engine(engine, version, policy)
    if choice.engine == MLX:
        from cosyvoice_mac.mlx.networks import build_mlx_networks

        llm_choice = mlx_llm_choice(low_memory, mlx_llm)
        networks = build_mlx_networks(
            config,
            qwen_config_for(folder),
            folder=folder,
            random_weights=random_weights,
            seed=seed,
            precision=llm_choice.precision,
            low_memory=low_memory,
        )
        networks.llm_choice = llm_choice
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


def mlx_llm_choice(low_memory: bool, requested: str | None = None):
    """The MLX LLM's precision and why (:func:`cosyvoice_mac.mlx.llm_gate.choose_mlx_llm`, on this machine's
    RAM as the device policy reads it); an explicit choice is never refused, an unknown name is a ConfigError."""
    from cosyvoice_mac import device
    from cosyvoice_mac.mlx.llm_gate import choose_mlx_llm
    from cosyvoice_mac.mlx.llm_precision import llm_precision

    choice = choose_mlx_llm(low_memory, requested, ram_bytes=device.psutil.virtual_memory().total)
    llm_precision(choice.precision)  # refuses a name outside the table
    return choice


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
    the onnxruntime provider of each prompt frontend (``frontend_providers``), and MLX's current and peak
    memory (bytes) while it runs on MLX."""
    choice = model.engine
    status = {"engine": choice.engine, "engine_reason": choice.reason}
    encoder = getattr(model, "prompt_encoder", None)  # a backend without ONNX frontends (the preview) has none
    if encoder is not None:
        status["frontend_providers"] = encoder.providers()  # where the speech tokenizer and CAM++ run
    if choice.engine == MLX:
        import mlx.core as mx

        limits = getattr(getattr(model, "networks", None), "memory_limits", None)  # a stand-in may have none
        llm_choice = getattr(getattr(model, "networks", None), "llm_choice", None)
        if llm_choice is not None:
            status["mlx_llm"] = llm_choice.as_dict()  # which precision runs and why, for the status panel
        status["mlx_memory"] = {
            "active_bytes": mx.get_active_memory(),
            "peak_bytes": mx.get_peak_memory(),
            "cache_bytes": mx.get_cache_memory(),
            "device": str(mx.default_device()),
            "limits": limits.as_dict() if limits is not None else None,
        }
    return status


def mlx_settle():
    """What ends an MLX LLM step's device turn: waiting for the step it queued ahead (on its own thread's stream)."""
    import mlx.core as mx

    return mx.synchronize


def release_engine_memory(model) -> None:
    """After the warm-up, each sentence and each job: hand MLX's buffer cache back (the counterpart of
    ``torch.mps.empty_cache()``)."""
    if model.engine.engine == MLX:
        from cosyvoice_mac.mlx.memory import release_cache

        release_cache()


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
        return {"llm_dtype": networks.llm_precision, "flow_dtype": networks.flow_storage}
    name = lambda module: str(next(module.parameters()).dtype).removeprefix("torch.")  # noqa: E731
    return {"llm_dtype": name(networks.llm.llm_decoder), "flow_dtype": name(networks.flow)}
