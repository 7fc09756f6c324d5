"""Input every door must refuse the same way, from outside: a batch CSV whose quote never closes (the rest of the
file would become one spoken text) and a five-minute recording saved as a voice (every later job would refuse
it). Each through the ``/v1`` API, the page's own events and the CLI, and nothing is made or saved."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from gradio_client import handle_file

from tests.reliability.server import JOB_S, POST_OFF, REPO_ROOT

UNCLOSED = 'text,voice\nThe first line.,\n"The second line opens a quote, and never,\nThird line.,\nFourth line.,\n'
OPENS_ON = "line 3"


def _cli(arguments: list[str], cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(REPO_ROOT), "COSYVOICE_CACHE_DIR": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "cosyvoice_mac", *arguments],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=2 * JOB_S,
        check=False,
    )


@pytest.fixture(scope="module")
def unclosed_csv(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("batch") / "lines.csv"
    path.write_text(UNCLOSED)
    return path


@pytest.fixture(scope="module")
def five_minutes(make_speech) -> str:
    return str(make_speech("This recording goes on and on, far longer than a voice prompt may.", seconds=300.0))


def _wavs(app) -> set[Path]:
    return set(app.outputs.rglob("*.wav"))


def test_a_batch_csv_with_an_unclosed_quote_is_refused_by_the_api_naming_the_line(app, unclosed_csv):
    before = _wavs(app)
    answer = httpx.post(
        app.url + "v1/longform/batch",
        files={"file": ("lines.csv", unclosed_csv.read_bytes(), "text/csv")},
        data={"name": "unclosed"},
        timeout=JOB_S,
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "file" and OPENS_ON in error["message"] and "never closed" in error["message"], error
    assert _wavs(app) == before


def test_a_batch_csv_with_an_unclosed_quote_is_refused_by_the_page_naming_the_line(app, client, unclosed_csv):
    before = _wavs(app)
    answer = app.call(client, "/batch", "en", handle_file(str(unclosed_csv)), None, "unclosed", *POST_OFF)
    message = answer[1]
    assert OPENS_ON in message and "never closed" in message, message
    assert _wavs(app) == before


def test_a_batch_csv_with_an_unclosed_quote_is_refused_by_the_cli_naming_the_line(app, unclosed_csv, tmp_path):
    before = _wavs(app)
    result = _cli(
        ["batch", str(unclosed_csv), "--out-dir", str(tmp_path / "out"), "--server", app.url], tmp_path, app.cache
    )
    said = result.stderr + result.stdout
    assert result.returncode == 2 and OPENS_ON in said and "never closed" in said, (result.returncode, said)
    assert "Traceback" not in said and not (tmp_path / "out").exists()
    assert _wavs(app) == before


def test_the_cli_refuses_to_save_a_five_minute_recording_as_a_voice(app, five_minutes, tmp_path):
    result = _cli(["voices", "add", "Lecture", "--audio", five_minutes], tmp_path, app.cache)
    said = result.stderr + result.stdout
    assert result.returncode == 2, (result.returncode, said)
    assert "s of speech; the model takes at most" in said and "Traceback" not in said, said
    listed = _cli(["voices", "list"], tmp_path, app.cache).stdout
    assert "Lecture" not in listed


def test_the_api_and_the_page_refuse_the_same_recording_with_the_same_check(app, client, five_minutes):
    with open(five_minutes, "rb") as audio:
        answer = httpx.post(
            app.url + "v1/voices",
            files={"audio": ("lecture.wav", audio, "audio/wav")},
            data={"name": "Lecture"},
            timeout=JOB_S,
        )
    assert answer.status_code == 400 and "s of speech; the model takes at most" in answer.text, answer.text
    saved = app.call(client, "/save_voice", "en", "Lecture", handle_file(five_minutes), "")
    assert "of speech" in saved[0] and "Lecture" not in str(saved[1]), saved
