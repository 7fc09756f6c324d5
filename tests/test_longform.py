"""Long-form work: glossary, dialogue scripts, subtitle dubbing, batches, post-processing.

The jobs run against a ``Speak`` that makes real speech with espeak-ng (duration follows the text and the
speed), so timing, fitting, resuming and loudness are checked on speech, not on tones.
"""

from __future__ import annotations

import errno
import json
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.engine.outputs import OutputWriteError
from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.frontend.glossary import (
    GlossaryEntry,
    GlossaryError,
    GlossaryStore,
    RequestGlossary,
    apply_glossary,
    entries_from_csv,
    entries_to_csv,
)
from cosyvoice_mac.frontend.text import TextNormalizer
from cosyvoice_mac.frontend.tokenizer import SpeechTextTokenizer
from cosyvoice_mac.longform import batch, dialogue, subtitles
from cosyvoice_mac.longform import files as files_module
from cosyvoice_mac.longform.files import ResultFiles, result_stem
from cosyvoice_mac.longform.runner import LineRequest, Spoken, run_batch, run_dialogue, run_dub
from cosyvoice_mac.longform.speakers import VoiceUnusable
from cosyvoice_mac.paths import atomic_write
from cosyvoice_mac.request import PostSettings
from cosyvoice_mac.sound.post import loudness, post_process, trim_silence
from tests.parity.common import parity_dir

BLANK_EN = parity_dir() / "cosyvoice3_tiny" / "CosyVoice-BlankEN"
RATE = 22050


@pytest.fixture(scope="module")
def tokenizer():
    return SpeechTextTokenizer.from_dir(BLANK_EN, "cosyvoice3")


class EspeakSpeak:
    """Speaks each line with espeak-ng (faster for speed > 1) and remembers every request."""

    def __init__(self, make_speech, stop_after: int | None = None, refuse: str | None = None):
        self.make_speech, self.requests, self.stop_after, self.refuse = make_speech, [], stop_after, refuse
        self.prepared: list[tuple[list, int]] = []  # (voices asked for, lines spoken by then)

    def prepare(self, voices) -> None:
        self.prepared.append((list(voices), len(self.requests)))
        if self.refuse:
            raise VoiceUnusable(f"the loaded model cannot use the saved voice {self.refuse!r}: no audio")

    def styles(self, voice) -> tuple[str, ...]:
        return ("calm",) if voice == "A" else ()  # the voice A has a calm recording its lines' (calm) tags may name

    def __call__(self, line: LineRequest) -> Spoken:
        self.requests.append(line)
        audio, rate = soundfile.read(self.make_speech(line.text), dtype="float32")
        if line.speed != 1.0:  # crude but monotonic: speech gets shorter as speed rises
            audio = np.interp(np.arange(0, len(audio), line.speed), np.arange(len(audio)), audio).astype(np.float32)
        return Spoken(audio, rate, {"voice": line.voice})

    def should_stop(self) -> bool:
        return self.stop_after is not None and len(self.requests) >= self.stop_after


# -------------------------------------------------------------------------------------------- glossary


def _ids(tokenizer, text):
    normalizer = TextNormalizer(lambda t: len(tokenizer.encode(t)))
    return tokenizer.encode("".join(normalizer.normalize(text, split=False)))


def _changed_span(before: list[int], after: list[int]) -> tuple[list[int], list[int]]:
    """The ids that differ between two encodings once their common prefix and suffix are set aside."""
    prefix = 0
    while prefix < min(len(before), len(after)) and before[prefix] == after[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(before), len(after)) - prefix and before[-1 - suffix] == after[-1 - suffix]:
        suffix += 1
    return before[prefix : len(before) - suffix], after[prefix : len(after) - suffix]


def test_english_glossary_changes_the_ids_only_where_the_word_is(tokenizer):
    entries = [GlossaryEntry("minute", "[M][AY0][N][UW1][T]", "en")]
    text = "Wait a minute, the minutes said read the menu."
    result = apply_glossary(text, entries)
    assert result.text == "Wait a [M][AY0][N][UW1][T], the minutes said read the menu."
    assert result.describe() == [{"key": "minute", "replacement": "[M][AY0][N][UW1][T]", "language": "en", "count": 1}]
    old, new = _changed_span(_ids(tokenizer, text), _ids(tokenizer, result.text))
    assert tokenizer.decode(old).strip() == "minute"
    assert [i for i in new if tokenizer.decode([i]).strip()] == tokenizer.encode("[M][AY0][N][UW1][T]")


def test_chinese_glossary_matches_inside_words_longest_first(tokenizer):
    entries = [
        GlossaryEntry("好", "[h][ǎo]", "zh"),
        GlossaryEntry("爱好", "爱[h][ào]", "zh"),
        GlossaryEntry("hobby", "pastime", "en"),
    ]
    result = apply_glossary("我的爱好很好。hobby", entries)
    assert result.text == "我的爱[h][ào]很[h][ǎo]。hobby"  # the English entry is not for Chinese text
    old, new = _changed_span(_ids(tokenizer, "我的爱好很好。hobby"), _ids(tokenizer, result.text))
    assert tokenizer.decode(old) == "好很好"
    assert new == tokenizer.encode("[h][ào]很[h][ǎo]")


def test_a_latin_key_between_han_characters_still_matches():
    assert apply_glossary("用AI说话", [GlossaryEntry("AI", "A I")]).text == "用A I说话"
    assert apply_glossary("AIR is here", [GlossaryEntry("AI", "A I")]).text == "AIR is here"


@pytest.mark.parametrize(
    "rows, message",
    [
        ("key,replacement\n,x\n", "row 1: the word or phrase is empty"),
        ("a,b\nword,[zz][qq]\n", "row 2 ('word'): the replacement has markup CosyVoice3 does not know: [zz], [qq]"),
        ("a,b,fr\n", "row 1 ('a'): language 'fr' is not one of"),
        ("a,b\nA,c\n", "row 2 ('A'): the same word is already in row 1"),
        ("a\n", "row 1: expected 2 or 3 columns"),
    ],
)
def test_bad_glossary_rows_are_refused_with_their_row(rows, message):
    with pytest.raises(
        GlossaryError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)")
    ):
        entries_from_csv(rows)


def test_glossary_round_trips_through_csv_and_the_store(tmp_path):
    entries = entries_from_csv('key,replacement,language\n好,[h][ǎo],zh\n"St., Louis",Saint Louis,en\n')
    store = GlossaryStore(tmp_path / "glossary.json")
    assert store.replace(entries) == entries and store.entries() == entries
    assert entries_from_csv(entries_to_csv(store.entries())) == entries
    with pytest.raises(GlossaryError):
        store.replace([GlossaryEntry("", "x")])
    assert store.entries() == entries  # a refused edit changes nothing


def test_a_damaged_glossary_is_kept_when_it_is_replaced_or_started_empty(tmp_path):
    store = GlossaryStore(tmp_path / "glossary.json")
    store.path.write_bytes(b'{"entries": [{"key": "GIF"')
    assert "cannot be read" in store.problem() and "start an empty glossary" in store.problem()
    entries, note = store.usable_entries()
    assert entries == () and "not applied" in note  # long form goes on without it
    kept = store.start_empty()
    assert kept.name.startswith("glossary.json.unreadable-") and kept.read_bytes() == b'{"entries": [{"key": "GIF"'
    assert store.entries() == () and store.problem() is None and store.start_empty() is None
    store.path.write_bytes(b"\xff torn again")
    store.replace([GlossaryEntry("GIF", "jif")])  # an import over a damaged file keeps it too
    assert [path.read_bytes() for path in store.kept_copies()] == [b'{"entries": [{"key": "GIF"', b"\xff torn again"]
    assert store.entries() == (GlossaryEntry("GIF", "jif"),)


def test_the_page_s_glossary_panel_offers_the_repair_only_while_the_file_is_damaged(tmp_path):
    from cosyvoice_mac.webui.longform import LongformCallbacks

    store = GlossaryStore(tmp_path / "glossary.json")
    panel = LongformCallbacks(host=None, glossary=store)
    assert panel.glossary_state("en")[1]["visible"] is False
    store.path.write_text("{broken")
    note, button = panel.glossary_state("zh")
    assert "glossary.json`" in note and button["visible"] is True and "不会删除" in button["value"]
    rows, message, note_after, button_after = panel.start_empty_glossary("en")
    assert store.kept_copies()[0].name in message and note_after == "" and button_after["visible"] is False


# -------------------------------------------------------------------------------------------- dialogue


def test_script_errors_name_their_line():
    with pytest.raises(dialogue.ScriptError, match="line 3 has no speaker tag"):
        dialogue.parse_script("[S1] Hi.\n\njust words\n")
    with pytest.raises(dialogue.ScriptError, match=r"line 2 \(Bob\) has a speaker tag but nothing to say"):
        dialogue.parse_script("Anna: Hi.\nBob:   \n")
    lines = dialogue.parse_script("Anna: Hi.\n[S2] {speak softly} Hello there.\n")
    with pytest.raises(dialogue.ScriptError, match="line 2: speaker 'S2' has no voice"):
        dialogue.check_cast(lines, {}, ["Anna"])
    with pytest.raises(dialogue.ScriptError, match="line 2: speaker 'S2' is mapped to 'Zed'"):
        dialogue.check_cast(lines, {"S2": "Zed"}, ["Anna"])
    assert lines[1] == dialogue.DialogueLine(2, "S2", "Hello there.", "speak softly")


def test_three_speaker_dialogue_timing_matches_the_audio(make_speech, tmp_path):
    speak = EspeakSpeak(make_speech)
    script = "[S1] Good morning.\nBob: {cheerful} Morning to you!\n[S3] Shall we start?\n[S1] Yes.\n"
    seen = []
    result = run_dialogue(
        script,
        {"S1": "Anna", "S3": "Cleo"},
        ["Anna", "Bob", "Cleo"],
        speak,
        tmp_path / "talk",
        pause_s=0.5,
        per_line_files=True,
        on_progress=seen.append,
    )
    audio, rate = soundfile.read(result.audio_path, dtype="float32")
    timing = json.loads((tmp_path / "talk.timing.json").read_text())["lines"]
    assert [t["line"] for t in timing] == [1, 2, 3, 4] and [t["voice"] for t in timing] == [
        "Anna",
        "Bob",
        "Cleo",
        "Anna",
    ]
    assert [r.instruct for r in speak.requests] == [None, "cheerful", None, None]
    for previous, current in zip(timing, timing[1:]):
        assert current["start"] - previous["end"] == pytest.approx(0.5, abs=0.002)
        gap = audio[int(previous["end"] * rate) + 10 : int(current["start"] * rate) - 10]
        assert np.max(np.abs(gap)) < 1e-3  # the pause is silence
    assert timing[-1]["end"] == pytest.approx(len(audio) / rate, abs=0.002)
    assert len(list(tmp_path.glob("talk-0*.wav"))) == 4 and [p.done for p in seen] == [1, 2, 3, 4]


def test_stopping_a_dialogue_keeps_the_finished_lines_labelled_partial(make_speech, tmp_path):
    speak = EspeakSpeak(make_speech, stop_after=2)
    result = run_dialogue(
        "[S1] One.\n[S2] Two.\n[S1] Three.\n",
        {"S1": "A", "S2": "B"},
        ["A", "B"],
        speak,
        tmp_path / "cut",
        should_stop=speak.should_stop,
    )
    assert result.stopped and result.done == 2
    assert json.loads(result.audio_path.with_suffix(".json").read_text())["partial"] is True


def test_a_dialogue_never_writes_over_another_result_of_the_same_name(make_speech, tmp_path):
    speak = EspeakSpeak(make_speech)
    first = run_dialogue("[S1] First take.\n", {"S1": "A"}, ["A"], speak, tmp_path / "same")
    kept = first.audio_path.read_bytes()
    with pytest.raises(FileExistsError):
        run_dialogue("[S1] A second, longer take.\n", {"S1": "A"}, ["A"], speak, tmp_path / "same")
    assert first.audio_path.read_bytes() == kept  # the first job's file is whole and its own
    again = run_dialogue(  # a command's --out is the user's own name: a re-run may replace it
        "[S1] A second, longer take.\n", {"S1": "A"}, ["A"], speak, tmp_path / "same", files=ResultFiles(replace=True)
    )
    assert again.audio_path.read_bytes() != kept


def test_result_stems_of_one_second_differ_by_the_job_id(tmp_path):
    """Each long job runs on a thread of its own, one after another: a name from the thread (whose id the
    next thread reuses) gave them all one name within a second."""
    stems = []
    for _ in range(50):
        job = threading.Thread(target=lambda: stems.append(result_stem(tmp_path, "dialogue")))
        job.start()
        job.join()
    stems = set(stems)
    assert len(stems) == 50 and all(stem.parent == tmp_path for stem in stems)
    assert result_stem(tmp_path, "dub", "0123456789abcdef").name.endswith("-dub-0123456789ab")


def test_a_dialogue_whose_folder_refuses_its_files_keeps_them_in_the_fallback_and_says_why(make_speech, tmp_path):
    blocked = tmp_path / "outputs"
    blocked.write_text("a file where the folder should be")
    fallback = tmp_path / "unsaved"
    result = run_dialogue(
        "[S1] Keep me.\n",
        {"S1": "A"},
        ["A"],
        EspeakSpeak(make_speech),
        blocked / "longform" / "talk",
        files=ResultFiles(fallback=fallback),
    )
    assert result.audio_path == fallback / "talk.wav" and soundfile.info(result.audio_path).duration > 0.3
    assert result.not_saved and "could not save" in result.not_saved
    assert {path.parent for path in result.files} == {fallback}


class DiskFullAt:
    """``atomic_write`` of ``longform.files`` that raises ENOSPC at the ``step``-th file written in ``folder``
    (0: the WAV, 1: its sidecar, 2: the timing), as a disk that fills up part-way through a result would."""

    def __init__(self, folder: Path, step: int):
        self.folder, self.step, self.count = folder, step, 0

    def __call__(self, path, data, *, replace=True):
        if Path(path).parent == self.folder:
            self.count += 1
            if self.count > self.step:
                raise OSError(errno.ENOSPC, "No space left on device")
        atomic_write(path, data, replace=replace)


@pytest.mark.parametrize("step", [0, 1, 2], ids=["wav", "sidecar", "timing"])
@pytest.mark.parametrize("fallback", [True, False], ids=["fallback", "no-fallback"])
def test_a_disk_full_part_way_through_a_dialogue_leaves_no_half_result(
    make_speech, tmp_path, monkeypatch, step, fallback
):
    """A full disk used to leave the small ``.json`` and ``.timing.json`` in outputs/ and the WAV elsewhere (or
    nowhere): a result's files are written together, WAV first, or not at all."""
    outputs, unsaved = tmp_path / "outputs", tmp_path / "unsaved"
    monkeypatch.setattr(files_module, "atomic_write", DiskFullAt(outputs, step))
    run = lambda: run_dialogue(  # noqa: E731
        "[S1] Keep me.\n",
        {"S1": "A"},
        ["A"],
        EspeakSpeak(make_speech),
        outputs / "talk",
        files=ResultFiles(fallback=unsaved if fallback else None),
    )
    if fallback:
        result = run()
        assert sorted(path.name for path in result.files) == ["talk.json", "talk.timing.json", "talk.wav"]
        assert {path.parent for path in result.files} == {unsaved} and soundfile.info(result.audio_path).frames > 0
        assert "disk is full" in result.not_saved and "still available" in result.not_saved
    else:
        with pytest.raises(OutputWriteError, match="disk is full") as caught:
            run()
        assert "nothing was saved" in str(caught.value) and str(tmp_path) not in str(caught.value)
    assert list(outputs.iterdir()) == []  # no sidecar without its WAV, no temporary file


def test_a_line_the_engine_made_but_could_not_save_is_said_in_the_result(make_speech, tmp_path):
    class Unsaved(EspeakSpeak):
        def __call__(self, line):
            spoken = super().__call__(line)
            return Spoken(spoken.audio, spoken.sample_rate, {"not_saved": "the disk is full"})

    result = run_dialogue("[S1] One.\n[S1] Two.\n", {"S1": "A"}, ["A"], Unsaved(make_speech), tmp_path / "t")
    assert result.audio_path.is_file() and "the disk is full" in result.not_saved


def test_a_line_s_style_tags_are_checked_against_its_own_voice_s_recordings_before_any_line(make_speech, tmp_path):
    """The script's own check cannot know the voices; once the cast is read, each line's (style) tags are checked
    against the styles its voice has recordings of (EspeakSpeak: the voice A has a "calm" one, B none)."""
    script = "[S1] (calm) Slowly now.\n[S2] And (calm) me?\n"
    speak = EspeakSpeak(make_speech, stop_after=0)  # stops before its first line: the check alone is run
    result = run_dialogue(script, {"S1": "A", "S2": "A"}, ["A"], speak, tmp_path / "a", should_stop=speak.should_stop)
    assert (result.done, speak.requests) == (0, [])  # both speak as A, which has a calm recording
    with pytest.raises(dialogue.ScriptError, match=r"line 2 \(S2\): \(calm\) is not a style \(at character 5\)"):
        run_dialogue(script, {"S1": "A", "S2": "B"}, ["A", "B"], speak, tmp_path / "b")
    with pytest.raises(batch.BatchError, match=r"line 1: \(calmly\) is not a style .*did you mean \(calm\)"):
        run_batch("Say it (calmly).\n", "txt", tmp_path / "batch", speak, voice="A")
    assert speak.requests == [] and list(tmp_path.iterdir()) == []


def test_a_bad_script_writes_nothing(make_speech, tmp_path):
    with pytest.raises(dialogue.ScriptError):
        run_dialogue("[S1] fine\nno tag here\n", {"S1": "A"}, ["A"], EspeakSpeak(make_speech), tmp_path / "x")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------- subtitles

SRT = """1
00:00:00,500 --> 00:00:02,500
Hello there.

2
00:00:03,000 --> 00:00:04,200
<i>This line is a bit long for its slot.</i>

3
00:00:05,000 --> 00:00:07,000
Number three.

4
00:00:07,500 --> 00:00:09,500
And four.

5
00:00:10,000 --> 00:00:12,000
Goodbye.
"""


def test_five_cues_start_on_time_and_never_run_into_the_next(make_speech, tmp_path):
    speak = EspeakSpeak(make_speech)
    result = run_dub(SRT, "Anna", speak, tmp_path / "dub", speed_limit=2.0)
    audio, rate = soundfile.read(result.audio_path, dtype="float32")
    report = json.loads((tmp_path / "dub.report.json").read_text())
    cues = subtitles.parse_srt(SRT)
    envelope = np.convolve(np.abs(audio) > 0.02, np.ones(64), "same") > 0
    for index, cue in enumerate(cues):
        next_start = cues[index + 1].start if index + 1 < len(cues) else len(audio) / rate
        window = envelope[int(cue.start * rate) - int(0.3 * rate) : int(next_start * rate)]
        onset = cue.start - 0.3 + np.argmax(window) / rate
        assert abs(onset - cue.start) < 0.05, f"cue {cue.number} starts at {onset:.3f} s"
        if index + 1 < len(cues):  # silent just before the next cue: this one ended in time
            assert np.max(np.abs(audio[int((next_start - 0.02) * rate) : int((next_start - 0.002) * rate)])) < 1e-3
    sped = [r for r in speak.requests if r.speed > 1.0]
    assert [r.text for r in sped] == ["This line is a bit long for its slot."]  # made again, faster
    assert report["misfits"] == [] and [c["speed"] > 1 for c in report["cues"]] == [False, True, False, False, False]


@pytest.mark.parametrize(
    "text, message",
    [
        ("1\n00:00:01,000 --> 00:00:02,000\nA\n\n2\n00:00:0x,000 --> 00:00:04,000\nB\n", "cue 2: the block is not"),
        (
            "1\n00:00:01,000 --> 00:00:03,000\nA\n\n2\n00:00:02,000 --> 00:00:04,000\nB\n",
            "cue 2 starts at 00:00:02,000",
        ),
        ("7\n00:00:05,000 --> 00:00:04,000\nA\n", "cue 7: it ends"),
        ("", "no cues"),
    ],
)
def test_malformed_subtitles_name_the_cue(text, message):
    with pytest.raises(subtitles.SubtitleError, match=message):
        subtitles.parse_srt(text)


def test_a_cue_that_cannot_fit_pushes_the_next_one_and_is_reported():
    cues = subtitles.parse_srt("1\n00:00:00,000 --> 00:00:01,000\nA\n\n2\n00:00:01,200 --> 00:00:02,000\nB\n")
    placed = subtitles.place(cues, [1.5, 0.5], [2.0, 1.0])
    assert placed[1].start == pytest.approx(1.5)  # never cut: the second cue waits
    assert [m["cue"] for m in subtitles.misfit_report(placed)] == [1, 2]


# --------------------------------------------------------------------------------------------- batches


def test_a_long_job_has_its_voices_made_ready_once_before_its_first_line(make_speech, tmp_path):
    speak = EspeakSpeak(make_speech)
    script = "[S1] One.\n[S2 (happy)] Two.\nAnna (whisper): Three.\n"
    run_dialogue(script, {"S1": "Anna", "S2": "Bob"}, ["Anna", "Bob"], speak, tmp_path / "talk")
    assert speak.prepared == [([("Anna", None), ("Bob", "happy"), ("Anna", "whisper")], 0)]
    assert [(line.voice, line.style) for line in speak.requests] == speak.prepared[0][0]  # each line its style
    dub = EspeakSpeak(make_speech)
    run_dub(SRT, "Cleo", dub, tmp_path / "dub", style="calm", speed_limit=2.0)
    assert dub.prepared == [([("Cleo", "calm")], 0)] and {line.style for line in dub.requests} == {"calm"}
    styled = EspeakSpeak(make_speech)
    run_batch("text,voice,style\nOne.,Bob,happy\nTwo.,,\n", "csv", tmp_path / "styled", styled, voice="Anna")
    assert styled.prepared == [([("Bob", "happy"), ("Anna", None)], 0)]
    lines = "Plain line.\n"
    batch = EspeakSpeak(make_speech)
    run_batch(lines, "txt", tmp_path / "batch", batch, voice="Anna")
    assert batch.prepared == [([("Anna", None)], 0)]
    again = EspeakSpeak(make_speech)  # nothing left to make: no voice is needed
    run_batch(lines, "txt", tmp_path / "batch", again, voice="Anna")
    assert again.prepared == [([], 0)] and again.requests == []


def test_a_voice_the_model_cannot_use_stops_the_job_before_any_line_or_file(make_speech, tmp_path):
    speak = EspeakSpeak(make_speech, refuse="Bob")
    with pytest.raises(VoiceUnusable, match="'Bob'"):
        run_dialogue("[S1] One.\n[S2] Two.\n", {"S1": "Anna", "S2": "Bob"}, ["Anna", "Bob"], speak, tmp_path / "t")
    with pytest.raises(VoiceUnusable):
        run_batch("A line.\n", "txt", tmp_path / "batch", speak, voice="Bob")
    assert speak.requests == [] and not list(tmp_path.glob("t*"))


def test_an_interrupted_batch_of_twenty_resumes_with_the_rest(make_speech, tmp_path):
    lines = "\n".join(f"Sentence number {n}." for n in range(1, 21)) + "\n"
    first = EspeakSpeak(make_speech, stop_after=7)
    result = run_batch(lines, "txt", tmp_path / "batch", first, voice="Anna", should_stop=first.should_stop)
    assert result.stopped and len(first.requests) == 7
    again = EspeakSpeak(make_speech)
    result = run_batch(lines, "txt", tmp_path / "batch", again, voice="Anna")
    assert len(again.requests) == 13 and again.requests[0].text == "Sentence number 8."
    assert not result.stopped and result.report == [{"made": 13, "skipped": 7}]
    names = zipfile.ZipFile(tmp_path / "batch.zip").namelist()
    assert len([n for n in names if n.endswith(".wav")]) == 20
    changed = EspeakSpeak(make_speech)  # other settings: everything is made again
    run_batch(lines, "txt", tmp_path / "batch", changed, voice="Bob")
    assert len(changed.requests) == 20


def test_a_csv_batch_with_an_unclosed_quote_is_refused_naming_the_line_it_opens_on():
    with pytest.raises(batch.BatchError, match=r"line 3: a quote .* never closed"):
        batch.parse_batch('text,voice\nHello.,A\n"Unclosed, and on,B\nThird.,C\nFourth.,D\n', "csv")
    with pytest.raises(batch.BatchError, match="line 2:"):
        batch.parse_batch('text\n"She said ""hi"" and left\nnext\n', "csv")  # "" is a quote inside, not the end
    items = batch.parse_batch('text,voice\n"Two\nlines",A\nNext.,B\nIt\'s a "word" here,C\n', "csv")
    assert [(item.number, item.text) for item in items] == [(2, "Two\nlines"), (4, "Next."), (5, 'It\'s a "word" here')]


def test_csv_batches_take_voice_instruction_and_file_name():
    items = batch.parse_batch('text,voice,instruct,file\n"Hi, you.",Anna,,greeting\nBye.,,speak sadly,\n', "csv")
    assert items == [
        batch.BatchItem(2, "Hi, you.", "greeting.wav", "Anna", None),
        batch.BatchItem(3, "Bye.", "0002.wav", None, "speak sadly"),
    ]
    with pytest.raises(batch.BatchError, match="line 2: the file name '../x.wav'"):
        batch.parse_batch("text,file\nHi,../x\n", "csv")
    with pytest.raises(batch.BatchError, match="line 3: the text is empty"):
        batch.parse_batch("text,voice\nHi,A\n,B\n", "csv")
    with pytest.raises(batch.BatchError, match="unknown column"):
        batch.parse_batch("text,colour\nHi,red\n", "csv")


# ------------------------------------------------------------------------------------- post-processing


@pytest.mark.parametrize("target", [-20.0, -23.0, -30.0])
def test_loudness_lands_within_half_a_unit_of_the_target(make_speech, target):
    audio, rate = soundfile.read(make_speech("Loudness is measured over the whole of this sentence."), dtype="float32")
    out, report = post_process(audio * 0.3, rate, PostSettings(loudness_lufs=target))
    assert abs(loudness(out, rate) - target) < 0.5 and "LUFS" in report.notes[0]
    assert np.max(np.abs(out)) <= 10 ** (-1 / 20) + 1e-6


def test_a_target_that_would_clip_is_held_below_the_ceiling_and_says_so(make_speech):
    audio, rate = soundfile.read(make_speech("Loudness is measured over the whole of this sentence."), dtype="float32")
    out, report = post_process(audio, rate, PostSettings(loudness_lufs=-5.0))
    assert np.max(np.abs(out)) == pytest.approx(10 ** (-1 / 20), rel=1e-4) and "so it does not clip" in report.notes[0]
    assert report.peak_limited and report.output_lufs < -5.0


def test_trim_removes_only_the_silent_edges(make_speech):
    speech, rate = soundfile.read(make_speech("Trim me."), dtype="float32")
    padded = np.concatenate([np.zeros(rate), speech, np.zeros(rate)]).astype(np.float32)
    trimmed = trim_silence(padded, rate)
    assert len(trimmed) < len(speech) + 0.2 * rate and np.sum(trimmed**2) == pytest.approx(np.sum(speech**2), 1e-3)
    with pytest.raises(RequestError, match="-40 to -5 LUFS") as refused:
        PostSettings(loudness_lufs=0)
    assert refused.value.field == "loudness_lufs"


# ------------------------------------------------------------------------------- every request, in the worker


def test_the_worker_speaks_every_request_with_the_glossary_and_the_sidecar_says_which_entries(tmp_path):
    from tests.fakes.fake_pipeline import fake_request, fake_worker_config, quick_engine, started

    config = fake_worker_config(tmp_path)
    GlossaryStore(Path(config.cache_dir) / "glossary.json").replace(
        [GlossaryEntry("minute", "[M][AY0][N][UW1][T]", "en")]
    )
    engine = started(quick_engine(config))
    try:
        with engine.subscribe() as heard:
            job_id = engine.submit(fake_request("Wait a minute. No minutes here."))
            spoken = [event.text for event in heard.of(job_id, timeout=60) if event.kind == "progress"]
        result = engine.result(job_id, timeout=0)
        sidecar = json.loads(Path(result.sidecar_path).read_text())
    finally:
        engine.close()
    assert "Wait a [M][AY0][N][UW1][T]." in spoken and "No minutes here." in spoken
    assert sidecar["text"] == "Wait a minute. No minutes here."  # the sidecar keeps what the user typed
    assert sidecar["glossary"] == [
        {"key": "minute", "replacement": "[M][AY0][N][UW1][T]", "language": "en", "count": 1}
    ]


def test_a_text_under_the_limit_is_spoken_whole_however_far_the_glossary_lengthens_it(tmp_path):
    from cosyvoice_mac.request import MAX_TEXT_CHARS
    from tests.fakes.fake_pipeline import fake_request, fake_worker_config, quick_engine, started

    config = fake_worker_config(tmp_path)
    markup = "[M][AY0][N][UW1][T]"
    GlossaryStore(Path(config.cache_dir) / "glossary.json").replace([GlossaryEntry("minute", markup, "en")])
    typed = " ".join(["minute"] * 700) + "."  # 4,900 characters: accepted at the door
    assert len(typed) <= MAX_TEXT_CHARS < len(apply_glossary(typed, [GlossaryEntry("minute", markup)]).text)
    engine = started(quick_engine(config))
    try:
        with engine.subscribe() as heard:
            job_id = engine.submit(fake_request(typed))
            spoken = [event.text for event in heard.of(job_id, timeout=60) if event.kind == "progress"]
        result = engine.result(job_id, timeout=0)
        sidecar = json.loads(Path(result.sidecar_path).read_text())
    finally:
        engine.close()
    assert "".join(spoken).count(markup) == 700 and "minute" not in "".join(spoken)  # every word, none lost
    assert sidecar["text"] == typed and sidecar["glossary"][0]["count"] == 700
    assert not any("glossary" in note for note in result.notes)


def test_a_rewrite_that_leaves_nothing_to_speak_is_skipped_and_the_typed_text_spoken(tmp_path):
    from tests.fakes.fake_pipeline import fake_request

    store = GlossaryStore(tmp_path / "glossary.json")
    store.replace([GlossaryEntry("etc", "…")])
    typed = fake_request("etc")
    spoken, hits, note = RequestGlossary(store).apply(typed)
    assert spoken is typed and hits == [] and "glossary was not applied" in note and "nothing to speak" in note


def test_an_unreadable_glossary_is_skipped_with_a_note(tmp_path):
    from tests.fakes.fake_pipeline import fake_request, fake_worker_config, quick_engine, started

    config = fake_worker_config(tmp_path)
    (Path(config.cache_dir)).mkdir(parents=True, exist_ok=True)
    (Path(config.cache_dir) / "glossary.json").write_text("{broken")
    engine = started(quick_engine(config))
    try:
        result = engine.result(engine.submit(fake_request("Still spoken.")), timeout=60)
    finally:
        engine.close()
    assert result.output_path and any("glossary was not applied" in note for note in result.notes)


def test_every_line_of_a_long_job_is_drawn_with_the_job_s_sampling_and_a_batch_remakes_on_a_change(
    make_speech, tmp_path
):
    from cosyvoice_mac.request import Sampling

    steady = Sampling.build(temperature=0.8, top_k=30.0)  # a number box's 30.0 is a whole number
    speak = EspeakSpeak(make_speech)
    cast = {"S1": "Anna", "S2": "Bob"}
    talk = run_dialogue("[S1] One.\n[S2] Two.\n", cast, list(cast.values()), speak, tmp_path / "t", sampling=steady)
    assert [line.sampling for line in speak.requests] == [steady, steady]
    assert json.loads(talk.audio_path.with_suffix(".json").read_text())["sampling"]["top_k"] == 30
    dub = EspeakSpeak(make_speech)
    run_dub(SRT, "Cleo", dub, tmp_path / "dub", speed_limit=2.0, sampling=steady)
    assert dub.requests and {line.sampling for line in dub.requests} == {steady}  # a re-made faster cue too
    batch = EspeakSpeak(make_speech)
    run_batch("One.\nTwo.\n", "txt", tmp_path / "batch", batch, voice="Anna")
    assert {line.sampling for line in batch.requests} == {Sampling()}  # unset: the model's own
    again = EspeakSpeak(make_speech)  # the same lines with other sampling are other audio: made again
    run_batch("One.\nTwo.\n", "txt", tmp_path / "batch", again, voice="Anna", sampling=steady)
    assert [line.sampling for line in again.requests] == [steady, steady]
