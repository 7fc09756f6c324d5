"""Behaviour of the CosyVoice2 flow parts: conformer encoder, U-Net estimator, chunk masks, configs."""

from __future__ import annotations

import pytest
import torch

from cosyvoice_mac.checkpoint import load_checkpoint, load_strict
from cosyvoice_mac.config import ConfigError, read_yaml_config
from cosyvoice_mac.models.flow.conformer import (
    ConformerConfig,
    UpsampleConformerEncoder,
    _relative_shift,
    relative_position_encoding,
)
from cosyvoice_mac.models.flow.masks import chunk_causal_mask
from cosyvoice_mac.models.flow.unet import CausalConditionalDecoder, UNetConfig
from tests.parity.common import parity_dir

TINY_DIR = parity_dir() / "cosyvoice2_tiny"
WIDTH = 16
TOKEN_CHUNK = 5
FRAME_CHUNK = 8


def _random(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def encoder() -> UpsampleConformerEncoder:
    torch.manual_seed(0)
    config = ConformerConfig(
        input_size=WIDTH,
        output_size=WIDTH,
        attention_heads=2,
        linear_units=32,
        num_blocks=2,
        static_chunk_size=TOKEN_CHUNK,
    )
    model = UpsampleConformerEncoder(config).eval()
    with torch.no_grad():  # non-zero biases so that u/v actually take part
        for layer in [*model.encoders, *model.up_encoders]:
            layer.self_attn.pos_bias_u.normal_()
            layer.self_attn.pos_bias_v.normal_()
    return model


@pytest.fixture(scope="module")
def estimator() -> CausalConditionalDecoder:
    torch.manual_seed(0)
    config = UNetConfig(
        in_channels=320,
        out_channels=80,
        channels=16,
        attention_head_dim=8,
        num_heads=2,
        n_blocks=1,
        num_mid_blocks=1,
        static_chunk_size=FRAME_CHUNK,
    )
    return CausalConditionalDecoder(config).eval()


def _estimator_inputs(batch: int, frames: int, seed: int = 0) -> dict[str, torch.Tensor]:
    return dict(
        x=_random(batch, 80, frames, seed=seed),
        mask=torch.ones(batch, 1, frames),
        mu=_random(batch, 80, frames, seed=seed + 1),
        t=torch.full((batch,), 0.3),
        spks=_random(batch, 80, seed=seed + 2),
        cond=_random(batch, 80, frames, seed=seed + 3),
    )


def _prefix(inputs: dict[str, torch.Tensor], frames: int) -> dict[str, torch.Tensor]:
    return {key: value[..., :frames] if value.dim() == 3 else value for key, value in inputs.items()}


# --- chunk masks and relative positions -------------------------------------------------------


def test_chunk_mask_lets_a_frame_see_its_own_chunk_and_all_earlier_ones():
    expected = torch.tensor(
        [[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool
    )
    assert torch.equal(chunk_causal_mask(5, 2, torch.device("cpu")), expected)
    assert chunk_causal_mask(3, 25, torch.device("cpu")).all()


def test_chunk_mask_rejects_a_non_positive_chunk():
    with pytest.raises(ValueError, match="chunk_size"):
        chunk_causal_mask(4, 0, torch.device("cpu"))


def test_relative_position_rows_run_from_offset_l_minus_1_down_to_minus_l_plus_1():
    length, width = 6, 8
    table = relative_position_encoding(length, width, torch.device("cpu"), torch.float32)
    assert table.shape == (1, 2 * length - 1, width)
    zero_offset = table[0, length - 1]
    assert torch.equal(zero_offset, torch.tensor([0.0, 1.0] * (width // 2)))
    # offsets +p and -p: sines change sign, cosines do not; the first frequency is 1 rad per step
    for p in range(1, length):
        plus, minus = table[0, length - 1 - p], table[0, length - 1 + p]
        torch.testing.assert_close(plus[0::2], -minus[0::2])
        torch.testing.assert_close(plus[1::2], minus[1::2])
        torch.testing.assert_close(plus[0], torch.sin(torch.tensor(float(p))))


def test_relative_shift_indexes_scores_by_key_offset():
    batch, heads, length = 2, 3, 5
    scores = _random(batch, heads, length, 2 * length - 1)
    shifted = _relative_shift(scores)
    assert shifted.shape == (batch, heads, length, length)
    for i in range(length):
        for j in range(length):
            assert torch.equal(shifted[:, :, i, j], scores[:, :, i, length - 1 - i + j])


# --- encoder --------------------------------------------------------------------------------


def test_encoder_doubles_the_time_axis(encoder):
    with torch.inference_mode():
        out = encoder(_random(2, 12, WIDTH), None, streaming=False)
    assert out.shape == (2, 24, WIDTH)


def test_encoder_rejects_embeddings_of_the_wrong_width(encoder):
    with pytest.raises(ValueError, match="token embeddings"):
        encoder(_random(1, 12, WIDTH + 1))


def test_encoder_streaming_attention_differs_from_full_attention(encoder):
    tokens = _random(1, 3 * TOKEN_CHUNK, WIDTH)
    with torch.inference_mode():
        full = encoder(tokens, None, streaming=False)
        chunked = encoder(tokens, None, streaming=True)
    assert not torch.allclose(full, chunked, atol=1e-3)
    # one chunk or less: the chunk mask allows everything, so both modes agree
    short = tokens[:, :TOKEN_CHUNK]
    with torch.inference_mode():
        torch.testing.assert_close(encoder(short, None, streaming=True), encoder(short, None, streaming=False))


def test_encoder_streaming_frames_of_a_finished_chunk_do_not_change_when_tokens_arrive(encoder):
    tokens = _random(1, 3 * TOKEN_CHUNK, WIDTH)
    lookahead = encoder.config.pre_lookahead_len
    ratio = encoder.config.upsample_stride
    with torch.inference_mode():
        later = encoder(tokens, None, streaming=True)
        first_chunk = encoder(tokens[:, :TOKEN_CHUNK], tokens[:, TOKEN_CHUNK : TOKEN_CHUNK + lookahead], streaming=True)
        without_context = encoder(tokens[:, :TOKEN_CHUNK], None, streaming=True)
    torch.testing.assert_close(first_chunk, later[:, : ratio * TOKEN_CHUNK], atol=1e-5, rtol=1e-5)
    # the look-ahead context matters: zeros instead of the real next tokens change the last frames
    assert not torch.allclose(without_context[:, -1], first_chunk[:, -1], atol=1e-4)


def test_encoder_is_deterministic(encoder):
    tokens = _random(1, 11, WIDTH)
    with torch.inference_mode():
        assert torch.equal(encoder(tokens, None, streaming=True), encoder(tokens, None, streaming=True))


# --- estimator ------------------------------------------------------------------------------


def test_estimator_maps_noisy_mel_to_a_velocity_of_the_same_shape(estimator):
    inputs = _estimator_inputs(2, 20)
    with torch.inference_mode():
        assert estimator(**inputs).shape == (2, 80, 20)


def test_estimator_rejects_inputs_that_do_not_stack_to_its_channels(estimator):
    inputs = _estimator_inputs(1, 10)
    inputs["cond"] = inputs["cond"][:, :40]
    with pytest.raises(ValueError, match="320"):
        estimator(**inputs)


def test_estimator_streaming_attention_differs_from_full_attention(estimator):
    inputs = _estimator_inputs(1, 3 * FRAME_CHUNK)
    with torch.inference_mode():
        assert not torch.allclose(estimator(**inputs, streaming=True), estimator(**inputs), atol=1e-3)


def test_estimator_streaming_output_of_a_prefix_is_stable(estimator):
    inputs = _estimator_inputs(1, 3 * FRAME_CHUNK)
    with torch.inference_mode():
        whole = estimator(**inputs, streaming=True)
        prefix = estimator(**_prefix(inputs, 2 * FRAME_CHUNK), streaming=True)
    torch.testing.assert_close(prefix, whole[..., : 2 * FRAME_CHUNK], atol=1e-5, rtol=1e-5)


def test_estimator_ignores_padded_frames_and_zeroes_their_output(estimator):
    frames, valid = 20, 13
    inputs = _estimator_inputs(2, frames)
    inputs["mask"][1, :, valid:] = 0
    with torch.inference_mode():
        batched = estimator(**inputs)
        alone = estimator(**_prefix({k: v[1:] for k, v in inputs.items()}, valid))
    assert torch.all(batched[1, :, valid:] == 0)
    torch.testing.assert_close(batched[1:, :, :valid], alone, atol=1e-5, rtol=1e-5)


def test_estimator_is_deterministic(estimator):
    inputs = _estimator_inputs(2, 17)
    with torch.inference_mode():
        assert torch.equal(estimator(**inputs, streaming=True), estimator(**inputs, streaming=True))


def test_bfloat16_runs_stay_finite(encoder, estimator):
    encoder_bf16 = UpsampleConformerEncoder(encoder.config).eval()
    encoder_bf16.load_state_dict(encoder.state_dict())
    estimator_bf16 = CausalConditionalDecoder(estimator.config).eval()
    estimator_bf16.load_state_dict(estimator.state_dict())
    encoder_bf16.to(torch.bfloat16)
    estimator_bf16.to(torch.bfloat16)
    inputs = {k: v.to(torch.bfloat16) for k, v in _estimator_inputs(2, 3 * FRAME_CHUNK).items()}
    inputs["t"] = inputs["t"].float()
    with torch.inference_mode():
        features = encoder_bf16(_random(1, 12, WIDTH).to(torch.bfloat16), None, streaming=True)
        velocity = estimator_bf16(**inputs, streaming=True)
    assert features.dtype == velocity.dtype == torch.bfloat16
    assert torch.isfinite(features).all() and torch.isfinite(velocity).all()


# --- configs and checkpoint keys ------------------------------------------------------------

OFFICIAL_ENCODER = dict(
    output_size=512,
    attention_heads=8,
    linear_units=2048,
    num_blocks=6,
    dropout_rate=0.1,
    positional_dropout_rate=0.1,
    attention_dropout_rate=0.1,
    normalize_before=True,
    input_layer="linear",
    pos_enc_layer_type="rel_pos_espnet",
    selfattention_layer_type="rel_selfattn",
    input_size=512,
    use_cnn_module=False,
    macaron_style=False,
    static_chunk_size=25,
)
OFFICIAL_ESTIMATOR = dict(
    in_channels=320,
    out_channels=80,
    channels=[256],
    dropout=0.0,
    attention_head_dim=64,
    n_blocks=4,
    num_mid_blocks=12,
    num_heads=8,
    act_fn="gelu",
    static_chunk_size=50,
    num_decoding_left_chunks=-1,
)


def test_configs_read_the_official_sizes_and_ignore_unknown_keys():
    encoder = ConformerConfig.from_yaml({**OFFICIAL_ENCODER, "_tag": "new:x.UpsampleConformerEncoder", "extra": 1})
    assert (encoder.input_size, encoder.output_size, encoder.attention_heads) == (512, 512, 8)
    assert (encoder.linear_units, encoder.num_blocks, encoder.num_up_blocks, encoder.static_chunk_size) == (
        2048,
        6,
        4,
        25,
    )
    unet = UNetConfig.from_yaml({**OFFICIAL_ESTIMATOR, "extra": 1})
    assert (unet.channels, unet.n_blocks, unet.num_mid_blocks, unet.num_heads, unet.attention_head_dim) == (
        256,
        4,
        12,
        8,
        64,
    )
    assert unet.static_chunk_size == 50


@pytest.mark.parametrize(
    "change",
    [{"macaron_style": True}, {"use_cnn_module": True}, {"input_layer": "conv2d"}, {"attention_heads": 7}],
)
def test_encoder_config_rejects_unsupported_architectures(change):
    with pytest.raises(ConfigError, match="flow.encoder"):
        ConformerConfig.from_yaml({**OFFICIAL_ENCODER, **change})


def test_encoder_config_applies_upstream_defaults_for_absent_options():
    node = {key: value for key, value in OFFICIAL_ENCODER.items() if key != "macaron_style"}
    with pytest.raises(ConfigError, match="macaron_style"):  # upstream default is True
        ConformerConfig.from_yaml(node)


@pytest.mark.parametrize("change", [{"channels": [256, 256]}, {"act_fn": "snake"}])
def test_estimator_config_rejects_unsupported_architectures(change):
    with pytest.raises(ConfigError, match="flow.decoder.estimator"):
        UNetConfig.from_yaml({**OFFICIAL_ESTIMATOR, **change})


@pytest.mark.skipif(not (TINY_DIR / "flow.pt").is_file(), reason="tiny parity model not available")
def test_tiny_checkpoint_keys_and_shapes_match_both_modules():
    flow_node = read_yaml_config(TINY_DIR / "cosyvoice2.yaml")["flow"]
    state = load_checkpoint(TINY_DIR / "flow.pt")

    def under(prefix: str) -> dict[str, torch.Tensor]:
        return {key.removeprefix(prefix): value for key, value in state.items() if key.startswith(prefix)}

    load_strict(
        UpsampleConformerEncoder(ConformerConfig.from_yaml(flow_node["encoder"])), under("encoder."), source="flow.pt"
    )
    estimator_node = flow_node["decoder"]["estimator"]
    load_strict(
        CausalConditionalDecoder(UNetConfig.from_yaml(estimator_node)), under("decoder.estimator."), source="flow.pt"
    )
