"""A batch of recordings converted through the real app (preview voice): ``/v1/longform/batch`` with several
``audio`` files (raw httpx multipart), and ``cosyvoice-mac batch FOLDER --voice preview`` sent to the app. In
each, a bad recording in the middle (noise the worker's speech detector refuses; silence the door refuses) is
reported by name and reason, and the recordings after it are converted all the same."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile

import httpx
import numpy as np
import pytest
import soundfile

from cosyvoice_mac.cli.common import EXIT_REFUSED
from tests.browser.conftest import REPO_ROOT


def _events(answer: httpx.Response) -> list[dict]:
    return [json.loads(line[len("data: ") :]) for line in answer.text.splitlines() if line.startswith("data: ")]


@pytest.fixture(scope="module")
def sources(make_speech, tmp_path_factory):
    """a_first.wav (speech), b_noise.wav (noise), c_silent.wav, d_last.flac (speech, 44.1 kHz), readme.txt."""
    folder = tmp_path_factory.mktemp("recordings")
    speech, rate = soundfile.read(make_speech("Glue the sheet to the dark blue background."), dtype="float32")
    soundfile.write(folder / "a_first.wav", speech, rate)
    noise = 0.3 * np.random.default_rng(2).standard_normal(48000).astype(np.float32)
    soundfile.write(folder / "b_noise.wav", noise, 16000)
    soundfile.write(folder / "c_silent.wav", np.zeros(32000, np.float32), 16000)
    later, later_rate = soundfile.read(make_speech("Rice is often served in round bowls."), dtype="float32")
    soundfile.write(folder / "d_last.flac", np.repeat(later, 2)[: len(later) * 2], later_rate * 2)
    (folder / "readme.txt").write_text("not a recording")
    return folder


def _statuses(report: list[dict]) -> dict[str, str]:
    return {entry["source"]: entry["status"] for entry in report}


def test_the_batch_route_converts_several_uploads_and_reports_the_bad_one(api_app, sources):
    uploads = [("audio", (path.name, path.read_bytes())) for path in sorted(sources.iterdir())]
    answer = httpx.post(api_app.url + "v1/longform/batch", data={"voice": "preview"}, files=uploads, timeout=600)
    assert answer.status_code == 200, answer.text
    events = _events(answer)
    assert [e["done"] for e in events if e["type"] == "progress"] == [1, 2, 3, 4]  # one report per recording
    done = events[-1]
    assert done["type"] == "done" and (done["done"], done["total"], done["partial"]) == (4, 4, False), done
    report = {entry["source"]: entry for entry in done["report"]}
    assert _statuses(done["report"]) == {
        "a_first.wav": "made",
        "b_noise.wav": "failed",
        "c_silent.wav": "failed",
        "d_last.flac": "made",
        "readme.txt": "not_audio",
    }
    assert "b_noise.wav holds no speech" in report["b_noise.wav"]["reason"]
    assert "c_silent.wav is silent" in report["c_silent.wav"]["reason"]
    archive_name = next(name for name in done["files"] if name.endswith(".zip"))
    archive = httpx.get(api_app.url + f"v1/longform/files/{archive_name}", timeout=60)
    with zipfile.ZipFile(io.BytesIO(archive.content)) as files:
        names = {name.split("/")[-1]: name for name in files.namelist()}
        assert {"a_first.wav", "d_last.wav", "results.json"} <= set(names)
        converted = soundfile.info(io.BytesIO(files.read(names["d_last.wav"])))
        sidecar = json.loads(files.read(names["d_last.json"]))
    assert abs(converted.duration - soundfile.info(sources / "d_last.flac").duration) < 0.05  # words and timing kept
    assert sidecar["mode"] == "voice_conversion" and sidecar["source"] == "d_last.flac" and sidecar["source_hash"]


@pytest.mark.parametrize(
    "form, files, words",
    [
        ({}, [("audio", ("a.wav", b"RIFF"))], "name the voice"),
        ({"voice": "Nobody"}, [("audio", ("a.wav", b"RIFF"))], "Nobody"),
        ({"voice": "preview"}, [("audio", ("notes.txt", b"hi"))], "no audio file to convert"),
        ({"voice": "preview", "speed": "9"}, [("audio", ("a.wav", b"RIFF"))], "speed 9.0 is out of range"),
        ({"voice": "preview"}, [("audio", ("a.wav", b"RIFF")), ("file", ("x.txt", b"hi"))], "one of the two"),
    ],
)
def test_a_batch_that_cannot_start_is_a_400_naming_the_problem(api_app, form, files, words):
    answer = httpx.post(api_app.url + "v1/longform/batch", data=form, files=files, timeout=60)
    assert answer.status_code in (400, 404), answer.text
    assert words in answer.json()["error"]["message"]


def _batch(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COSYVOICE_API_KEY", "COSYVOICE_SERVER")}
    env.update(OMP_WAIT_POLICY="PASSIVE", PYTHONPATH=str(REPO_ROOT))
    command = [sys.executable, "-m", "cosyvoice_mac", "batch", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT, env=env)


def test_the_cli_converts_a_folder_through_the_app_and_a_rerun_resumes(api_app, sources, tmp_path):
    out = tmp_path / "converted"
    done = _batch(str(sources), "--voice", "preview", "--out-dir", str(out), "--server", api_app.url)
    assert "sent to the app" in done.stderr and "Traceback" not in done.stderr
    assert done.returncode == EXIT_REFUSED, done.stderr  # two recordings could not be converted: said, not hidden
    assert "note: skipped readme.txt: not an audio file" in done.stderr
    assert "b_noise.wav: not converted: b_noise.wav holds no speech" in done.stderr
    assert "c_silent.wav: not converted" in done.stderr and "2 of 4 recordings could not be converted" in done.stderr
    assert "a_first.wav -> a_first.wav" in done.stdout and "d_last.flac -> d_last.wav" in done.stdout
    assert sorted(path.name for path in out.glob("*.wav")) == ["a_first.wav", "d_last.wav"]
    results = json.loads((out / "results.json").read_text())["results"]
    assert _statuses(results)["b_noise.wav"] == "failed" and _statuses(results)["d_last.flac"] == "made"
    sidecar = json.loads((out / "a_first.json").read_text())
    assert sidecar["interface"] == "cli" and sidecar["mode"] == "voice_conversion"

    again = _batch(str(sources), "--voice", "preview", "--out-dir", str(out), "--server", api_app.url)
    assert "a_first.wav -> a_first.wav (already made)" in again.stdout, again.stderr


def test_the_cli_refuses_a_folder_without_a_voice_before_sending(api_app, sources, tmp_path):
    done = _batch(str(sources), "--out-dir", str(tmp_path / "x"), "--server", api_app.url)
    assert done.returncode == EXIT_REFUSED and "needs --voice" in done.stderr and "Traceback" not in done.stderr
