"""End-to-end parity through the public pipeline (``CosyVoice.synthesize``) on the tiny models.

Text goes in as a string and is normalised and tokenised by our frontend; the prompt features are
the recorded ones (the reference's ONNX models were stand-ins too). The reference's randomness is
replayed: its multinomial draws (sampler) and, for CosyVoice2, its vocoder noise; CosyVoice3's fixed
vocoder buffers are the tiny build's. The LLM runs in the reference-compatible EOS-mask mode.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from cosyvoice_mac.models.llm import RasSampler
from cosyvoice_mac.models.vocoder import RecordedSourceNoise
from cosyvoice_mac.pipeline import CosyVoice, SpeakerPrompt
from cosyvoice_mac.pipeline import cosyvoice as pipeline_module
from tests.fakes.onnx_models import make_tiny_model_dir
from tests.parity.common import ParityContext, assert_close
from tests.parity.llm import _ReplayDraws

_MODELS: dict[str, CosyVoice] = {}


def _model(ctx: ParityContext) -> CosyVoice:
    if ctx.version not in _MODELS:
        folder = make_tiny_model_dir(ctx.version, Path(tempfile.mkdtemp(prefix=f"e2e-{ctx.version}-")))
        model = CosyVoice.from_pretrained(folder, device="cpu")
        reference_llm = model.networks.llm
        size = reference_llm.config.speech_token_size
        reference_llm._masked_before_min_len = (size,)  # the reference masks only id S (spec 5.4)
        _MODELS[ctx.version] = model
    return _MODELS[ctx.version]


def _speaker(ctx: ParityContext, model: CosyVoice) -> SpeakerPrompt:
    inputs = ctx.vectors("inputs")
    return SpeakerPrompt(
        speech_tokens=inputs["prompt_speech_token"].long(),
        mel=inputs["prompt_feat"],
        embedding=inputs["embedding"],
        audio_hash="recorded",
        model_id=model.model_id,
        transcript=ctx.case_params.prompt_transcript,
    )


def check_text_ids(ctx: ParityContext) -> None:
    """Our frontend turns the strings into exactly the reference's ids (mode zero-shot)."""
    model, e2e, inputs, params = _model(ctx), ctx.vectors("e2e"), ctx.vectors("inputs"), ctx.case_params
    from cosyvoice_mac.pipeline.prompts import plan_request
    from cosyvoice_mac.request import Request, Voice

    request = Request.build(params.e2e_text, Voice(prepared="recorded", transcript=params.prompt_transcript), seed=0)
    plan = plan_request(model.version, model.normalizer, request)
    assert [model.tokenizer.encode(s.llm_text) for s in plan.segments] == [e2e["text"][0].tolist()]
    assert model.tokenizer.encode(plan.llm_prompt_text) == inputs["prompt_text"][0].tolist()
    assert plan.llm_prompt_text == params.instruct_prefix + params.prompt_transcript
    assert inputs["prompt_speech_token"].shape[1] == params.prompt_speech_tokens


def check_synthesize(ctx: ParityContext) -> None:
    model, e2e = _model(ctx), ctx.vectors("e2e")
    llm = model.networks.llm
    draws = _ReplayDraws(e2e["multinomial"], llm.config.speech_vocab_size)
    c = llm.config
    replay = RasSampler(top_p=c.top_p, top_k=c.top_k, win_size=c.win_size, tau_r=c.tau_r, seed=0, draw=draws)
    original_sampler, original_noise = llm.make_sampler, pipeline_module.GaussianSourceNoise
    original_default = model.networks.hift.default_noise
    try:
        llm.make_sampler = lambda seed=None: replay
        if ctx.version == "cosyvoice2":
            pipeline_module.GaussianSourceNoise = lambda seed: RecordedSourceNoise(e2e["rand1_randn_like"])
        else:
            model.networks.hift.default_noise = RecordedSourceNoise(ctx.vectors("hift")["fixed_sine_waves_prefix"])
        params = ctx.case_params
        results = list(
            model.synthesize(
                params.e2e_text,
                prompt_text=params.prompt_transcript,
                speaker=_speaker(ctx, model),
                seed=params.e2e_seed,
            )
        )
    finally:
        llm.make_sampler, pipeline_module.GaussianSourceNoise = original_sampler, original_noise
        model.networks.hift.default_noise = original_default
    draws.assert_all_used()
    assert len(results) == 1
    assert results[0].speech_token_count == e2e["speech_tokens"].shape[1]
    assert_close(torch.from_numpy(results[0].audio)[None], e2e["tts_speech"], "waveform", "e2e tts_speech")


CASES = {"text_ids": check_text_ids, "synthesize": check_synthesize}
