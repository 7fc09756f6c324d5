"""A prompt over the limit is offered its clearest stretch (issue 50 item 10): the window with the most speech by
the silence rule, its edges in pauses, written as a prompt the checks accept."""

from __future__ import annotations

import numpy as np
import soundfile

from cosyvoice_mac.sound.clearest import CLEAREST_SECONDS, EDGE_SEARCH_SECONDS, clearest_span, keep_clearest
from cosyvoice_mac.sound.prompt_check import checked_prompt
from cosyvoice_mac.webui.prompt_trim import PromptTrimCallbacks

RATE = 16000


def _bursts(seconds: float, on: float, off: float, rng) -> np.ndarray:
    """Word-like bursts (a tone with noise) of ``on`` seconds between pauses of ``off`` seconds."""
    out = []
    while sum(map(len, out)) < seconds * RATE:
        t = np.arange(int(on * RATE)) / RATE
        out.append((0.4 * np.sin(2 * np.pi * 180 * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32))
        out.append(np.zeros(int(off * RATE), np.float32))
    return np.concatenate(out)[: int(seconds * RATE)]


def _recording(rng) -> np.ndarray:
    """5 s of near silence, 16 s of dense speech, then 19 s of sparse speech: 40 s, 35 s of it sound."""
    quiet = (1e-4 * rng.standard_normal(5 * RATE)).astype(np.float32)
    return np.concatenate([quiet, _bursts(16, 0.35, 0.12, rng), _bursts(19, 0.2, 1.2, rng)])


def test_the_clearest_stretch_is_the_densest_speech_cut_in_pauses(tmp_path):
    rng = np.random.default_rng(7)
    samples = _recording(rng)
    span = clearest_span(samples, RATE)
    assert span.total == 40.0
    assert 4.5 <= span.start and span.end <= 21.5  # inside the dense part, not the silence or the sparse tail
    assert CLEAREST_SECONDS <= span.seconds <= CLEAREST_SECONDS + 2 * EDGE_SEARCH_SECONDS
    for edge in (span.start, span.end):  # each edge sits in a pause, not in a word
        around = samples[int(edge * RATE) - 80 : int(edge * RATE) + 80]
        assert np.abs(around).max() < 0.1, edge
    assert clearest_span(samples[: 5 * RATE], RATE).seconds == 5.0  # a short one is kept whole

    long = tmp_path / "interview.wav"
    soundfile.write(long, samples, RATE)
    assert checked_prompt(long).problem == "too_long"
    assert PromptTrimCallbacks.trim_offer("en", str(long))["visible"] is True
    assert PromptTrimCallbacks.trim_offer("en", None)["visible"] is False
    kept, span = keep_clearest(long, tmp_path / "kept")
    assert checked_prompt(kept).ok and abs(soundfile.info(kept).duration - span.seconds) < 0.01


def test_the_cli_and_v1_keep_the_clearest_stretch_on_request_and_name_the_option_otherwise(make_speech):
    """The same rule at the other doors: ``synth --prompt-trim auto`` and ``/v1``'s ``prompt_trim=auto``; without
    it a too-long prompt is refused with a sentence that names the option."""
    import pytest

    from cosyvoice_mac.api.errors import ApiError
    from cosyvoice_mac.api.voice_door import VoiceDoor
    from cosyvoice_mac.cli.main import _check_prompt
    from cosyvoice_mac.errors import CosyVoiceError

    long = make_speech("The birch canoe slid on the smooth planks, and the wind blew.", seconds=40.0)
    with pytest.raises(CosyVoiceError, match="--prompt-trim auto"):
        _check_prompt(long)
    kept = _check_prompt(long, "auto")
    assert kept != long and checked_prompt(kept).ok and soundfile.info(kept).duration < 16
    with pytest.raises(ApiError) as refused:
        VoiceDoor.check_recording(None, str(long), "prompt_audio", "off")
    assert refused.value.status == 400 and "prompt_trim=auto" in str(refused.value)
    assert checked_prompt(VoiceDoor.check_recording(None, str(long), "prompt_audio", "auto")).ok
