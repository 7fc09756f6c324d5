"""From outside, over raw HTTP: nothing outside outputs/ and the page's temporary folder can be read, uploads
stay in the temporary folder, another site's page cannot change anything, and the server listens on
loopback only."""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import psutil
import pytest
from gradio_client import handle_file

from tests.reliability.server import POST_OFF

SECRET = "not-for-the-web-" + uuid.uuid4().hex


def _request(app, path: str, method: str = "GET", headers: dict | None = None, body: bytes | None = None):
    """(status, body) of one raw request; ``path`` is sent as given (no normalising)."""
    request = urllib.request.Request(app.url.rstrip("/") + path, data=body, method=method, headers=headers or {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=20) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _upload_body(name: str, content: bytes) -> tuple[bytes, dict]:
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + content
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def _temp_files(app) -> set[Path]:
    return {path for path in app.temp_root.rglob("*") if path.is_file()}


@pytest.fixture(scope="module")
def secrets(app, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside") / "secret.txt"
    outside.write_text(SECRET)
    app.outputs.mkdir(parents=True, exist_ok=True)
    link = app.outputs / "link-to-secret.wav"
    if not link.exists():
        link.symlink_to(outside)
    (app.cache / "secret.txt").write_text(SECRET)
    (app.root / "models").mkdir(exist_ok=True)
    (app.root / "models" / "secret.txt").write_text(SECRET)
    return {
        "outside": outside,
        "link": link,
        "cache": app.cache / "secret.txt",
        "models": app.root / "models" / "secret.txt",
    }


def _file_paths(app, secrets) -> list[str]:
    paths = []
    for target in (secrets["outside"], secrets["cache"], secrets["models"], secrets["link"], Path("/etc/passwd")):
        paths += [str(target), urllib.parse.quote(str(target)), urllib.parse.quote(str(target), safe="")]
    traversal = f"{app.outputs}/../cache/secret.txt"
    paths += [
        traversal,
        traversal.replace("..", "%2e%2e"),
        traversal.replace("/", "%2f"),
        f"{app.temp_root}/../cache/secret.txt",
        f"{app.outputs}/%2e%2e/%2e%2e/{secrets['outside'].name}",
        "../" * 12 + "etc/passwd",
        "~/.ssh/id_rsa",
        f"{app.outputs}/..%5c..%5ccache%5csecret.txt",
    ]
    return paths


def test_nothing_outside_outputs_and_the_temp_folder_can_be_read(app, secrets):
    attempts = 0
    for path in _file_paths(app, secrets):
        for prefix in ("/gradio_api/file=", "/file=", "/gradio_api/file/"):
            status, body = _request(app, prefix + path)
            attempts += 1
            assert SECRET.encode() not in body and b"root:" not in body, (prefix + path, status)
    assert attempts >= 60


def test_a_result_in_outputs_is_served(app, client, speech):
    answer = app.call(
        client,
        "/generate",
        "en",
        handle_file(speech),
        "",
        "",
        "Serve me.",
        "cross_lingual",
        "",
        3,
        1.0,
        False,
        *POST_OFF,
        True,
    )
    name = answer[3].split("Saved as ")[1].split(".wav")[0] + ".wav"
    status, body = _request(app, "/gradio_api/file=" + str(app.outputs / name))
    assert status == 200 and body[:4] == b"RIFF"


def test_the_voice_library_is_not_served(app):
    """Its list names every voice with its transcript and hash; the page plays a recording from a copy."""
    voices = app.cache / "voices"
    recording = voices / ("e" * 64 + ".wav")
    recording.write_bytes(b"RIFF" + os.urandom(64))
    listed = [voices / "voices.json", voices / "voices.json.bak", recording]
    assert all(path.is_file() for path in listed)
    for path in listed:
        for prefix in ("/gradio_api/file=", "/file="):
            for spelled in (str(path), urllib.parse.quote(str(path))):
                status, body = _request(app, prefix + spelled)
                assert status in (403, 404) and path.read_bytes() not in body, (prefix + spelled, status)


def _answer_headers(app, path: str, headers: dict) -> dict:
    request = urllib.request.Request(app.url.rstrip("/") + path, headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=20) as response:
            return {name.lower(): value for name, value in response.headers.items()}
    except urllib.error.HTTPError as error:
        return {name.lower(): value for name, value in error.headers.items()}


@pytest.mark.parametrize("origin", ["http://localhost:9999", "http://127.0.0.1:1", "null", "http://evil.example"])
def test_a_page_on_another_origin_is_not_let_read_the_answers(app, origin):
    """Gradio grants any loopback origin the right to read with the user's cookies; only the app's own keeps it."""
    for path in ("/config", "/gradio_api/info"):
        answer = _answer_headers(app, path, {"Origin": origin})
        assert "access-control-allow-origin" not in answer and "access-control-allow-credentials" not in answer, (
            path,
            answer,
        )
        preflight = urllib.request.Request(
            app.url.rstrip("/") + path,
            method="OPTIONS",
            headers={"Origin": origin, "Access-Control-Request-Method": "GET"},
        )
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(preflight, timeout=20) as response:
            assert response.headers.get("access-control-allow-origin") is None, path
    own = app.url.rstrip("/")
    assert _answer_headers(app, "/config", {"Origin": own}).get("access-control-allow-origin") == own


@pytest.mark.parametrize("name", ["../../escape.txt", "..\\..\\escape.txt", "/etc/escape.txt", "a/../../escape.txt"])
def test_an_upload_cannot_name_its_way_out_of_the_temp_folder(app, name):
    body, headers = _upload_body(name, b"upload")
    status, answer = _request(app, "/gradio_api/upload", "POST", headers, body)
    assert status in (200, 400, 403), (status, answer)
    for place in (app.root, app.root.parent, Path("/etc")):
        assert not (place / "escape.txt").exists()
    if status == 200:
        for stored in __import__("json").loads(answer):  # upload/<digest>/<name>, in the temp folder
            marker, digest, file_name = stored.split("/")
            assert marker == "upload" and file_name not in ("..", "."), stored
            assert [folder for folder in app.temp_root.glob(f"*/{digest}") if (folder / file_name).is_file()]


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Referer": "http://evil.example/attack.html"},
        {"Origin": "http://127.0.0.1:1"},
    ],
    ids=["foreign_origin", "null_origin", "foreign_referer", "other_local_port"],
)
def test_another_site_s_page_cannot_upload_or_queue(app, headers):
    before = _temp_files(app)
    body, form = _upload_body("pushed.bin", os.urandom(4096))
    status, answer = _request(app, "/gradio_api/upload", "POST", {**form, **headers}, body)
    assert status == 403 and b"refused" in answer, (status, answer)
    assert _temp_files(app) == before  # nothing stored
    status, _ = _request(
        app,
        "/gradio_api/queue/join",
        "POST",
        {"Content-Type": "application/json", **headers},
        b'{"data": ["en"], "fn_index": 0, "session_hash": "x"}',
    )
    assert status == 403


@pytest.mark.parametrize(
    "headers", [{}, {"Origin": "{own}"}, {"Referer": "{own}?view=api"}], ids=["no_origin", "own_origin", "own_referer"]
)
def test_the_own_page_and_non_browser_clients_may_upload(app, headers):
    own = app.url.rstrip("/")
    headers = {key: value.format(own=own) for key, value in headers.items()}
    body, form = _upload_body("mine.bin", b"x" * 100)
    status, answer = _request(app, "/gradio_api/upload", "POST", {**form, **headers}, body)
    assert status == 200, (status, answer)


def test_a_rebinding_host_name_is_refused(app):
    status, body = _request(app, "/", headers={"Host": f"evil.example:{app.port}"})
    assert status == 403 and b"not a name this app answers to" in body
    assert _request(app, "/", headers={"Host": f"localhost:{app.port}"})[0] == 200


def test_the_server_listens_on_loopback_only(app):
    listening = [
        conn.laddr
        for conn in psutil.Process(app.process.pid).net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    ]
    assert listening and all(address.ip in ("127.0.0.1", "::1") for address in listening), listening
