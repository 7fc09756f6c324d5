"""A new voice's first streamed chunk records its flow prefix on the way (``Flow.first_chunk_recording_prefix``).

On a CPU one estimator call over the prompt and the chunk costs about what the chunk alone costs through a
prefix, so a new voice's first audio no longer waits for a separate prefix build. This must change nothing
that is heard: the recorded prefix equals a built one, the first chunk equals the uncached computation, and
later chunks through either prefix are the same, for both estimators (DiT and U-Net).
"""

from __future__ import annotations

import pytest
import torch

from cosyvoice_mac.models.flow.cfm import FlowInputError
from cosyvoice_mac.pipeline import CosyVoice
from tests.fakes.onnx_models import make_tiny_model_dir
from tests.test_flow_prefix import TEXT, _prompt, _tokens
from tests.test_streaming import _RecordFlow

PROMPT_TOKENS, PREFIX_TOKENS = 90, 50  # 50 cached + 40 more prompt tokens


@pytest.fixture(scope="module", params=("cosyvoice3", "cosyvoice2"))
def model(request, tmp_path_factory) -> CosyVoice:
    folder = make_tiny_model_dir(request.param, tmp_path_factory.mktemp(request.param))
    return CosyVoice.from_pretrained(folder, device="cpu")


def test_the_recorded_prefix_and_first_chunk_equal_a_built_prefix_and_the_uncached_chunk(model):
    flow = model.networks.flow
    prompt = _prompt(model, PROMPT_TOKENS)
    first = _tokens(model, 13)
    mel, recorded = flow.first_chunk_recording_prefix(first, *prompt, prefix_tokens=PREFIX_TOKENS)
    uncached = flow.inference(first, *prompt, streaming=True, finalize=False)
    torch.testing.assert_close(mel, uncached, atol=1e-5, rtol=1e-5)
    built = flow.build_prefix(*prompt, tokens=PREFIX_TOKENS)
    assert (recorded.tokens, recorded.frames) == (built.tokens, built.frames) == (PREFIX_TOKENS, 2 * PREFIX_TOKENS)
    assert recorded.matches(prompt[0], prompt[2]) and len(recorded.steps) == len(built.steps)
    for mine, theirs in zip(recorded.steps, built.steps):
        assert mine.frames == theirs.frames and not mine.recording and mine.tensors.keys() == theirs.tensors.keys()
        for key, tensor in theirs.tensors.items():  # attention keys/values and causal-conv context
            assert mine.tensors[key].shape == tensor.shape, key
            torch.testing.assert_close(mine.tensors[key], tensor, atol=1e-5, rtol=1e-5)
    later = _tokens(model, 38, seed=3)  # the first hop and 25 more: read through each prefix
    through_recorded = flow.inference(later, *prompt, streaming=True, finalize=False, prefix=recorded)
    through_built = flow.inference(later, *prompt, streaming=True, finalize=False, prefix=built)
    uncached = flow.inference(later, *prompt, streaming=True, finalize=False)
    torch.testing.assert_close(through_recorded, through_built, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(through_recorded, uncached, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("prefix_tokens", [0, 30, 100])
def test_a_prefix_that_is_not_whole_chunks_inside_the_prompt_is_refused_by_name(model, prefix_tokens):
    with pytest.raises(FlowInputError, match="a cached prefix must be a positive multiple of 25 tokens"):
        model.networks.flow.first_chunk_recording_prefix(
            _tokens(model, 13), *_prompt(model, PROMPT_TOKENS), prefix_tokens=prefix_tokens
        )


def test_a_new_voice_streams_the_audio_of_a_prepared_one_without_a_separate_build(model, make_speech, monkeypatch):
    assert_a_new_voice_streams_a_prepared_ones_audio_without_a_build(model, make_speech, monkeypatch)


def assert_a_new_voice_streams_a_prepared_ones_audio_without_a_build(model, make_speech, monkeypatch) -> None:
    """A voice prepared beforehand (its prefix built) and the same voice new (its prefix recorded by the first
    chunk, no build) stream the same chunks; the recorded prefix is kept. Any engine's model."""
    speaker = model.prepare_prompt(make_speech("Hello there, this is a short prompt for testing.", seconds=3.0))
    model.flow_prefixes.clear()
    model.prepare_streaming(speaker)  # a voice used before: its prefix built beforehand
    with _RecordFlow(model.networks.flow) as known:
        prepared = [chunk.audio for chunk in model.synthesize(TEXT, speaker=speaker, seed=3, stream=True)]
    builds = model.flow_prefixes.builds
    model.flow_prefixes.clear()
    monkeypatch.setattr(model.networks.flow, "build_prefix", lambda *a, **k: pytest.fail("a new voice built a prefix"))
    with _RecordFlow(model.networks.flow) as new_voice:
        new = [chunk.audio for chunk in model.synthesize(TEXT, speaker=speaker, seed=3, stream=True)]
    assert model.flow_prefixes.builds == builds and len(model.flow_prefixes._entries) == 1  # recorded, then kept
    assert len(new) == len(prepared) > 2 and len(new_voice.calls) == len(known.calls)
    for (_, _, mine), (_, _, theirs) in zip(new_voice.calls, known.calls):  # every chunk's mel
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)
    # Mels within ~1e-6 (GEMM rounding: the recorded prefix comes from a longer call than the built one) still
    # reach 3e-4 in the v3 tiny model's later chunks: its sine source turns them into phase (bench/README.md).
    for a, b in zip(new, prepared):
        torch.testing.assert_close(torch.from_numpy(a), torch.from_numpy(b), atol=5e-4, rtol=0)
