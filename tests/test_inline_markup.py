"""Inline control markup (frontend/inline.py, pipeline/prompts.py): what each tag does to the plan and, on the
preview voice, to the sound; each malformed form refused with its position; CosyVoice3's own markup untouched."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.errors import InputError, RequestError
from cosyvoice_mac.frontend.glossary import GlossaryEntry, apply_glossary
from cosyvoice_mac.frontend.inline import Pause, Spoken, parse_inline
from cosyvoice_mac.frontend.text import TextNormalizer
from cosyvoice_mac.longform import LongformError, runner
from cosyvoice_mac.longform.runner import LineRequest, run_dialogue, run_dub
from cosyvoice_mac.pipeline.prompts import plan_request
from cosyvoice_mac.request import Request, Voice

# -- the grammar -------------------------------------------------------------------------------------------


def test_a_text_without_markup_is_one_run():
    assert parse_inline("Hello there. How are you?") == [Spoken("Hello there. How are you?")]


def test_each_tag_becomes_a_pause_a_speed_or_a_style_and_a_sentence_end_ends_them():
    parts = parse_inline("One. [pause 250ms] [speed 1.5] Two fast (happy) and glad. Three [pause 1.5s] four.")
    assert parts == [
        Spoken("One. ", 1.0, None, 0),
        Pause(0.25, 5),
        Spoken(" Two fast ", 1.5, None, 30),
        Spoken(" and glad.", 1.5, "happy", 47),
        Spoken(" Three ", 1.0, None, 57),
        Pause(1.5, 64),
        Spoken(" four.", 1.0, None, 76),
    ]


def test_a_chinese_sentence_ends_at_its_stop_without_a_space():
    assert parse_inline("(happy)你好。[speed 1.5]我们走吧！再见。") == [
        Spoken("你好。", 1.0, "happy", 7),
        Spoken("我们走吧！", 1.5, None, 21),
        Spoken("再见。", 1.0, None, 26),
    ]


def test_escapes_and_prose_and_the_models_own_markup_are_text():
    prose = "See [1], [citation needed], (see above) and [breath] or [h][ào] [M][AY0] <strong>x</strong>."
    assert parse_inline(prose) == [Spoken(prose)]
    # an escaped bracket is never a tag and never a model unit: the model reads a round bracket
    assert parse_inline(r"Write \[pause 500ms] or \(happy) or \[breath].") == [
        Spoken("Write (pause 500ms] or (happy) or (breath].")
    ]


@pytest.mark.parametrize(
    ("text", "position", "advice"),
    [
        ("Hi [pause 500] there.", 4, "[pause 500ms]"),
        ("Hi [pause] there.", 4, "[pause 500ms]"),
        ("Hi [pause 20s] there.", 4, "at most 10 s"),
        ("Hi [pause 0ms] there.", 4, "longer than 0"),
        ("Hi [speed fast] there.", 4, "[speed 1.2]"),
        ("Hi [speed 3] there.", 4, "0.5 to 2"),
        ("Hi [pase 500ms] there.", 4, "did you mean [pause 500ms]"),
        ("Hi [sped 1.2] there.", 4, "did you mean [speed 1.2]"),
        ("Hi (hapy) there.", 4, "did you mean (happy)"),
        ("Hi (sic) there.", 4, r"write \(sic)"),
        ("Fine.\nHi [speed] x", 10, "line 2"),
    ],
)
def test_a_malformed_or_unknown_tag_is_refused_with_its_position_and_a_suggestion(text, position, advice):
    with pytest.raises(RequestError) as caught:
        parse_inline(text)
    error = caught.value
    assert error.field == "text" and error.code == "markup_invalid"
    assert error.values["position"] == position and f"at character {position}" in str(error)
    assert advice in str(error)


def test_a_style_tag_may_name_the_voice_s_recordings_and_any_well_formed_name_where_the_voice_is_not_known():
    with pytest.raises(RequestError, match=r"\(car-noisy\) is not a style \(at character 4\)"):
        parse_inline("Hi (car-noisy) there.")  # a voice without that recording
    assert parse_inline("Hi (car-noisy) there.", ("neutral", "car-noisy"))[1] == Spoken(" there.", 1.0, "car-noisy", 14)
    assert parse_inline("Hi (anything) there.", None)[1].style == "anything"  # the door that knows the voice checks
    with pytest.raises(RequestError, match=r"did you mean \[pause 500ms\]"):
        parse_inline("Hi [pase 500ms] there.", None)  # a malformed tag is malformed whatever the voice


@pytest.mark.parametrize(
    ("typed", "kept"),
    [("neutral", "neutral"), ("Car-Noisy", "car-noisy"), (" quiet_now ", "quiet_now"), ("whisper2", None)]
    + [("two words", None), ("x", None), ("y" * 25, None), ("快乐", None), ("sad!", None)],
)
def test_one_rule_names_a_voice_s_recordings_and_the_inline_style_tags(typed, kept):
    """Whatever a voice's recording may be called, a tag can ask for, and nothing else: the library, the request
    contract and the inline grammar read the one rule (style_names.py)."""
    from cosyvoice_mac.engine.voice_rules import VoiceStyleRefused, check_style

    if kept is not None:  # kept lowercased: a tag asks for it, a request names it
        assert check_style(typed) == kept and parse_inline(f"Hi ({kept}) there.", (kept,))[1].style == kept
        assert Request.build("Hi.", Voice.saved_voice("Anna", style=typed), seed=0).voice.style == typed.strip()
    else:
        with pytest.raises(VoiceStyleRefused, match="a style is one word of 2 to 24 letters"):
            check_style(typed)
        assert all(part.style is None for part in parse_inline(f"Hi ({typed}) there.", None))  # prose, not a tag
        with pytest.raises(RequestError, match="a style is one word of 2 to 24 letters"):
            Request.build("Hi.", Voice.saved_voice("Anna", style=typed), seed=0)


def test_the_glossary_never_rewrites_a_tag():
    entries = (GlossaryEntry("happy", "glad", "all"), GlossaryEntry("pause", "stop", "all"))
    assert apply_glossary("(happy) A happy pause [pause 300ms].", entries, "en").text == (
        "(happy) A glad stop [pause 300ms]."
    )


# -- the plan: what each model reads ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def normalizer():
    return TextNormalizer(lambda text: len(text.split()))


def _plan(normalizer, text, version="cosyvoice3", styles=None, **build):
    voice = Voice(prepared="x", transcript="This is the prompt.")
    return plan_request(version, normalizer, Request.build(text, voice, seed=0, **build), styles)


def test_a_style_becomes_each_versions_instruction_for_its_run_only(normalizer):
    v3 = _plan(normalizer, "(happy) Good news. Plain words.").segments
    assert [s.mode for s in v3] == ["instruct", "zero_shot"]
    assert v3[0].llm_prompt_text == "You are a helpful assistant. 请非常开心地说一句话。<|endofprompt|>"
    assert v3[1].llm_prompt_text.endswith("This is the prompt.")
    v2 = _plan(normalizer, "(whisper) Quiet now.", version="cosyvoice2").segments
    assert [(s.mode, s.llm_prompt_text) for s in v2] == [("instruct", "用耳语的方式轻声说这句话<|endofprompt|>")]


def test_a_style_the_voice_has_a_recording_of_keeps_the_mode_and_reads_that_recording_s_transcript(normalizer):
    plain, happy = _plan(normalizer, "Good news. (happy) Good news.", styles={"happy": "Happy words."}).segments
    assert (happy.mode, happy.style) == ("zero_shot", "happy") and happy.llm_prompt_text.endswith("Happy words.")
    assert plain.style is None and plain.llm_prompt_text.endswith("This is the prompt.")
    # a recording without a transcript cannot prompt zero-shot: its run speaks cross-lingual, in its voice
    (car,) = _plan(normalizer, "(car-noisy) Good news.", styles={"car-noisy": None}).segments
    assert (car.mode, car.style, car.llm_prompt_text) == ("cross_lingual", "car-noisy", "")


def test_speed_multiplies_the_requests_within_its_range_and_a_pause_splits_the_text(normalizer):
    plan = _plan(normalizer, "[speed 1.5] Quick one. Then [pause 300ms] slow.", speed=1.6)
    assert [(s.display_text, s.speed, s.silence_s) for s in plan.segments] == [
        ("Quick one.", 2.0, 0.0),  # 1.6 x 1.5, held at the model's 2.0
        ("Then.", 1.6, 0.0),  # the normaliser ends every piece as a sentence
        ("", 1.0, 0.3),
        ("slow.", 1.6, 0.0),
    ]


def test_cosyvoice3_pronunciation_markup_still_works_beside_the_tags_and_its_typos_are_still_refused(normalizer):
    plan = _plan(normalizer, "[h][ào] [pause 200ms] I [breath] said [M][AY0][N][UW1][T].")
    spoken = [s.display_text for s in plan.segments if not s.silence_s]
    assert spoken == ["[h][ào].", "I [breath] said [M][AY0][N][UW1][T]."]
    with pytest.raises(InputError, match=r"\[zz\]"):
        _plan(normalizer, "[pause 200ms] [zz][qq] there.")


def test_a_speed_tag_in_a_stream_is_refused(normalizer):
    with pytest.raises(InputError, match="streaming"):
        _plan(normalizer, "[speed 1.2] Hello there.", stream=True)


# -- the effect, measured on the preview voice ---------------------------------------------------------------

pytest.importorskip("piper")
pytest.importorskip("pyworld")


@pytest.fixture(scope="module")
def preview():
    from cosyvoice_mac.preview.backend import PreviewVoice

    return PreviewVoice.from_pretrained(None)


def _longest_silence_s(audio: np.ndarray, rate: int = 24000) -> float:
    """The longest run of samples under -60 dBFS (the preview voice's own gaps are far shorter)."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], (np.abs(audio) < 1e-3).astype(np.int8), [0]))))
    return float((edges[1::2] - edges[::2]).max(initial=0)) / rate


# -- inside long-form lines ------------------------------------------------------------------------------------


class PreviewSpeak:
    """Speaks each long-form line with the preview voice in this process (its own voice for every speaker)."""

    def __init__(self, preview):
        self.preview = preview

    def prepare(self, voices) -> None:
        list(voices)

    def styles(self, voice) -> tuple[str, ...]:
        return ()

    def __call__(self, line: LineRequest) -> runner.Spoken:
        pieces = self.preview.synthesize(line.text, Voice.builtin(), seed=line.seed or 0, speed=line.speed)
        return runner.Spoken(np.concatenate([piece.audio for piece in pieces]), 24000)


def _dialogue(preview, out, script: str) -> tuple[float, np.ndarray]:
    """(the first line's length in the timing report, the dialogue's audio)."""
    result = run_dialogue(script, {"Anna": "A"}, ["A"], PreviewSpeak(preview), out, seed=1)
    audio, _ = soundfile.read(result.audio_path, dtype="float32")
    return result.report[0]["end"] - result.report[0]["start"], audio


def test_a_pause_inside_a_dialogue_line_is_silence_of_its_length(preview, tmp_path):
    short_s, short = _dialogue(preview, tmp_path / "a", "Anna: One. [pause 200ms] Two.")
    long_s, long = _dialogue(preview, tmp_path / "b", "Anna: One. [pause 700ms] Two.")
    assert abs(long_s - short_s - 0.5) <= 0.02
    assert abs(_longest_silence_s(long) - _longest_silence_s(short) - 0.5) <= 0.02
    assert _longest_silence_s(long) >= 0.7


def test_a_speed_tag_inside_a_subtitle_cue_shortens_that_cue(preview, tmp_path):
    cues = (
        "1\n00:00:00,000 --> 00:00:05,000\nOne two three four five.\n\n"
        "2\n00:00:05,000 --> 00:00:10,000\n[speed 1.6] One two three four five.\n"
    )
    result = run_dub(cues, None, PreviewSpeak(preview), tmp_path / "dub", seed=1)
    plain, fast = (json.loads(tmp_path.joinpath("dub.report.json").read_text())["cues"][i] for i in (0, 1))
    assert fast["speed"] == plain["speed"] == 1.0  # no fitting: the tag alone made it shorter
    assert fast["end"] - fast["start"] < 0.8 * (plain["end"] - plain["start"])
    assert result.done == 2


@pytest.mark.parametrize(
    ("run", "where"),
    [
        (
            lambda speak, out: run_dialogue("Anna: Hi.\nBob: Hi (hapy) there.", {}, ["Anna", "Bob"], speak, out),
            "line 2",
        ),
        (lambda speak, out: run_dub("1\n00:00:01,000 --> 00:00:02,000\nHi [pause 5] x\n", None, speak, out), "cue 1"),
    ],
)
def test_a_malformed_tag_in_a_long_job_names_its_line_before_any_line_is_spoken(run, where, tmp_path):
    class Mute:
        spoken = 0

        def prepare(self, voices):
            list(voices)

        def styles(self, voice):
            return ()

        def __call__(self, line):
            Mute.spoken += 1
            raise AssertionError("nothing may be spoken")

    with pytest.raises(LongformError, match=rf"{where}.*at character \d+"):
        run(Mute(), tmp_path / "x")
    assert Mute.spoken == 0 and not list(tmp_path.iterdir())
