"""``bash run.sh download``: against a fake Hugging Face hub served on 127.0.0.1 (no network).

The fake hub answers the few calls huggingface_hub makes (paths-info, revision, tree, resolve with
HEAD/GET/Range) for one repo that holds the inference files plus files inference never reads, so
the tests see exactly which files were fetched, that a broken download resumes, and that a size
that disagrees with the hub's metadata is caught.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cosyvoice_mac.download import (
    MODELS,
    DownloadError,
    HubUnreachable,
    announced_size,
    download_model,
    verify_sizes,
)
from cosyvoice_mac.pipeline.model_dir import inference_files

REPO_ROOT = Path(__file__).resolve().parents[1]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
EXTRA_FILES = ("llm.rl.pt", "flow.decoder.estimator.fp32.onnx", "CosyVoice-BlankEN/model.safetensors", "README.md")


class FakeHub:
    """Owns one fake repo (path -> bytes) and the log of requests made to it."""

    def __init__(self, repo: str, files: dict[str, bytes]):
        self.repo, self.files = repo, files
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
        self.cuts: dict[str, int] = {}  # file -> how many more GETs stop half-way
        self.lie_about_size: dict[str, int] = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def downloaded(self) -> list[str]:
        """Files whose body was requested (GET on resolve)."""
        prefix = f"/{self.repo}/resolve/"
        return sorted(
            {
                urllib.parse.unquote(path[len(prefix) :]).split("/", 1)[1]
                for method, path, _ in self.requests
                if method == "GET" and path.startswith(prefix)
            }
        )

    def entry(self, path: str) -> dict:
        data = self.files[path]
        size = self.lie_about_size.get(path, len(data))
        return {
            "type": "file",
            "path": path,
            "size": size,
            "oid": hashlib.sha1(data).hexdigest(),
            "lfs": {"size": size, "oid": hashlib.sha256(data).hexdigest(), "pointerSize": 130},
        }

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode()
                self._log("POST")
                if f"/api/models/{hub.repo}/paths-info/" not in self.path:
                    return self._send(404, b'{"error": "not found"}')
                form = (
                    urllib.parse.parse_qs(body)
                    if "json" not in (self.headers.get("Content-Type") or "")
                    else json.loads(body)
                )
                paths = form.get("paths", [])
                self._json([hub.entry(p) for p in paths if p in hub.files])

            def do_HEAD(self):
                self._resolve(head=True)

            def do_GET(self):
                path = urllib.parse.urlparse(self.path).path
                if path.startswith(f"/api/models/{hub.repo}/revision/"):
                    self._log("GET")
                    return self._json(
                        {"id": hub.repo, "sha": COMMIT, "siblings": [{"rfilename": name} for name in hub.files]}
                    )
                if path.startswith(f"/api/models/{hub.repo}/tree/"):
                    self._log("GET")
                    folders = sorted({name.rsplit("/", 1)[0] for name in hub.files if "/" in name})
                    entries = [{"type": "directory", "path": folder, "oid": "0" * 40, "size": 0} for folder in folders]
                    return self._json(entries + [hub.entry(name) for name in sorted(hub.files)])
                self._resolve(head=False)

            def _resolve(self, head: bool):
                self._log("HEAD" if head else "GET")
                prefix = f"/{hub.repo}/resolve/"
                path = urllib.parse.unquote(urllib.parse.urlparse(self.path).path)
                if not path.startswith(prefix):
                    return self._send(404, b"", head=head)
                name = path[len(prefix) :].split("/", 1)[1]
                if name not in hub.files:
                    return self._send(404, b"", head=head, extra={"X-Error-Code": "EntryNotFound"})
                data = hub.files[name]
                headers = {
                    "X-Repo-Commit": COMMIT,
                    "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                    "Accept-Ranges": "bytes",
                }
                start = 0
                ranged = self.headers.get("Range")
                if ranged and not head:
                    start = int(ranged.split("=")[1].split("-")[0])
                    headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                body = data[start:]
                if not head and hub.cuts.get(name, 0) > 0:
                    hub.cuts[name] -= 1
                    self.send_response(206 if ranged else 200)
                    for key, value in {**headers, "Content-Length": str(len(body))}.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self._send(206 if ranged and not head else 200, body, head=head, extra=headers)

            def _log(self, method):
                hub.requests.append((method, urllib.parse.urlparse(self.path).path, self.headers.get("Range")))

            def _json(self, payload):
                self._send(
                    200,
                    json.dumps(payload).encode(),
                    extra={"Content-Type": "application/json", "X-Repo-Commit": COMMIT},
                )

            def _send(self, status, body: bytes, head=False, extra=None):
                self.send_response(status)
                for key, value in (extra or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

        return Handler

    def __enter__(self) -> "FakeHub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


BIG_FILE_BYTES = 21 * 1024 * 1024  # past huggingface_hub's 10 MiB write chunk, so a cut leaves a partial file


def _repo_files(version: str) -> dict[str, bytes]:
    files = {}
    for index, name in enumerate(list(inference_files(version)) + list(EXTRA_FILES)):
        size = BIG_FILE_BYTES + index if name in ("llm.pt", "flow.pt") else 1500 + 300 * index
        pattern = f"{name}:".encode() + bytes(range(256))
        files[name] = (pattern * (size // len(pattern) + 1))[:size]
    return files


@pytest.fixture
def hub():
    with FakeHub(MODELS["cosyvoice3"].huggingface, _repo_files("cosyvoice3")) as fake:
        yield fake


@pytest.fixture(autouse=True)
def quiet_hub(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no token, no cache of the real user
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)


def test_fetches_exactly_the_inference_files_into_the_model_folder(hub, tmp_path):
    folder = download_model("cosyvoice3", tmp_path / "models", endpoint=hub.url)
    assert folder == tmp_path / "models" / "Fun-CosyVoice3-0.5B"
    wanted = inference_files("cosyvoice3")
    assert hub.downloaded() == sorted(wanted)
    for name in wanted:
        assert (folder / name).read_bytes() == hub.files[name], name
    for name in EXTRA_FILES:
        assert not (folder / name).exists(), name
    # The folder is what the app looks for.
    from cosyvoice_mac.engine.host import find_models

    assert [(choice.name, choice.version) for choice in find_models(tmp_path / "models")] == [
        ("Fun-CosyVoice3-0.5B", "cosyvoice3")
    ]


def test_a_cut_download_resumes_where_it_stopped_and_a_finished_one_is_not_fetched_again(hub, tmp_path):
    hub.cuts["llm.pt"] = 1  # huggingface_hub resumes within the same run
    folder = download_model("cosyvoice3", tmp_path, endpoint=hub.url)
    assert (folder / "llm.pt").read_bytes() == hub.files["llm.pt"]
    ranges = [ranged for method, path, ranged in hub.requests if method == "GET" and path.endswith("/llm.pt")]
    assert ranges[0] is None and ranges[-1] and not ranges[-1].startswith("bytes=0-"), ranges

    hub.requests.clear()
    download_model("cosyvoice3", tmp_path, endpoint=hub.url)
    assert hub.downloaded() == []


def test_an_interrupted_run_is_resumed_by_the_next_one(hub, tmp_path):
    hub.cuts["flow.pt"] = 1000  # the connection keeps breaking: this run gives up
    with pytest.raises(DownloadError, match="[Rr]un the same command again"):
        download_model("cosyvoice3", tmp_path, endpoint=hub.url)
    hub.cuts.clear()
    hub.requests.clear()
    folder = download_model("cosyvoice3", tmp_path, endpoint=hub.url)
    assert (folder / "flow.pt").read_bytes() == hub.files["flow.pt"]
    # Files finished by the first run are kept; this huggingface_hub restarts an unfinished file from
    # its beginning in a new run (it resumes byte-wise only within one run, as the test above shows).
    assert hub.downloaded() == ["flow.pt"]
    assert not list(folder.rglob("*.incomplete"))


def test_a_size_that_disagrees_with_the_hub_is_reported(hub, tmp_path):
    hub.lie_about_size["hift.pt"] = len(hub.files["hift.pt"]) + 10
    with pytest.raises(DownloadError, match="hift.pt"):
        download_model("cosyvoice3", tmp_path, endpoint=hub.url)


def test_verify_sizes_names_missing_and_short_files(tmp_path):
    (tmp_path / "a.pt").write_bytes(b"12345")
    (tmp_path / "b.pt").write_bytes(b"123")
    verify_sizes(tmp_path, {"a.pt": 5})
    with pytest.raises(DownloadError) as raised:
        verify_sizes(tmp_path, {"a.pt": 5, "b.pt": 4, "c.pt": 1})
    assert "b.pt has 3 bytes, the hub says 4" in str(raised.value)
    assert "c.pt is missing" in str(raised.value)


def test_a_repo_missing_an_inference_file_is_refused_before_downloading(tmp_path):
    files = _repo_files("cosyvoice3")
    del files["campplus.onnx"]
    with FakeHub(MODELS["cosyvoice3"].huggingface, files) as hub:
        with pytest.raises(DownloadError, match="lacks campplus.onnx"):
            download_model("cosyvoice3", tmp_path, endpoint=hub.url)
        assert hub.downloaded() == []


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_offline_fails_fast_with_a_clear_message(tmp_path):
    started = time.monotonic()
    with pytest.raises(HubUnreachable, match="cannot reach"):
        download_model("cosyvoice2", tmp_path, source="huggingface", endpoint=f"http://127.0.0.1:{_closed_port()}")
    assert time.monotonic() - started < 30  # fails fast: no retries with back-off (those take minutes)
    assert not (tmp_path / "CosyVoice2-0.5B").exists() or not any((tmp_path / "CosyVoice2-0.5B").iterdir())


def test_the_command_line_says_what_to_do_offline_and_exits_1(tmp_path):
    env = {
        **os.environ,
        "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}",
        "HF_HOME": str(tmp_path / "hf"),
        "PYTHONPATH": str(REPO_ROOT),
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cosyvoice_mac.download",
            "cosyvoice3",
            "--models-dir",
            str(tmp_path),
            "--source",
            "huggingface",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 1, result.stderr
    assert "download failed: cannot reach http://127.0.0.1" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_sh_download_verb_sets_up_then_runs_the_downloader(tmp_path):
    """``bash run.sh download ARGS`` runs ``.venv/bin/python -m cosyvoice_mac.download ARGS`` (after set-up)."""
    import shutil

    shutil.copy(REPO_ROOT / "run.sh", tmp_path / "run.sh")
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/usr/bin/env bash\necho "$*" >>"$(dirname "$0")/../../calls.log"\n')
    python.chmod(0o755)
    result = subprocess.run(
        ["bash", "run.sh", "download", "cosyvoice2", "--source", "huggingface"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls[-1] == "-m cosyvoice_mac.download cosyvoice2 --source huggingface"
    assert any(call.startswith("-m pip install") for call in calls)  # set-up ran first


def test_unknown_model_and_source_are_refused(tmp_path):
    with pytest.raises(DownloadError, match="unknown model"):
        download_model("cosyvoice1", tmp_path)
    with pytest.raises(DownloadError, match="unknown source"):
        download_model("cosyvoice3", tmp_path, source="ftp")


def test_rl_fetches_llm_rl_pt_and_the_folder_then_prefers_it_only_because_it_was_asked(hub, tmp_path, monkeypatch):
    from cosyvoice_mac.pipeline.model_dir import ModelFolder
    from cosyvoice_mac.webui.render import render_status

    def llm_file(path):  # the fake hub's yaml is not yaml: the folder without parsing it
        return ModelFolder(path=path, version="cosyvoice3", config={}).llm_file

    monkeypatch.delenv("COSYVOICE_LLM", raising=False)
    plain = download_model("cosyvoice3", tmp_path / "plain", endpoint=hub.url)
    assert not (plain / "llm.rl.pt").exists() and llm_file(plain) == "llm.pt"
    folder = download_model("cosyvoice3", tmp_path / "rl", endpoint=hub.url, rl=True)
    assert hub.downloaded().count("llm.rl.pt") == 1
    assert (folder / "llm.rl.pt").read_bytes() == hub.files["llm.rl.pt"]
    assert llm_file(folder) == "llm.rl.pt"
    # A folder that merely holds the file (a full hub snapshot) keeps llm.pt: never silently.
    (plain / "llm.rl.pt").write_bytes(hub.files["llm.rl.pt"])
    assert llm_file(plain) == "llm.pt"
    monkeypatch.setenv("COSYVOICE_LLM", "base")
    assert llm_file(folder) == "llm.pt"
    monkeypatch.setenv("COSYVOICE_LLM", "rl")
    assert llm_file(plain) == "llm.rl.pt"
    note = render_status("en", {"state": "ready", "llm_weights": "llm.rl.pt"})
    assert "llm.rl.pt" in note and "--rl" in note and "COSYVOICE_LLM=base" in note


def test_rl_is_refused_for_cosyvoice2(tmp_path):
    with pytest.raises(DownloadError, match="--rl is for cosyvoice3"):
        download_model("cosyvoice2", tmp_path, rl=True)


def test_the_pipeline_loads_llm_rl_pt_when_it_is_the_choice(tmp_path, monkeypatch):
    import torch

    from cosyvoice_mac.pipeline import CosyVoice
    from tests.fakes.onnx_models import make_tiny_model_dir

    folder = make_tiny_model_dir("cosyvoice3", tmp_path)
    state = torch.load(folder / "llm.pt", map_location="cpu", weights_only=True)
    torch.save(
        {key: value * 2 if value.is_floating_point() else value for key, value in state.items()}, folder / "llm.rl.pt"
    )
    monkeypatch.setenv("COSYVOICE_LLM", "rl")
    rl = CosyVoice.from_pretrained(folder, device="cpu")
    monkeypatch.setenv("COSYVOICE_LLM", "base")
    base = CosyVoice.from_pretrained(folder, device="cpu")
    assert (rl.llm_weights, base.llm_weights) == ("llm.rl.pt", "llm.pt") and rl.model_id != base.model_id
    torch.testing.assert_close(rl.networks.llm.speech_embedding.weight, 2 * base.networks.llm.speech_embedding.weight)


def test_the_announced_size_is_the_hubs_sum_and_downloads_nothing(hub):
    files = _repo_files("cosyvoice3")
    expected = sum(len(files[name]) for name in inference_files("cosyvoice3"))  # llm.rl.pt only when asked for
    assert announced_size("cosyvoice3", endpoint=hub.url) == expected
    assert hub.downloaded() == []


def test_the_page_buttons_show_each_models_size_once_the_hub_said_it(hub, tmp_path, monkeypatch):
    from cosyvoice_mac.webui import download_panel

    downloads = download_panel.Downloads(tmp_path, endpoint=hub.url)
    assert download_panel.button_label("en", "cosyvoice3", downloads) == "Download Fun-CosyVoice3-0.5B"
    size = downloads.size("cosyvoice3")
    files = _repo_files("cosyvoice3")
    assert size == sum(len(files[name]) for name in inference_files("cosyvoice3"))
    label = download_panel.button_label("en", "cosyvoice3", downloads)
    assert label.startswith("Download Fun-CosyVoice3-0.5B (") and label.endswith(" MB)")
    assert download_panel.button_label("zh", "cosyvoice3", downloads).startswith("下载 Fun-CosyVoice3-0.5B (")


def test_without_the_hub_the_button_has_no_size_and_is_not_asked_again_at_once(tmp_path, monkeypatch):
    from cosyvoice_mac.webui import download_panel

    asked = []
    real = download_panel.announced_size
    monkeypatch.setattr(
        download_panel,
        "announced_size",
        lambda version, endpoint: asked.append(version) or real(version, endpoint=endpoint),
    )
    downloads = download_panel.Downloads(tmp_path, endpoint=f"http://127.0.0.1:{_closed_port()}")
    assert downloads.size("cosyvoice2") is None and downloads.size("cosyvoice2") is None
    assert asked == ["cosyvoice2"]
    assert download_panel.button_label("en", "cosyvoice2", downloads) == "Download CosyVoice2-0.5B"


def test_the_page_says_an_offline_download_plainly_in_both_languages(tmp_path):
    """Issue 50 item 5: no escaped entities, no errno, no variable name and no "run the command again" on a page
    that has a button; it says Hugging Face was tried, then ModelScope, and what to press."""
    from cosyvoice_mac.webui.download_panel import DownloadCallbacks, Downloads, failure_html

    page = DownloadCallbacks()
    dead_huggingface, dead_modelscope = (f"http://127.0.0.1:{_closed_port()}" for _ in range(2))
    page.downloads = Downloads(tmp_path, endpoint=dead_huggingface, modelscope_endpoint=dead_modelscope)
    said = {"en": [update[0] for update in page.download("en", "cosyvoice2")][-1]}
    said["zh"] = failure_html("zh", page.downloads.current.error)  # the same failure, the other language
    assert "Hugging Face" in said["en"] and "then ModelScope" not in said["zh"]
    assert "neither Hugging Face nor ModelScope answered" in said["en"] and "press the download button" in said["en"]
    assert "先后尝试了 Hugging Face 和 ModelScope" in said["zh"] and "下载按钮" in said["zh"]
    for message in said.values():
        for leftover in ("&#", "Errno", "HF_", "command", "127.0.0.1"):
            assert leftover not in message, (leftover, message)


def test_a_failure_s_reason_is_plain_words_and_a_resumable_one_says_what_to_press():
    import urllib.error

    import httpx

    from cosyvoice_mac.download import DownloadError, _plain
    from cosyvoice_mac.webui.download_panel import failure_html

    assert _plain(urllib.error.URLError(OSError(-2, "Name or service not known"))) == "Name or service not known"
    assert _plain(httpx.ConnectError("[Errno 111] Connection refused")) == "Connection refused"
    assert _plain(OSError(28, "No space left on device")) == "No space left on device"
    error = DownloadError("could not write into models/Fun_x [1] (No space left on device)", resumable=True)
    assert str(error).endswith("Run the same command again to resume.")
    shown = failure_html("en", error)
    assert "models/Fun_x [1]" in shown and "&#" not in shown and "command" not in shown
    assert "Press the download button again: it resumes where it stopped." in shown
    assert "再按一次下载按钮" in failure_html("zh", error)
