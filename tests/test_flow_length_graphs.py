"""The whole non-streaming flow as CUDA graphs by padded length bucket (``models/cuda/flow_length_graphs.py``).

The claim that makes one graph serve every length of its bucket is that padding a call at its end with
masked frames changes none of the valid frames: that is checked on every device, for both estimators,
by running the padded sampler eagerly. Which flows are graphed (16-bit ones on CUDA) needs no GPU. The
graphs themselves (the flow's first call eager, then a bucket captured on its first call and replayed
after, bounded, dropped when the weights move, eager after a failed capture) need CUDA
(``COSYVOICE_TEST_DEVICE=cuda``; the device tool runs them), in bfloat16 as the auto precision picks there.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import cosyvoice_mac.models.cuda.flow_length_graphs as length_graphs
from cosyvoice_mac.models.cuda.flow_length_graphs import BUCKET_FRAMES, bucket_frames, padded_inputs
from cosyvoice_mac.pipeline import CosyVoice
from cosyvoice_mac.settings import setting
from tests.fakes.onnx_models import make_tiny_model_dir
from tests.test_flow_graphs import _draws
from tests.test_flow_prefix import strict_fp32  # noqa: F401 (autouse: CUDA compares in real fp32)

TEST_DEVICE = os.environ.get("COSYVOICE_TEST_DEVICE", "cpu")
cuda_only = pytest.mark.skipif(TEST_DEVICE != "cuda" or not torch.cuda.is_available(), reason="needs CUDA")
PROMPT_TOKENS = 20


@pytest.fixture(scope="module", params=("cosyvoice3", "cosyvoice2"))
def model(request, tmp_path_factory) -> CosyVoice:
    folder = make_tiny_model_dir(request.param, tmp_path_factory.mktemp(request.param))
    return CosyVoice.from_pretrained(folder, device=TEST_DEVICE)


def _request(model, new_tokens: int, seed: int):
    """``new_tokens`` speech tokens and a prompt (tokens, mel, speaker vector), on the model's device."""
    prompt, tokens = _draws(model, PROMPT_TOKENS, new_tokens, seed)
    return tokens, prompt


def padded_sample(decoder, mu, mask, spks, cond, frames: int) -> torch.Tensor:
    """What a bucket graph computes, run eagerly: the sampler over the inputs padded to ``frames``, cut back to
    ``mu``'s length ``(B, 80, T)``."""
    padded_mu, padded_mask, padded_cond = padded_inputs(mu, mask, cond, frames)
    return decoder(padded_mu, padded_mask, spks, padded_cond)[:, :, : mu.shape[-1]]


def _sampler_inputs(frames: int, seed: int, device):
    generator = torch.Generator().manual_seed(seed)
    mu, cond = (torch.randn(1, 80, frames, generator=generator).to(device) for _ in range(2))
    return mu, torch.ones(1, 1, frames, device=device), torch.randn(1, 80, generator=generator).to(device), cond


def test_a_bucket_is_the_next_multiple_of_its_size():
    assert [bucket_frames(n) for n in (1, BUCKET_FRAMES - 1, BUCKET_FRAMES, BUCKET_FRAMES + 1, 660)] == [
        BUCKET_FRAMES,
        BUCKET_FRAMES,
        BUCKET_FRAMES,
        2 * BUCKET_FRAMES,
        704,
    ]


@pytest.mark.parametrize("frames", [41, 64, 90])
def test_padding_a_call_to_its_bucket_changes_none_of_its_frames(model, frames):
    """What a bucket graph replays (the sampler over the padded inputs) equals the plain call on the valid frames,
    for every padding from none to most of a bucket, so one graph can serve every length of its bucket."""
    decoder = model.networks.flow.decoder
    mu, mask, spks, cond = _sampler_inputs(frames, seed=frames, device=model.device)
    with torch.inference_mode():
        plain = decoder(mu, mask, spks, cond)
        for bucket in {bucket_frames(frames), bucket_frames(frames) + BUCKET_FRAMES}:
            padded = padded_sample(decoder, mu, mask, spks, cond, bucket)
            assert padded.shape == plain.shape
            torch.testing.assert_close(padded, plain, atol=2e-5, rtol=1e-5)


def test_only_16_bit_flows_on_cuda_are_graphed(monkeypatch):
    graphs, cuda = length_graphs.LengthGraphs(), torch.device("cuda")
    assert graphs.wanted(cuda, torch.bfloat16) and graphs.wanted(cuda, torch.float16)
    assert not graphs.wanted(cuda, torch.float32)  # bound by the GPU: a graph would not pay
    assert not graphs.wanted(torch.device("cpu"), torch.bfloat16) and not graphs.wanted(
        torch.device("mps"), torch.float16
    )
    monkeypatch.setenv(setting("flow_length_graphs").env, "0")
    assert not graphs.wanted(cuda, torch.bfloat16)


@pytest.mark.skipif(TEST_DEVICE == "cuda", reason="the CPU's case")
def test_a_cpu_sentence_is_never_a_graph(model):
    flow = model.networks.flow
    tokens, prompt = _request(model, 30, seed=1)
    for _ in range(2):
        flow.inference(tokens, *prompt)
    assert flow.length_graphs is None  # no graph object is even made off CUDA


@pytest.fixture
def bf16_flow(model):
    """The model's flow in bfloat16 (what auto runs on CUDA, and the dtype graphs apply to) with fresh graphs."""
    flow = model.networks.flow.to(torch.bfloat16)
    flow.length_graphs = length_graphs.LengthGraphs()
    yield flow
    flow.float()


def _eager(flow, monkeypatch, tokens, prompt):
    monkeypatch.setenv("COSYVOICE_CUDA_GRAPHS", "0")
    mel = flow.inference(tokens, *prompt)
    monkeypatch.setenv("COSYVOICE_CUDA_GRAPHS", "1")
    return mel


def _same_in_bf16(actual, expected):
    """Replayed against eager bf16 mels: the same kernels on the valid rows (measured bit-equal on an H200 at full
    size); the bound allows another attention kernel for the masked keys."""
    torch.testing.assert_close(actual, expected, atol=3e-2, rtol=1e-2)


def _close_bf16_audio(audio: np.ndarray, eager: np.ndarray) -> None:
    """Audio of one sentence from two bf16 mels equal up to rounding (checked on the mels themselves): the vocoder
    integrates its f0 into a phase, so a rounding-sized f0 difference drifts the phase along the sentence (measured on
    an H200 at tiny size: the difference's energy 1.5e-3 of the sentence's). Bound: 1e-2 of it (20 dB)."""
    error = audio.astype(np.float64) - eager  # cpu-only: numpy audio
    assert float(np.sum(error**2)) <= 1e-2 * float(np.sum(eager.astype(np.float64) ** 2))


@cuda_only
def test_every_length_in_a_bucket_replays_one_graph_with_the_eager_mel(model, bf16_flow, monkeypatch):
    flow = bf16_flow
    first, prompt = _request(model, 30, seed=1)  # 40 + 60 = 100 frames: the bucket of 128
    flow.inference(first, *prompt)  # the flow's first call runs eagerly (it loads the kernels)
    assert flow.length_graphs.captures == 0 and flow.length_graphs.kernels_loaded
    for new_tokens, seed in ((30, 2), (44, 3), (25, 4)):  # 100, 128 and 90 frames: one bucket, one graph
        tokens = _request(model, new_tokens, seed)[0]
        _same_in_bf16(flow.inference(tokens, *prompt), _eager(flow, monkeypatch, tokens, prompt))
    assert flow.length_graphs.captures == 1 and flow.length_graphs.replays == 3 and flow.length_graphs.error is None
    assert list(flow.length_graphs.graphs) == [bucket_frames(100)]


@cuda_only
def test_the_graphs_are_bounded_and_dropped_when_the_weights_move(model, bf16_flow):
    flow = bf16_flow
    flow.length_graphs.max_buckets = 2
    prompt = _request(model, 1, seed=1)[1]
    for new_tokens in (10, 10, 50, 90):  # eager, then three buckets captured: the first one is dropped
        flow.inference(_request(model, new_tokens, seed=new_tokens)[0], *prompt)
    assert flow.length_graphs.captures == 3 and list(flow.length_graphs.graphs) == [bucket_frames(140), 256]
    tokens = _request(model, 90, seed=7)[0]
    before = flow.inference(tokens, *prompt)
    weight = next(flow.decoder.parameters())
    weight.data = weight.data.clone()  # same values, another address: a graph would read freed memory
    after = flow.inference(tokens, *prompt)
    assert flow.length_graphs.captures == 4
    torch.testing.assert_close(after, before, atol=0, rtol=0)
    flow.float()  # a cast drops every graph, and a float32 flow is not graphed
    assert not flow.length_graphs.graphs
    flow.inference(tokens, *prompt)
    assert flow.length_graphs.captures == 4


@cuda_only
def test_a_failed_capture_runs_eagerly_and_stays_eager(model, bf16_flow, monkeypatch):
    flow = bf16_flow
    tokens, prompt = _request(model, 30, seed=1)
    eager = _eager(flow, monkeypatch, tokens, prompt)

    def host_sync(*args, **kwargs):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(length_graphs, "BucketGraph", host_sync)
    for _ in range(3):
        _same_in_bf16(flow.inference(tokens, *prompt), eager)
    assert "capture of the whole flow failed" in flow.length_graphs.error and flow.length_graphs.captures == 0


@cuda_only
def test_whole_sentences_are_the_same_with_and_without_flow_graphs(model, bf16_flow, monkeypatch):
    from cosyvoice_mac.bench.measure import synthetic_prompt

    speaker = model.prepare_prompt(synthetic_prompt(3.0), sample_rate=24000)
    text = "The quick brown fox jumps over the lazy dog."
    mels = []
    inference = bf16_flow.inference
    monkeypatch.setattr(bf16_flow, "inference", lambda *a, **k: mels.append(inference(*a, **k)) or mels[-1])
    monkeypatch.setenv("COSYVOICE_CUDA_GRAPHS", "0")
    (eager,) = [result.audio for result in model.synthesize(text, speaker=speaker, seed=3)]
    monkeypatch.setenv("COSYVOICE_CUDA_GRAPHS", "1")
    for _ in range(3):  # eager (the flow's first call), captured, replayed
        (audio,) = [result.audio for result in model.synthesize(text, speaker=speaker, seed=3)]
        assert audio.shape == eager.shape  # the same tokens (the LLM's graphs and device sampler)
        _same_in_bf16(mels[-1], mels[0])
        _close_bf16_audio(audio, eager)
    assert bf16_flow.length_graphs.replays >= 1
