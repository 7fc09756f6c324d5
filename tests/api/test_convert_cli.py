"""``cosyvoice-mac convert`` against the real app (its job in the app's queue, recorded as ``cli``) and on its own
engine (``--local``); a source that cannot be converted is refused before anything is sent or loaded."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.cli.common import EXIT_REFUSED
from tests.api.conftest import sidecar_for
from tests.browser.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def source(make_speech):
    return make_speech("Glue the sheet to the dark blue background.")


@pytest.fixture(scope="module")
def prompt(make_speech):
    return make_speech("This is the voice I would like you to copy, please.", seconds=4.0)


def _convert(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COSYVOICE_API_KEY", "COSYVOICE_SERVER")}
    env.update(OMP_WAIT_POLICY="PASSIVE", PYTHONPATH=str(REPO_ROOT))
    command = [sys.executable, "-m", "cosyvoice_mac", "convert", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=400, cwd=REPO_ROOT, env=env)


def test_convert_through_the_app_is_queued_there_and_recorded_as_cli(api_app, source, tmp_path):
    out = tmp_path / "converted.wav"
    done = _convert(str(source), "--voice", "preview", "--out", str(out), "--server", api_app.url)
    assert done.returncode == 0, done.stderr
    assert "sent to the app" in done.stderr
    seconds = soundfile.info(source).duration
    assert abs(soundfile.info(out).duration - seconds) < 0.05
    job = re.search(r"job ([0-9a-f]{8})", done.stdout).group(1)
    sidecar = sidecar_for(api_app, job)
    assert sidecar["interface"] == "cli" and sidecar["mode"] == "voice_conversion"
    assert sidecar["source"] == source.name  # the file the user named, not the server's upload.wav (issue 45 item 7)
    assert sidecar["source_duration_s"] == pytest.approx(seconds, abs=0.01)


def test_convert_streams_into_the_voice_of_a_prompt_recording(api_app, source, prompt, tmp_path):
    out = tmp_path / "streamed.wav"
    done = _convert(str(source), "--prompt-wav", str(prompt), "--stream", "--out", str(out), "--server", api_app.url)
    assert done.returncode == 0, done.stderr
    assert "first audio after" in done.stderr
    assert abs(soundfile.info(out).duration - soundfile.info(source).duration) < 0.05


def test_a_silent_source_or_an_unknown_voice_is_refused_with_the_reason(api_app, source, tmp_path):
    silent = tmp_path / "silent.wav"
    soundfile.write(silent, np.zeros(32000, np.float32), 16000)
    done = _convert(str(silent), "--voice", "preview", "--out", str(tmp_path / "x.wav"), "--server", api_app.url)
    assert done.returncode == EXIT_REFUSED and "is silent" in done.stderr and "Traceback" not in done.stderr
    done = _convert(str(source), "--voice", "Nobody", "--out", str(tmp_path / "y.wav"), "--server", api_app.url)
    assert done.returncode == EXIT_REFUSED and "has no voice 'Nobody'" in done.stderr
    assert not (tmp_path / "x.wav").exists() and not (tmp_path / "y.wav").exists()


def test_convert_runs_the_apps_engine_itself_when_asked(source, tmp_path):
    out, outputs = tmp_path / "local.wav", tmp_path / "outputs"
    done = _convert(
        str(source),
        "--voice",
        "preview",
        "--model",
        "preview",
        "--local",
        "--out",
        str(out),
        "--outputs-dir",
        str(outputs),
    )
    assert done.returncode == 0, done.stderr
    (sidecar,) = outputs.glob("*.json")
    facts = json.loads(sidecar.read_text())
    assert facts["interface"] == "cli" and facts["mode"] == "voice_conversion" and len(facts["source_hash"]) == 64
    assert abs(soundfile.info(out).duration - soundfile.info(source).duration) < 0.05
