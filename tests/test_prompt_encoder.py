"""The prompt encoder: speech tokens beside the speaker vector and mel, with the same features as one after another."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from cosyvoice_mac.frontend.speaker import RandomSpeakerEncoder
from cosyvoice_mac.frontend.speech_tokenizer import RandomSpeechTokenizer
from cosyvoice_mac.pipeline.loading import OnDemand
from cosyvoice_mac.pipeline.speaker import PromptEncoder
from cosyvoice_mac.pipeline.types import PromptAudio, SynthesisError

SECONDS = 3.0


class _Timed:
    """Wraps a stand-in and records when (and on which thread) each call ran; ``keep_loaded`` as OnDemand's."""

    def __init__(self, inner, method: str, delay: float, keep_loaded: bool = True):
        self.inner, self.method, self.delay, self.keep_loaded = inner, method, delay, keep_loaded
        self.calls: list[tuple[float, float, int]] = []

    def __getattr__(self, name):
        if name != self.method:
            return getattr(self.inner, name)

        def timed(*args):
            started = time.perf_counter()
            time.sleep(self.delay)  # an ONNX session's run releases the GIL the same way
            value = getattr(self.inner, name)(*args)
            self.calls.append((started, time.perf_counter(), threading.get_ident()))
            return value

        return timed


def _voice(seconds: float = SECONDS) -> np.ndarray:
    t = np.arange(int(seconds * 24000)) / 24000
    return (0.3 * np.sin(2 * np.pi * 140 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)


def _encoder(keep_loaded: bool, delay: float = 0.3):
    tokenizer = _Timed(RandomSpeechTokenizer(seed=1), "tokens", delay, keep_loaded)
    speaker = _Timed(RandomSpeakerEncoder(seed=1), "embedding", delay, keep_loaded)
    return PromptEncoder(tokenizer, speaker, fmax=None, model_id="test"), tokenizer, speaker


def test_the_speaker_vector_is_made_while_the_speech_tokens_are():
    """Before: one after the other, so the two calls' intervals never overlapped."""
    encoder, tokenizer, speaker = _encoder(keep_loaded=True)
    encoder.encode(_voice(), sample_rate=24000)
    (tok_start, tok_end, tok_thread), (emb_start, emb_end, emb_thread) = tokenizer.calls[0], speaker.calls[0]
    assert emb_start < tok_end and tok_start < emb_end, "the two frontends ran one after the other"
    assert tok_thread != emb_thread
    assert set(encoder.last_timings) == {"speech_tokens_s", "speaker_embedding_s", "prompt_mel_s"}


def test_the_helper_thread_runs_torch_on_one_thread():
    """It shares the cores with the tokenizer, and a 2-thread OpenMP team kept by this long-lived thread slowed
    every later parallel op of the process, the LLM step's among them (issue 47)."""
    encoder = _encoder(keep_loaded=True, delay=0.0)[0]
    encoder.encode(_voice(), sample_rate=24000)
    assert encoder._helper.submit(torch.get_num_threads).result() == 1


def test_concurrent_and_sequential_encoding_give_the_same_features():
    concurrent = _encoder(keep_loaded=True, delay=0.0)[0].encode(_voice(), sample_rate=24000)
    low_memory, tokenizer, speaker = _encoder(keep_loaded=False, delay=0.0)
    assert not low_memory.concurrent  # a session loaded per call: never two at once
    sequential = low_memory.encode(_voice(), sample_rate=24000)
    assert tokenizer.calls[0][2] == speaker.calls[0][2] == threading.get_ident()
    assert torch.equal(concurrent.speech_tokens, sequential.speech_tokens)
    assert torch.equal(concurrent.embedding, sequential.embedding)
    assert torch.equal(concurrent.mel, sequential.mel)


class _Refusing:
    def __init__(self, why: str):
        self.why = why

    def tokens(self, wave16k):
        time.sleep(0.05)  # the speaker encoder refuses first
        raise SynthesisError(self.why)

    def embedding(self, wave16k):
        raise SynthesisError(self.why)


def test_the_speech_tokenizers_error_is_the_one_raised_and_the_encoder_works_on():
    encoder = PromptEncoder(_Refusing("tokenizer: no"), _Refusing("speaker: no"), fmax=None, model_id="test")
    with pytest.raises(SynthesisError, match="tokenizer: no"):  # as when they ran one after the other
        encoder.encode(_voice(), sample_rate=24000)
    encoder.speech_tokenizer, encoder.speaker_encoder = RandomSpeechTokenizer(), RandomSpeakerEncoder()
    assert encoder.encode(_voice(), sample_rate=24000).speech_tokens.shape[1] > 0


# ------------------------------------------------------------------------------- several prompts in one call


def _on_demand_pair(keep_loaded: bool):
    """The stand-ins behind OnDemand (as the low-memory mode builds them); each build records what else was
    loaded at that moment."""
    built: list[tuple[str, bool]] = []
    tokenizer = OnDemand(
        lambda: built.append(("tokenizer", speaker.loaded)) or RandomSpeechTokenizer(seed=1), keep_loaded=keep_loaded
    )
    speaker = OnDemand(
        lambda: built.append(("speaker", tokenizer.loaded)) or RandomSpeakerEncoder(seed=1), keep_loaded=keep_loaded
    )
    return PromptEncoder(tokenizer, speaker, fmax=None, model_id="test"), tokenizer, speaker, built


@pytest.mark.parametrize("keep_loaded", [False, True], ids=["low-memory", "resident"])
def test_several_prompts_in_one_call_load_each_frontend_once_and_match_one_at_a_time(keep_loaded):
    voices = [_voice(3.0), _voice(0.2), _voice(4.5), _voice(3.5) * 0.5]  # the second is far too short
    encoder, tokenizer, speaker, built = _on_demand_pair(keep_loaded)
    many = encoder.encode_many([PromptAudio(voice, 24000, f"text {i}") for i, voice in enumerate(voices)])

    assert (tokenizer.loads, speaker.loads) == (1, 1)  # before: one load of each per prompt in low-memory mode
    if not keep_loaded:  # one session at a time: the tokenizer is gone before CAM++ is built
        assert built == [("tokenizer", False), ("speaker", False)]
        assert not tokenizer.loaded and not speaker.loaded
    assert isinstance(many[1], SynthesisError) and many[1].field == "prompt_audio" and "0.2 s" in str(many[1])
    alone = _encoder(keep_loaded=True, delay=0.0)[0]
    for index in (0, 2, 3):
        one = alone.encode(voices[index], sample_rate=24000, transcript=f"text {index}")
        assert torch.equal(many[index].speech_tokens, one.speech_tokens)
        assert torch.equal(many[index].embedding, one.embedding)
        assert torch.equal(many[index].mel, one.mel)
        assert (many[index].audio_hash, many[index].transcript) == (one.audio_hash, one.transcript)
    assert len({many[index].audio_hash for index in (0, 2, 3)}) == 3
    assert encoder.last_timings["speech_tokens_s"] > 0


def test_a_prompt_the_frontends_refuse_keeps_its_error_in_its_place_and_unreadable_input_too(tmp_path):
    notes = tmp_path / "notes.wav"
    notes.write_text("meeting notes, not a recording")
    encoder = _encoder(keep_loaded=True, delay=0.0)[0]
    many = encoder.encode_many(
        [PromptAudio(str(notes)), PromptAudio(_voice(), 24000), PromptAudio(_voice(31.0), 24000)]
    )
    assert isinstance(many[0], SynthesisError) and isinstance(many[2], SynthesisError)
    assert many[1].speech_tokens.shape[1] > 0
    assert encoder.encode_many([]) == []
    with pytest.raises(SynthesisError):  # one prompt alone still raises its error
        encoder.encode(str(notes))
