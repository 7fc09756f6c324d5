"""Browser tests: the real app (``python app.py``) on a free port with a tiny random-weight model, driven
by Playwright through an installed Chromium (Debian's ``/usr/bin/chromium``; never ``playwright install``).

One app serves the whole session (starting it loads gradio and warms the model up: tens of seconds on a
busy machine); each test gets a fresh browser page, that is a fresh session. ``preview_app`` is a second
app with no model folder at all (the preview voice stands in), started once, when a module first uses it.
A failing test leaves a full-page screenshot in ``$COSYVOICE_SCREENSHOT_DIR`` (default:
``<tmp>/cosyvoice-browser-screens``). The speech recogniser never reaches for the network here.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes.onnx_models import make_tiny_model_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_S = 240  # gradio import + model warm-up on two busy cores
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
BROWSER_CANDIDATES = (
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
    "/usr/bin/google-chrome",
    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
    "/Applications/Chromium.app/Contents/MacOS/Chromium",
)
MODEL_NAME = "Fun-CosyVoice3-0.5B"
SCREENSHOT_DIR = Path(
    os.environ.get("COSYVOICE_SCREENSHOT_DIR") or Path(tempfile.gettempdir()) / "cosyvoice-browser-screens"
)


def browser_executable() -> str:
    configured = os.environ.get("COSYVOICE_BROWSER")
    for candidate in (configured,) if configured else BROWSER_CANDIDATES:
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail(
        "no Chromium or Chrome found for the browser tests. Install it (Debian/Ubuntu: sudo apt-get "
        "install chromium; macOS: Google Chrome) or point COSYVOICE_BROWSER at one; bash run.sh test "
        "installs it on Debian/Ubuntu."
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class RunningApp:
    """The app under test: its URL and the folders it writes to."""

    url: str
    process: subprocess.Popen
    root: Path

    @property
    def outputs(self) -> Path:
        return self.root / "outputs"

    @property
    def log(self) -> Path:
        return self.root / "app.log"

    def output_files(self) -> set[str]:
        return {path.name for path in self.outputs.glob("*.wav")} if self.outputs.is_dir() else set()


def start_app(root: Path, models_dir: Path, extra: tuple[str, ...] = ()) -> RunningApp:
    port = free_port()
    log = open(root / "app.log", "w")
    env = {
        **os.environ,
        "OMP_WAIT_POLICY": "PASSIVE",
        "PYTHONUNBUFFERED": "1",
        "COSYVOICE_ASR_DOWNLOAD": os.environ.get("COSYVOICE_ASR_DOWNLOAD", "0"),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "app.py",
            "--port",
            str(port),
            "--models-dir",
            str(models_dir),
            "--outputs-dir",
            str(root / "outputs"),
            "--cache-dir",
            str(root / "cache"),
            "--device",
            "cpu",
            "--torch-threads",
            "1",
            *extra,
        ],
        cwd=REPO_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    app = RunningApp(f"http://127.0.0.1:{port}/", process, root)
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the app exited with {process.returncode} before serving:\n{app.log.read_text()}")
        try:
            with urllib.request.urlopen(app.url, timeout=5):
                return app
        except urllib.error.HTTPError:  # an answer, if a refusal (a server locked with a key): it serves
            return app
        except OSError:
            time.sleep(0.5)
    stop_app(app)
    pytest.fail(f"no page at {app.url} after {STARTUP_S} s:\n{app.log.read_text()}")


def stop_app(app: RunningApp) -> None:
    if app.process.poll() is None:
        app.process.send_signal(signal.SIGINT)
        try:
            app.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            app.process.kill()
            app.process.wait(timeout=10)


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=browser_executable(), args=BROWSER_ARGS, timeout=60_000)
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def app(tmp_path_factory):
    """The app with one tiny CosyVoice3 model (random weights: the audio is noise, every step is real)."""
    root = tmp_path_factory.mktemp("webui")
    make_tiny_model_dir("cosyvoice3", root / "models" / MODEL_NAME)
    running = start_app(root, root / "models")
    yield running
    stop_app(running)


@pytest.fixture(scope="session")
def preview_app(tmp_path_factory):
    """The app with an empty models folder: the preview voice (Piper + WORLD) stands in for CosyVoice. One for
    the session: the modules that use it change nothing of it but its outputs (each reads only its own)."""
    root = tmp_path_factory.mktemp("webui-preview")
    (root / "models").mkdir()
    running = start_app(root, root / "models")
    yield running
    stop_app(running)


NEWCOMER_VIEWPORT = {"width": 1366, "height": 900}  # a common laptop screen
PHONE_VIEWPORT = {"width": 390, "height": 844}  # a common phone


@contextmanager
def open_page(browser, app: RunningApp, request, viewport: dict | None = None):
    """A fresh browser page (a new session) on ``app``; screenshot on failure."""
    context = browser.new_context(viewport=viewport or {"width": 1400, "height": 1000}, locale="en-US")
    context.set_default_timeout(60_000)
    tab = context.new_page()
    tab.goto(app.url, timeout=120_000)
    tab.wait_for_selector("#cv-generate", timeout=120_000)
    yield tab
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOT_DIR / f"{request.node.name}.png"
        tab.screenshot(path=str(path), full_page=True)
        print(f"screenshot of the failure: {path}\napp log: {app.log}")
    context.close()


@pytest.fixture
def page(browser, app, request):
    with open_page(browser, app, request) as tab:
        yield tab


@pytest.fixture
def laptop_page(browser, app, request):
    """A fresh session in a 1366x900 window."""
    with open_page(browser, app, request, NEWCOMER_VIEWPORT) as tab:
        yield tab


@pytest.fixture
def phone_page(browser, app, request):
    """A fresh session in a 390x844 window."""
    with open_page(browser, app, request, PHONE_VIEWPORT) as tab:
        yield tab


@pytest.fixture
def preview_page(browser, preview_app, request):
    with open_page(browser, preview_app, request) as tab:
        yield tab


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(scope="session")
def prompt_wav(make_speech):
    return make_speech("This is the voice I would like you to copy, please.", seconds=4.0)


@pytest.fixture(scope="session")
def not_audio(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("uploads") / "notes.wav"
    path.write_text("These are meeting notes, not a recording.\n")
    return path
