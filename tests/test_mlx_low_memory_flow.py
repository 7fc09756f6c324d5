"""The MLX low-memory mode's flow: fp16 storage, float32 arithmetic, for both versions' flows.

CosyVoice3 stores its DiT blocks in fp16; CosyVoice2 its conformer layers and U-Net transformer blocks
(its token front end's ``mlx.flow.STORED_IN_HALF`` rule, applied by the checkpoint read and by the
random-weight build alike). The mel must stay within the gate's relative error of the fp32 golden
vector, the tolerance the PyTorch low-memory flow is held to (tests/test_precision.py, ``gate.MAX_RELATIVE_ERROR``).
"""

from __future__ import annotations

import pytest

pytest.importorskip("mlx.core", reason="needs mlx (Linux: pip install 'mlx[cpu]')")

import mlx.core as mx  # noqa: E402
import torch  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

from cosyvoice_mac.mlx.networks import build_mlx_networks  # noqa: E402
from cosyvoice_mac.pipeline import gate  # noqa: E402
from cosyvoice_mac.pipeline.loading import qwen_config_for  # noqa: E402
from cosyvoice_mac.pipeline.model_dir import ModelFolder  # noqa: E402
from tests.parity.common import ParityContext, parity_dir  # noqa: E402

# The blocks each version stores in fp16, by name; everything else (and every norm) stays float32.
HALF_BLOCKS = {
    "cosyvoice3": ("decoder.estimator.transformer_blocks.",),
    "cosyvoice2": ("encoder.encoders.", "encoder.up_encoders.", "decoder.estimator."),
}


@pytest.fixture
def restored_limits():
    """build_mlx_networks sets MLX's memory and cache limits for this machine: put MLX's back afterwards."""
    memory_before, cache_before = mx.get_memory_limit(), mx.set_cache_limit(0)
    mx.set_cache_limit(cache_before)
    yield
    mx.set_memory_limit(memory_before)
    mx.set_cache_limit(cache_before)


def _half_names(version: str, parameters: dict[str, mx.array]) -> set[str]:
    """The parameters the low-memory mode must store in fp16 (the U-Net's: its transformer blocks only)."""
    prefixes = HALF_BLOCKS[version]
    chosen = {name for name in parameters if name.startswith(prefixes) and ".norm" not in name}
    if version == "cosyvoice2":
        chosen = {n for n in chosen if not n.startswith("decoder.") or ".transformers." in n}
    return chosen


def _relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual.float() - expected.float()).norm() / expected.float().norm()).item()


@pytest.mark.parametrize("version", ["cosyvoice2", "cosyvoice3"])
def test_the_low_memory_flow_stores_fp16_and_keeps_the_mel(version, restored_limits):
    ctx = ParityContext(root=parity_dir(), version=version)
    folder = ModelFolder.open(ctx.model_dir)
    networks = build_mlx_networks(
        folder.config, qwen_config_for(folder), folder=folder, precision="fp32", low_memory=True, cache_dir=None
    )
    flow = networks.flow.mlx
    parameters = dict(tree_flatten(flow.parameters()))
    half = _half_names(version, parameters)
    assert half and all(parameters[name].dtype == mx.float16 for name in half)  # before (v2): all float32
    assert all(parameters[name].dtype == mx.float32 for name in set(parameters) - half)
    assert networks.flow_storage == "float16"
    inputs = ctx.vectors("inputs")
    mel = flow.inference(
        inputs["flow_tokens"], inputs["prompt_speech_token"], inputs["prompt_feat"], inputs["embedding"]
    )
    error = _relative_error(mel, ctx.vectors("flow")["mel_nonstream"])
    assert mel.dtype == torch.float32 and error < gate.MAX_RELATIVE_ERROR, f"relative error {error:.2e}"


@pytest.mark.parametrize("version", ["cosyvoice2", "cosyvoice3"])
def test_the_random_weight_build_stores_by_the_same_rule(version, restored_limits):
    """The random-weight build (bench, doctor) halves the same parameters as the checkpoint read."""
    folder = ModelFolder.open(ParityContext(root=parity_dir(), version=version).model_dir)
    networks = build_mlx_networks(
        folder.config, qwen_config_for(folder), random_weights=True, precision="fp32", low_memory=True
    )
    parameters = dict(tree_flatten(networks.flow.mlx.parameters()))
    half = _half_names(version, parameters)
    assert half and {parameters[name].dtype for name in half} == {mx.float16}
    assert {parameters[name].dtype for name in set(parameters) - half} == {mx.float32}
