"""Word timing: the recogniser's word times put on the words of the INPUT text, measured on speech whose word
boundaries are known (single espeak-ng words joined with known silences), laid on one timeline across sentences
and across a dialogue's lines, and written as captions that the ``srt`` package and a WebVTT parser read."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import soundfile
import srt

pytest.importorskip("faster_whisper")
webvtt = pytest.importorskip("webvtt")

from cosyvoice_mac.engine.asr import ModelStore, Transcriber  # noqa: E402
from cosyvoice_mac.engine.takes import JobTakes, WhisperRecogniser  # noqa: E402
from cosyvoice_mac.longform.runner import LineRequest, Spoken, run_dialogue  # noqa: E402
from cosyvoice_mac.pipeline.takes import Word  # noqa: E402
from cosyvoice_mac.pipeline.takes.captions import srt_text, vtt_text, write_captions  # noqa: E402
from cosyvoice_mac.pipeline.takes.words import align_words  # noqa: E402

WORDS = ["morning", "yellow", "garden", "window", "purple", "basket", "tomorrow", "river"]
GAPS_S = [0.3, 0.5, 0.25, 0.6, 0.35, 0.45, 0.3, 0.4]
TOLERANCE_S = 0.1


@pytest.fixture(scope="module")
def known_speech(make_speech):
    """(audio, rate, [(word, start, end)]): single spoken words, their silences cut, joined with known pauses."""
    pieces, truth, at = [], [], 0.4
    rate = None
    for word, gap in zip(WORDS, GAPS_S):
        audio, rate = soundfile.read(make_speech(word), dtype="float32")
        sounding = np.flatnonzero(np.abs(audio) > 0.02 * np.abs(audio).max())
        audio = audio[sounding[0] : sounding[-1] + 1]
        pieces += [audio, np.zeros(round(gap * rate), np.float32)]
        truth.append((word, at, at + len(audio) / rate))
        at += (len(audio) + round(gap * rate)) / rate
    return np.concatenate([np.zeros(round(0.4 * rate), np.float32), *pieces]), rate, truth


def test_every_words_start_and_end_are_within_a_tenth_of_a_second(known_speech, tmp_path):
    audio, rate, truth = known_speech
    recogniser = WhisperRecogniser(Transcriber(ModelStore(folder=tmp_path / "asr", allow_download=False)))
    heard = recogniser.hear(audio, rate, "en")
    text = "Morning, yellow garden; window... purple basket - tomorrow river!"
    timed = align_words(text, list(heard.words), len(audio) / rate, audio, rate)
    # the caption says what was asked; a mark standing alone joins the word before it
    assert [word.word for word in timed] == text.replace(" -", "-").split()
    for word, (said, start, end) in zip(timed, truth):
        assert abs(word.start - start) <= TOLERANCE_S and abs(word.end - end) <= TOLERANCE_S, (said, word, start, end)


def test_a_misheard_or_unheard_word_keeps_the_texts_spelling_and_a_time_between_its_neighbours():
    heard = [Word("the", 0.0, 0.2), Word("quack", 0.3, 0.6), Word("fox", 1.0, 1.4)]
    timed = align_words("The quick brown fox.", heard, 2.0)
    assert [(w.word, w.start, w.end) for w in timed] == [
        ("The", 0.0, 0.2),
        ("quick", 0.3, 0.6),  # misheard: the recogniser's time, the text's word
        ("brown", 0.6, 1.0),  # not heard at all: the gap between its neighbours
        ("fox.", 1.0, 1.4),
    ]


def test_sentences_follow_each_other_on_one_timeline_less_the_trimmed_start():
    takes = JobTakes(words=[(2.0, [Word("Hello", 0.1, 0.5)]), (1.5, [Word("again", 0.2, 0.6)])])
    assert [(w.word, w.start, w.end) for w in takes.timeline(0.1)] == [("Hello", 0.0, 0.4), ("again", 2.1, 2.5)]


def test_captions_parse_as_subrip_and_webvtt(tmp_path):
    words = [Word("Hello", 0.0, 0.4), Word("there.", 0.45, 0.9), Word("Second", 2.5, 3.0), Word("line", 3.0, 3.4)]
    cues = list(srt.parse(srt_text(words)))
    assert [(cue.content, cue.start.total_seconds(), cue.end.total_seconds()) for cue in cues] == [
        ("Hello there.", 0.0, 0.9),
        ("Second line", 2.5, 3.4),
    ]
    vtt = webvtt.from_buffer(io.StringIO(vtt_text(words)))
    assert [(c.text, c.start, c.end) for c in vtt] == [
        ("Hello there.", "00:00:00.000", "00:00:00.900"),
        ("Second line", "00:00:02.500", "00:00:03.400"),
    ]
    written = write_captions(tmp_path / "take.wav", words)
    assert sorted(written) == ["json", "srt", "vtt"] and written["json"].endswith("take.words.json")
    assert json.loads((tmp_path / "take.words.json").read_text())[2] == {"word": "Second", "start": 2.5, "end": 3.0}


class TimedSpeak:
    """Each line is 1 s of tone with its words timed at 0.2 s intervals (what the engine's result carries)."""

    def prepare(self, voices) -> None:
        pass

    def styles(self, voice) -> tuple[str, ...]:
        return ()  # no saved voice has style recordings here

    def __call__(self, line: LineRequest) -> Spoken:
        t = np.arange(24000, dtype=np.float32) / 24000
        words = [{"word": w, "start": 0.2 * i, "end": 0.2 * i + 0.15} for i, w in enumerate(line.text.split())]
        check = {"check": "flagged", "check_notes": ["kept take 3 of 3: WER 40 %"]} if "Four" in line.text else {}
        return Spoken((0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 24000, check, words)


def test_a_dialogues_captions_line_up_with_its_timing_and_a_flagged_line_is_named(tmp_path):
    script = "[S1] One two three.\n[S2] Four five.\n[S1] Six.\n"
    result = run_dialogue(script, {"S1": "A", "S2": "B"}, ["A", "B"], TimedSpeak(), tmp_path / "talk", pause_s=0.5)
    lines = json.loads((tmp_path / "talk.timing.json").read_text())["lines"]
    stamps = {stamp["word"]: stamp for stamp in result.timestamps}
    assert stamps["One"]["start"] == lines[0]["start"] and stamps["Four"]["start"] == lines[1]["start"] == 1.5
    assert stamps["Six."]["start"] == lines[2]["start"] == 3.0 and stamps["five."]["start"] == 1.7
    cues = list(srt.parse((tmp_path / "talk.srt").read_text()))
    assert [cue.content for cue in cues] == ["One two three.", "Four five.", "Six."]
    assert [cue.start.total_seconds() for cue in cues] == [line["start"] for line in lines]
    assert json.loads((tmp_path / "talk.words.json").read_text()) == result.timestamps
    assert (tmp_path / "talk.vtt").is_file() and {p.name for p in result.files} >= {"talk.srt", "talk.vtt"}
    assert result.flagged == ["line 2: kept take 3 of 3: WER 40 %"]  # the CLI warns with it; the job succeeds
