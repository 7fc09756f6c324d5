"""The app under test: ``python app.py`` in a subprocess on a free loopback port, with the preview voice (no
model download), its own outputs, cache and temporary folders, and a way to fill its outputs disk."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from cosyvoice_mac.engine.start_method import looks_like_worker

REPO_ROOT = Path(__file__).resolve().parents[2]
INJECT = Path(__file__).resolve().parent / "inject"
STARTUP_S = 180.0  # gradio and the preview voice on a busy two-core machine
JOB_S = 60.0  # the most one preview job may take here, waiting included
MAX_QUEUE = 4
HANG_TIMEOUT_S = 3.0
TEMP_MAX_AGE_S = 8
# The last inputs of Generate and the long-form jobs: the post-processing controls (trim, normalise, target),
# then the sampling controls (on, then temperature, top-p, top-k, repetition window): off, as by default.
POST_OFF = (False, False, -16.0, False, 1.0, 0.8, 25, 10)
# Generate's last inputs after them: the saved voice's style menu, empty (its own recording), the take check's box
# (None: as the app is set), and "Keep this seed" ticked (the seed given is the one spoken).
GENERATE_OFF = (*POST_OFF, None, None, True)
# /synthesize's last inputs after loudness_lufs: the four sampling values (none: the model's own), then the style.
SYNTHESIZE_TAIL = (None, None, None, None, "")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class FullDisk:
    """Fills the outputs folder: a real small tmpfs when this machine lets us mount one, else a simulated
    ENOSPC (inject/sitecustomize.py) switched by a flag file."""

    folder: Path
    flag: Path
    mounted: bool = False
    filler: Path | None = None

    @classmethod
    def prepare(cls, folder: Path, flag: Path) -> FullDisk:
        folder.mkdir(parents=True, exist_ok=True)
        disk = cls(folder, flag)
        if sys.platform.startswith("linux") and os.geteuid() == 0 and shutil.which("mount"):
            result = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(folder)],
                capture_output=True,
                timeout=20,
                check=False,
            )
            disk.mounted = result.returncode == 0
        return disk

    @property
    def kind(self) -> str:
        return "tmpfs of 64 MiB" if self.mounted else "simulated ENOSPC"

    def fill(self, leave: int = 0) -> None:
        """No room left, or (``leave`` bytes, a mounted disk only) room for small files but not a WAV."""
        if not self.mounted:
            self.flag.touch()
            return
        self.filler = self.folder / "filler.bin"
        with open(self.filler, "wb") as handle:
            try:
                while True:
                    handle.write(b"\0" * 2**20)
                    handle.flush()
            except OSError:
                pass
        if leave:
            with open(self.filler, "r+b") as handle:
                handle.truncate(max(self.filler.stat().st_size - leave, 0))

    def free(self) -> None:
        self.flag.unlink(missing_ok=True)
        if self.filler is not None:
            self.filler.unlink(missing_ok=True)
            self.filler = None

    def release(self) -> None:
        self.free()
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.folder)], capture_output=True, timeout=20, check=False)
            self.mounted = False


@dataclass
class AppServer:
    """One running app. ``root`` holds outputs/, cache/, models/ (empty: the preview voice speaks), tmp/."""

    root: Path
    extra_args: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)  # what every request of ours sends (the key)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def outputs(self) -> Path:
        return self.root / "outputs"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def temp_root(self) -> Path:
        return self.root / "tmp"

    def start(self, disk: FullDisk | None = None, model_ready: bool = True) -> AppServer:
        """Until the page answers and (``model_ready``) the model is ready."""
        self.temp_root.mkdir(parents=True, exist_ok=True)
        self.log_path = self.root / "server.log"
        env = {
            **os.environ,
            "TMPDIR": str(self.temp_root),
            "OMP_WAIT_POLICY": "PASSIVE",
            "GRADIO_ANALYTICS_ENABLED": "False",
            "NO_PROXY": "127.0.0.1,localhost",
            # The page's events stay callable (undocumented) so gradio_client can press its buttons here.
            "COSYVOICE_UNDOCUMENTED_EVENTS": "1",
            "PYTHONPATH": os.pathsep.join([str(INJECT), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        if disk is not None and not disk.mounted:
            env.update(COSYVOICE_TEST_FULL_DISK_FLAG=str(disk.flag), COSYVOICE_TEST_FULL_DISK_DIR=str(disk.folder))
        command = [
            sys.executable,
            "app.py",
            "--port",
            str(self.port),
            "--model",
            "preview",
            "--models-dir",
            str(self.root / "models"),
            "--outputs-dir",
            str(self.outputs),
            "--cache-dir",
            str(self.cache),
            "--max-queue",
            str(MAX_QUEUE),
            "--torch-threads",
            "1",
            "--hang-timeout",
            str(HANG_TIMEOUT_S),
            "--temp-max-age",
            str(TEMP_MAX_AGE_S),
            *self.extra_args,
        ]
        self.process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=env,
            stdout=self.log_path.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the app exited with {self.process.returncode}:\n{self.log()}")
            try:
                urllib.request.urlopen(urllib.request.Request(self.url, headers=self.headers), timeout=5).read()
                break
            except (OSError, urllib.error.URLError):
                time.sleep(0.5)
        else:
            raise RuntimeError(f"no page at {self.url} after {STARTUP_S} s:\n{self.log()}")
        if model_ready:
            self.wait_ready()
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def client(self):
        from gradio_client import Client

        return Client(self.url, verbose=False, download_files=str(self.root / "downloads"), headers=self.headers)

    def call(self, client, endpoint: str, *args, timeout: float = JOB_S):
        """One event through the page's API, bounded in time."""
        return client.submit(*args, api_name=endpoint).result(timeout=timeout)

    def status(self, client) -> str:
        return self.call(client, "/status_panel", "en")

    def wait_ready(self, timeout: float = STARTUP_S) -> None:
        client = self.client()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "**State:** ready" in self.status(client) and self.worker_pid():
                return
            time.sleep(0.3)
        raise RuntimeError(f"the model did not become ready: {self.status(client)}")

    def worker_pid(self) -> int | None:
        """The model worker among the server's children (named so on Linux; else spawned, not the resource tracker)."""
        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return None
        for child in children:
            try:
                command = " ".join(child.cmdline())
                if looks_like_worker(child.name(), command) and child.status() != "zombie":
                    return child.pid
            except psutil.Error:
                continue
        return None

    def rss(self, pid: int) -> int:
        return psutil.Process(pid).memory_info().rss

    def stop(self) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait(10)
