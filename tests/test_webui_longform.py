"""The page's long-form callbacks through a real engine (fake pipeline): progress, Stop, glossary, errors."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import soundfile

from cosyvoice_mac.engine.host import Settings
from cosyvoice_mac.longform import subtitles
from cosyvoice_mac.longform.progress import Progress
from cosyvoice_mac.webui.callbacks import Callbacks
from cosyvoice_mac.webui.longform import _misfit_words, progress_html
from cosyvoice_mac.webui.strings import plural
from tests.fakes.fake_pipeline import started_fake_host

PROGRESS, MESSAGE, AUDIO, FILES = range(4)


@pytest.fixture(scope="module")
def callbacks(tmp_path_factory, make_speech):
    root = tmp_path_factory.mktemp("ui-longform")
    host = started_fake_host(root, max_queue=4, segment_s=0.3, stop_s=5.0)
    page = Callbacks(host, Settings(root / "cache"))
    for name in ("Anna", "Bob"):
        host.engine.save_voice_from_audio(
            name,
            make_speech(f"My name is {name} and this is my voice.", seconds=4.0),
            transcript=f"My name is {name} and this is my voice.",
            timeout=60,
        )
    yield page
    host.close()


def _request(session="s1"):
    return SimpleNamespace(session_hash=session)


def test_a_dialogue_reports_progress_after_every_line_and_writes_its_files(callbacks):
    script = "Anna: Hello Bob.\n[S2] Hi Anna.\nAnna: Bye now.\n"
    sampling = (True, 1.0, 0.8, 30, 10)  # the sampling controls turned on: every line is drawn with them
    updates = list(
        callbacks.longform.dialogue(_request(), "en", script, [["S2", "Bob"]], 0.3, True, False, False, -16, *sampling)
    )
    bars = [u[PROGRESS] for u in updates if isinstance(u[PROGRESS], str) and "<progress" in u[PROGRESS]]
    assert any('value="1" max="3"' in bar for bar in bars) and 'value="3" max="3"' in bars[-1]
    final = updates[-1]
    assert "Done: 3 of 3 lines" in final[MESSAGE]
    audio, rate = soundfile.read(final[AUDIO])
    timing = json.loads(Path(final[AUDIO]).with_suffix(".timing.json").read_text())["lines"]
    assert [t["voice"] for t in timing] == ["Anna", "Bob", "Anna"] and timing[-1]["end"] * rate == pytest.approx(
        len(audio), abs=rate * 0.01
    )
    assert sum(name.endswith(".wav") for name in final[FILES]) == 4  # the whole and one per line
    facts = json.loads(Path(final[AUDIO]).with_suffix(".json").read_text())
    assert facts["sampling"] == {"temperature": 1.0, "top_p": 0.8, "top_k": 30, "repetition_window": 10}


def test_stop_keeps_the_finished_lines(callbacks):
    script = "\n".join(f"Anna: Line number {n}. It is slow." for n in range(1, 9)) + "\n"
    updates, stopper = [], None
    for update in callbacks.longform.dialogue(_request("s2"), "en", script, [], 0.1, False, False, False, -16):
        updates.append(update)
        if stopper is None and 'value="2"' in str(update[PROGRESS]):
            stopper = threading.Thread(target=callbacks.longform.stop, args=(_request("s2"),))
            stopper.start()
    final = updates[-1]
    assert "Stopped" in final[MESSAGE] and "of 8" in final[MESSAGE]
    sidecar = json.loads(Path(final[AUDIO]).with_suffix(".json").read_text())
    assert sidecar["partial"] is True and 2 <= sidecar["lines"] < 8


def test_bad_input_is_a_message_and_user_text_is_escaped(callbacks):
    final = list(
        callbacks.longform.dialogue(
            _request(), "en", "<img src=x onerror=alert(1)>\n", [], 0.3, False, False, False, -16
        )
    )[-1]
    assert "line 1 has no speaker tag" in final[MESSAGE] and "<img" not in final[MESSAGE]
    final = list(callbacks.longform.dialogue(_request(), "en", "Zed: hi\n", [], 0.3, False, False, False, -16))[-1]
    assert "speaker &#x27;Zed&#x27; has no voice" in final[MESSAGE] and final[AUDIO] is None


def test_the_glossary_table_saves_refuses_bad_rows_and_imports_csv(callbacks, tmp_path):
    rows, message = callbacks.longform.save_glossary("en", [["minute", "[M][AY0][N][UW1][T]", "en"], ["", "", ""]])
    assert rows == [["minute", "[M][AY0][N][UW1][T]", "en"]] and message == "Saved 1 entry."
    skipped, message = callbacks.longform.save_glossary("en", [["word", "[zz][qq]", "all"]])
    assert "row 1 (&#x27;word&#x27;)" in message and callbacks.longform.glossary_rows() == rows
    csv = tmp_path / "g.csv"
    csv.write_text("key,replacement,language\n好,[h][ǎo],zh\n")
    rows, message = callbacks.longform.import_glossary("en", str(csv))
    assert rows == [["好", "[h][ǎo]", "zh"]]


def test_the_long_form_words_count_right_and_say_what_is_missing(callbacks):
    assert progress_html("en", Progress(2, 8, 4.0, "lines"), "lines").count("s left") == 1
    for finished in (Progress(2, 8, 0.0, "lines"), Progress(8, 8, 5.0, "lines")):  # stopped, done
        assert "left" not in progress_html("en", finished, "lines", finished=True)
    assert "left" not in progress_html("en", Progress(7, 8, 0.1, "lines"), "lines")  # never "0 s left"
    assert _misfit_words("en", {"cue": 3, "overrun": 0.25, "late": 0.0}) == "3 (+0.25 s)"
    assert _misfit_words("en", {"cue": 4, "overrun": 0.0, "late": 0.3}) == "4 (starts 0.30 s late)"
    assert "晚 0.30 秒" in _misfit_words("zh", {"cue": 4, "overrun": 0.0, "late": 0.3})
    assert plural("en", "lf_misfits", 1, cues="3") == "1 cue did not fit its slot: 3."
    assert plural("en", "lf_misfits", 2, cues="3, 4") == "2 cues did not fit their slots: 3, 4."
    assert plural("en", "lf_glossary_saved", 0) == "Saved 0 entries."
    for run, words in (
        (lambda lang: callbacks.longform.dub(_request(), lang, None, "", 1.5, False, False, -16), "subtitle file"),
        (lambda lang: callbacks.longform.batch(_request(), lang, None, "", "b", False, False, -16), ".txt"),
        (lambda lang: callbacks.longform.dialogue(_request(), lang, " ", [], 0.3, False, False, False, -16), "script"),
    ):
        assert words in list(run("en"))[-1][MESSAGE] and "Give the" not in list(run("en"))[-1][MESSAGE]
        assert "请先" in list(run("zh"))[-1][MESSAGE]


def test_a_slip_too_small_to_hear_is_no_misfit():
    cues = subtitles.parse_srt("1\n00:00:00,000 --> 00:00:01,000\nA\n\n2\n00:00:01,000 --> 00:00:02,000\nB\n")
    placed = subtitles.place(cues, [1.003, 0.5], [1.0, 1.0])  # 3 ms over: "+0.00 s" if it were listed
    assert subtitles.misfit_report(placed) == []
