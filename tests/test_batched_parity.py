"""A line made in a batch of mixed lengths equals its solo run (issue 47), on the shared tiny models, on the CPU.

Speech tokens identical (each line has its own seeded sampler), mel and waveform within the manifest's
tolerances. Every case comes from the manifest in ``COSYVOICE_PARITY_DIR`` (its ``case_params`` and vectors),
as the parity harness reads it, so any vector set runs. The batch is ragged on purpose: the lines' prompts and
texts differ in length, so the prompts are padded and the lines leave the batch at different steps.
``COSYVOICE_TEST_DEVICE=cuda`` (or mps) runs the same comparisons with the models there (CUDA's solo path
replays its decoding graphs and samples on the device; the batch decodes eagerly). The MLX engine (on its CPU
backend here) is held to the same: its batched decoding against its solo decoding, and its pipeline's batches.
Which stages a batch runs together on a device (``batched_stages``) is checked inside the pipeline too.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch

from cosyvoice_mac.config import read_yaml_config
from cosyvoice_mac.models.flow import Flow, FlowConfig
from cosyvoice_mac.models.llm import batch_decoding, load_speech_lm
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


@pytest.fixture(autouse=True)
def full_float32_products():
    """On CUDA, products and convolutions in full float32 (torch lets cuDNN use TF32, ~1e-3 relative): these
    tests hold a batch to its solo run at the manifest's tolerances, which TF32 kernels chosen per shape exceed
    whatever the batching does (CosyVoice2's U-Net: 2.5e-3 on an H100)."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _prompt_cuts(ctx: ParityContext) -> list[int]:
    """Prompt speech-token counts of the batch's lines: the whole prompt, one hop shorter, one hop (ragged)."""
    params = ctx.case_params
    whole = ctx.vectors("inputs")["prompt_speech_token"].shape[1]
    assert whole == params.prompt_speech_tokens, "the inputs' prompt disagrees with case_params"
    return [whole, whole - params.token_hop_len, params.token_hop_len]


def _seeds(ctx: ParityContext) -> list[int]:
    params = ctx.case_params
    return [params.ras_seed, params.e2e_seed, params.ras_seed + params.e2e_seed]


def _llm_config(ctx: ParityContext) -> dict:
    return read_yaml_config(ctx.model_dir / f"{ctx.version}.yaml", overrides={"qwen_pretrain_path": ""})["llm"]


def _assert_batched_tokens_equal_solo(ctx: ParityContext, lm) -> None:
    """Three lines of different texts and prompts: each one's ids from ``lm.generate_batch`` are its solo ids."""
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


def test_batched_speech_tokens_equal_solo(ctx):
    _assert_batched_tokens_equal_solo(ctx, load_speech_lm(ctx.model_dir, _llm_config(ctx)).to(TEST_DEVICE))


def test_fixed_rows_batch_speech_tokens_equal_solo(ctx, monkeypatch):
    """CUDA's batch (fixed addresses: whole-capacity attention with unwritten slots masked, lines that left kept in
    their rows until half have, then the cache compacted), run here without a graph: each line's ids are its solo
    ids. Three lines leaving at different steps exercise both: the first leaver keeps its row, the second compacts."""
    lm = load_speech_lm(ctx.model_dir, _llm_config(ctx)).to(TEST_DEVICE)
    made = []

    def fixed(lm, lines):
        made.append(batch_decoding.FixedRowsBatch(lm, lines))
        return made[-1]

    monkeypatch.setattr(type(lm), "start_batch", fixed)
    _assert_batched_tokens_equal_solo(ctx, lm)
    assert made and made[0].cache.batch_size == 1  # it compacted from three rows to the last line's one


@pytest.mark.skipif(TEST_DEVICE != "cuda" or not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_batch_step_is_a_replayed_graph_with_the_solo_ids(ctx):
    from cosyvoice_mac.models.cuda.batch_graph import BatchStepGraph

    before = BatchStepGraph.captures
    _assert_batched_tokens_equal_solo(ctx, load_speech_lm(ctx.model_dir, _llm_config(ctx)).to(TEST_DEVICE))
    assert BatchStepGraph.captures - before == 2  # three rows, then (two having left) the last line's one


def test_mlx_batched_speech_tokens_equal_solo(ctx):
    pytest.importorskip("mlx.core", reason="the MLX batch needs mlx (Linux: pip install 'mlx[cpu]')")
    from cosyvoice_mac.mlx.speech_lm import load_mlx_speech_lm

    _assert_batched_tokens_equal_solo(ctx, load_mlx_speech_lm(ctx.model_dir, _llm_config(ctx)))


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
    # float32 everywhere: the manifest's tolerances are float32's (on CUDA, ``auto`` may pick a 16-bit flow, whose
    # batched and solo kernels round apart by ~3e-3 in the waveform, a precision's doing, not the batch's)
    return CosyVoice.from_pretrained(folder, device=TEST_DEVICE, precision="float32")


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


def _requests_and_speakers(ctx: ParityContext, model: CosyVoice):
    """The pipeline tests' ragged requests (a short middle line: mixed lengths) and their voices."""
    params = ctx.case_params
    voice = Voice(prepared="recorded", transcript=params.prompt_transcript)
    texts = [params.e2e_text, params.e2e_text.split()[0], params.e2e_text]
    requests = [Request.build(text, voice, seed=seed) for text, seed in zip(texts, _seeds(ctx))]
    return requests, [_speaker(ctx, model, cut) for cut in _prompt_cuts(ctx)]


def _assert_each_line_equals_solo(ctx, batch, solo, batch_size: int) -> None:
    for index, alone in enumerate(solo):
        together = [result for place, result in batch if place == index]
        assert [r.speech_token_count for r in together] == [r.speech_token_count for r in alone]
        assert {r.batch_size for r in together} == {batch_size}
        for mine, theirs in zip(together, alone):
            what = f"{ctx.version} line {index} waveform"
            assert_close(torch.from_numpy(mine.audio), torch.from_numpy(theirs.audio), "waveform", what)


@pytest.fixture(scope="module")
def lines_and_solo(ctx, model):
    """The pipeline test's requests, their voices, and each one's solo ``run``."""
    requests, speakers = _requests_and_speakers(ctx, model)
    return requests, speakers, [list(model.run(request, speaker)) for request, speaker in zip(requests, speakers)]


def _counting(calls: list, name: str, function):
    def counted(*args, **kwargs):
        calls.append(name)
        return function(*args, **kwargs)

    return counted


@pytest.mark.parametrize("stages", ["the device's", "every stage"])
def test_batched_pipeline_lines_equal_solo_and_a_bad_line_fails_alone(ctx, model, lines_and_solo, stages, monkeypatch):
    from cosyvoice_mac.pipeline import batch as batching

    if stages == "every stage":  # what a GPU batches, here too: the batched flow and vocoder inside the pipeline
        monkeypatch.setitem(batching.BATCHED_STAGES, model.device.type, batching.EVERY_STAGE)
    calls: list[str] = []
    flow = model.networks.flow
    monkeypatch.setattr(flow, "inference_batch", _counting(calls, "flow", flow.inference_batch))
    monkeypatch.setattr(batching, "vocode_batch", _counting(calls, "vocoder", batching.vocode_batch))
    requests, speakers, solo = lines_and_solo
    stranger = _speaker(ctx, model, ctx.case_params.prompt_speech_tokens, model_id="another model")
    batch = list(model.run_batch([*requests, requests[0]], [*speakers, stranger], batch_size=4))

    assert set(calls) == batching.batched_stages(batching.runs_on(model)) - {"llm"}  # the stages it batches, no others
    failures = [(index, result) for index, result in batch if isinstance(result, SynthesisError)]
    assert [index for index, _ in failures] == [len(requests)]
    assert failures[0][1].field == "voice"  # the stranger voice, found when its turn came
    _assert_each_line_equals_solo(ctx, batch, solo, len(requests))


def test_a_cpu_batches_only_the_llm_and_a_gpu_every_stage():
    """The flow and the vocoder are bound by arithmetic on a CPU (batched they only add the padding's work:
    bench/results/issue47_batch/), by launching kernels on a GPU; MLX's have no batched form yet."""
    from cosyvoice_mac.pipeline.batch import EVERY_STAGE, batched_stages

    assert batched_stages("cpu") == batched_stages("mlx") == {"llm"}
    assert batched_stages("cuda") == batched_stages("mps") == EVERY_STAGE


@pytest.fixture(scope="module")
def mlx_pipeline(tmp_path_factory):
    """One version's case and its tiny pipeline on MLX: CosyVoice3 where the manifest has it (a third of CosyVoice2's
    MLX cost; the decoding itself is held to its solo run on every version above)."""
    mx = pytest.importorskip("mlx.core", reason="the MLX batch needs mlx (Linux: pip install 'mlx[cpu]')")
    ctx = ParityContext(ROOT, "cosyvoice3" if "cosyvoice3" in VERSIONS else VERSIONS[0])
    folder = make_tiny_model_dir(ctx.version, tmp_path_factory.mktemp(f"batch-mlx-{ctx.version}"))
    memory_before, cache_before = mx.get_memory_limit(), mx.set_cache_limit(0)  # the engine sets both: put back
    mx.set_cache_limit(cache_before)
    with pytest.MonkeyPatch.context() as patch:  # its converted weights in a folder of the test's own
        patch.setenv("COSYVOICE_MLX_CACHE", str(tmp_path_factory.mktemp("mlx-cache")))
        patch.delenv("COSYVOICE_MLX_LLM", raising=False)
        yield ctx, CosyVoice.from_pretrained(folder, device="cpu", engine="mlx")
    mx.set_memory_limit(memory_before)
    mx.set_cache_limit(cache_before)


def test_the_mlx_engine_decodes_a_batch_together_and_each_line_equals_solo(mlx_pipeline, monkeypatch):
    monkeypatch.delenv("COSYVOICE_BATCH_LINES", raising=False)
    ctx, mlx_model = mlx_pipeline
    llm = mlx_model.networks.llm
    batches: list[str] = []
    monkeypatch.setattr(llm, "start_batch", _counting(batches, "llm", llm.start_batch))
    requests, speakers = _requests_and_speakers(ctx, mlx_model)
    solo = [list(mlx_model.run(request, speaker)) for request, speaker in zip(requests, speakers)]
    assert mlx_model.batch_lines() > 1
    batch = list(mlx_model.run_batch(requests, speakers, batch_size=len(requests)))

    assert batches, "the MLX LLM spoke the lines one by one"
    _assert_each_line_equals_solo(ctx, batch, solo, len(requests))


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


def test_the_cpu_batch_projections_equal_f_linear():
    """The batch step's CPU projections (weight @ x.T, which streams the weight once for every row) compute
    ``F.linear`` and the in-place residual add, within float32 rounding, with and without a bias."""
    from cosyvoice_mac.models.llm.step_kernels import FEW_ROWS_ON_CPU

    generator = torch.Generator().manual_seed(0)
    x, weight, bias, residual = (
        torch.randn(*shape, generator=generator) for shape in ((3, 64), (96, 64), (96,), (3, 96))
    )
    torch.testing.assert_close(FEW_ROWS_ON_CPU.linear(x, weight, bias), torch.nn.functional.linear(x, weight, bias))
    torch.testing.assert_close(FEW_ROWS_ON_CPU.linear(x, weight, None), torch.nn.functional.linear(x, weight))
    added = FEW_ROWS_ON_CPU.linear_added(x, residual.clone(), weight)
    torch.testing.assert_close(added, residual + torch.nn.functional.linear(x, weight))
