"""Faults named as faults, from outside: a worker killed mid-job is the server's fault (5xx, a retry later
works: 503 with Retry-After, CLI exit 75), a stream it cuts ends detectably and logs no traceback, a prompt
the model refuses names the prompt's field, a result outputs/ refused is said (X-CosyVoice-Saved: false and
a Warning; CLI exit 73 with --out written), and long-form results never overwrite each other."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile

from cosyvoice_mac.cli.common import EXIT_NOT_SAVED, EXIT_TRY_LATER
from tests.reliability.server import JOB_S, REPO_ROOT

LONG_TEXT = " ".join(f"This is sentence number {i} of a long request that the worker never finishes." for i in range(8))
SPEECH = "v1/audio/speech"
VOICE = "Faults voice"


def _body(text: str, **extra) -> dict:
    return {"model": "tts-1", "voice": "preview", "input": text, "response_format": "wav", **extra}


def _wait_running(app, timeout: float = JOB_S) -> None:
    client = app.client()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "1 running" in app.status(client):
            return
        time.sleep(0.05)
    raise AssertionError(app.status(client))


def _kill_worker(app) -> int:
    pid = app.worker_pid()
    os.kill(pid, signal.SIGKILL)
    return pid


def _cli(app, *arguments: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(REPO_ROOT), "NO_PROXY": "127.0.0.1"}
    return subprocess.Popen(
        [sys.executable, "-m", "cosyvoice_mac", *arguments, "--server", app.url],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _events(lines) -> list[dict]:
    return [json.loads(line[len("data:") :]) for line in lines if line.startswith("data:")]


@pytest.fixture(scope="module")
def saved_voice(app, speech):
    app.wait_ready()  # an earlier test's kill (or a heartbeat lost on a busy machine) may still be restarting it
    with open(speech, "rb") as audio:
        answer = httpx.post(
            app.url + "v1/voices", data={"name": VOICE}, files={"audio": ("v.wav", audio, "audio/wav")}, timeout=JOB_S
        )
    assert answer.status_code in (201, 409), answer.text
    return VOICE


@pytest.fixture
def outputs_refused(app, full_disk):
    """The outputs disk is full (a tmpfs filled up, or the simulated ENOSPC) while the test runs."""
    app.wait_ready()
    full_disk.fill()
    yield full_disk
    full_disk.free()


# -- item 4: a crash is the server's fault ------------------------------------------------------------
def test_a_worker_killed_mid_job_is_a_503_server_error_with_retry_after(app):
    app.wait_ready()
    answers = []
    request = threading.Thread(
        target=lambda: answers.append(httpx.post(app.url + SPEECH, json=_body(LONG_TEXT), timeout=2 * JOB_S))
    )
    request.start()
    _wait_running(app)
    time.sleep(0.3)
    _kill_worker(app)
    request.join(2 * JOB_S)
    answer = answers[0]
    error = answer.json()["error"]
    assert answer.status_code == 503, answer.text
    assert error["type"] == "server_error" and error["code"] == "engine_restarted" and error["param"] is None, error
    assert int(answer.headers["retry-after"]) > 0
    assert "SIGKILL" in error["message"]
    app.wait_ready()
    assert httpx.post(app.url + SPEECH, json=_body("Back again."), timeout=JOB_S).status_code == 200  # retry works


def test_the_cli_says_the_engine_crashed_and_exits_75(app, tmp_path):
    app.wait_ready()
    run = _cli(app, "synth", "--voice", "preview", "--text", LONG_TEXT, "--out", "o.wav", cwd=tmp_path)
    _wait_running(app)
    time.sleep(0.3)
    _kill_worker(app)
    _, said = run.communicate(timeout=2 * JOB_S)
    assert run.returncode == EXIT_TRY_LATER, said
    assert "crashed" in said and "restarted" in said and "--text" not in said, said
    app.wait_ready()


def test_an_sse_stream_cut_by_a_kill_ends_with_an_error_event(app):
    app.wait_ready()
    body = _body(LONG_TEXT, stream=True, stream_format="sse")
    lines, killed = [], None
    with httpx.stream("POST", app.url + SPEECH, json=body, timeout=2 * JOB_S) as answer:
        assert answer.status_code == 200
        for line in answer.iter_lines():
            lines.append(line)
            if killed is None and _events(lines):  # the first sentence came: the job is mid-way
                killed = _kill_worker(app)
    events = _events(lines)
    assert events[0]["type"] == "speech.audio.delta"
    last = events[-1]
    assert last["type"] == "error", last
    assert last["error"]["type"] == "server_error" and last["error"]["code"] == "engine_restarted", last
    assert last["retry_after"] > 0
    app.wait_ready()


def test_a_wav_stream_cut_by_a_kill_ends_incomplete_and_logs_no_traceback(app):
    app.wait_ready()
    logged = len(app.log())
    received = bytearray()
    with pytest.raises(httpx.RemoteProtocolError):  # the chunked body never ends: the client can tell
        with httpx.stream("POST", app.url + SPEECH, json=_body(LONG_TEXT, stream=True), timeout=2 * JOB_S) as answer:
            assert answer.status_code == 200
            for chunk in answer.iter_bytes():
                if not received:
                    _kill_worker(app)
                received += chunk
    assert received[:4] == b"RIFF"
    app.wait_ready()
    since = app.log()[logged:]
    assert "Traceback" not in since and "Exception in ASGI" not in since, since[-3000:]
    assert "cut (engine_restarted)" in since  # one line says what happened


def test_a_dc_only_prompt_is_a_fault_of_the_prompt_audio(app, tmp_path):
    app.wait_ready()
    dc = tmp_path / "dc.wav"
    soundfile.write(dc, np.full(24000 * 4, 0.5, np.float32), 24000, subtype="PCM_16")
    with dc.open("rb") as audio:
        answer = httpx.post(
            app.url + "v1/audio/speech/recording",
            data={"body": json.dumps({"model": "tts-1", "input": "Hello there.", "response_format": "wav"})},
            files={"prompt_audio": ("dc.wav", audio, "audio/wav")},
            timeout=JOB_S,
        )
    error = answer.json()["error"]
    assert answer.status_code == 400 and error["param"] == "prompt_audio", answer.text
    run = _cli(app, "synth", "--prompt-wav", str(dc), "--text", "Hello there.", "--out", "o.wav", cwd=tmp_path)
    _, said = run.communicate(timeout=JOB_S)
    # refused before sending, in the prompt check's own sentence (every door says it alike), naming the file
    assert run.returncode == 2 and "dc.wav" in said and "--text" not in said, said


# -- item 3: nothing saved is said ------------------------------------------------------------------
def test_v1_says_when_the_result_was_saved(app):
    app.wait_ready()
    answer = httpx.post(app.url + SPEECH, json=_body("Saved, of course."), timeout=JOB_S)
    assert answer.status_code == 200
    assert answer.headers["x-cosyvoice-saved"] == "true" and "warning" not in answer.headers
    assert (app.outputs / answer.headers["x-cosyvoice-file"]).is_file()


def test_v1_says_not_saved_with_a_warning_when_outputs_refuses(app, outputs_refused):
    answer = httpx.post(app.url + SPEECH, json=_body("Nowhere to keep this."), timeout=JOB_S)
    assert answer.status_code == 200 and answer.content[:4] == b"RIFF"  # the audio still comes
    assert answer.headers["x-cosyvoice-saved"] == "false", dict(answer.headers)
    warning = answer.headers["warning"]
    assert warning.startswith('199 - "') and warning.endswith('"') and "disk is full" in warning, warning
    assert "x-cosyvoice-file" not in answer.headers
    stream = httpx.post(app.url + SPEECH, json=_body("Streamed, not kept.", stream_format="sse"), timeout=JOB_S)
    done = _events(stream.text.splitlines())[-1]
    assert done["type"] == "speech.audio.done" and done["saved"] is False and "disk is full" in done["warning"]


@pytest.mark.parametrize("stream", [False, True])
def test_the_cli_writes_out_and_exits_not_saved_when_outputs_refuses(app, outputs_refused, tmp_path, stream):
    arguments = ["synth", "--voice", "preview", "--text", "Keep me here.", "--out", "o.wav"]
    run = _cli(app, *arguments, *(["--stream"] if stream else []), cwd=tmp_path)
    out, said = run.communicate(timeout=JOB_S)
    assert run.returncode == EXIT_NOT_SAVED, out + said
    assert "not save" in said and "disk is full" in said, said
    assert soundfile.info(tmp_path / "o.wav").duration > 0.3


def test_the_cli_exits_not_saved_when_outputs_is_read_only(app, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder anyway; the full-disk tests cover the same path")
    app.wait_ready()
    app.outputs.chmod(0o555)
    try:
        run = _cli(app, "synth", "--voice", "preview", "--text", "Read only.", "--out", "o.wav", cwd=tmp_path)
        _, said = run.communicate(timeout=JOB_S)
    finally:
        app.outputs.chmod(0o755)
    assert run.returncode == EXIT_NOT_SAVED and "permission denied" in said, said
    assert (tmp_path / "o.wav").is_file()


# -- item 2: long-form results never overwrite each other ----------------------------------------------
def _dialogue(app, voice: str) -> dict:
    answer = httpx.post(app.url + "v1/longform/dialogue", json={"script": f"{voice}: Hi."}, timeout=JOB_S)
    assert answer.status_code == 200, answer.text
    return _events(answer.text.splitlines())[-1]


def test_dialogues_run_back_to_back_each_keep_their_own_files(app, saved_voice):
    app.wait_ready()
    started = time.monotonic()
    results = [_dialogue(app, saved_voice) for _ in range(6)]  # several finish within the same second
    seconds = time.monotonic() - started
    names = [next(name for name in done["files"] if name.endswith(".wav")) for done in results]
    assert all(done["type"] == "done" for done in results), results
    assert len(set(names)) == len(names), (names, seconds)
    assert all((app.outputs / "longform" / name).is_file() for name in names), names
    concurrent = []
    threads = [threading.Thread(target=lambda: concurrent.append(_dialogue(app, saved_voice))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(2 * JOB_S)
    more = {next(name for name in done["files"] if name.endswith(".wav")) for done in concurrent}
    assert len(more) == 3 and not more & set(names)


def test_a_dialogue_outputs_refused_is_kept_downloadable_and_said(app, saved_voice, outputs_refused, tmp_path):
    done = _dialogue(app, saved_voice)
    assert done["type"] == "done" and done["saved"] is False and "disk is full" in done["warning"], done
    wav = next(name for name in done["files"] if name.endswith(".wav"))
    download = httpx.get(app.url + f"v1/longform/files/{wav}", timeout=JOB_S)
    assert download.status_code == 200 and download.content[:4] == b"RIFF"
    script = tmp_path / "talk.txt"
    script.write_text(f"{saved_voice}: Hello from the command line.\n")
    run = _cli(app, "dialogue", str(script), "--out", "talk", cwd=tmp_path)
    _, said = run.communicate(timeout=JOB_S)
    assert run.returncode == EXIT_NOT_SAVED and "disk is full" in said, said
    assert soundfile.info(tmp_path / "talk.wav").duration > 0.3
