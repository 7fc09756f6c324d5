"""Streaming synthesis on tiny random-weight models: schedule, stitching, first audio before the end."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
import torch

from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.pipeline import CosyVoice, streaming
from tests.fakes.onnx_models import make_tiny_model_dir

# The suite runs on the CPU in CI; COSYVOICE_TEST_DEVICE=cuda (or mps) runs it on an accelerator.
TEST_DEVICE = os.environ.get("COSYVOICE_TEST_DEVICE", "cpu")

TEXT = "The quick brown fox jumps over the lazy dog, again and again, for a long while."


@pytest.fixture(scope="module", params=("cosyvoice3", "cosyvoice2"))
def model(request, tmp_path_factory) -> CosyVoice:
    folder = make_tiny_model_dir(request.param, tmp_path_factory.mktemp(request.param))
    return CosyVoice.from_pretrained(folder, device=TEST_DEVICE)


@pytest.fixture(scope="module")
def speaker(model, make_speech):
    return model.prepare_prompt(make_speech("Hello there, this is a short prompt for testing.", seconds=3.0))


class _RecordFlow:
    """Wraps the flow's chunk calls (``inference``, and a new voice's ``first_chunk_recording_prefix``) to keep each
    call's arguments and output mel."""

    def __init__(self, flow):
        self.flow, self.calls = flow, []
        self.original, self.original_first = flow.inference, flow.first_chunk_recording_prefix

    def __enter__(self):
        def record(tokens, *args, **kwargs):
            mel = self.original(tokens, *args, **kwargs)
            self.calls.append((tokens, kwargs, mel))
            return mel

        def record_first(tokens, *args, **kwargs):
            mel, prefix = self.original_first(tokens, *args, **kwargs)
            self.calls.append((tokens, {"streaming": True, "finalize": False}, mel))
            return mel, prefix

        self.flow.inference, self.flow.first_chunk_recording_prefix = record, record_first
        return self

    def __exit__(self, *exc):
        self.flow.inference, self.flow.first_chunk_recording_prefix = self.original, self.original_first


def test_schedule_is_10_25_50_100_and_resets_per_request(model, speaker):
    for _ in range(2):  # a second request starts over (upstream keeps the grown hop)
        chunks = list(model.synthesize(TEXT, speaker=speaker, seed=3, stream=True))
        counts = [c.speech_token_count for c in chunks]
        expected, hop = [10], 25
        while expected[-1] + hop + 3 <= counts[-1]:
            expected.append(expected[-1] + hop)
            hop = min(100, 2 * hop)
        assert counts[:-1] == expected and chunks[-1].is_final_chunk
        assert not any(c.is_final_chunk for c in chunks[:-1])


def test_streamed_audio_has_the_length_and_tokens_of_the_offline_audio(model, speaker):
    offline = list(model.synthesize(TEXT, speaker=speaker, seed=3))
    chunks = list(model.synthesize(TEXT, speaker=speaker, seed=3, stream=True))
    assert chunks[-1].speech_token_count == sum(r.speech_token_count for r in offline)
    assert sum(len(c.audio) for c in chunks) == sum(len(r.audio) for r in offline)
    assert all(np.isfinite(c.audio).all() and np.abs(c.audio).max() <= 0.99 + 1e-6 for c in chunks)


@pytest.mark.parametrize("prompt_tokens", [5, 15, 24, 25, 40, 75, 80, 89, 90, 114, 250, 750])
def test_prompt_plan_ends_the_first_hop_on_the_chunk_grid(prompt_tokens):
    from cosyvoice_mac.pipeline.streaming import PromptPlan

    plan = PromptPlan.for_prompt(prompt_tokens, first_hop=10, max_prefix=75)
    kept = prompt_tokens - plan.cut
    assert 0 <= plan.cut < prompt_tokens and (kept + plan.first_hop) % 25 == 0
    assert plan.prefix_tokens % 25 == 0 and plan.prefix_tokens <= 75
    if plan.prefix_tokens:
        assert kept - plan.prefix_tokens >= 3  # the look-ahead of the last cached token stays in the prompt
    if prompt_tokens >= 15:
        assert plan.first_hop == 10 and kept - plan.prefix_tokens == 15  # one chunk left to compute per call
    else:
        assert plan.first_hop == 25 - prompt_tokens and plan.prefix_tokens == 0


def test_prompt_plan_is_cut_at_its_start(model, speaker):
    from cosyvoice_mac.pipeline.streaming import PromptPlan

    plan = PromptPlan.for_prompt(speaker.speech_tokens.shape[1])
    tokens, mel, embedding = plan.prompt(speaker, torch.device("cpu"))
    assert torch.equal(tokens, speaker.speech_tokens[:, plan.cut :]) and torch.equal(
        mel, speaker.mel[:, 2 * plan.cut :]
    )
    assert torch.equal(embedding, speaker.embedding)


def test_last_chunk_is_the_full_attention_mel_of_all_tokens(model, speaker):
    from cosyvoice_mac.pipeline.streaming import PromptPlan

    flow = model.networks.flow
    with _RecordFlow(flow) as recorder:
        chunks = list(model.synthesize(TEXT, speaker=speaker, seed=3, stream=True))
        streamed = recorder.calls
        recorder.calls = []
        list(model.synthesize(TEXT, speaker=speaker, seed=3))
        ((offline_tokens, _, _),) = recorder.calls
    assert [kwargs["streaming"] for _, kwargs, _ in streamed] == [True] * (len(chunks) - 1) + [False]
    final_tokens, _, final_mel = streamed[-1]
    assert torch.equal(final_tokens, offline_tokens)  # same seed: the stream decodes the same tokens
    prompt = PromptPlan.for_prompt(speaker.speech_tokens.shape[1]).prompt(speaker, final_tokens.device)
    full = flow.inference(final_tokens, *prompt, streaming=False, finalize=True)
    assert torch.equal(final_mel, full)  # all tokens, full attention, the grid-aligned prompt


def test_cosyvoice3_chunks_join_seamlessly(tmp_path, make_speech):
    model = CosyVoice.from_pretrained(make_tiny_model_dir("cosyvoice3", tmp_path), device=TEST_DEVICE)
    speaker = model.prepare_prompt(make_speech("Hello there, this is a short prompt for testing.", seconds=3.0))
    with _RecordFlow(model.networks.flow) as recorder:
        chunks = list(model.synthesize(TEXT, speaker=speaker, seed=3, stream=True))
    offsets = [0] + [c.speech_token_count for c in chunks[:-1]]
    mel = torch.cat([m[:, :, 2 * off :] for (_, _, m), off in zip(recorder.calls, offsets)], dim=2)
    once = model.networks.hift.inference(mel.float())[0][0].cpu().numpy()
    streamed = np.concatenate([c.audio for c in chunks])
    assert np.abs(streamed - once).max() < 1e-4  # causal vocoder: re-running on more mel keeps the prefix


def test_cosyvoice3_streaming_decodes_only_the_new_frames_and_their_context(tmp_path, make_speech, monkeypatch):
    from cosyvoice_mac.models.vocoder.window import context_frames

    model = CosyVoice.from_pretrained(make_tiny_model_dir("cosyvoice3", tmp_path), device=TEST_DEVICE)
    speaker = model.prepare_prompt(make_speech("Hello there, this is a short prompt for testing.", seconds=3.0))
    hift, decoded = model.networks.hift, []
    original = hift.decode

    def recording_decode(mel, source, **kwargs):
        decoded.append(mel.shape[-1])
        return original(mel, source, **kwargs)

    monkeypatch.setattr(hift, "decode", recording_decode)
    chunks = list(model.synthesize(TEXT * 2, speaker=speaker, seed=3, stream=True))
    counts = [0] + [c.speech_token_count for c in chunks]
    left, _ = context_frames(hift)
    lag = 2 * model.networks.flow.config.pre_lookahead_len + hift.streaming_lag  # held-back frames
    assert len(decoded) == len(chunks) >= 4
    for frames, before, after in zip(decoded, counts, counts[1:]):
        assert frames <= 2 * (after - before) + lag + left  # never the whole sentence so far
    assert decoded[-1] < 2 * counts[-1] - left  # the last call did not re-decode the start


def test_first_chunk_arrives_while_the_llm_is_still_decoding(model, speaker, monkeypatch):
    llm = model.networks.llm
    original = llm.generate
    last_token_at: list[float] = []

    def slow_generate(*args, **kwargs):
        for token in original(*args, **kwargs):
            time.sleep(0.01)
            last_token_at.append(time.perf_counter())
            yield token

    monkeypatch.setattr(llm, "generate", slow_generate)
    stream = model.synthesize(TEXT, speaker=speaker, seed=3, stream=True)
    next(stream)
    first_chunk_at = time.perf_counter()
    list(stream)
    assert first_chunk_at < last_token_at[-1]


@pytest.mark.skipif(TEST_DEVICE != "cpu", reason="the LLM is held for the first chunk on a CPU only")
def test_the_llm_is_held_while_the_first_chunk_is_made_on_a_cpu(model, speaker, monkeypatch):
    llm, flow = model.networks.llm, model.networks.flow
    made: list[int] = []
    original_generate, original_inference = llm.generate, flow.inference

    def counting_generate(*args, **kwargs):
        for token in original_generate(*args, **kwargs):
            made.append(token)
            yield token

    during: list[tuple[int, int]] = []

    def slow(original):  # a new voice's first chunk records its prefix; a known voice's is a plain inference
        def chunk(*args, **kwargs):
            before = len(made)
            mel = original(*args, **kwargs)
            time.sleep(0.3)  # time in which a free-running tiny LLM makes many tokens
            during.append((before, len(made)))
            return mel

        return chunk

    monkeypatch.setattr(llm, "generate", counting_generate)
    monkeypatch.setattr(flow, "inference", slow(original_inference))
    monkeypatch.setattr(flow, "first_chunk_recording_prefix", slow(flow.first_chunk_recording_prefix))
    stop = threading.Event()  # two chunks show it: the rest of a long sentence (minutes for CosyVoice2) adds nothing
    stream = model.synthesize(TEXT * 3, speaker=speaker, seed=3, stream=True, should_stop=stop.is_set)
    next(stream), next(stream)
    stop.set()
    list(stream)
    first_before, first_after = during[0]
    assert first_after - first_before <= 1  # at most the token that was in flight
    assert len(made) > first_after  # and it went on afterwards


def _device_work_intervals(model, speaker, text: str) -> tuple[list[tuple], list[tuple]]:
    """(LLM step intervals, flow/vocoder intervals) of one streamed request; each step is slowed a little."""
    llm, flow, hift = model.networks.llm, model.networks.flow, model.networks.hift
    steps: list[tuple[float, float]] = []
    chunks: list[tuple[float, float]] = []
    original_generate, original_flow, original_hift = llm.generate, flow.inference, hift.inference

    def timed_generate(*args, **kwargs):
        inner = original_generate(*args, **kwargs)
        while True:
            started = time.perf_counter()
            time.sleep(0.002)  # the step's device work, long enough to be caught beside a chunk
            token = next(inner, None)
            steps.append((started, time.perf_counter()))
            if token is None:
                return
            yield token

    def timed(original):
        def run(*args, **kwargs):
            started = time.perf_counter()
            time.sleep(0.02)
            result = original(*args, **kwargs)
            chunks.append((started, time.perf_counter()))
            return result

        return run

    llm.generate, flow.inference, hift.inference = timed_generate, timed(original_flow), timed(original_hift)
    try:
        list(model.synthesize(text, speaker=speaker, seed=3, stream=True))
    finally:
        del llm.generate, flow.inference, hift.inference  # back to the class methods
    return steps, chunks


def _overlaps(steps, chunks) -> int:
    return sum(1 for a, b in steps for c, d in chunks if a < d and c < b)


def test_with_serialised_device_work_no_llm_step_runs_beside_a_chunk(model, speaker, monkeypatch):
    """The MPS policy (forced on for the CPU): LLM steps and flow/vocoder calls never overlap in time."""
    monkeypatch.setenv("COSYVOICE_SERIAL_DEVICE", "1")
    steps, chunks = _device_work_intervals(model, speaker, TEXT)
    assert len(chunks) >= 6 and len(steps) > 50
    assert _overlaps(steps, chunks) == 0
    # Without the policy the producer runs beside every chunk after the first (the test can see it).
    monkeypatch.delenv("COSYVOICE_SERIAL_DEVICE")
    steps, chunks = _device_work_intervals(model, speaker, TEXT)
    assert _overlaps(steps, chunks) > 0


def test_stop_ends_the_stream_and_its_llm_thread(model, speaker, monkeypatch):
    """On torch a sentence's LLM thread ends with it: a long-lived one would keep its OpenMP team, and GNU
    OpenMP then stops spinning between parallel ops in the whole process (issue 47's slower CPU decode)."""
    llm_threads = []
    run = streaming.TokenProducer._run

    def watched(producer, tokens):
        llm_threads.append(threading.current_thread())
        return run(producer, tokens)

    monkeypatch.setattr(streaming.TokenProducer, "_run", watched)
    stop = threading.Event()
    stream = model.synthesize(TEXT * 3, speaker=speaker, seed=3, stream=True, should_stop=stop.is_set)
    next(stream)
    stop.set()
    list(stream)
    assert llm_threads and llm_threads[0] is not threading.current_thread()
    for thread in llm_threads:
        thread.join(timeout=5)  # it ends just after signalling that the sentence's decoding did
    assert not [thread for thread in llm_threads if thread.is_alive()]


def test_speed_with_streaming_is_a_clear_error(model, speaker):
    with pytest.raises(RequestError, match="speed 1.5 cannot be used while streaming"):
        model.synthesize(TEXT, speaker=speaker, stream=True, speed=1.5)


def test_streaming_runs_on_its_parts_alone(model, speaker):
    """stream_segment takes the flow, the vocoder, the version's stitcher and a prefix cache: no CosyVoice."""
    from cosyvoice_mac.pipeline.streaming import FlowPrefixCache, StreamingParts, stream_segment

    flow, hift = model.networks.flow, model.networks.hift
    tokens = torch.randint(0, flow.config.vocab_size, (80,), generator=torch.Generator().manual_seed(5)).tolist()
    parts = StreamingParts(flow=flow, vocoder=hift, stitcher=model.spec.stitcher, prefixes=FlowPrefixCache())
    alone = list(stream_segment(parts, iter(tokens), speaker, model._noise(3, 0), lambda: False))
    assert [c.tokens_so_far for c in alone] == [10, 35, 80] and alone[-1].is_final
    assert sum(len(c.audio) for c in alone) == 2 * len(tokens) * hift.config.samples_per_frame
    owned = list(stream_segment(model.streaming_parts(), iter(tokens), speaker, model._noise(3, 0), lambda: False))
    for a, b in zip(alone, owned, strict=True):  # the model's own parts stream the same audio
        torch.testing.assert_close(torch.from_numpy(a.audio), torch.from_numpy(b.audio), atol=1e-5, rtol=0)
    wrong = StreamingParts(flow=flow, vocoder=hift, stitcher="overlap-add", prefixes=FlowPrefixCache())
    with pytest.raises(ValueError, match="unknown stitcher 'overlap-add'"):
        next(stream_segment(wrong, iter(tokens), speaker, None, lambda: False))
