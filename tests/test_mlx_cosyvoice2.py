"""CosyVoice2's MLX flow and vocoder against the PyTorch modules, beyond the tiny parity model.

The parity suite (tests/test_parity_mlx.py) checks the reference's vectors on the tiny folder, whose
U-Net has one transformer block per level; the released model has four and twelve mid blocks. Here
random PyTorch weights with several blocks per level, non-zero relative-position biases and a small
chunk go through the same conversion into MLX, and the MLX flow must give the PyTorch flow's mels:
full attention, chunk-causal, and after a cached prefix on both of its mask paths. The official-format
checkpoints load through the converted-weights cache.
"""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("mlx.core", reason="needs mlx (Linux: pip install 'mlx[cpu]')")

import mlx.core as mx  # noqa: E402
import torch  # noqa: E402

from cosyvoice_mac.config import read_yaml_config  # noqa: E402
from cosyvoice_mac.mlx import convert  # noqa: E402
from cosyvoice_mac.mlx.flow import KEY_MAPS, MlxFlow  # noqa: E402
from cosyvoice_mac.mlx.hift import load_mlx_hift  # noqa: E402
from cosyvoice_mac.models.flow import Flow, FlowConfig  # noqa: E402
from cosyvoice_mac.models.vocoder import GaussianSourceNoise, load_hift  # noqa: E402
from cosyvoice_mac.versions import CONFORMER  # noqa: E402
from tests.parity.common import assert_close, parity_dir  # noqa: E402

TINY = parity_dir() / "cosyvoice2_tiny"
CHUNK_TOKENS = 5  # attention chunk: 5 tokens, 10 mel frames
PROMPT_TOKENS = 13
PREFIX_TOKENS = 10  # two chunks, leaving the 3 look-ahead tokens of prompt after them


def _config() -> FlowConfig:
    config = FlowConfig.from_yaml(read_yaml_config(TINY / "cosyvoice2.yaml")["flow"])
    estimator = dataclasses.replace(config.estimator, n_blocks=2, num_mid_blocks=3, static_chunk_size=2 * CHUNK_TOKENS)
    encoder = dataclasses.replace(config.encoder, static_chunk_size=CHUNK_TOKENS)
    return dataclasses.replace(config, estimator=estimator, encoder=encoder)


@pytest.fixture(scope="module")
def flows() -> tuple[Flow, MlxFlow]:
    torch.manual_seed(0)
    config = _config()
    reference = Flow(config).eval()
    with torch.no_grad():  # the default init leaves these zero: make them take part
        for name, parameter in reference.named_parameters():
            if "pos_bias" in name or "norm" in name:
                parameter.add_(0.3 * torch.randn_like(parameter))
    ours = MlxFlow(config)
    ours.load_weights(list(convert.convert_state(reference.state_dict(), KEY_MAPS[CONFORMER]).items()), strict=True)
    return reference, ours


def _prompt(config: FlowConfig, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    return (
        torch.randint(0, config.vocab_size, (1, PROMPT_TOKENS), generator=generator),
        torch.randn(1, 2 * PROMPT_TOKENS, 80, generator=generator),
        torch.randn(1, 192, generator=generator),
    )


def _tokens(config: FlowConfig, count: int) -> torch.Tensor:
    return torch.randint(0, config.vocab_size, (1, count), generator=torch.Generator().manual_seed(2))


@pytest.mark.parametrize(("streaming", "finalize"), [(False, True), (True, False), (True, True)])
def test_the_mlx_flow_gives_the_torch_mel_with_several_blocks_per_level(flows, streaming, finalize):
    reference, ours = flows
    prompt, tokens = _prompt(reference.config), _tokens(reference.config, 17)
    expected = reference.inference(tokens, *prompt, streaming=streaming, finalize=finalize)
    actual = ours.inference(tokens, *prompt, streaming=streaming, finalize=finalize)
    assert_close(actual, expected, "mel", f"MLX CosyVoice2 flow, streaming={streaming}, finalize={finalize}")


@pytest.mark.parametrize("new_tokens", [4, 12])  # 8 new frames: one chunk sees every key (no mask); 24: masked
def test_a_cached_prefix_changes_nothing_but_the_work(flows, new_tokens):
    reference, ours = flows
    prompt, tokens = _prompt(reference.config), _tokens(reference.config, new_tokens)
    prefix = ours.build_prefix(*prompt, tokens=PREFIX_TOKENS)
    attention = ours.decoder.estimator.attention_mask
    new_frames = 2 * (PROMPT_TOKENS + new_tokens - 3 - PREFIX_TOKENS)
    assert (attention(new_frames, True, prefix.frames) is None) == (new_tokens == 4)
    with_prefix = ours.inference(tokens, *prompt, streaming=True, finalize=False, prefix=prefix)
    from_scratch = ours.inference(tokens, *prompt, streaming=True, finalize=False)
    assert_close(with_prefix, from_scratch, "mel", "MLX flow after a cached prefix")
    expected = reference.inference(tokens, *prompt, streaming=True, finalize=False)
    assert_close(with_prefix, expected, "mel", "MLX flow after a cached prefix, against torch")


def test_the_cosyvoice2_checkpoints_load_through_the_cache(tmp_path, monkeypatch):
    flow_config = FlowConfig.from_yaml(read_yaml_config(TINY / "cosyvoice2.yaml")["flow"])
    first = MlxFlow.from_checkpoint(flow_config, TINY / "flow.pt", cache_dir=tmp_path)
    vocoder = load_mlx_hift(TINY / "cosyvoice2.yaml", TINY / "hift.pt", cache_dir=tmp_path)
    assert not vocoder.config.causal and isinstance(vocoder.default_noise, GaussianSourceNoise)  # CosyVoice2's
    assert len(list(tmp_path.glob("*.safetensors"))) == 2

    def no_reading(*args, **kwargs):
        raise AssertionError("a checkpoint was read again despite the cache")

    monkeypatch.setattr(convert, "load_checkpoint", no_reading)
    again = MlxFlow.from_checkpoint(flow_config, TINY / "flow.pt", cache_dir=tmp_path)
    from mlx.utils import tree_flatten

    for (name, a), (_, b) in zip(tree_flatten(first.parameters()), tree_flatten(again.parameters())):
        assert mx.array_equal(a, b), name
    mel = torch.randn(1, 80, 30, generator=torch.Generator().manual_seed(3))
    cached = load_mlx_hift(TINY / "cosyvoice2.yaml", TINY / "hift.pt", cache_dir=tmp_path)
    wave, _ = cached.inference(mel, noise=GaussianSourceNoise(seed=5))
    with torch.inference_mode():
        expected, _ = load_hift(TINY / "cosyvoice2.yaml", TINY / "hift.pt").inference(
            mel, noise=GaussianSourceNoise(seed=5)
        )
    assert_close(wave, expected, "waveform", "cached MLX CosyVoice2 vocoder")


def test_the_vocoder_source_cache_replaces_the_start_of_the_source():
    vocoder = load_mlx_hift(TINY / "cosyvoice2.yaml", TINY / "hift.pt")
    mel = torch.randn(1, 80, 20, generator=torch.Generator().manual_seed(4))
    cache = torch.full((1, 1, 960), 0.25)
    wave, source = vocoder.inference(mel, cache_source=cache, noise=GaussianSourceNoise(seed=6))
    assert torch.equal(source[..., :960], cache) and source.shape == (1, 1, 480 * 20) and wave.shape == (1, 480 * 20)
    with pytest.raises(ValueError, match="cache_source must have shape"):
        vocoder.inference(mel, cache_source=torch.zeros(1, 1, 480 * 21))
    with pytest.raises(ValueError, match="finalize=False is for the causal CosyVoice3 vocoder"):
        vocoder.inference(mel, finalize=False)
