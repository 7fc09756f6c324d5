"""CUDA graphs of the flow's first streamed chunk: a voice's own (``models/cuda/flow_prefix_graphs.py``) and the ones
every voice of a prefix length shares, with its prefix build (``models/cuda/flow_shared_graphs.py``).

A graph must change nothing but the time: every CUDA check compares the replayed mel with the
eager one (``COSYVOICE_TEST_DEVICE=cuda``; the device tool runs them). What needs no GPU (the
host-side mask rule that made the sampler capturable, when a call is a graph) runs everywhere.
"""

from __future__ import annotations

import os

import pytest
import torch

import cosyvoice_mac.models.cuda.flow_prefix_graphs as graphs
from cosyvoice_mac.bench.measure import synthetic_prompt
from cosyvoice_mac.models.flow.masks import chunk_causal_mask, new_rows_see_every_key
from cosyvoice_mac.pipeline import CosyVoice
from tests.fakes.onnx_models import make_tiny_model_dir
from tests.test_flow_prefix import strict_fp32  # noqa: F401 (autouse: CUDA compares in real fp32)

TEST_DEVICE = os.environ.get("COSYVOICE_TEST_DEVICE", "cpu")
cuda_only = pytest.mark.skipif(TEST_DEVICE != "cuda" or not torch.cuda.is_available(), reason="needs CUDA")
PROMPT, PREFIX, FIRST_CHUNK = 65, 50, 13  # 15 prompt tokens after the prefix + the first hop of 10 (+ 3 look-ahead)


@pytest.mark.parametrize("chunk", [4, 50])
def test_the_host_side_mask_rule_equals_the_mask(chunk):
    for prefix in range(0, 3 * chunk + 1, chunk):
        for length in range(1, 3 * chunk):
            expected = bool(chunk_causal_mask(prefix + length, chunk, torch.device("cpu"))[prefix:].all())
            assert new_rows_see_every_key(prefix, length, chunk) == expected, (prefix, length)


@pytest.fixture(scope="module", params=("cosyvoice3", "cosyvoice2"))
def model(request, tmp_path_factory) -> CosyVoice:
    folder = make_tiny_model_dir(request.param, tmp_path_factory.mktemp(request.param))
    return CosyVoice.from_pretrained(folder, device=TEST_DEVICE)


def _draws(model, prompt_tokens: int, new_tokens: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    vocab = model.networks.flow.config.vocab_size
    prompt = (
        torch.randint(0, vocab, (1, prompt_tokens), generator=generator),
        torch.randn(1, 2 * prompt_tokens, 80, generator=generator),
        torch.randn(1, 192, generator=generator),
    )
    tokens = torch.randint(0, vocab, (1, new_tokens), generator=generator)
    return [t.to(model.device) for t in prompt], tokens.to(model.device)


@pytest.mark.skipif(TEST_DEVICE == "cuda", reason="the CPU's case")
def test_a_cpu_call_is_never_a_graph(model):
    prompt, tokens = _draws(model, PROMPT, FIRST_CHUNK, seed=1)
    flow = model.networks.flow
    prefix = flow.build_prefix(*prompt, tokens=PREFIX)
    flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=prefix)
    assert prefix.graphs is None  # no graph object is even made off CUDA (nor is models/cuda/ imported for it)


@pytest.mark.skipif(TEST_DEVICE == "cuda", reason="the CPU's case")
def test_the_cuda_dispatch_leaves_the_eager_mel_where_every_capture_fails(model, monkeypatch):
    """The seam between the flow and models/cuda/ on any device: the CPU posing as CUDA, every capture failing
    (as a host sync does), a whole sentence, a prefix build and a streamed chunk go through the dispatch to the
    length, shared and per-prefix graphs, and each falls back to exactly the eager mel."""
    import cosyvoice_mac.models.cuda.flow_length_graphs as length_graphs
    import cosyvoice_mac.models.cuda.flow_shared_graphs as shared_graphs
    import cosyvoice_mac.models.flow.flow as flow_module

    flow = model.networks.flow
    prompt, tokens = _draws(model, PROMPT, FIRST_CHUNK, seed=1)
    whole = flow.inference(tokens, *prompt)
    eager_prefix = flow.build_prefix(*prompt, tokens=PREFIX)
    chunk = flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=eager_prefix)
    monkeypatch.setattr(flow, "shared_graphs", None)  # restored to None: the module's model stays graph-free
    monkeypatch.setattr(flow, "length_graphs", None)
    monkeypatch.setattr(flow_module, "is_cuda", lambda device: True)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: "pool")
    monkeypatch.setattr(length_graphs, "GRAPHED_DTYPES", (torch.float32,))
    for module in (graphs, length_graphs, shared_graphs):
        monkeypatch.setattr(module, "cuda_graphs_on", lambda device, part=None: True)
        monkeypatch.setattr(module, "try_cuda_capture", lambda capture, device: (None, "RuntimeError: sync"))
    for _ in range(2):  # the first call loads the kernels eagerly, the second tries the capture
        assert torch.equal(flow.inference(tokens, *prompt), whole)
    prefix = flow.build_prefix(*prompt, tokens=PREFIX)
    assert "shared flow graphs failed" in flow.shared_graphs.error
    assert torch.equal(flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=prefix), chunk)
    assert "capture of the whole flow failed" in flow.length_graphs.error
    assert "capture of the flow failed" in prefix.graphs.error and prefix.graphs.captures == 0


@pytest.fixture
def own_graphs(monkeypatch):
    """The per-prefix graphs (the fallback when the shared ones are off or failed): the shared graphs off."""
    monkeypatch.setenv("COSYVOICE_FLOW_SHARED_GRAPHS", "0")


@cuda_only
def test_the_first_chunk_replays_a_graph_with_the_eager_mel(model, monkeypatch, own_graphs):
    flow = model.networks.flow
    prompt, _ = _draws(model, PROMPT, FIRST_CHUNK, seed=1)
    prefix = flow.build_prefix(*prompt, tokens=PREFIX)
    for seed in (2, 3, 4):  # capture, then replays with other tokens: the graph's inputs are copied in
        tokens = _draws(model, PROMPT, FIRST_CHUNK, seed=seed)[1]
        monkeypatch.setenv("COSYVOICE_CUDA_GRAPHS", "0")
        eager = flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=prefix)
        monkeypatch.setenv("COSYVOICE_CUDA_GRAPHS", "1")
        replayed = flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=prefix)
        torch.testing.assert_close(replayed, eager, atol=1e-5, rtol=1e-5)
    assert prefix.graphs.captures == 1 and list(prefix.graphs.graphs) == [50] and prefix.graphs.error is None
    longer = _draws(model, PROMPT, FIRST_CHUNK + 25, seed=5)[1]  # the second chunk: a one-off shape, eager
    flow.inference(longer, *prompt, streaming=True, finalize=False, prefix=prefix)
    assert prefix.graphs.captures == 1


@cuda_only
def test_moved_weights_are_captured_again(model, own_graphs):
    flow = model.networks.flow
    prompt, tokens = _draws(model, PROMPT, FIRST_CHUNK, seed=1)
    prefix = flow.build_prefix(*prompt, tokens=PREFIX)
    before = flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=prefix)
    weight = next(flow.decoder.parameters())
    weight.data = weight.data.clone()  # same values, another address: the old graph would read freed memory
    after = flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=prefix)
    assert prefix.graphs.captures == 2
    torch.testing.assert_close(after, before, atol=1e-5, rtol=1e-5)


@cuda_only
def test_a_failed_capture_runs_the_chunk_eagerly_and_stays_eager(model, monkeypatch, own_graphs):
    flow = model.networks.flow
    prompt, tokens = _draws(model, PROMPT, FIRST_CHUNK, seed=1)
    prefix = flow.build_prefix(*prompt, tokens=PREFIX)
    monkeypatch.setenv("COSYVOICE_CUDA_GRAPHS", "0")
    eager = flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=prefix)
    monkeypatch.setenv("COSYVOICE_CUDA_GRAPHS", "1")

    def host_sync(*args, **kwargs):
        raise RuntimeError("operation not permitted when stream is capturing")

    real_graph = graphs.SamplerGraph
    monkeypatch.setattr(graphs, "SamplerGraph", host_sync)
    fallback = flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=prefix)
    torch.testing.assert_close(fallback, eager, atol=1e-5, rtol=1e-5)
    assert "capture of the flow failed" in prefix.graphs.error and prefix.graphs.captures == 0
    monkeypatch.setattr(graphs, "SamplerGraph", real_graph)
    flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=prefix)
    assert prefix.graphs.captures == 0  # no second try for this prefix


@cuda_only
def test_streamed_audio_is_the_same_with_and_without_flow_graphs(model, monkeypatch):
    speaker = model.prepare_prompt(synthetic_prompt(3.0), sample_rate=24000)  # no espeak-ng on the GPU machine
    text = "The quick brown fox jumps over the lazy dog."
    monkeypatch.setenv("COSYVOICE_CUDA_GRAPHS", "0")  # read per call by the flow (the LLM keeps its own setting)
    model.flow_prefixes.clear()
    eager = [chunk.audio for chunk in model.synthesize(text, speaker=speaker, seed=3, stream=True)]
    monkeypatch.setenv("COSYVOICE_CUDA_GRAPHS", "1")
    model.flow_prefixes.clear()
    for _ in range(2):  # a new voice (captured in place), then a voice used before (replayed)
        replayed = [chunk.audio for chunk in model.synthesize(text, speaker=speaker, seed=3, stream=True)]
        assert len(replayed) == len(eager)
        for a, b in zip(replayed, eager):
            torch.testing.assert_close(torch.from_numpy(a), torch.from_numpy(b), atol=1e-4, rtol=0)
    shared = model.networks.flow.shared_graphs
    assert next(iter(model.flow_prefixes._entries.values())).graphs.captures == 0  # the shared graphs served it
    assert shared.error is None and shared.has_first_chunk(next(iter(model.flow_prefixes._entries.values())))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_grouped_conv_as_matrix_products_equals_the_conv(dtype):
    from cosyvoice_mac.models.cuda.products import grouped_conv1d_as_matmul

    torch.manual_seed(0)
    conv = torch.nn.Conv1d(64, 64, 31, groups=16).to(dtype)
    x = torch.randn(2, 64, 80).to(dtype)
    tolerance = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 3e-2, "rtol": 2e-2}
    torch.testing.assert_close(grouped_conv1d_as_matmul(x, conv), conv(x), **tolerance)
    conv.bias = None
    torch.testing.assert_close(grouped_conv1d_as_matmul(x, conv), conv(x), **tolerance)


@cuda_only
def test_preparing_a_voice_for_streaming_captures_its_first_chunk_graph(model):
    speaker = model.prepare_prompt(synthetic_prompt(3.0), sample_rate=24000)
    model.flow_prefixes.clear()
    shared = _shared_graphs(model.networks.flow)
    shared.clear()
    assert model.prepare_streaming(speaker)
    prefix = next(iter(model.flow_prefixes._entries.values()))
    assert shared.has_first_chunk(prefix) and shared.error is None and prefix.graphs.captures == 0
    captures = shared.captures
    list(model.synthesize("The quick brown fox jumps over the lazy dog.", speaker=speaker, seed=3, stream=True))
    assert shared.captures == captures  # the request replayed it


# -- the shared graphs of a new voice's prefix build and first chunk (models/cuda/flow_shared_graphs.py) ----
def _shared_graphs(flow):
    """The flow's shared graphs on the test's CUDA device (made now if no CUDA call made them yet)."""
    flow.cuda_graphs(torch.device(TEST_DEVICE))
    return flow.shared_graphs


def _slots_of(prefix):
    from cosyvoice_mac.models.flow.prefix import StepState

    return [StepState(s.frames, False, {k: t.clone() for k, t in s.tensors.items()}) for s in prefix.steps]


def test_a_length_loads_another_voices_prefix_into_its_slots_once(model):
    """The slot bookkeeping every shared replay relies on, on any device: a prefix not in the slots is copied in,
    one that is costs nothing, and a new prefix object never passes for an old one."""
    from types import SimpleNamespace

    from cosyvoice_mac.models.cuda.flow_shared_graphs import LengthGraphs, prefix_serial

    flow = model.networks.flow
    first = flow.build_prefix(*_draws(model, PROMPT, FIRST_CHUNK, seed=1)[0], tokens=PREFIX)
    second = flow.build_prefix(*_draws(model, PROMPT, FIRST_CHUNK, seed=2)[0], tokens=PREFIX)
    assert prefix_serial(first) != prefix_serial(second) and prefix_serial(first) == prefix_serial(first)
    entry = LengthGraphs(SimpleNamespace(slots=_slots_of(first)), signature=())
    entry.load(second)
    for slot, state in zip(entry.build.slots, second.steps):
        assert slot.tensors.keys() == state.tensors.keys()
        assert all(torch.equal(slot.tensors[k], state.tensors[k]) for k in slot.tensors)
    marked = next(iter(entry.build.slots[0].tensors.values()))
    marked.fill_(7.0)  # were it copied again, the mark would go
    entry.load(second)
    assert bool((marked == 7.0).all())
    entry.load(first)
    assert torch.equal(next(iter(entry.build.slots[0].tensors.values())), next(iter(first.steps[0].tensors.values())))


@pytest.mark.skipif(TEST_DEVICE == "cuda", reason="the CPU's case")
def test_a_cpu_prefix_build_and_chunk_never_use_the_shared_graphs(model):
    flow = model.networks.flow
    prompt, tokens = _draws(model, PROMPT, FIRST_CHUNK, seed=1)
    prefix = flow.build_prefix(*prompt, tokens=PREFIX)
    flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=prefix)
    assert flow.shared_graphs is None and flow.length_graphs is None  # not made off CUDA


@cuda_only
def test_new_voices_replay_the_shared_build_and_chunk_graphs_with_the_eager_results(model, monkeypatch):
    flow = model.networks.flow
    _shared_graphs(flow).clear()
    voices = [_draws(model, PROMPT, FIRST_CHUNK, seed=seed) for seed in (11, 12, 11)]  # A, B, then A again
    monkeypatch.setenv("COSYVOICE_FLOW_SHARED_GRAPHS", "0")
    eager = []
    for prompt, tokens in voices:
        prefix = flow.build_prefix(*prompt, tokens=PREFIX)
        eager.append((prefix, flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=prefix)))
    monkeypatch.setenv("COSYVOICE_FLOW_SHARED_GRAPHS", "1")
    captures_before = flow.shared_graphs.captures
    prefixes = []
    for (prompt, tokens), (eager_prefix, eager_mel) in zip(voices, eager):
        prefix = flow.build_prefix(*prompt, tokens=PREFIX)  # replayed from the length's graph
        for step, eager_step in zip(prefix.steps, eager_prefix.steps):
            for key, tensor in step.tensors.items():
                torch.testing.assert_close(tensor, eager_step.tensors[key], atol=1e-5, rtol=1e-5)
        prefixes.append(prefix)
        mel = flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=prefix)
        torch.testing.assert_close(mel, eager_mel, atol=1e-5, rtol=1e-5)
        assert prefix.graphs.captures == 0  # no graph of its own
    assert flow.shared_graphs.error is None
    assert flow.shared_graphs.captures - captures_before == 2  # one build, one chunk
    prompt, tokens = voices[0]  # the first voice again after the others: its prefix is copied back into the slots
    again = flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=prefixes[0])
    torch.testing.assert_close(again, eager[0][1], atol=1e-5, rtol=1e-5)
    flow.to(TEST_DEVICE)  # a move (here: none) still drops the graphs, bounded memory
    assert not flow.shared_graphs.lengths


@cuda_only
def test_a_failed_shared_capture_leaves_the_eager_build_and_the_voices_own_graph(model, monkeypatch):
    import cosyvoice_mac.models.cuda.flow_shared_graphs as shared_graphs

    flow = model.networks.flow
    prompt, tokens = _draws(model, PROMPT, FIRST_CHUNK, seed=21)
    monkeypatch.setenv("COSYVOICE_FLOW_SHARED_GRAPHS", "0")
    eager_prefix = flow.build_prefix(*prompt, tokens=PREFIX)
    eager = flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=eager_prefix)
    monkeypatch.setenv("COSYVOICE_FLOW_SHARED_GRAPHS", "1")

    def host_sync(*args, **kwargs):
        raise RuntimeError("operation not permitted when stream is capturing")

    _shared_graphs(flow).clear()
    monkeypatch.setattr(shared_graphs, "BuildGraph", host_sync)
    prefix = flow.build_prefix(*prompt, tokens=PREFIX)
    mel = flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=prefix)
    torch.testing.assert_close(mel, eager, atol=1e-5, rtol=1e-5)
    assert "shared flow graphs failed" in flow.shared_graphs.error and not flow.shared_graphs.lengths
    assert prefix.graphs.captures == 1  # the voice's own first-chunk graph, as before the shared ones
    flow.shared_graphs.error = None  # the module-scoped model serves the other tests
