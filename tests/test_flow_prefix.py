"""The flow's streaming cache (a voice prompt's cached prefix) and the side-by-side CFG branches.

A cached prefix must change nothing but the time taken: every check compares against the same
chunk-causal call made from scratch. The reference's own first streaming chunk, computed through
a cached prefix, is checked in tests/parity/flow*.py.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

import cosyvoice_mac.models.flow.cfm as cfm
from cosyvoice_mac.models.flow.cfm import FlowInputError
from cosyvoice_mac.pipeline import CosyVoice
from cosyvoice_mac.pipeline.streaming import FlowPrefixCache, PromptPlan, TokenProducer
from tests.fakes.onnx_models import make_tiny_model_dir

TEST_DEVICE = os.environ.get("COSYVOICE_TEST_DEVICE", "cpu")
TEXT = "The quick brown fox jumps over the lazy dog, again and again, for a long while."


@pytest.fixture(autouse=True)
def strict_fp32():
    """CUDA's TF32 convolutions round differently for different sequence lengths; compare in real fp32."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.fixture(scope="module", params=("cosyvoice3", "cosyvoice2"))
def model(request, tmp_path_factory) -> CosyVoice:
    folder = make_tiny_model_dir(request.param, tmp_path_factory.mktemp(request.param))
    return CosyVoice.from_pretrained(folder, device=TEST_DEVICE)


def _prompt(model, prompt_tokens: int, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    vocab = model.networks.flow.config.vocab_size
    device = model.device
    return (
        torch.randint(0, vocab, (1, prompt_tokens), generator=generator).to(device),
        torch.randn(1, 2 * prompt_tokens, 80, generator=generator).to(device),
        torch.randn(1, 192, generator=generator).to(device),
    )


class _EstimatorCalls:
    """Records the (batch, frames) of every estimator call made inside the ``with`` block."""

    def __init__(self, flow):
        self.estimator, self.shapes = flow.decoder.estimator, []

    def __enter__(self):
        self.handle = self.estimator.register_forward_pre_hook(
            lambda module, args: self.shapes.append((args[0].shape[0], args[0].shape[-1]))
        )
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def _tokens(model, count: int, seed: int = 2):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.networks.flow.config.vocab_size, (1, count), generator=generator).to(model.device)


@pytest.mark.parametrize("side_by_side", [True, False])
@pytest.mark.parametrize("new_tokens", [13, 38, 88])  # the first hop, then 25 and 50 more (each + 3 look-ahead)
def test_cached_prefix_gives_the_mel_of_the_full_computation(model, monkeypatch, side_by_side, new_tokens):
    if not side_by_side:
        monkeypatch.setattr(cfm, "use_branch_threads", lambda x: False)
    flow = model.networks.flow
    prompt = _prompt(model, 90)  # 50 cached + 40 more prompt tokens
    tokens = _tokens(model, new_tokens)
    full = flow.inference(tokens, *prompt, streaming=True, finalize=False)
    prefix = flow.build_prefix(*prompt, tokens=50)
    with _EstimatorCalls(flow) as calls:
        cached = flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=prefix)
    assert {frames for _, frames in calls.shapes} == {2 * (90 + new_tokens - 3) - 100}  # the prefix is not redone
    assert cached.shape == full.shape
    torch.testing.assert_close(cached, full, atol=2e-5, rtol=1e-5)
    assert prefix.frames == 100 and len(prefix.steps) == 10 and prefix.nbytes() > 0


def test_side_by_side_branches_equal_the_batched_guidance(model, monkeypatch):
    flow = model.networks.flow
    prompt, tokens = _prompt(model, 40), _tokens(model, 30)
    with _EstimatorCalls(flow) as side_by_side:
        together = flow.inference(tokens, *prompt)
    monkeypatch.setattr(cfm, "use_branch_threads", lambda x: False)
    with _EstimatorCalls(flow) as one_batch:
        batched = flow.inference(tokens, *prompt)
    torch.testing.assert_close(together, batched, atol=2e-5, rtol=1e-5)
    assert {batch for batch, _ in one_batch.shapes} == {2}
    if model.device.type == "cpu" and torch.get_num_threads() >= 2:
        assert {batch for batch, _ in side_by_side.shapes} == {1} and len(side_by_side.shapes) == 20


def test_branch_threads_keep_the_callers_thread_count():
    from cosyvoice_mac.models.flow.branches import run_branches

    before = torch.get_num_threads()
    seen = run_branches(torch.get_num_threads, torch.get_num_threads)
    assert seen == (1, 1) and torch.get_num_threads() == before
    started_later: list[int] = []
    thread = threading.Thread(target=lambda: started_later.append(torch.get_num_threads()))
    thread.start(), thread.join()
    assert started_later == [before]  # e.g. the LLM producer thread of the next request


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_runs_branches_on_threads_of_its_own():
    from cosyvoice_mac.models.flow.branches import run_branches

    run_branches(lambda: torch.ones(1), lambda: torch.ones(1))  # the parent's pool exists now
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            first, second = run_branches(lambda: torch.ones(2).sum(), lambda: torch.ones(3).sum())
            os._exit(0 if (float(first), float(second)) == (2.0, 3.0) else 1)
        except BaseException:
            os._exit(2)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        finished, status = os.waitpid(child, os.WNOHANG)
        if finished:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(child, 9)
    os.waitpid(child, 0)
    pytest.fail("the forked child hung waiting for its parent's branch threads")


def test_a_prefix_refuses_another_voice_and_non_streaming_calls(model):
    flow = model.networks.flow
    prompt, tokens = _prompt(model, 60), _tokens(model, 13)
    prefix = flow.build_prefix(*prompt, tokens=25)
    other = _prompt(model, 60, seed=9)
    with pytest.raises(FlowInputError, match="different voice"):
        flow.inference(tokens, *other, streaming=True, finalize=False, prefix=prefix)
    with pytest.raises(FlowInputError, match="only applies to streaming"):
        flow.inference(tokens, *prompt, streaming=False, finalize=True, prefix=prefix)


@pytest.mark.parametrize("length", [0, 20, 58, 60])
def test_a_prefix_must_be_whole_chunks_that_leave_the_look_ahead_in_the_prompt(model, length):
    with pytest.raises(FlowInputError, match="multiple of 25"):
        model.networks.flow.build_prefix(*_prompt(model, 60), tokens=length)


def test_prefix_cache_reuses_a_voice_and_rebuilds_for_another(model, monkeypatch):
    flow = model.networks.flow
    built: list[int] = []
    original = flow.build_prefix
    monkeypatch.setattr(flow, "build_prefix", lambda *a, **k: built.append(1) or original(*a, **k))

    class Voice:
        def __init__(self, seed):
            self.speech_tokens, self.mel, self.embedding = _prompt(model, 90, seed)
            self.mel = self.mel  # (1, 180, 80)
            self.audio_hash = f"voice-{seed}"

    cache, first, second = FlowPrefixCache(capacity=1), Voice(1), Voice(2)
    plan = PromptPlan.for_prompt(90)
    for voice in (first, first, second, first):
        prefix = cache.get(flow, voice, plan, plan.prompt(voice, model.device))
        assert prefix.matches(plan.prompt(voice, model.device)[0], voice.embedding)
    assert len(built) == 3  # the second use of a voice is free; capacity 1 forgot the first voice
    assert cache.get(flow, first, PromptPlan.for_prompt(10), plan.prompt(first, model.device)) is None


def test_streaming_makes_the_prefix_once_per_voice_and_moving_the_model_forgets_it(model, make_speech, monkeypatch):
    """Made once per voice: built before the first chunk on CUDA, recorded by the first chunk elsewhere."""
    speaker = model.prepare_prompt(make_speech("Hello there, this is a short prompt for testing.", seconds=3.0))
    flow = model.networks.flow
    made: list[str] = []
    for name in ("build_prefix", "first_chunk_recording_prefix"):
        original = getattr(flow, name)
        monkeypatch.setattr(flow, name, lambda *a, _f=original, _n=name, **k: made.append(_n) or _f(*a, **k))
    model.flow_prefixes.clear()
    first = list(model.synthesize(TEXT, speaker=speaker, seed=3, stream=True))
    second = list(model.synthesize(TEXT, speaker=speaker, seed=3, stream=True))
    how = "build_prefix" if model.device.type == "cuda" else "first_chunk_recording_prefix"
    assert made == [how]
    for a, b in zip(first, second):  # the cache changes nothing that is heard
        torch.testing.assert_close(torch.from_numpy(a.audio), torch.from_numpy(b.audio), atol=1e-5, rtol=0)
    model.to(model.device)
    list(model.synthesize(TEXT, speaker=speaker, seed=3, stream=True))
    assert made == [how, how]


def test_paused_producer_holds_the_llm_until_released():
    gate = threading.Event()
    produced: list[int] = []

    def tokens():
        for token in range(100):
            produced.append(token)
            if token == 5:
                gate.set()
            yield token

    producer = TokenProducer(tokens())
    gate.wait(5)
    producer.pause(True)
    held = producer.wait_for(5)
    time.sleep(0.1)
    assert len(producer.tokens) <= held + 2  # at most the token in flight
    producer.pause(False)
    assert producer.wait_for(100) == 100
    producer.abandon()


def test_producer_holds_after_the_first_chunk_tokens_until_released():
    producer = TokenProducer(iter(range(100)), hold_after=13)
    assert producer.wait_for(13) == 13
    time.sleep(0.1)
    assert len(producer.tokens) == 13 and not producer.finished
    producer.pause(False)
    assert producer.wait_for(100) == 100
    producer.abandon()


def test_on_a_cpu_the_llm_waits_at_the_first_chunk_tokens_while_a_new_voice_prefix_is_made(
    model, make_speech, monkeypatch
):
    """A new voice's first chunk (which records its prefix) is what its first audio waits for: tokens past the
    first chunk's must not take the cores from it (before: the LLM decoded on, all 200 tokens were pulled)."""
    from cosyvoice_mac.pipeline.streaming import FIRST_HOP_TOKENS, stream_segment

    if model.device.type != "cpu":
        pytest.skip("the CPU's rule (CUDA holds for its own reason, tested on the device)")
    speaker = model.prepare_prompt(make_speech("Hello there, this is a short prompt for testing.", seconds=3.0))
    flow = model.networks.flow
    pulled: list[int] = []
    during_build: list[int] = []
    original = flow.first_chunk_recording_prefix

    def slow_build(*args, **kwargs):
        time.sleep(0.4)  # time for an unheld LLM to run far ahead
        during_build.append(len(pulled))
        return original(*args, **kwargs)

    def tokens():
        for token in range(200):
            pulled.append(token)
            yield token % flow.config.vocab_size

    monkeypatch.setattr(flow, "first_chunk_recording_prefix", slow_build)
    model.flow_prefixes.clear()
    chunks = stream_segment(model.streaming_parts(), tokens(), speaker, model._noise(0, 0), lambda: False)
    first = next(chunks)
    chunks.close()
    assert during_build, "the voice was new: its first chunk must have recorded its prefix"
    assert during_build[0] <= FIRST_HOP_TOKENS + flow.config.pre_lookahead_len + 1  # at most the token in flight
    assert first.audio.size > 0
