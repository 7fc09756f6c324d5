"""CosyVoice2 flow parity: the U-Net estimator alone, then the whole flow (conformer encoder + CFM)
non-streaming and streaming, against ``cosyvoice2_tiny/vectors/flow.safetensors``."""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from cosyvoice_mac.checkpoint import load_checkpoint, load_strict
from cosyvoice_mac.config import read_yaml_config
from cosyvoice_mac.models.flow.flow import Flow, FlowConfig
from cosyvoice_mac.models.flow.unet import CausalConditionalDecoder, UNetConfig
from tests.parity.common import ParityContext, assert_close

ESTIMATOR_PREFIX = "decoder.estimator."


@functools.lru_cache(maxsize=2)
def _flow_yaml(model_dir: Path) -> dict:
    return read_yaml_config(model_dir / "cosyvoice2.yaml")["flow"]


@functools.lru_cache(maxsize=2)
def _flow(model_dir: Path) -> Flow:
    return Flow.from_checkpoint(FlowConfig.from_yaml(_flow_yaml(model_dir)), model_dir / "flow.pt")


def _inputs(ctx: ParityContext) -> dict[str, torch.Tensor]:
    inputs = ctx.vectors("inputs")
    return dict(
        prompt_tokens=inputs["prompt_speech_token"],
        prompt_feat=inputs["prompt_feat"],
        embedding=inputs["embedding"],
    )


def check_estimator_first_step(ctx: ParityContext) -> None:
    vectors = ctx.vectors("flow")
    estimator = CausalConditionalDecoder(UNetConfig.from_yaml(_flow_yaml(ctx.model_dir)["decoder"]["estimator"]))
    state = load_checkpoint(ctx.model_dir / "flow.pt")
    load_strict(
        estimator,
        {key.removeprefix(ESTIMATOR_PREFIX): value for key, value in state.items() if key.startswith(ESTIMATOR_PREFIX)},
        source="flow.pt",
    )
    with torch.inference_mode():
        out = estimator.eval()(
            vectors["est_x_in"],
            vectors["est_mask_in"],
            vectors["est_mu_in"],
            vectors["est_t_in"],
            vectors["est_spks_in"],
            vectors["est_cond_in"],
            streaming=False,
        )
    assert_close(out, vectors["est_out_step1"], "flow", "cosyvoice2 estimator, first Euler step")


def check_mel_nonstream(ctx: ParityContext) -> None:
    tokens = ctx.vectors("inputs")["flow_tokens"]
    mel = _flow(ctx.model_dir).inference(tokens, **_inputs(ctx), streaming=False, finalize=True)
    assert_close(mel, ctx.vectors("flow")["mel_nonstream"], "mel", "cosyvoice2 flow, non-streaming")


def check_mel_stream_chunk1(ctx: ParityContext) -> None:
    tokens = ctx.vectors("inputs")["flow_tokens"][:, : ctx.case_params.stream_chunk1_tokens]
    mel = _flow(ctx.model_dir).inference(tokens, **_inputs(ctx), streaming=True, finalize=False)
    assert_close(mel, ctx.vectors("flow")["mel_stream_chunk1"], "mel", "cosyvoice2 flow, first streaming chunk")


def check_mel_stream_chunk1_cached_prefix(ctx: ParityContext) -> None:
    """The first chunk again, with the prompt's first two chunks taken from a cached flow prefix."""
    flow = _flow(ctx.model_dir)
    prompt = _inputs(ctx)
    prefix = flow.build_prefix(*prompt.values(), tokens=ctx.case_params.prompt_prefix_tokens)
    tokens = ctx.vectors("inputs")["flow_tokens"][:, : ctx.case_params.stream_chunk1_tokens]
    mel = flow.inference(tokens, **prompt, streaming=True, finalize=False, prefix=prefix)
    assert_close(
        mel, ctx.vectors("flow")["mel_stream_chunk1"], "mel", "cosyvoice2 first streaming chunk, cached prefix"
    )


def check_mel_stream_final(ctx: ParityContext) -> None:
    # Upstream's last streaming call uses full attention (stream=False) and keeps the new frames only.
    tokens = ctx.vectors("inputs")["flow_tokens"]
    flow = _flow(ctx.model_dir)
    mel = flow.inference(tokens, **_inputs(ctx), streaming=False, finalize=True)
    new_frames = mel[:, :, flow.config.token_mel_ratio * ctx.case_params.first_stream_hop_tokens :]
    assert_close(new_frames, ctx.vectors("flow")["mel_stream_final"], "mel", "cosyvoice2 flow, final streaming chunk")


CASES_BY_VERSION = {
    "cosyvoice2": {
        "est_out_step1": check_estimator_first_step,
        "mel_nonstream": check_mel_nonstream,
        "mel_stream_chunk1": check_mel_stream_chunk1,
        "mel_stream_chunk1_cached_prefix": check_mel_stream_chunk1_cached_prefix,
        "mel_stream_final": check_mel_stream_final,
    }
}
