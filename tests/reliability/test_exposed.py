"""A server opened to the network, from outside over raw HTTP (httpx) and gradio_client: with
``--host 0.0.0.0 --api-key K`` no door opens without the key (the page, the Gradio API, uploads, /v1), a
browser gets in through the key form's cookie, a DNS-rebinding page is refused on every bind, an
``--allowed-host`` name is admitted, an exposed bind without a key refuses to start unless ``--no-auth``
(which warns), and no upload answer names a server path."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import openai
import psutil
import pytest
from gradio_client import handle_file

from tests.reliability.server import JOB_S, POST_OFF, REPO_ROOT, AppServer, free_port

KEY = "exposed-" + uuid.uuid4().hex
REBIND = "rebind.evil.example"
ALLOWED = "studio.example"
STATUS = 3  # the Generate event's status line
UPLOAD = "/gradio_api/upload"


def _http(server: AppServer, **options) -> httpx.Client:
    return httpx.Client(base_url=server.url.rstrip("/"), trust_env=False, timeout=30, **options)


def _upload(http: httpx.Client, headers: dict | None = None) -> httpx.Response:
    return http.post(UPLOAD, files={"files": ("mine.bin", os.urandom(256))}, headers=headers or {})


def _temp_files(server: AppServer) -> set:
    return {path for path in server.temp_root.rglob("*") if path.is_file()}


@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    root = tmp_path_factory.mktemp("locked")
    server = AppServer(
        root,
        ["--host", "0.0.0.0", "--api-key", KEY, "--allowed-host", ALLOWED],
        headers={"Authorization": f"Bearer {KEY}"},
    ).start()
    yield server
    assert server.stop() == 0, server.log()[-3000:]


def test_without_the_key_no_door_opens(locked):
    before = _temp_files(locked)
    with _http(locked) as http:
        page = http.get("/", headers={"Accept": "text/html"})
        assert page.status_code == 401 and 'name="key"' in page.text and 'action="/key-login"' in page.text
        for path in ("/config", "/gradio_api/info", "/theme.css", "/gradio_api/queue/status"):
            assert http.get(path).status_code == 401, path
        call = http.post("/gradio_api/call/synthesize", json={"data": ["Not for you.", "preview", "", "", 1, 1.0]})
        assert call.status_code == 401 and "Authorization: Bearer" in call.text, call.text
        join = http.post("/gradio_api/queue/join", json={"data": ["en"], "fn_index": 0, "session_hash": "x"})
        assert join.status_code == 401
        assert _upload(http).status_code == 401
        assert _upload(http, {"Authorization": "Bearer guessed"}).status_code == 401
        http.cookies.set(f"cosyvoice-key-{locked.port}", KEY)  # the cookie holds a token made from the key, not it
        assert http.get("/").status_code == 401
        http.cookies.clear()
        models = http.get("/v1/models")
        assert models.status_code == 401 and models.json()["error"]["code"] == "missing_api_key"
    assert _temp_files(locked) == before  # nothing was stored


def test_with_the_key_the_gradio_api_uploads_and_the_page_s_events_work(locked, speech):
    client = locked.client()  # sends Authorization: Bearer KEY
    path, facts = client.predict(text="Key holders only.", voice="preview", api_name="/synthesize")
    assert (locked.outputs / facts["file"]).is_file() and open(path, "rb").read(4) == b"RIFF"
    answer = locked.call(
        client, "/generate", "en", handle_file(speech), "", "", "Uploaded, then spoken.", "cross_lingual", "", 2, 1.0,
        False, *POST_OFF, True,
    )  # fmt: skip
    assert answer[STATUS].startswith("✅ Done"), answer[STATUS]
    with _http(locked, headers=locked.headers) as http:
        stored = _upload(http)
        assert stored.status_code == 200
        assert http.get("/config").status_code == 200


def test_the_openai_client_is_served_with_the_key_and_refused_with_a_wrong_one(locked):
    url = locked.url
    wrong = httpx.get(url + "v1/models", headers={"Authorization": "Bearer nope"}, timeout=30)
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    client = openai.OpenAI(base_url=url + "v1", api_key=KEY, max_retries=0, timeout=300)
    speech = client.audio.speech.create(
        model="tts-1", voice="preview", input="Only for key holders.", response_format="wav"
    )
    assert speech.content[:4] == b"RIFF" and len(speech.content) > 24000
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url + "v1", api_key="wrong", max_retries=0).models.list()
    config = httpx.get(url + "config", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).text
    assert "Authorization: Bearer" in config  # the locked page's API view says how to send the key


def test_the_key_form_sets_a_cookie_the_page_then_opens_with(locked):
    own = locked.url.rstrip("/")
    with _http(locked) as http:
        wrong = http.post("/key-login", data={"key": "guess", "next": "/"}, headers={"Origin": own})
        assert wrong.status_code == 401 and "not this server's key" in wrong.text
        away = http.post("/key-login", data={"key": KEY, "next": "//evil.example/"}, headers={"Origin": own})
        assert away.status_code == 303 and away.headers["location"] == "/"
        http.cookies.clear()
        right = http.post("/key-login", data={"key": KEY, "next": "/?view=api"}, headers={"Origin": own})
        assert right.status_code == 303 and right.headers["location"] == "/?view=api"
        cookie = right.headers["set-cookie"]
        assert cookie.startswith(f"cosyvoice-key-{locked.port}=") and KEY not in cookie, cookie  # its port's own
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie, cookie
        page = http.get("/", headers={"Accept": "text/html"})
        assert page.status_code == 200 and 'name="key"' not in page.text
        assert "locked with its key" in http.get("/config").text
        assert _upload(http, {"Origin": own}).status_code == 200


# Each would send the browser to evil.example after the key: it drops tabs, newlines and carriage returns from a
# Location, reads "\" as "/" and follows a scheme.
AWAY = [
    "/\t/evil.example",
    "/\n/evil.example",
    "/\r/evil.example",
    "/\\evil.example",
    "/\\/evil.example",
    "\\\\evil.example",
    "//evil.example",
    "/ /evil.example",
    "https://evil.example/",
    "https:evil.example",
    "javascript:alert(1)",
]


def test_the_key_form_never_sends_the_browser_to_another_site(locked):
    """The form is served for any page asked for (its path becomes ``next``), then the right key answers 303 to
    ``next``: only a path on this server may come back, the rest goes to the page itself."""
    own = locked.url.rstrip("/")
    with _http(locked) as http:
        for path in ("/%09/evil.example", "/%0A/evil.example", "/%0D/evil.example", "/%5C/evil.example"):
            form = http.get(path, headers={"Accept": "text/html"})
            assert form.status_code == 401 and 'name="next" value="/"' in form.text, (path, form.text)
        for target in AWAY:
            http.cookies.clear()
            answer = http.post("/key-login", data={"key": KEY, "next": target}, headers={"Origin": own})
            assert answer.status_code == 303 and answer.headers["location"] == "/", (target, answer.headers)
        kept = http.post("/key-login", data={"key": KEY, "next": "/%09/here?x=1"}, headers={"Origin": own})
        assert kept.headers["location"] == "/%09/here?x=1"  # still encoded: a path on this server, kept


def test_a_rebinding_page_is_refused_on_an_exposed_server(locked):
    rebind = f"{REBIND}:{locked.port}"
    headers = {"Host": rebind, "Origin": f"http://{rebind}", **locked.headers}  # even with the key
    with _http(locked) as http:
        data = {"data": ["Rebound.", "preview", "", "", 1, 1.0]}
        call = http.post("/gradio_api/call/synthesize", json=data, headers=headers)
        assert call.status_code == 403 and "not a name this app answers to" in call.text, call.text
        assert "--allowed-host" in call.text
        assert http.get("/", headers=headers).status_code == 403
        assert http.get("/v1/models", headers=headers).status_code == 403


def _own_addresses() -> list[str]:
    return [
        entry.address
        for entries in psutil.net_if_addrs().values()
        for entry in entries
        if entry.family == socket.AF_INET and not entry.address.startswith("127.")
    ]


def test_an_allowed_host_name_and_this_machine_s_addresses_are_admitted(locked):
    with _http(locked, headers=locked.headers) as http:
        assert http.get("/config", headers={"Host": f"{ALLOWED}:{locked.port}"}).status_code == 200
        for address in _own_addresses():  # the server is bound to every interface: its own addresses reach it
            assert http.get("/config", headers={"Host": f"{address}:{locked.port}"}).status_code == 200
        assert http.get("/config", headers={"Host": f"203.0.113.9:{locked.port}"}).status_code == 403  # not ours
        assert http.get("/config", headers={"Host": f"other.example:{locked.port}"}).status_code == 403


def test_a_rebinding_page_is_refused_on_loopback(app):
    rebind = f"{REBIND}:{app.port}"
    with _http(app) as http:
        call = http.post(
            "/gradio_api/call/synthesize",
            json={"data": ["Rebound.", "preview", "", "", 1, 1.0]},
            headers={"Host": rebind, "Origin": f"http://{rebind}"},
        )
        assert call.status_code == 403 and "not a name this app answers to" in call.text, call.text


def test_an_upload_answer_names_no_server_path(app):
    with _http(app) as http:
        answer = _upload(http)
    assert answer.status_code == 200
    (stored,) = json.loads(answer.text)
    assert stored.startswith("upload/") and not os.path.isabs(stored), stored
    assert str(app.temp_root) not in answer.text and os.sep + "tmp" not in answer.text
    with _http(app) as http:  # the name serves the file back, as the page's audio player asks for it
        assert http.get(f"/gradio_api/file={stored}").status_code == 200


def test_a_result_in_the_event_stream_names_no_server_path_and_still_downloads(app):
    with _http(app) as http:
        started = http.post(
            "/gradio_api/call/synthesize", json={"data": ["Hi there.", "preview", "", "", 1, 1.0, False, None]}
        )
        stream = http.get(f"/gradio_api/call/synthesize/{started.json()['event_id']}", timeout=JOB_S).text
        assert "event: complete" in stream, stream
        assert str(app.temp_root) not in stream and str(app.root) not in stream, stream
        result = json.loads(stream.split("event: complete", 1)[1].split("data:", 1)[1].strip())[0]
        assert result["path"].startswith("upload/") and not os.path.isabs(result["path"]), result
        audio = http.get("/gradio_api/" + result["url"].split("/gradio_api/", 1)[1])
        assert audio.status_code == 200 and audio.content[:4] == b"RIFF"
    path, facts = app.client().predict("Hi again.", "preview", "", "", 1, 1.0, api_name="/synthesize")
    assert Path(path).read_bytes()[:4] == b"RIFF" and facts["duration_s"] > 0  # gradio_client downloads it


def _serve(root, *arguments: str) -> subprocess.Popen:
    env = {key: value for key, value in os.environ.items() if key != "COSYVOICE_API_KEY"}
    command = [sys.executable, "app.py", "--port", str(free_port()), "--model", "preview"]
    command += ["--models-dir", str(root / "models"), "--outputs-dir", str(root / "outputs"), *arguments]
    return subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_an_exposed_bind_without_a_key_refuses_to_start(tmp_path):
    process = _serve(tmp_path, "--host", "0.0.0.0", "--cache-dir", str(tmp_path / "cache"))
    try:
        output, _ = process.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail("an exposed server without a key started")
    assert process.returncode == 2, output
    assert "--api-key" in output and "--no-auth" in output and "Traceback" not in output, output
    assert not (tmp_path / "outputs").exists()  # nothing started


def test_no_auth_opens_an_exposed_server_with_a_warning(tmp_path):
    server = AppServer(tmp_path, ["--host", "0.0.0.0", "--no-auth"]).start(model_ready=False)  # the doors, not speech
    try:
        said_by = time.monotonic() + JOB_S  # printed once it serves, and the page may answer first
        while "Warning: --no-auth" not in server.log() and time.monotonic() < said_by:
            time.sleep(0.1)
        assert "Warning: --no-auth" in server.log()
        with _http(server) as http:
            config = http.get("/config")
            assert config.status_code == 200 and "Open to everyone" in config.text
            assert _upload(http).status_code == 200
    finally:
        assert server.stop() == 0
