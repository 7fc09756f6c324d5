"""A prompt over the limit is offered its clearest stretch (issue 50 item 10): the window with the most speech by
the silence rule, its edges in pauses, written as a prompt the checks accept; the page shows it as a selection on
the recording's waveform that the person moves, and the part chosen is the one used, as the CLI's and /v1's
``prompt_trim`` START-END is."""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
import soundfile

from cosyvoice_mac.sound.clearest import (
    CLEAREST_SECONDS,
    EDGE_SEARCH_SECONDS,
    LONGEST_SPAN_SECONDS,
    WAVE_BINS,
    clearest_span,
    keep_clearest,
    parse_trim,
)
from cosyvoice_mac.sound.prompt_check import checked_prompt
from cosyvoice_mac.webui import prompt_trim
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
    it a too-long prompt is refused with a sentence that names the option. START-END keeps that span."""
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

    part = _check_prompt(long, "10-22.5")  # a span chosen: that part, whatever the recording's length
    assert abs(soundfile.info(part).duration - 12.5) < 0.01
    with pytest.raises(CosyVoiceError, match="--prompt-trim is off, auto, or a span of the recording in seconds"):
        _check_prompt(long, "12-")
    with pytest.raises(CosyVoiceError, match=r"starts after the recording ends \(40.0 s\)"):
        _check_prompt(long, "50-60")
    spoken = VoiceDoor.check_recording(None, str(long), "prompt_audio", parse_trim(" 5 - 17 ", "prompt_trim"))
    assert abs(soundfile.info(spoken).duration - 12.0) < 0.01
    with pytest.raises(ApiError) as refused:
        VoiceDoor.check_recording(None, str(long), "prompt_audio", (45.0, 50.0))
    assert refused.value.status == 400 and refused.value.param == "prompt_trim"
    assert [parse_trim(words, "x") for words in (None, "", "OFF", "auto")] == ["off", "off", "off", "auto"]
    for wrong in ("7-3", "3-3", "-2-5", "12", "all of it"):
        with pytest.raises(ValueError, match="x is off, auto, or a span"):
            parse_trim(wrong, "x")


@pytest.fixture()
def interview(tmp_path, monkeypatch):
    """A 40 s recording (``_recording``), and the page's parts written under ``tmp_path``."""
    monkeypatch.setattr(prompt_trim, "_parts_folder", lambda: tmp_path / "parts")
    path = tmp_path / "interview.wav"
    soundfile.write(path, _recording(np.random.default_rng(7)), RATE)
    return path


def test_the_page_selects_the_clearest_part_on_the_waveform_and_uses_the_part_it_is_moved_to(interview):
    samples, _ = soundfile.read(interview, dtype="float32")
    audio, words, offer, picker, hint, picked = PromptTrimCallbacks.keep_clearest("en", str(interview))
    drawn = json.loads(picker)
    assert drawn["total"] == 40.0 and len(drawn["peaks"]) == WAVE_BINS and max(drawn["peaks"]) == 1.0
    assert drawn["peaks"][0] < 0.01  # the quiet start is drawn flat
    assert abs(soundfile.info(audio).duration - (drawn["end"] - drawn["start"])) < 0.01  # the player: the selection
    assert "Kept the clearest" in words and hint["visible"] and not offer["visible"]
    assert picked["source"] == str(interview) and "interview" not in picker  # the browser is given no path

    moved = gr.EventData(None, {"start": 22.0, "end": 34.0})  # the person drags the selection to 22-34 s
    audio, words, picker, picked = PromptTrimCallbacks.span_moved("en", picked, moved)
    kept, _ = soundfile.read(audio, dtype="float32")
    assert np.allclose(kept, samples[22 * RATE : 34 * RATE], atol=1e-4)  # the part chosen, to the sample
    assert "Kept the part you chose: 12.0 s (22.0-34.0 s of 40.0 s)" in words
    assert (json.loads(picker)["start"], json.loads(picker)["end"]) == (22.0, 34.0)

    # The player holding that part (under Gradio's cache folder) keeps the picker; any other recording ends it.
    offer, shown, hint, state = PromptTrimCallbacks.prompt_followed(
        "en", f"/tmp/gradio/0a1b/{Path(audio).name}", picked
    )
    assert (shown, hint, state) == (gr.skip(), gr.skip(), gr.skip()) and not offer["visible"]
    offer, shown, hint, state = PromptTrimCallbacks.prompt_followed("en", str(interview), picked)
    assert (shown, state) == ("", None) and not hint["visible"] and offer["visible"]  # offered again: too long

    # What the browser sends is held to the recording and the limits, never trusted.
    audio, *_ = PromptTrimCallbacks.span_moved("en", picked, gr.EventData(None, {"start": -5, "end": 99}))
    assert abs(soundfile.info(audio).duration - LONGEST_SPAN_SECONDS) < 0.01
    assert (
        PromptTrimCallbacks.span_moved("en", picked, gr.EventData(None, {"start": "x", "end": 3})) == (gr.skip(),) * 4
    )
    audio, words, *_ = PromptTrimCallbacks.span_moved("en", picked, gr.EventData(None, {"start": 0, "end": 4}))
    assert checked_prompt(audio).problem == "silent" and "Kept" not in words  # the part chosen, its problem said
