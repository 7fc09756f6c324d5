"""The long-form commands against the real app: their lines are jobs in the app's queue (its engine saves
each one in its outputs/ with ``interface: cli``), the progress comes back over SSE, the results are
downloaded to the command's own output, and Ctrl-C stops the job in the app keeping what it finished.

The app runs the preview voice with an API key; two voices are saved in its cache before it starts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.api.conftest import wait_until_ready
from tests.api.test_cli_through_app import _cli_env
from tests.browser.conftest import REPO_ROOT, start_app, stop_app
from tests.test_longform_cli import interrupt_when

KEY = "longform-cli-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def longform_app(tmp_path_factory, make_speech):
    root = tmp_path_factory.mktemp("longform-cli-app")
    for name, sentence in (("Anna", "The quick brown fox jumps over the lazy dog."), ("Bob", "One step at a time.")):
        audio = make_speech(sentence, seconds=4.0)
        added = _cli(["voices", "add", name, "--audio", str(audio), "--transcript", sentence], root)
        assert added.returncode == 0, added.stderr
    app = start_app(root, root / "models", ("--model", "preview", "--api-key", KEY))
    try:
        wait_until_ready(app, AUTH)
        yield app
    finally:
        stop_app(app)


def _cli(args: list[str], root: Path, **popen) -> subprocess.CompletedProcess | subprocess.Popen:
    command = [sys.executable, "-m", "cosyvoice_mac", *args]
    env = _cli_env(COSYVOICE_CACHE_DIR=str(root / "cache"))
    if popen:
        return subprocess.Popen(command, text=True, cwd=REPO_ROOT, env=env, **popen)
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=env)


def _app_args(app) -> list[str]:
    return ["--server", app.url, "--api-key", KEY]


def _line_sidecars(app) -> list[dict]:
    """The sidecars the app's engine saved, one per job, oldest first (names of one second sort by job id;
    the long-form results live in outputs/longform)."""
    paths = sorted(app.outputs.glob("*.json"), key=lambda path: path.stat().st_mtime_ns)
    return [json.loads(path.read_text()) for path in paths]


def test_a_dialogue_runs_in_the_apps_queue_and_is_recorded_cli(longform_app, tmp_path):
    script = tmp_path / "talk.txt"
    script.write_text("Anna: Good morning, Bob.\n[S2] How are you today, Anna?\nAnna: Very well.\n")
    before = len(_line_sidecars(longform_app))
    args = ["dialogue", str(script), "--cast", "S2=Bob", "--seed", "3", "--per-line", "--out", str(tmp_path / "talk")]
    done = _cli([*args, *_app_args(longform_app)], longform_app.root)
    assert done.returncode == 0, done.stderr
    assert f"sent to the app at {longform_app.url.rstrip('/')}" in done.stderr and "3/3 lines done" in done.stdout
    assert "Traceback" not in done.stderr
    lines = _line_sidecars(longform_app)[before:]
    assert [line["text"] for line in lines] == ["Good morning, Bob.", "How are you today, Anna?", "Very well."]
    assert {line["interface"] for line in lines} == {"cli"} and [line["seed"] for line in lines] == [3, 4, 5]
    timing = json.loads((tmp_path / "talk.timing.json").read_text())
    assert [t["voice"] for t in timing["lines"]] == ["Anna", "Bob", "Anna"] and not timing["partial"]
    audio, rate = soundfile.read(tmp_path / "talk.wav")
    assert timing["lines"][-1]["end"] == pytest.approx(len(audio) / rate, abs=0.01)
    [served] = [p.with_suffix(".wav") for p in (longform_app.outputs / "longform").glob("*-dialogue-*.timing.json")]
    served = served.with_name(served.name.replace(".timing", ""))
    assert np.array_equal(soundfile.read(served)[0], audio)  # the app's own result, downloaded whole
    assert len(list(tmp_path.glob("talk-0*-*.wav"))) == 3  # --per-line files, renamed to the --out stem


def test_a_batch_through_the_app_lands_in_the_out_dir_and_resumes(longform_app, tmp_path):
    (tmp_path / "lines.txt").write_text("First line of the batch.\nSecond line of the batch.\n")
    args = ["batch", str(tmp_path / "lines.txt"), "--voice", "Anna", "--out-dir", str(tmp_path / "made")]
    before = len(_line_sidecars(longform_app))
    first = _cli([*args, *_app_args(longform_app)], longform_app.root)
    assert first.returncode == 0 and "2/2 lines done" in first.stdout, first.stderr
    assert sorted(p.name for p in (tmp_path / "made").glob("*.wav")) == ["0001.wav", "0002.wav"]
    assert json.loads((tmp_path / "made" / "0001.json").read_text())["interface"] == "cli"
    again = _cli([*args, *_app_args(longform_app)], longform_app.root)
    assert again.returncode == 0 and "2/2 lines done" in again.stdout, again.stderr
    assert len(_line_sidecars(longform_app)) == before + 2  # the re-run resumed: nothing spoken twice


def test_a_bad_cast_is_the_apps_one_line_refusal(longform_app, tmp_path):
    (tmp_path / "bad.txt").write_text("Zed: hello\n")
    done = _cli(
        ["dialogue", str(tmp_path / "bad.txt"), "--out", str(tmp_path / "x"), *_app_args(longform_app)],
        longform_app.root,
    )
    assert done.returncode == 2 and "speaker 'Zed' has no voice" in done.stderr and "Traceback" not in done.stderr
    assert not list(tmp_path.glob("x*"))


def test_ctrl_c_disconnects_and_the_app_stops_the_rest_keeping_what_is_done(longform_app, tmp_path):
    sentence = "Anna: This long line of the dialogue is spoken slowly, so that it is still running when stopped."
    (tmp_path / "long.txt").write_text("\n".join([sentence] * 12) + "\n")
    before = len(_line_sidecars(longform_app))
    args = ["dialogue", str(tmp_path / "long.txt"), "--out", str(tmp_path / "talk"), *_app_args(longform_app)]
    cli = _cli(args, longform_app.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, stderr = interrupt_when(cli, lambda: len(_line_sidecars(longform_app)) > before)
    assert cli.returncode == 130 and "cancelled (Ctrl-C)" in stderr and "Traceback" not in stderr, stderr
    deadline, partial = time.monotonic() + 60, []
    while not partial and time.monotonic() < deadline:
        time.sleep(0.2)
        timings = [json.loads(p.read_text()) for p in (longform_app.outputs / "longform").glob("*.timing.json")]
        partial = [timing for timing in timings if timing["partial"]]
    assert len(partial) == 1 and 1 <= len(partial[0]["lines"]) < 12
    time.sleep(2.0)  # nothing more is spoken once the app has stopped the job
    assert len(_line_sidecars(longform_app)) - before == len(partial[0]["lines"])


def test_a_dub_through_the_app_is_downloaded_to_the_out_stem(longform_app, tmp_path):
    srt = tmp_path / "film.srt"
    srt.write_text(
        "1\n00:00:00,500 --> 00:00:03,000\nThe first cue.\n\n2\n00:00:04,000 --> 00:00:06,500\nThe last cue.\n"
    )
    before = len(_line_sidecars(longform_app))
    args = [
        "dub",
        str(srt),
        "--voice",
        "Anna",
        "--loudness",
        "-20",
        "--out",
        str(tmp_path / "film"),
        *_app_args(longform_app),
    ]
    done = _cli(args, longform_app.root)
    assert done.returncode == 0 and "2/2 cues done" in done.stdout, done.stderr
    assert {line["interface"] for line in _line_sidecars(longform_app)[before:]} == {"cli"}
    audio, rate = soundfile.read(tmp_path / "film.wav")
    assert len(audio) / rate >= 4.0  # the last cue starts at 4 s on the timeline
    facts = json.loads((tmp_path / "film.json").read_text())
    assert facts["kind"] == "dub" and facts["voice"] == "Anna" and facts["cues"] == 2
    assert (tmp_path / "film.report.json").is_file()
