"""Parity of the prompt-audio frontend with ``frontend.safetensors`` (computed from prompt.wav).

Loading/resampling cases start from the file; each feature case starts from the reference's own
16/24 kHz waveform, so a failure points at one step. The prompt mel's ``fmax`` is read from each
version's yaml (8000 for CosyVoice2, null for CosyVoice3).
"""

from __future__ import annotations

from cosyvoice_mac.config import read_yaml_config
from cosyvoice_mac.frontend.features import PromptMelConfig, kaldi_fbank, prompt_mel, whisper_log_mel
from cosyvoice_mac.frontend.prompt import align_prompt, load_wav
from cosyvoice_mac.frontend.speaker import normalised_fbank
from tests.parity.common import ParityContext, assert_close


def check_speech_16k(ctx: ParityContext) -> None:
    expected = ctx.frontend_vectors()["speech_16k"]
    assert_close(load_wav(ctx.root / "prompt.wav", 16000), expected, "frontend", "speech_16k")


def check_speech_24k(ctx: ParityContext) -> None:
    expected = ctx.frontend_vectors()["speech_24k"]
    assert_close(load_wav(ctx.root / "prompt.wav", 24000), expected, "frontend", "speech_24k")


def check_kaldi_fbank80(ctx: ParityContext) -> None:
    vectors = ctx.frontend_vectors()
    assert_close(kaldi_fbank(vectors["speech_16k"]), vectors["kaldi_fbank80"], "frontend", "kaldi_fbank80")


def check_kaldi_fbank80_meannorm(ctx: ParityContext) -> None:
    vectors = ctx.frontend_vectors()
    actual = normalised_fbank(vectors["speech_16k"])
    assert_close(actual, vectors["kaldi_fbank80_meannorm"], "frontend", "kaldi_fbank80_meannorm")


def check_whisper_logmel128(ctx: ParityContext) -> None:
    vectors = ctx.frontend_vectors()
    actual = whisper_log_mel(vectors["speech_16k"])
    assert_close(actual, vectors["whisper_logmel128"], "frontend", "whisper_logmel128")


def _yaml_prompt_mel_config(ctx: ParityContext) -> PromptMelConfig:
    node = read_yaml_config(ctx.model_dir / f"{ctx.version}.yaml")["feat_extractor"]
    return PromptMelConfig.from_yaml(node)


def check_prompt_mel(ctx: ParityContext) -> None:
    vectors = ctx.frontend_vectors()
    config = _yaml_prompt_mel_config(ctx)
    assert config == PromptMelConfig(fmax=config.fmax), f"{ctx.version}.yaml feat_extractor: {config}"
    name = f"prompt_mel_{ctx.version}"
    assert_close(prompt_mel(vectors["speech_24k"], config.fmax), vectors[name], "frontend", name)


def check_prompt_feat_aligned(ctx: ParityContext) -> None:
    """Our prompt mel cut by align_prompt to the recorded prompt tokens is the flow's prompt_feat."""
    inputs = ctx.vectors("inputs")
    mel = prompt_mel(ctx.frontend_vectors()["speech_24k"], _yaml_prompt_mel_config(ctx).fmax)
    tokens, aligned = align_prompt(inputs["prompt_speech_token"], mel)
    assert tokens.shape == inputs["prompt_speech_token"].shape, f"aligned tokens {tuple(tokens.shape)}"
    assert_close(aligned, inputs["prompt_feat"], "frontend", "inputs.prompt_feat")


CASES = {
    "speech_16k": check_speech_16k,
    "speech_24k": check_speech_24k,
    "kaldi_fbank80": check_kaldi_fbank80,
    "kaldi_fbank80_meannorm": check_kaldi_fbank80_meannorm,
    "whisper_logmel128": check_whisper_logmel128,
}

CASES_BY_VERSION = {
    version: {f"prompt_mel_{version}": check_prompt_mel, "prompt_feat_aligned": check_prompt_feat_aligned}
    for version in ("cosyvoice2", "cosyvoice3")
}
