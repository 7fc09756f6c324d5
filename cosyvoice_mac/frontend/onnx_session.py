"""Open an official ONNX frontend (speech tokenizer, CAM++) on the best onnxruntime execution provider here.

The released graphs run unchanged through onnxruntime; only where they run is chosen: next to the
networks when onnxruntime can (its CUDA execution provider with ``onnxruntime-gpu`` when the model runs on
CUDA; its Core ML provider, which the standard macOS wheel carries, on a Mac), else on the CPU. The CPU
provider always comes last, so onnxruntime places there any operation the first one cannot run, and a
provider that fails to start leaves the CPU one. ``$COSYVOICE_ONNX_PROVIDER`` (``auto``, ``cpu``,
``cuda``, ``coreml``) overrides the choice; the provider each session really uses (``session.get_providers()``,
which drops one that failed to load) is what the status and the sidecars name.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from cosyvoice_mac.checkpoint import CheckpointError
from cosyvoice_mac.frontend.onnx_mapping import FOLDER_OPTION, mapped_model_bytes
from cosyvoice_mac.settings import setting

log = logging.getLogger(__name__)

PROVIDER_ENV = setting("onnx_provider").env
CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
COREML = "CoreMLExecutionProvider"
ACCELERATED = {"cuda": CUDA, "coreml": COREML}  # the setting's names
# The accelerator's provider for the device the networks run on (``auto``): the frontends join them there.
FOR_DEVICE = {"cuda": CUDA, "mps": COREML}


@dataclass(frozen=True)
class ProviderChoice:
    """Which providers to ask onnxruntime for (best first, the CPU last) and why."""

    providers: tuple[str, ...]
    reason: str

    @property
    def first(self) -> str:
        return self.providers[0]


def choose_providers(
    available: list[str], device_type: str, setting: str | None = None, platform: str = sys.platform
) -> ProviderChoice:
    """The providers for a session, from onnxruntime's ``available`` list and the networks' ``device_type``.

    ``setting`` (default ``$COSYVOICE_ONNX_PROVIDER``, else ``auto``): ``auto`` takes the accelerator's
    provider of ``device_type`` when onnxruntime has it (on a Mac, ``platform`` darwin, Core ML whatever
    engine runs the networks: MLX's models sit on the CPU device in torch's terms); ``cuda`` / ``coreml`` ask
    for that one wherever the networks run; ``cpu`` never leaves the CPU. A provider asked for but missing
    falls back to the CPU, saying so.
    """
    setting = (setting if setting is not None else os.environ.get(PROVIDER_ENV, "auto")).strip().lower() or "auto"
    if setting not in ("auto", "cpu", *ACCELERATED):
        raise ValueError(f"{PROVIDER_ENV}={setting!r}; use auto, cpu, cuda or coreml")
    if setting == "cpu":
        return ProviderChoice((CPU,), f"{PROVIDER_ENV}=cpu")
    wanted = ACCELERATED.get(setting) or FOR_DEVICE.get("mps" if platform == "darwin" else device_type)
    if wanted is None:
        return ProviderChoice((CPU,), f"the networks run on {device_type}: the frontends run on the CPU beside them")
    if wanted not in available:
        package = "onnxruntime-gpu" if wanted == CUDA else "the standard macOS onnxruntime wheel"
        return ProviderChoice((CPU,), f"this onnxruntime has no {wanted} (it comes with {package}); on the CPU")
    why = f"{PROVIDER_ENV}={setting}" if setting != "auto" else f"the networks run on {device_type}"
    return ProviderChoice((wanted, CPU), f"{wanted}: {why}")


@cache
def preload_cuda_libraries() -> None:
    """Load CUDA and cuDNN for onnxruntime's CUDA provider from the nvidia pip packages, once, before the first
    CUDA session: ``onnxruntime.preload_dlls()`` (onnxruntime-gpu >= 1.21; absent elsewhere, then a no-op).

    Without it the provider finds them only on the loader's path or where an imported torch of the same CUDA
    major already loaded them; a library missing still only costs the CPU fallback below. What onnxruntime
    prints about it goes to the log, not to stdout.
    """
    import onnxruntime

    if not hasattr(onnxruntime, "preload_dlls"):
        return
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said):
            onnxruntime.preload_dlls()
    except Exception as error:  # a loader error must not stop the CPU fallback
        said.write(f"{type(error).__name__}: {error}")
    if said.getvalue().strip():
        log.warning("onnxruntime.preload_dlls: %s", said.getvalue().strip())


def open_session(
    onnx_path: str | Path,
    intra_op_threads: int,
    role: str,
    *,
    map_weights: bool = False,
    device_type: str = "cpu",
):
    """``(session, provider, reason)``: an onnxruntime session with full graph optimisation, on the provider
    :func:`choose_providers` picks for ``device_type`` (``provider`` is the one the session really uses).

    ``role`` names the model in errors ("speech tokenizer", "speaker encoder"). ``map_weights`` (low-memory
    mode) lets onnxruntime memory-map the weights from the file instead of copying them
    (:mod:`cosyvoice_mac.frontend.onnx_mapping`). If the accelerated session cannot be made, a CPU one is.
    """
    import onnxruntime

    path = Path(onnx_path)
    if not path.is_file():
        raise CheckpointError(f"{role} model {path} is missing; the model folder must contain it")
    if intra_op_threads < 1:
        raise ValueError(f"intra_op_threads must be >= 1, got {intra_op_threads}")
    choice = choose_providers(onnxruntime.get_available_providers(), device_type)
    if choice.first == CUDA:
        preload_cuda_libraries()
    try:
        model: str | bytes = mapped_model_bytes(path) if map_weights else str(path)
    except Exception as error:  # a file that is no ONNX model
        raise CheckpointError(f"cannot load {role} model {path}: {error}") from error

    def make(providers: tuple[str, ...]):
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = intra_op_threads
        if map_weights:
            options.add_session_config_entry(FOLDER_OPTION, str(path.parent))
        return onnxruntime.InferenceSession(model, sess_options=options, providers=list(providers))

    reason = choice.reason
    try:
        session = make(choice.providers)
    except Exception as error:  # onnxruntime raises its own exception types for bad files
        if choice.providers == (CPU,):
            raise CheckpointError(f"cannot load {role} model {path}: {error}") from error
        reason = f"{choice.first} could not run the {role} ({type(error).__name__}: {error}); on the CPU"
        log.warning(reason)
        try:
            session = make((CPU,))
        except Exception as cpu_error:
            raise CheckpointError(f"cannot load {role} model {path}: {cpu_error}") from cpu_error
    provider = session.get_providers()[0]
    if provider != choice.first and reason == choice.reason:  # onnxruntime dropped a provider that did not load
        reason = f"{choice.first} did not load in onnxruntime; on the CPU"
        log.warning("%s: %s", role, reason)
    return session, provider, reason
