"""Behaviour of the flow wrapper that the golden vectors do not cover: shapes, bad input, limits,
determinism, streaming prefix stability, dtypes and devices. Uses the tiny v3 config with random weights."""

from __future__ import annotations

import pytest
import torch

from cosyvoice_mac.checkpoint import load_checkpoint
from cosyvoice_mac.config import ConfigError, read_yaml_config
from cosyvoice_mac.models.flow import (
    MAX_SECONDS,
    NOISE_FRAMES,
    Flow,
    FlowConfig,
    FlowInputError,
    PreLookaheadLayer,
    fixed_start_noise,
)
from tests.parity.common import parity_dir

TINY = parity_dir()
PROMPT_TOKENS = 25  # 50 prompt frames: one streaming attention chunk, so chunk and hop boundaries align


def _flow_node(version: str) -> dict:
    return read_yaml_config(TINY / f"{version}_tiny" / f"{version}.yaml")["flow"]


@pytest.fixture(scope="module")
def flow() -> Flow:
    torch.manual_seed(0)
    return Flow(FlowConfig.from_yaml(_flow_node("cosyvoice3"))).eval()


def _inputs(n_tokens: int, prompt_tokens: int = PROMPT_TOKENS, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    return dict(
        tokens=torch.randint(0, 512, (1, n_tokens), generator=generator, dtype=torch.int32),
        prompt_tokens=torch.randint(0, 512, (1, prompt_tokens), generator=generator),
        prompt_feat=torch.randn(1, 2 * prompt_tokens, 80, generator=generator),
        embedding=torch.randn(1, 192, generator=generator),
    )


def test_output_covers_generated_tokens_only(flow):
    assert flow.inference(**_inputs(30)).shape == (1, 80, 60)
    assert flow.inference(**_inputs(30), streaming=True, finalize=False).shape == (1, 80, 54)
    assert flow.inference(**_inputs(7, prompt_tokens=0)).shape == (1, 80, 14)


def test_same_input_gives_identical_mel(flow):
    first = flow.inference(**_inputs(20))
    second = flow.inference(**_inputs(20))
    assert torch.isfinite(first).all()
    assert torch.equal(first, second)


def test_streaming_chunk_frames_are_reproduced_by_the_longer_call(flow):
    inputs = _inputs(50)
    hop = 25
    chunk = flow.inference(**{**inputs, "tokens": inputs["tokens"][:, : hop + 3]}, streaming=True, finalize=False)
    whole = flow.inference(**inputs, streaming=True, finalize=True)
    torch.testing.assert_close(chunk, whole[:, :, : 2 * hop], atol=1e-5, rtol=1e-5)


def test_token_id_outside_vocabulary_is_refused(flow):
    inputs = _inputs(10)
    inputs["tokens"][0, 3] = 512
    with pytest.raises(FlowInputError, match=r"id 512.*0\.\.511"):
        flow.inference(**inputs)
    inputs = _inputs(10)
    inputs["prompt_tokens"][0, 0] = 9999
    with pytest.raises(FlowInputError, match="prompt_tokens"):
        flow.inference(**inputs)


def test_sequence_longer_than_the_fixed_noise_is_refused_before_any_work(flow):
    too_many = NOISE_FRAMES // 2 - PROMPT_TOKENS + 1
    with pytest.raises(FlowInputError, match=rf"{NOISE_FRAMES} mel frames \({MAX_SECONDS} s"):
        flow.inference(**_inputs(too_many))
    assert MAX_SECONDS == 300
    assert fixed_start_noise(NOISE_FRAMES).shape == (1, 80, NOISE_FRAMES)
    with pytest.raises(FlowInputError):
        fixed_start_noise(NOISE_FRAMES + 1)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(tokens=torch.zeros(1, 4)), "integer"),
        (dict(tokens=torch.zeros(2, 4, dtype=torch.long)), r"shape \(1, N\)"),
        (dict(embedding=torch.zeros(1, 80)), r"\(1, 192\)"),
        (dict(prompt_feat=torch.zeros(1, 50, 100)), "prompt_feat"),
        (dict(prompt_feat=torch.zeros(1, 200, 80)), "frames per prompt token"),
    ],
)
def test_malformed_inputs_get_a_clear_error(flow, change, message):
    with pytest.raises(FlowInputError, match=message):
        flow.inference(**{**_inputs(10), **change})


def test_unfinished_chunk_needs_more_than_the_lookahead(flow):
    with pytest.raises(FlowInputError, match="look-ahead"):
        flow.inference(**_inputs(3), streaming=True, finalize=False)


def test_bfloat16_flow_runs_and_keeps_rope_frequencies_exact():
    torch.manual_seed(0)
    reference = Flow(FlowConfig.from_yaml(_flow_node("cosyvoice3"))).eval()
    half = Flow(reference.config).eval()
    half.load_state_dict(reference.state_dict())
    half.to(torch.bfloat16)
    assert half.decoder.estimator.rotary_embed.inv_freq.dtype == torch.float32
    mel = half.inference(**_inputs(20))
    assert mel.dtype == torch.float32 and torch.isfinite(mel).all()
    assert (mel - reference.inference(**_inputs(20))).abs().mean() < 0.02


def _accelerator() -> torch.device | None:
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return None


@pytest.mark.skipif(_accelerator() is None, reason="no CUDA or MPS device")
def test_cpu_inputs_run_on_the_module_device(flow):
    device = _accelerator()
    moved = Flow(flow.config).eval()
    moved.load_state_dict(flow.state_dict())
    moved.to(device)
    mel = moved.inference(**_inputs(20))
    assert mel.device.type == device.type
    torch.testing.assert_close(mel.cpu(), flow.inference(**_inputs(20)), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("version", ["cosyvoice3", "cosyvoice2"])
def test_random_init_model_has_the_checkpoint_keys_and_shapes(version):
    built = Flow(FlowConfig.from_yaml(_flow_node(version))).state_dict()
    official = load_checkpoint(TINY / f"{version}_tiny" / "flow.pt")
    assert {k: tuple(v.shape) for k, v in built.items()} == {k: tuple(v.shape) for k, v in official.items()}
    if version == "cosyvoice3":
        inv_freq = "decoder.estimator.rotary_embed.inv_freq"
        torch.testing.assert_close(built[inv_freq], official[inv_freq])


def test_unknown_flow_class_is_a_config_error():
    node = {**_flow_node("cosyvoice3"), "_tag": "new:cosyvoice.flow.flow.MaskedDiffWithXvec"}
    with pytest.raises(ConfigError, match="CausalMaskedDiffWithDiT"):
        FlowConfig.from_yaml(node)


def test_lookahead_context_gives_the_frames_a_longer_input_gives():
    torch.manual_seed(0)
    layer = PreLookaheadLayer(8, 16, pre_lookahead_len=3)
    x = torch.randn(1, 12, 8)
    torch.testing.assert_close(layer(x[:, :9], context=x[:, 9:]), layer(x)[:, :9])
    with pytest.raises(ValueError, match="at most 3"):
        layer(x[:, :8], context=x[:, 8:])


def test_padded_frames_do_not_change_the_valid_frames(flow):
    estimator = flow.decoder.estimator
    generator = torch.Generator().manual_seed(2)
    x, mu, cond = (torch.randn(1, 80, 60, generator=generator) for _ in range(3))
    spks, t = torch.randn(1, 80, generator=generator), torch.tensor([0.3])
    mask = torch.ones(1, 1, 60)
    mask[:, :, 50:] = 0
    with torch.inference_mode():
        for streaming in (False, True):
            padded = estimator(x, mask, mu, t, spks, cond, streaming=streaming)
            trimmed = estimator(x[..., :50], mask[..., :50], mu[..., :50], t, spks, cond[..., :50], streaming=streaming)
            torch.testing.assert_close(padded[..., :50], trimmed, atol=1e-5, rtol=1e-5)
