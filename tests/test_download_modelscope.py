"""The ModelScope fallback of ``bash run.sh download``, against a stand-in ModelScope served on 127.0.0.1 (no
network, no ``modelscope`` package): Hugging Face unreachable, the files come from ModelScope's two HTTP calls,
exactly the inference files, resumed after a cut, refused when damaged, and said clearly when neither hub
answers."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cosyvoice_mac.download import MODELS, DownloadError, HubUnreachable, download_model
from cosyvoice_mac.pipeline.model_dir import inference_files

EXTRA_FILES = ("llm.rl.pt", "README.md")
REPO = MODELS["cosyvoice2"].modelscope


class StandInModelScope:
    """One repo (path -> bytes) behind ModelScope's file list and file calls; logs each file GET and its Range."""

    def __init__(self, files: dict[str, bytes]):
        self.files = files
        self.gets: list[tuple[str, str | None]] = []  # (file path, Range header)
        self.cut: dict[str, int] = {}  # file -> how many more GETs stop half-way
        self.listed_sha256: dict[str, str] = {}  # a listing that disagrees with the bytes
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def fetched(self) -> list[str]:
        return sorted({path for path, _ in self.gets})

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                parts = urllib.parse.urlparse(self.path)
                query = urllib.parse.parse_qs(parts.query)
                if parts.path == f"/api/v1/models/{REPO}/repo/files" and query.get("Recursive") == ["true"]:
                    entries = [{"Path": folder, "Type": "tree", "Size": 0} for folder in ("CosyVoice-BlankEN",)]
                    for path, data in hub.files.items():
                        digest = hub.listed_sha256.get(path, hashlib.sha256(data).hexdigest())
                        entries.append({"Path": path, "Type": "blob", "Size": len(data), "Sha256": digest})
                    return self._send(200, json.dumps({"Code": 200, "Data": {"Files": entries}}).encode())
                if parts.path == f"/api/v1/models/{REPO}/repo" and query.get("FilePath", [""])[0] in hub.files:
                    return self._file(query["FilePath"][0])
                self._send(404, b'{"Code": 404}')

            def _file(self, path: str):
                ranged = self.headers.get("Range")
                hub.gets.append((path, ranged))
                data = hub.files[path]
                start = int(ranged.split("=")[1].split("-")[0]) if ranged else 0
                body = data[start:]
                self.send_response(206 if ranged else 200)
                self.send_header("Content-Length", str(len(body)))
                if ranged:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if hub.cut.get(path, 0) > 0:
                    hub.cut[path] -= 1
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(body)

            def _send(self, status: int, body: bytes):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def __enter__(self) -> "StandInModelScope":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def _repo_files() -> dict[str, bytes]:
    files = {}
    for index, name in enumerate(list(inference_files("cosyvoice2")) + list(EXTRA_FILES)):
        size = (3 << 20) + index if name == "llm.pt" else 700 + 100 * index  # llm.pt: several read blocks
        pattern = f"{name}:".encode() + bytes(range(256))
        files[name] = (pattern * (size // len(pattern) + 1))[:size]
    return files


def _closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@pytest.fixture
def modelscope():
    with StandInModelScope(_repo_files()) as hub:
        yield hub


@pytest.fixture(autouse=True)
def no_hugging_face_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


def _download(modelscope, folder, **options):
    return download_model(
        "cosyvoice2", folder, endpoint=_closed_port_url(), modelscope_endpoint=modelscope.url, **options
    )


def test_without_hugging_face_the_inference_files_come_from_modelscope(modelscope, tmp_path, capsys):
    plans = []
    folder = _download(modelscope, tmp_path, on_plan=lambda source, sizes: plans.append((source, sizes)))
    assert folder == tmp_path / "CosyVoice2-0.5B"
    wanted = inference_files("cosyvoice2")
    assert modelscope.fetched() == sorted(wanted)
    for name in wanted:
        assert (folder / name).read_bytes() == modelscope.files[name], name
    assert not any((folder / name).exists() for name in EXTRA_FILES)
    assert not list(folder.rglob("*.incomplete"))
    assert plans == [("modelscope", {name: len(modelscope.files[name]) for name in wanted})]
    assert "Trying ModelScope instead" in capsys.readouterr().err
    from cosyvoice_mac.engine.host import find_models

    assert [(choice.name, choice.version) for choice in find_models(tmp_path)] == [("CosyVoice2-0.5B", "cosyvoice2")]


def test_a_cut_modelscope_download_is_resumed_by_the_next_run_from_where_it_stopped(modelscope, tmp_path):
    modelscope.cut["llm.pt"] = 1
    with pytest.raises(DownloadError, match="llm.pt.*[Rr]un the same command again to resume"):
        _download(modelscope, tmp_path, source="modelscope")
    partial = tmp_path / "CosyVoice2-0.5B" / "llm.pt.incomplete"
    kept = partial.stat().st_size
    assert 0 < kept < len(modelscope.files["llm.pt"]) and not (tmp_path / "CosyVoice2-0.5B" / "llm.pt").exists()
    modelscope.gets.clear()
    folder = _download(modelscope, tmp_path, source="modelscope")
    assert (folder / "llm.pt").read_bytes() == modelscope.files["llm.pt"] and not partial.exists()
    wanted = inference_files("cosyvoice2")
    assert modelscope.gets[0] == ("llm.pt", f"bytes={kept}-")  # only the rest was asked for
    assert modelscope.fetched() == sorted(wanted[wanted.index("llm.pt") :])  # what the first run finished is kept


def test_a_file_that_is_not_the_one_listed_is_refused_and_fetched_anew_next_time(modelscope, tmp_path):
    modelscope.listed_sha256["hift.pt"] = "0" * 64
    with pytest.raises(DownloadError, match="hift.pt arrived damaged.*fetch it anew"):
        _download(modelscope, tmp_path)
    folder = tmp_path / "CosyVoice2-0.5B"
    assert not (folder / "hift.pt").exists() and not (folder / "hift.pt.incomplete").exists()


def test_neither_hub_answering_is_said_plainly(tmp_path):
    with pytest.raises(HubUnreachable, match="cannot reach .* either"):
        download_model("cosyvoice2", tmp_path, endpoint=_closed_port_url(), modelscope_endpoint=_closed_port_url())
    with pytest.raises(HubUnreachable, match="cannot reach"):  # Hugging Face only, when asked for
        download_model("cosyvoice2", tmp_path, source="huggingface", endpoint=_closed_port_url())
