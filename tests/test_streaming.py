"""Streaming synthesis on tiny random-weight models: schedule, stitching, first audio before the end."""
from __future__ import annotations

import os

import threading
import time

import numpy as np
import pytest
import torch

from cosyvoice_mac.pipeline import CosyVoice, SynthesisError
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
    """Wraps flow.inference to keep each call's arguments and output mel."""

    def __init__(self, flow):
        self.flow, self.original, self.calls = flow, flow.inference, []

    def __enter__(self):
        def record(tokens, *args, **kwargs):
            mel = self.original(tokens, *args, **kwargs)
            self.calls.append((tokens, kwargs, mel))
            return mel

        self.flow.inference = record
        return self

    def __exit__(self, *exc):
        self.flow.inference = self.original


def test_schedule_grows_25_50_100_and_resets_per_request(model, speaker):
    first = 25  # the flow prompt is cut to whole 25-token chunks, so the first hop needs no padding
    for _ in range(2):  # a second request starts over (upstream keeps the grown hop)
        chunks = list(model.synthesize(TEXT, speaker=speaker, seed=3, stream=True))
        counts = [c.speech_token_count for c in chunks]
        expected = [first]
        while expected[-1] + min(100, 25 * 2 ** len(expected)) + 3 <= counts[-1]:
            expected.append(expected[-1] + min(100, 25 * 2 ** len(expected)))
        assert counts[:-1] == expected and chunks[-1].is_final_chunk
        assert not any(c.is_final_chunk for c in chunks[:-1])


def test_streamed_audio_has_the_length_and_tokens_of_the_offline_audio(model, speaker):
    offline = list(model.synthesize(TEXT, speaker=speaker, seed=3))
    chunks = list(model.synthesize(TEXT, speaker=speaker, seed=3, stream=True))
    assert chunks[-1].speech_token_count == sum(r.speech_token_count for r in offline)
    assert sum(len(c.audio) for c in chunks) == sum(len(r.audio) for r in offline)
    assert all(np.isfinite(c.audio).all() and np.abs(c.audio).max() <= 0.99 + 1e-6 for c in chunks)


def test_prompt_cut_to_the_chunk_grid_at_its_start(model, speaker):
    from cosyvoice_mac.pipeline.streaming import _grid_aligned_prompt

    (tokens, mel, _), pad = _grid_aligned_prompt(speaker, torch.device("cpu"))
    assert tokens.shape[1] % 25 == 0 and pad == 0 and mel.shape[1] == 2 * tokens.shape[1]
    cut = speaker.speech_tokens.shape[1] - tokens.shape[1]
    assert torch.equal(tokens, speaker.speech_tokens[:, cut:]) and torch.equal(mel, speaker.mel[:, 2 * cut:])


def test_last_chunk_is_the_full_attention_mel_of_all_tokens(model, speaker):
    from cosyvoice_mac.pipeline.streaming import _grid_aligned_prompt

    flow = model.networks.flow
    with _RecordFlow(flow) as recorder:
        chunks = list(model.synthesize(TEXT, speaker=speaker, seed=3, stream=True))
        streamed = recorder.calls
        recorder.calls = []
        list(model.synthesize(TEXT, speaker=speaker, seed=3))
        (offline_tokens, _, _), = recorder.calls
    assert [kwargs["streaming"] for _, kwargs, _ in streamed] == [True] * (len(chunks) - 1) + [False]
    final_tokens, _, final_mel = streamed[-1]
    assert torch.equal(final_tokens, offline_tokens)  # same seed: the stream decodes the same tokens
    prompt, _ = _grid_aligned_prompt(speaker, final_tokens.device)
    full = flow.inference(final_tokens, *prompt, streaming=False, finalize=True)
    assert torch.equal(final_mel, full)  # all tokens, full attention, the grid-aligned prompt


def test_cosyvoice3_chunks_join_seamlessly(tmp_path, make_speech):
    model = CosyVoice.from_pretrained(make_tiny_model_dir("cosyvoice3", tmp_path), device=TEST_DEVICE)
    speaker = model.prepare_prompt(make_speech("Hello there, this is a short prompt for testing.", seconds=3.0))
    with _RecordFlow(model.networks.flow) as recorder:
        chunks = list(model.synthesize(TEXT, speaker=speaker, seed=3, stream=True))
    offsets = [0] + [c.speech_token_count for c in chunks[:-1]]
    mel = torch.cat([m[:, :, 2 * off:] for (_, _, m), off in zip(recorder.calls, offsets)], dim=2)
    once = model.networks.hift.inference(mel.float())[0][0].cpu().numpy()
    streamed = np.concatenate([c.audio for c in chunks])
    assert np.abs(streamed - once).max() < 1e-4  # causal vocoder: re-running on more mel keeps the prefix


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


def test_stop_ends_the_stream_and_its_producer_thread(model, speaker):
    stop = threading.Event()
    stream = model.synthesize(TEXT * 3, speaker=speaker, seed=3, stream=True, should_stop=stop.is_set)
    next(stream)
    stop.set()
    list(stream)
    time.sleep(0.1)
    assert not [t for t in threading.enumerate() if t.name == "llm-producer" and t.is_alive()]


def test_speed_with_streaming_is_a_clear_error(model, speaker):
    with pytest.raises(SynthesisError, match="speed"):
        model.synthesize(TEXT, speaker=speaker, stream=True, speed=1.5)
