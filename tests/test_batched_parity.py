"""A line made in a batch of mixed lengths equals its solo run (issue 47), on the shared tiny models, on the CPU.

Speech tokens identical (each line has its own seeded sampler), mel and waveform within the manifest's
tolerances. Every case comes from the manifest in ``COSYVOICE_PARITY_DIR`` (its ``case_params`` and vectors),
as the parity harness reads it, so any vector set runs. The batch is ragged on purpose: the lines' prompts and
texts differ in length, so the prompts are padded and the lines leave the batch at different steps.
``COSYVOICE_TEST_DEVICE=cuda`` (or mps) runs the same comparisons with the models there (CUDA's solo path
replays its decoding graphs and samples on the device; the batch decodes eagerly).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch

from cosyvoice_mac.config import read_yaml_config
from cosyvoice_mac.models.flow import Flow, FlowConfig
from cosyvoice_mac.models.llm import load_speech_lm
from cosyvoice_mac.models.vocoder import GaussianSourceNoise, load_hift
from cosyvoice_mac.models.vocoder.batch import vocode_batch
from cosyvoice_mac.pipeline import CosyVoice, SpeakerPrompt, SynthesisError
from cosyvoice_mac.request import Request, Voice
from tests.fakes.onnx_models import make_tiny_model_dir
from tests.parity.common import ParityContext, assert_close, parity_dir, versions_in_manifest

ROOT = parity_dir()
if not (ROOT / "manifest.json").is_file():
    raise RuntimeError(
        f"no parity manifest at {ROOT}: set COSYVOICE_PARITY_DIR to a folder in the shared/parity format"
    )
VERSIONS = versions_in_manifest(ROOT)
TEST_DEVICE = os.environ.get("COSYVOICE_TEST_DEVICE", "cpu")


@pytest.fixture(scope="module", params=VERSIONS)
def ctx(request) -> ParityContext:
    return ParityContext(ROOT, request.param)


def _prompt_cuts(ctx: ParityContext) -> list[int]:
    """Prompt speech-token counts of the batch's lines: the whole prompt, one hop shorter, one hop (ragged)."""
    params = ctx.case_params
    whole = ctx.vectors("inputs")["prompt_speech_token"].shape[1]
    assert whole == params.prompt_speech_tokens, "the inputs' prompt disagrees with case_params"
    return [whole, whole - params.token_hop_len, params.token_hop_len]


def _seeds(ctx: ParityContext) -> list[int]:
    params = ctx.case_params
    return [params.ras_seed, params.e2e_seed, params.ras_seed + params.e2e_seed]


def test_batched_speech_tokens_equal_solo(ctx):
    config = read_yaml_config(ctx.model_dir / f"{ctx.version}.yaml", overrides={"qwen_pretrain_path": ""})
    lm = load_speech_lm(ctx.model_dir, config["llm"]).to(TEST_DEVICE)
    inputs, e2e_text = ctx.vectors("inputs"), ctx.vectors("e2e")["text"]
    texts = [inputs["text"], e2e_text, inputs["text"][:, : inputs["text"].shape[1] // 2]]
    lines = [
        (text, inputs["prompt_text"], inputs["prompt_speech_token"][:, :cut])
        for text, cut in zip(texts, _prompt_cuts(ctx))
    ]
    solo = [list(lm.generate(*line, lm.make_sampler(seed=seed))) for line, seed in zip(lines, _seeds(ctx))]
    batch = lm.generate_batch(lines, [lm.make_sampler(seed=seed) for seed in _seeds(ctx)])
    assert len({len(tokens) for tokens in solo}) == len(solo), "the lines must leave the batch at different steps"
    assert batch == solo


def test_batched_flow_mel_within_tolerance_of_solo(ctx):
    node = read_yaml_config(ctx.model_dir / f"{ctx.version}.yaml")["flow"]
    flow = Flow.from_checkpoint(FlowConfig.from_yaml(node), ctx.model_dir / "flow.pt").to(TEST_DEVICE)
    inputs = ctx.vectors("inputs")
    tokens = inputs["flow_tokens"].long()
    token_cuts = [tokens.shape[1], ctx.case_params.stream_chunk1_tokens, ctx.case_params.pre_lookahead_len + 1]
    lines = [
        (
            tokens[:, :count],
            inputs["prompt_speech_token"][:, :cut].long(),
            inputs["prompt_feat"][:, : 2 * cut],
            inputs["embedding"] * scale,
        )
        for count, cut, scale in zip(token_cuts, _prompt_cuts(ctx), (1.0, 0.5, 2.0))
    ]
    batch = flow.inference_batch(lines)
    for index, line in enumerate(lines):
        assert_close(batch[index], flow.inference(*line), "mel", f"{ctx.version} line {index} mel")


def test_batched_vocoder_waveform_within_tolerance_of_solo(ctx):
    hift = load_hift(ctx.model_dir / f"{ctx.version}.yaml", ctx.model_dir / "hift.pt").to(TEST_DEVICE)
    mel = ctx.vectors("hift")["mel_in"]
    hop = ctx.case_params.token_hop_len  # ragged: the whole mel, a hop of frames, and a window off its start
    mels = [mel, mel[:, :, :hop], mel[:, :, ctx.case_params.pre_lookahead_len : -ctx.case_params.pre_lookahead_len]]

    def noises():  # CosyVoice2's excitation is drawn per line from its own seed; CosyVoice3's is fixed
        random = ctx.version == "cosyvoice2"
        return [GaussianSourceNoise(seed=seed) if random else None for seed in _seeds(ctx)]

    batch = vocode_batch(hift, mels, noises())
    for index, (line, noise) in enumerate(zip(mels, noises())):
        alone = hift.inference(line, noise=noise)[0]
        assert_close(batch[index], alone, "waveform", f"{ctx.version} line {index} waveform")


@pytest.fixture(scope="module")
def model(ctx) -> CosyVoice:
    folder = make_tiny_model_dir(ctx.version, Path(tempfile.mkdtemp(prefix=f"batch-{ctx.version}-")))
    return CosyVoice.from_pretrained(folder, device=TEST_DEVICE)


def _speaker(ctx: ParityContext, model: CosyVoice, tokens: int, model_id: str | None = None) -> SpeakerPrompt:
    inputs = ctx.vectors("inputs")
    return SpeakerPrompt(
        speech_tokens=inputs["prompt_speech_token"][:, :tokens].long(),
        mel=inputs["prompt_feat"][:, : 2 * tokens],
        embedding=inputs["embedding"],
        audio_hash=f"recorded-{tokens}",
        model_id=model_id or model.model_id,
        transcript=ctx.case_params.prompt_transcript,
    )


def test_batched_pipeline_lines_equal_solo_and_a_bad_line_fails_alone(ctx, model):
    params = ctx.case_params
    voice = Voice(prepared="recorded", transcript=params.prompt_transcript)
    texts = [params.e2e_text, params.e2e_text.split()[0], params.e2e_text]  # a short middle line: mixed lengths
    requests = [Request.build(text, voice, seed=seed) for text, seed in zip(texts, _seeds(ctx))]
    speakers = [_speaker(ctx, model, cut) for cut in _prompt_cuts(ctx)]
    solo = [list(model.run(request, speaker)) for request, speaker in zip(requests, speakers)]
    stranger = _speaker(ctx, model, params.prompt_speech_tokens, model_id="another model")
    batch = list(model.run_batch([*requests, requests[0]], [*speakers, stranger], batch_size=4))

    failures = [(index, result) for index, result in batch if isinstance(result, SynthesisError)]
    assert [index for index, _ in failures] == [len(requests)]
    assert failures[0][1].field == "voice"  # the stranger voice, found when its turn came
    for index, alone in enumerate(solo):
        together = [result for place, result in batch if place == index]
        assert [r.speech_token_count for r in together] == [r.speech_token_count for r in alone]
        assert {r.batch_size for r in together} == {len(requests)}
        for mine, theirs in zip(together, alone):
            what = f"{ctx.version} line {index} waveform"
            assert_close(torch.from_numpy(mine.audio), torch.from_numpy(theirs.audio), "waveform", what)


def test_batch_size_comes_from_the_setting_capped_by_its_range_else_the_device(monkeypatch):
    from cosyvoice_mac.pipeline.batch import CPU_BATCH, DEVICE_BATCH, LOW_MEMORY_BATCH, batch_size_for
    from cosyvoice_mac.settings import bounds

    monkeypatch.delenv("COSYVOICE_BATCH_LINES", raising=False)
    assert batch_size_for(torch.device("cpu"), low_memory=False) == CPU_BATCH
    assert batch_size_for(torch.device("cuda"), low_memory=False) == DEVICE_BATCH
    assert batch_size_for(torch.device("mps"), low_memory=True) == LOW_MEMORY_BATCH
    monkeypatch.setenv("COSYVOICE_BATCH_LINES", "3")
    assert batch_size_for(torch.device("cuda"), low_memory=False) == 3
    for bad in (str(int(bounds("batch_lines")[1]) + 1), "0", "many"):
        monkeypatch.setenv("COSYVOICE_BATCH_LINES", bad)
        with pytest.raises(SynthesisError, match="COSYVOICE_BATCH_LINES"):
            batch_size_for(torch.device("cpu"), low_memory=False)
