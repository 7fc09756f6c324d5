"""``synth`` against the real app: its job waits in the app's one queue with API jobs, a full queue gives it a
retry message, Ctrl-C cancels its job in the app, and its sidecar says ``interface: cli``; without an app it
runs the app's engine itself and records the same.

The app runs the preview voice with a queue of 1 (one job running, one waiting) and an API key. To hold the
queue still while a test looks at it, an API job starts and then its worker is paused (SIGSTOP; the app's
hang timeout is far longer); an uploaded prompt lives in the app's temporary folder exactly as long as its
job, which tells the test when the CLI's job has entered the queue and when the app has let it go.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
import soundfile

from cosyvoice_mac.engine.start_method import looks_like_worker
from tests.api.conftest import LONG_TEXT, sidecar_for, wait_until_ready
from tests.browser.conftest import REPO_ROOT, free_port, start_app, stop_app
from tests.provenance_check import ai_credentials

KEY = "cli-test-key"
# Four pieces of the preview voice: three still to come when it is paused after the first (a piece takes over a
# second on any machine; the pause follows the first within milliseconds).
BLOCKER_TEXT = " ".join([LONG_TEXT] * 2)
AUTH = {"Authorization": f"Bearer {KEY}"}
WAIT_S = 120.0


@pytest.fixture(scope="module")
def queue_app(tmp_path_factory, prompt):
    """The preview voice behind a queue of 1, with an API key and a temporary folder of its own."""
    root = tmp_path_factory.mktemp("cli-app")
    temp = root / "tmp"
    temp.mkdir()
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(temp)
    try:
        app = start_app(
            root,
            root / "models",
            ("--model", "preview", "--max-queue", "1", "--hang-timeout", "300", "--api-key", KEY),
        )
    finally:
        os.environ.pop("TMPDIR") if saved is None else os.environ.__setitem__("TMPDIR", saved)
    app.temp = temp
    try:
        wait_until_ready(app, AUTH)
        _speak_in_the_voice_of(app, prompt)  # loads the app's speech detector, which checks every uploaded prompt
        yield app
    finally:
        stop_app(app)


@pytest.fixture(scope="module")
def prompt(make_speech):
    return make_speech("Hello there, this is the voice of the command line test.", seconds=4.0)


def _cli_env(**extra) -> dict:
    env = {key: value for key, value in os.environ.items() if key not in ("COSYVOICE_API_KEY", "COSYVOICE_SERVER")}
    return {**env, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(REPO_ROOT), **extra}


def _synth_args(app, out: Path, *args: str, key: str | None = KEY) -> list[str]:
    command = [sys.executable, "-m", "cosyvoice_mac", "synth", "--server", app.url, "--out", str(out), *args]
    return command + (["--api-key", key] if key is not None else [])


def _run(command: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=env or _cli_env())


def _start(command: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT, env=_cli_env()
    )


def _prompt_folders(app) -> list[Path]:
    return sorted(app.temp.glob("cosyvoice-api-prompt-*"))


def _until(condition, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    pytest.fail(f"waited {timeout:.0f} s for {what}")


def _worker_pid(app) -> int:
    for child in psutil.Process(app.process.pid).children(recursive=True):
        command = " ".join(child.cmdline())
        if looks_like_worker(child.name(), command) and child.status() != "zombie":
            return child.pid
    pytest.fail("the app has no model worker")


def _api_speech(app, text: str, timeout: float = 300, **extra) -> httpx.Response:
    body = {"model": "tts-1", "voice": "preview", "input": text, "response_format": "pcm", **extra}
    return httpx.post(app.url + "v1/audio/speech", json=body, headers=AUTH, timeout=timeout)


@contextmanager
def held_queue(app, finish: bool = True):
    """An API job is running and its worker paused: nothing in the queue moves until the block ends. Then the job
    runs to its end (``finish``), or its client leaves, which cancels it in the app (no test waits for its audio)."""
    started, leave, answer = threading.Event(), threading.Event(), {}

    def blocker():
        body = {"model": "tts-1", "voice": "preview", "input": BLOCKER_TEXT, "response_format": "pcm", "stream": True}
        with httpx.stream("POST", app.url + "v1/audio/speech", json=body, headers=AUTH, timeout=600) as response:
            answer["job_id"] = response.headers.get("x-cosyvoice-job-id")
            for _ in response.iter_raw():
                started.set()
                if leave.is_set():
                    break
        started.set()

    thread = threading.Thread(target=blocker, daemon=True)
    thread.start()
    assert started.wait(WAIT_S), "the blocking API job never started"
    worker = _worker_pid(app)
    os.kill(worker, signal.SIGSTOP)
    try:
        yield answer
    finally:
        if not finish:
            leave.set()
        os.kill(worker, signal.SIGCONT)
        thread.join(WAIT_S)


def _speak_in_the_voice_of(app, recording: Path) -> None:
    body = json.dumps({"model": "tts-1", "input": "Hello.", "response_format": "wav"})
    with recording.open("rb") as audio:
        answer = httpx.post(
            app.url + "v1/audio/speech/recording",
            data={"body": body},
            files={"prompt_audio": ("prompt.wav", audio, "audio/wav")},
            headers=AUTH,
            timeout=WAIT_S,
        )
    assert answer.status_code == 200, answer.text


def _refused_at_once(app) -> bool:
    """Whether a new API job is refused because the queue is full (True), or accepted to wait (False)."""
    try:
        answer = _api_speech(app, "Is there room in the queue?", timeout=3.0)
    except httpx.TimeoutException:  # accepted and waiting; leaving cancels it in the app
        return False
    assert answer.status_code == 429, answer.text
    return True


def test_a_cli_job_waits_in_the_apps_queue_behind_an_api_job_and_is_recorded_as_cli(queue_app, prompt, tmp_path):
    out = tmp_path / "cli.wav"
    text = "The command line waits its turn in the app."
    with held_queue(queue_app) as blocker:
        cli = _start(_synth_args(queue_app, out, "--prompt-wav", str(prompt), "--text", text, "--seed", "7"))
        _until(lambda: _prompt_folders(queue_app), "the app to receive the CLI's prompt")
        time.sleep(1.0)  # the upload is checked (the speech detector is loaded: queue_app), then queued
        assert _refused_at_once(queue_app), "the CLI's job does not hold the queue's one waiting place"
        assert cli.poll() is None, "the CLI finished while the app's only worker was paused"
    stdout, stderr = cli.communicate(timeout=300)
    assert cli.returncode == 0, stderr
    assert "wrote" in stdout and "Traceback" not in stderr
    api_sidecar = sidecar_for(queue_app, blocker["job_id"])
    cli_sidecar = next(
        json.loads(path.read_text())
        for path in queue_app.outputs.glob("*.json")
        if json.loads(path.read_text())["text"] == text
    )
    assert api_sidecar["interface"] == "api" and cli_sidecar["interface"] == "cli"
    assert cli_sidecar["seed"] == 7
    assert cli_sidecar["file"] in stdout  # the CLI says where the app saved it
    samples, rate = soundfile.read(out, dtype="int16")
    saved, saved_rate = soundfile.read(queue_app.outputs / cli_sidecar["file"], dtype="int16")
    assert rate == saved_rate == 24000 and np.array_equal(samples, saved)
    assert out.read_bytes() == (queue_app.outputs / cli_sidecar["file"]).read_bytes()  # credentials and all
    assert ai_credentials(out.read_bytes(), "wav")["org.cosyvoice-mac.generation"]["interface"] == "cli"
    assert not _prompt_folders(queue_app), "the uploaded prompt outlived its job"


def test_a_full_queue_gives_the_cli_a_retry_message_and_ctrl_c_frees_its_place(queue_app, prompt, tmp_path):
    text = "This job is withdrawn before it runs."
    with held_queue(queue_app, finish=False):
        waiting = _start(_synth_args(queue_app, tmp_path / "a.wav", "--prompt-wav", str(prompt), "--text", text))
        _until(lambda: _prompt_folders(queue_app), "the app to receive the CLI's prompt")
        time.sleep(1.0)  # the upload is checked (the speech detector is loaded: queue_app), then queued
        refused = _run(_synth_args(queue_app, tmp_path / "b.wav", "--voice", "preview", "--text", "No room for me."))
        assert refused.returncode == 75, refused.stderr
        assert "queue is full" in refused.stderr and "try again in" in refused.stderr
        assert "Traceback" not in refused.stderr and not (tmp_path / "b.wav").exists()

        waiting.send_signal(signal.SIGINT)
        _, stderr = waiting.communicate(timeout=60)
        assert waiting.returncode == 130 and "cancelled" in stderr and "Traceback" not in stderr
        _until(lambda: not _prompt_folders(queue_app), "the app to drop the CLI's job", timeout=30)
        assert not _refused_at_once(queue_app), "the cancelled CLI job still holds its place in the queue"
    assert _api_speech(queue_app, "After the cancel.").status_code == 200
    texts = [json.loads(path.read_text())["text"] for path in queue_app.outputs.glob("*.json")]
    assert text not in texts, "the cancelled CLI job ran anyway"


def test_a_streamed_cli_job_and_a_saved_voice(queue_app, tmp_path):
    out = tmp_path / "stream.wav"
    done = _run(_synth_args(queue_app, out, "--voice", "preview", "--text", LONG_TEXT[:140], "--stream"))
    assert done.returncode == 0, done.stderr
    assert "first audio after" in done.stderr
    samples, rate = soundfile.read(out)
    assert rate == 24000 and len(samples) / rate > 1.0 and np.sqrt(np.mean(samples**2)) > 0.01


def test_the_cli_names_what_is_wrong(queue_app, prompt, tmp_path):
    out = tmp_path / "never.wav"
    before = set(queue_app.outputs.glob("*.json"))
    unknown = _run(_synth_args(queue_app, out, "--voice", "nobody", "--text", "Hello."))
    assert unknown.returncode == 2 and "the app has no voice 'nobody' (its voices: preview)" in unknown.stderr
    no_key = _run(_synth_args(queue_app, out, "--voice", "preview", "--text", "Hello.", key=None))
    assert no_key.returncode == 2 and "needs a key" in no_key.stderr and "--api-key" in no_key.stderr
    bad_key = _run(_synth_args(queue_app, out, "--voice", "preview", "--text", "Hello.", key="wrong"))
    assert bad_key.returncode == 2 and "not the one this server was started with" in bad_key.stderr
    unspeakable = _run(_synth_args(queue_app, out, "--prompt-wav", str(prompt), "--text", "😀🎉"))
    assert unspeakable.returncode == 2 and "error: --text: the text has nothing to speak" in unspeakable.stderr
    model = _run(_synth_args(queue_app, out, "--voice", "preview", "--text", "Hello.", "--model", "Nope-0.5B"))
    assert model.returncode == 2 and "(--model): there is no model 'Nope-0.5B'" in model.stderr
    for done in (unknown, no_key, bad_key, unspeakable, model):
        assert "Traceback" not in done.stderr
    assert not out.exists() and set(queue_app.outputs.glob("*.json")) == before  # nothing was spoken


def test_the_recording_route_checks_its_upload_and_the_interface_header(queue_app, tmp_path):
    url = queue_app.url + "v1/audio/speech/recording"
    body = json.dumps({"model": "tts-1", "input": "Hello.", "response_format": "wav"})
    not_audio = httpx.post(url, data={"body": body}, files={"prompt_audio": ("x.wav", b"not audio")}, headers=AUTH)
    assert not_audio.status_code == 400 and not_audio.json()["error"]["param"] == "prompt_audio"
    claimed = httpx.post(
        queue_app.url + "v1/audio/speech",
        json={"model": "tts-1", "voice": "preview", "input": "Hi.", "response_format": "pcm"},
        headers={**AUTH, "X-CosyVoice-Interface": "page"},
    )
    assert claimed.status_code == 400 and claimed.json()["error"]["param"] == "X-CosyVoice-Interface"
    both = json.dumps({"model": "tts-1", "input": "Hello.", "voice": "preview"})
    ambiguous = httpx.post(url, data={"body": both}, files={"prompt_audio": ("x.wav", b"RIFF")}, headers=AUTH)
    assert ambiguous.status_code == 400 and ambiguous.json()["error"]["code"] == "voice_ambiguous"
    assert not _prompt_folders(queue_app)


class _OtherServer(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_unreachable_and_not_an_app_are_told_apart(tmp_path, prompt):
    args = ["--prompt-wav", str(prompt), "--text", "Hello.", "--out", str(tmp_path / "o.wav")]
    command = [sys.executable, "-m", "cosyvoice_mac", "synth", *args]
    dead = f"http://127.0.0.1:{free_port()}"
    unreachable = _run([*command, "--server", dead])
    assert unreachable.returncode == 2 and f"no app answers at {dead}" in unreachable.stderr
    assert "connection refused" in unreachable.stderr and "Traceback" not in unreachable.stderr
    other = ThreadingHTTPServer(("127.0.0.1", 0), _OtherServer)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        stranger = _run([*command, "--server", f"http://127.0.0.1:{other.server_address[1]}"])
    finally:
        other.shutdown()
    assert stranger.returncode == 2 and "is not CosyVoice for Mac" in stranger.stderr, stranger.stderr
    assert "Traceback" not in stranger.stderr


def test_without_an_app_the_cli_runs_the_apps_engine_and_records_cli(tmp_path, prompt):
    outputs, out = tmp_path / "outputs", tmp_path / "here.wav"
    env = _cli_env(COSYVOICE_SERVER=f"http://127.0.0.1:{free_port()}")  # nobody listens there
    done = _run(
        [
            sys.executable,
            "-m",
            "cosyvoice_mac",
            "synth",
            "--model",
            "preview",
            "--prompt-wav",
            str(prompt),
            "--text",
            "No app is running, so the engine runs here.",
            "--seed",
            "5",
            "--outputs-dir",
            str(outputs),
            "--out",
            str(out),
        ],
        env,
    )
    assert done.returncode == 0, done.stderr
    assert "no app answers" in done.stderr and "running the model in this process" in done.stderr
    [sidecar_path] = outputs.glob("*.json")
    sidecar = json.loads(sidecar_path.read_text())
    assert sidecar["interface"] == "cli" and sidecar["seed"] == 5 and sidecar["model"]
    assert sidecar["file"] in done.stdout
    copied, saved = (soundfile.read(path, dtype="int16")[0] for path in (out, outputs / sidecar["file"]))
    assert np.array_equal(copied, saved) and np.abs(copied).max() > 100


def test_ctrl_c_stops_the_clis_own_engine_and_writes_nothing(tmp_path, prompt):
    outputs, out = tmp_path / "outputs", tmp_path / "never.wav"
    command = [sys.executable, "-m", "cosyvoice_mac", "synth", "--local", "--model", "preview"]
    command += ["--prompt-wav", str(prompt), "--text", BLOCKER_TEXT, "--outputs-dir", str(outputs), "--out", str(out)]
    cli = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT, env=_cli_env())
    seen = []
    for line in cli.stderr:  # "loaded ...", then a line per sentence once the job runs
        seen.append(line)
        if line.startswith("[1/"):
            break
    assert seen and seen[-1].startswith("[1/"), "".join(seen)
    cli.send_signal(signal.SIGINT)
    rest = cli.stderr.read()
    assert cli.wait(timeout=60) == 130, rest
    assert "cancelled (Ctrl-C)" in rest and "Traceback" not in rest
    assert not out.exists() and not list(outputs.glob("*.json")), "the cancelled job was saved"
