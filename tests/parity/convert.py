"""Voice conversion parity: conversion is token2wav on the source's own speech tokens, so converting the golden
prompt, with its tokens replayed where the speech tokenizer answers, gives what the golden flow and HiFT
vectors give for those tokens: non-streaming (the e2e tokens -> e2e mel -> e2e waveform) and streaming
(upstream's schedule for this prompt: the flow vectors' first chunk and final chunk).

The replayed tokenizer stands where ``PromptEncoder.speech_tokens`` calls the tokenizer (the one path prompts
take too) and checks it is handed the golden 16 kHz samples: our decoding of the source is part of the proof.
Every number comes from the manifest's ``case_params`` and the vectors' shapes.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from cosyvoice_mac.conversion_request import ConversionRequest
from cosyvoice_mac.frontend.source_audio import TOKEN_SAMPLES
from cosyvoice_mac.models.vocoder import RecordedSourceNoise
from cosyvoice_mac.pipeline import CosyVoice, SpeakerPrompt, streaming
from cosyvoice_mac.pipeline import cosyvoice as pipeline_module
from cosyvoice_mac.pipeline.streaming import PromptPlan
from cosyvoice_mac.request import Voice
from tests.fakes.onnx_models import make_tiny_model_dir
from tests.parity.common import ParityContext, assert_close

_MODELS: dict[str, CosyVoice] = {}


def _model(ctx: ParityContext) -> CosyVoice:
    if ctx.version not in _MODELS:
        folder = make_tiny_model_dir(ctx.version, Path(tempfile.mkdtemp(prefix=f"vc-{ctx.version}-")))
        _MODELS[ctx.version] = CosyVoice.from_pretrained(folder, device="cpu")
    return _MODELS[ctx.version]


class _ReplayTokenizer:
    """Answers with the golden tokens, after checking it was handed the golden prompt's first samples."""

    def __init__(self, expected_wave: torch.Tensor, tokens: torch.Tensor):
        self.expected_wave, self.replayed, self.calls = expected_wave, tokens.long(), 0

    def tokens(self, wave16k: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        assert_close(wave16k, self.expected_wave, "mel", "the 16 kHz source handed to the speech tokenizer")
        return self.replayed


def _convert(ctx: ParityContext, tokens: torch.Tensor, stream: bool) -> tuple[list, list[torch.Tensor]]:
    """Convert the golden prompt's first ``len(tokens)`` tokens' worth of samples; (results, every flow mel)."""
    model, inputs = _model(ctx), ctx.vectors("inputs")
    source = ctx.frontend_vectors()["speech_16k"][:, : tokens.shape[1] * TOKEN_SAMPLES]
    replay = _ReplayTokenizer(source, tokens)
    speaker = SpeakerPrompt(
        speech_tokens=inputs["prompt_speech_token"].long(),
        mel=inputs["prompt_feat"],
        embedding=inputs["embedding"],
        audio_hash="recorded",
        model_id=model.model_id,
    )
    request = ConversionRequest.build(source[0].numpy(), Voice(prepared="recorded"), sample_rate=16000, stream=stream)
    flow, mels = model.networks.flow, []
    encoder, original_tokenizer = model.prompt_encoder, model.prompt_encoder.speech_tokenizer

    def recording_inference(*args, **kwargs):
        mel = type(flow).inference(flow, *args, **kwargs)
        mels.append(mel)
        return mel

    def recording_first_chunk(*args, **kwargs):  # off CUDA a new voice's first chunk records its prefix
        mel, prefix = type(flow).first_chunk_recording_prefix(flow, *args, **kwargs)
        mels.append(mel)
        return mel, prefix

    try:
        encoder.speech_tokenizer, flow.inference = replay, recording_inference
        flow.first_chunk_recording_prefix = recording_first_chunk
        results = list(model.run_conversion(request, speaker))
    finally:
        encoder.speech_tokenizer = original_tokenizer
        del flow.inference, flow.first_chunk_recording_prefix
    assert replay.calls == 1, "one piece, tokenised once"
    return results, mels


def _with_golden_noise(ctx: ParityContext, run):
    """Run ``run()`` with the reference's vocoder randomness (CosyVoice2) or fixed buffers (CosyVoice3)."""
    model, e2e = _model(ctx), ctx.vectors("e2e")
    original_noise, original_default = pipeline_module.GaussianSourceNoise, model.networks.hift.default_noise
    try:
        if ctx.version == "cosyvoice2":
            pipeline_module.GaussianSourceNoise = lambda seed: RecordedSourceNoise(e2e["rand1_randn_like"])
        else:
            model.networks.hift.default_noise = RecordedSourceNoise(ctx.vectors("hift")["fixed_sine_waves_prefix"])
        return run()
    finally:
        pipeline_module.GaussianSourceNoise = original_noise
        model.networks.hift.default_noise = original_default


def check_convert_nonstream(ctx: ParityContext) -> None:
    e2e = ctx.vectors("e2e")
    results, mels = _with_golden_noise(ctx, lambda: _convert(ctx, e2e["speech_tokens"], stream=False))
    assert len(results) == 1 and results[0].speech_token_count == e2e["speech_tokens"].shape[1]
    assert_close(mels[0], e2e["mel"], "mel", "converted mel")
    assert_close(torch.from_numpy(results[0].audio)[None], e2e["tts_speech"], "waveform", "converted waveform")


def check_convert_stream(ctx: ParityContext) -> None:
    """Streamed with upstream's schedule for this prompt (no cut, first hop ``first_stream_hop_tokens``, the
    prompt's whole chunks as the cached prefix): each chunk's mel is the flow vectors' one for it."""
    params, inputs, flow_vectors = ctx.case_params, ctx.vectors("inputs"), ctx.vectors("flow")
    upstream = PromptPlan(cut=0, first_hop=params.first_stream_hop_tokens, prefix_tokens=params.prompt_prefix_tokens)
    original_plan = streaming.PromptPlan.for_request
    try:
        streaming.PromptPlan.for_request = classmethod(lambda cls, parts, speaker, first_hop=0: upstream)
        results, mels = _with_golden_noise(ctx, lambda: _convert(ctx, inputs["flow_tokens"], stream=True))
    finally:
        streaming.PromptPlan.for_request = original_plan
    assert len(mels) == 2 and [r.is_final_chunk for r in results] == [False, True]
    assert_close(mels[0], flow_vectors["mel_stream_chunk1"], "mel", "converted first streaming chunk mel")
    offset = 2 * params.first_stream_hop_tokens
    assert_close(mels[1][:, :, offset:], flow_vectors["mel_stream_final"], "mel", "converted final chunk mel")
    streamed = sum(len(r.audio) for r in results)
    assert streamed == inputs["flow_tokens"].shape[1] * TOKEN_SAMPLES * 3 // 2  # the source's length exactly


CASES = {"convert_nonstream": check_convert_nonstream, "convert_stream": check_convert_stream}
