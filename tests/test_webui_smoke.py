"""`bash run.sh` serves the page on 127.0.0.1 only, says how to get a model when none is installed, and stops
cleanly on Ctrl-C, leaving no temporary folder behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from cosyvoice_mac.app import DOWNLOAD_COMMAND, TEMP_PREFIX, TITLE
from cosyvoice_mac.engine.host import find_models

REPO_ROOT = Path(__file__).resolve().parents[1]
STARTUP_SECONDS = 180  # importing gradio on a busy two-core machine is slow


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode("utf-8", "replace")


def _wait_for_page(server: subprocess.Popen, url: str) -> str:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the app exited with {server.returncode} before serving:\n{server.stdout.read()}")
        try:
            return _get(url)
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"no page at {url} after {STARTUP_SECONDS} s")


def test_app_serves_the_page_on_localhost_and_exits_cleanly_on_ctrl_c(tmp_path):
    port = _free_port()
    temp_root = tmp_path / "tmp"
    temp_root.mkdir()
    server = subprocess.Popen(
        [
            "bash",
            "run.sh",
            "--port",
            str(port),
            "--models-dir",
            str(tmp_path / "models"),
            "--outputs-dir",
            str(tmp_path / "outputs"),
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "TMPDIR": str(temp_root)},
    )
    try:
        page = _wait_for_page(server, f"http://127.0.0.1:{port}/")
        assert TITLE in page
        config = _get(f"http://127.0.0.1:{port}/config")
        assert "No model installed yet." in config and DOWNLOAD_COMMAND in config
        (gradio_temp,) = temp_root.glob(f"{TEMP_PREFIX}*")  # uploads go to a folder the app owns
        listening = [
            connection.laddr
            for connection in psutil.Process(server.pid).net_connections(kind="inet")
            if connection.status == psutil.CONN_LISTEN and connection.laddr.port == port
        ]
        assert listening and all(address.ip == "127.0.0.1" for address in listening)

        server.send_signal(signal.SIGINT)  # run.sh exec'd python, so this is the app itself
        output, _ = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert server.returncode == 0, output
    assert "Traceback" not in output, output
    assert f"running at http://127.0.0.1:{port}" in output
    assert DOWNLOAD_COMMAND in output
    assert not gradio_temp.exists()


def test_taken_port_is_reported_plainly(tmp_path):
    with socket.socket() as occupant:
        occupant.bind(("127.0.0.1", 0))
        occupant.listen()
        port = occupant.getsockname()[1]
        result = subprocess.run(
            ["bash", "run.sh", "--port", str(port), "--models-dir", str(tmp_path)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=STARTUP_SECONDS,
        )
    assert result.returncode == 1
    assert f"Cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_model_folders_are_recognised_by_their_config(tmp_path):
    (tmp_path / "Fun-CosyVoice3-0.5B").mkdir()
    (tmp_path / "Fun-CosyVoice3-0.5B" / "cosyvoice3.yaml").write_text("sample_rate: 24000\n")
    (tmp_path / "CosyVoice2-0.5B").mkdir()
    (tmp_path / "CosyVoice2-0.5B" / "cosyvoice2.yaml").write_text("sample_rate: 24000\n")
    (tmp_path / "half-downloaded").mkdir()
    (tmp_path / "notes.txt").write_text("not a model\n")
    assert [choice.name for choice in find_models(tmp_path)] == ["CosyVoice2-0.5B", "Fun-CosyVoice3-0.5B"]
    assert find_models(tmp_path / "absent") == []
