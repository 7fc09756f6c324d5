"""Parity of the flow (speech tokens -> mel) with the reference vectors ``vectors/flow.safetensors``.

Every case is version-agnostic. For CosyVoice2, ``flow_v2.py`` checks the U-Net and the mels; here
only the fixed noise and the wrapper's first estimator call (which covers encoder + ``encoder_proj``).
"""

from __future__ import annotations

import hashlib

import torch

from cosyvoice_mac.config import read_yaml_config
from cosyvoice_mac.models.flow import Flow, FlowConfig, fixed_start_noise
from cosyvoice_mac.models.flow.cfm import NOISE_FRAMES
from tests.parity.common import ParityContext, assert_close

_FLOWS: dict[str, Flow] = {}


def _flow(ctx: ParityContext) -> Flow:
    if ctx.version not in _FLOWS:
        node = read_yaml_config(ctx.model_dir / f"{ctx.version}.yaml")["flow"]
        _FLOWS[ctx.version] = Flow.from_checkpoint(FlowConfig.from_yaml(node), ctx.model_dir / "flow.pt")
    return _FLOWS[ctx.version]


def _run(ctx: ParityContext, tokens: torch.Tensor, **flags) -> torch.Tensor:
    inputs = ctx.vectors("inputs")
    return _flow(ctx).inference(
        tokens, inputs["prompt_speech_token"], inputs["prompt_feat"], inputs["embedding"], **flags
    )


def check_noise_z(ctx: ParityContext) -> None:
    expected = ctx.vectors("flow")["noise_z"]
    assert torch.equal(fixed_start_noise(expected.shape[2]), expected), "fixed start noise differs from noise_z"
    full = fixed_start_noise(NOISE_FRAMES).numpy().tobytes()
    recorded = ctx.file_entry(f"{ctx.version}_tiny/vectors/flow.safetensors")["observed"]["rand_noise_sha256"]
    assert hashlib.sha256(full).hexdigest() == recorded, "sha256 of the full noise buffer differs from the manifest"


def check_est_out_step1(ctx: ParityContext) -> None:
    v = ctx.vectors("flow")
    with torch.inference_mode():
        out = _flow(ctx).decoder.estimator(
            v["est_x_in"],
            v["est_mask_in"],
            v["est_mu_in"],
            v["est_t_in"],
            v["est_spks_in"],
            v["est_cond_in"],
            streaming=False,
        )
    assert_close(out, v["est_out_step1"], "flow", "estimator output, first Euler step")


def check_est_inputs_step1(ctx: ParityContext) -> None:
    """The wrapper's first estimator call (noise, features, speaker, prompt condition) equals the recorded one."""
    v = ctx.vectors("flow")
    estimator = _flow(ctx).decoder.estimator
    captured: list[tuple] = []
    handle = estimator.register_forward_pre_hook(lambda module, args: captured.append(args))
    try:
        _run(ctx, ctx.vectors("inputs")["flow_tokens"])
    finally:
        handle.remove()
    first_step = captured[0]
    if first_step[0].shape[0] == 1:  # on a CPU the two CFG branches run as two batch-1 calls, in either order
        branches = sorted(captured[:2], key=lambda args: float(args[4].abs().sum()), reverse=True)
        first_step = tuple(torch.cat(parts) for parts in zip(*branches))
    for name, actual in zip(("x", "mask", "mu", "t", "spks", "cond"), first_step):
        assert_close(actual, v[f"est_{name}_in"], "flow", f"estimator input {name}, first Euler step")


def check_mel_nonstream(ctx: ParityContext) -> None:
    mel = _run(ctx, ctx.vectors("inputs")["flow_tokens"], streaming=False, finalize=True)
    assert_close(mel, ctx.vectors("flow")["mel_nonstream"], "mel", "non-streaming mel")


def check_mel_stream_chunk1(ctx: ParityContext) -> None:
    tokens = ctx.vectors("inputs")["flow_tokens"][:, : ctx.case_params.stream_chunk1_tokens]
    mel = _run(ctx, tokens, streaming=True, finalize=False)
    assert_close(mel, ctx.vectors("flow")["mel_stream_chunk1"], "mel", "first streaming chunk mel")


def check_mel_stream_chunk1_cached_prefix(ctx: ParityContext) -> None:
    """The first chunk again, with the prompt's first two chunks taken from a cached flow prefix."""
    inputs = ctx.vectors("inputs")
    flow = _flow(ctx)
    prompt = (inputs["prompt_speech_token"], inputs["prompt_feat"], inputs["embedding"])
    params = ctx.case_params
    prefix = flow.build_prefix(*prompt, tokens=params.prompt_prefix_tokens)
    mel = flow.inference(
        inputs["flow_tokens"][:, : params.stream_chunk1_tokens], *prompt, streaming=True, finalize=False, prefix=prefix
    )
    assert_close(mel, ctx.vectors("flow")["mel_stream_chunk1"], "mel", "first streaming chunk mel, cached prefix")


def check_mel_stream_final(ctx: ParityContext) -> None:
    expected = ctx.vectors("flow")["mel_stream_final"]
    mel = _run(ctx, ctx.vectors("inputs")["flow_tokens"], streaming=False, finalize=True)
    offset = _flow(ctx).config.token_mel_ratio * ctx.case_params.first_stream_hop_tokens
    assert_close(mel[:, :, offset:], expected, "mel", "final streaming chunk mel (frames after the first chunk)")


def check_case_params_match_the_model(ctx: ParityContext) -> None:
    """The manifest's look-ahead is the flow's own (the chunk sizes above are derived from it)."""
    assert _flow(ctx).config.pre_lookahead_len == ctx.case_params.pre_lookahead_len


_CASES = {
    "case_params": check_case_params_match_the_model,
    "noise_z": check_noise_z,
    "est_out_step1": check_est_out_step1,
    "est_inputs_step1": check_est_inputs_step1,
    "mel_nonstream": check_mel_nonstream,
    "mel_stream_chunk1": check_mel_stream_chunk1,
    "mel_stream_chunk1_cached_prefix": check_mel_stream_chunk1_cached_prefix,
    "mel_stream_final": check_mel_stream_final,
}
CASES_BY_VERSION = {
    "cosyvoice3": _CASES,
    "cosyvoice2": {
        "noise_z": check_noise_z,
        "est_inputs_step1": check_est_inputs_step1,
        "case_params": check_case_params_match_the_model,
    },
}
