"""Upload names and the key lock, as ASGI middleware on a stand-in app: what goes in and out of the wire."""

from __future__ import annotations

import json

from cosyvoice_mac.api.key_lock import COOKIE, KeyLock
from cosyvoice_mac.api.upload_names import UploadNames
from tests.api.test_origin_guard import _run


def _drive(middleware, scope: dict, body: bytes = b"") -> list[dict]:
    """The messages sent back for one request with ``body``."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    _run(middleware(scope, receive, send))
    return sent


def _scope(method: str, path: str, headers: list | None = None) -> dict:
    return {"type": "http", "method": method, "path": path, "scheme": "http", "headers": headers or []}


def test_an_upload_answer_is_renamed_and_the_name_comes_back_as_the_path(tmp_path):
    folder = tmp_path / "gradio-temp"
    stored = str(folder / "ab12" / "voice.wav")
    seen = []

    async def gradio(scope, receive, send):
        message = await receive()
        seen.append((scope["path"], message["body"]))
        body = json.dumps([stored]).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"1")]})
        await send({"type": "http.response.body", "body": body})

    names = UploadNames(gradio, folder)
    sent = _drive(names, _scope("POST", "/gradio_api/upload"))
    assert json.loads(sent[1]["body"]) == ["upload/ab12/voice.wav"]
    assert dict(sent[0]["headers"])[b"content-length"] == str(len(sent[1]["body"])).encode()
    event = {"data": [{"path": "upload/ab12/voice.wav", "meta": {"_type": "gradio.FileData"}}, "upload/not-a-file"]}
    json_headers = [(b"content-type", b"application/json")]
    _drive(names, _scope("POST", "/gradio_api/queue/join", json_headers), json.dumps(event).encode())
    sent_on = json.loads(seen[-1][1])
    assert sent_on["data"] == [{"path": stored, "meta": {"_type": "gradio.FileData"}}, "upload/not-a-file"]
    _drive(names, _scope("GET", "/gradio_api/file=upload/ab12/voice.wav"))
    assert seen[-1][0] == "/gradio_api/file=" + stored


def test_a_name_that_would_leave_the_upload_folder_is_not_translated(tmp_path):
    names = UploadNames(None, tmp_path)
    for name in ("upload/../secret.txt", "upload/a/../../x", "upload/", "upload/a\\..\\b", "/etc/passwd"):
        assert names.path_of(name) is None, name
    assert names.name_of("/etc/passwd") == "/etc/passwd"


def test_the_key_lock_passes_the_key_or_its_cookie_and_nothing_else():
    passed = []

    async def inner(scope, receive, send):
        passed.append(scope["path"])

    lock = KeyLock(inner, "the-key")
    for headers in ([], [(b"authorization", b"Bearer wrong")], [(b"cookie", f"{COOKIE}=the-key".encode())]):
        sent = _drive(lock, _scope("GET", "/config", headers))
        assert sent[0]["status"] == 401 and passed == []
    _drive(lock, _scope("GET", "/config", [(b"authorization", b"Bearer the-key")]))
    _drive(lock, _scope("GET", "/", [(b"cookie", f"other=1; {COOKIE}={lock.cookie_value}".encode())]))
    _drive(lock, _scope("GET", "/v1/models"))  # /v1 answers for itself, in OpenAI's shape
    assert passed == ["/config", "/", "/v1/models"]


def test_each_port_has_its_own_key_cookie():
    """A browser sends every cookie of a host to each of its ports: two locked apps on one machine must not
    share (and overwrite) one cookie name, nor take each other's cookie."""
    passed = []

    async def inner(scope, receive, send):
        passed.append(scope["server"][1])

    apps = {port: KeyLock(inner, f"key-of-{port}") for port in (7860, 7861)}
    names = set()
    for port, lock in apps.items():
        login = {**_scope("POST", "/key-login"), "server": ("127.0.0.1", port)}
        sent = _drive(lock, login, f"key=key-of-{port}&next=/".encode())
        cookie = dict(sent[0]["headers"])[b"set-cookie"].decode()
        names.add(cookie.split("=", 1)[0])
    assert names == {f"{COOKIE}-7860", f"{COOKIE}-7861"}
    both = f"{COOKIE}-7860={apps[7860].cookie_value}; {COOKIE}-7861={apps[7861].cookie_value}"
    for port, lock in apps.items():
        _drive(lock, {**_scope("GET", "/config", [(b"cookie", both.encode())]), "server": ("127.0.0.1", port)})
    assert passed == [7860, 7861]  # each took its own
    other_only = f"{COOKIE}-7861={apps[7861].cookie_value}".encode()
    refused = _drive(apps[7860], {**_scope("GET", "/config", [(b"cookie", other_only)]), "server": ("127.0.0.1", 7860)})
    assert refused[0]["status"] == 401


def test_an_event_stream_names_result_files_by_name_not_path(tmp_path):
    folder = tmp_path / "gradio-temp"
    stored = f"{folder}/cd34/result.wav"
    event = {
        "msg": "process_completed",
        "output": {"data": [{"path": stored, "url": f"http://h:1/gradio_api/file={stored}"}]},
    }
    chunks = [f"data: {json.dumps(event)}\n\n".encode(), f'data: ["{tmp_path}/elsewhere.wav"]\n\n'.encode()]

    async def gradio(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    names = UploadNames(gradio, folder)
    for path in ("/gradio_api/queue/data", "/gradio_api/call/synthesize/abc123"):
        sent = _drive(names, _scope("GET", path))
        said = b"".join(message.get("body", b"") for message in sent[1:]).decode()
        assert str(folder) not in said, said
        sent_event = json.loads(said.split("\n\n")[0][len("data: ") :])
        value = sent_event["output"]["data"][0]
        assert value == {"path": "upload/cd34/result.wav", "url": "http://h:1/gradio_api/file=upload/cd34/result.wav"}
        assert f"{tmp_path}/elsewhere.wav" in said  # a path outside the folder is not Gradio's file: left alone
    assert names.path_of("upload/cd34/result.wav") == stored  # and the name serves it back
