"""Small rules that used to be written in several places, each now written once: the C heap's trim, the page's
byte sizes, reading ``Authorization: Bearer``, and the 413's sentence. Each test checks the rule's behaviour at
every door that uses it, and that no second copy has been written beside it."""

from __future__ import annotations

import ast
import asyncio
import sys
from pathlib import Path

import pytest

from cosyvoice_mac import heap
from cosyvoice_mac.api.auth import ApiAccess, bearer_key
from cosyvoice_mac.api.errors import ApiError, too_large_sentence
from cosyvoice_mac.api.key_lock import MAX_LOGIN_BODY, KeyLock
from cosyvoice_mac.api.server import BodyLimit
from cosyvoice_mac.api.upload_names import MAX_JSON_BODY, UploadNames
from cosyvoice_mac.request import MAX_UPLOAD_BYTES, VOICE_FILE_LIMITS
from cosyvoice_mac.webui.download_panel import progress_html
from cosyvoice_mac.webui.render import format_bytes, size_text
from cosyvoice_mac.wire import VOICES_IMPORT_PATH

PACKAGE = Path(__file__).resolve().parents[1] / "cosyvoice_mac"


def _modules_whose_code_holds(needle: str, whole: bool = False) -> set[str]:
    """The package's modules whose code (docstrings and comments aside) holds ``needle`` in a name or a string
    (``whole``: as the whole string)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            words = (
                node.attr
                if isinstance(node, ast.Attribute)
                else node.value
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                else None
            )
            if words is not None and (words == needle if whole else needle in words):
                found.add(path.relative_to(PACKAGE.parent).as_posix())
    return found


# -- the C heap's trim ------------------------------------------------------------------------------------


def test_the_heap_is_trimmed_on_linux_only_and_a_libc_without_trim_is_no_error(monkeypatch):
    calls = []

    class Libc:
        def malloc_trim(self, pad):
            calls.append(pad)

    monkeypatch.setattr(heap.ctypes, "CDLL", lambda name: Libc())
    monkeypatch.setattr(sys, "platform", "linux")
    heap.return_freed_heap()
    assert calls == [0]
    monkeypatch.setattr(sys, "platform", "darwin")
    heap.return_freed_heap()
    assert calls == [0]  # macOS gives freed pages back itself

    def no_glibc(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(heap.ctypes, "CDLL", no_glibc)
    heap.return_freed_heap()  # musl: nothing to trim, nothing raised


def test_the_page_the_worker_and_the_loader_trim_through_the_one_function(monkeypatch):
    assert _modules_whose_code_holds("malloc_trim") == {"cosyvoice_mac/heap.py"}
    from cosyvoice_mac.engine import worker_memory

    trims = []
    monkeypatch.setattr(worker_memory, "return_freed_heap", lambda: trims.append("worker"))
    worker_memory.release_memory()
    assert trims == ["worker"]


# -- byte sizes on the page -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "count, words",
    [(512, "512 B"), (1536, "1.5 KB"), (3 << 20, "3.0 MB"), (5 * (1 << 30) // 2, "2.5 GB"), (999.7, "999 B")],
)
def test_the_status_panel_and_the_download_panel_write_a_size_alike(count, words):
    assert size_text(count) == words
    assert format_bytes(int(count), "en") == size_text(int(count))

    class Job:
        version, source = "cosyvoice3", None

    progress = {"done": count, "total": None, "speed": count, "left": None, "resumed": 0}
    assert f"{words} of ?, {words}/s" in progress_html("en", Job(), progress).replace("&#x27;", "'")


def test_sizes_are_written_by_one_function():
    assert _modules_whose_code_holds("GB", whole=True) == {"cosyvoice_mac/webui/render.py"}


# -- Authorization: Bearer --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header, key",
    [
        (None, None),
        ("", None),
        ("Bearer the-key", "the-key"),
        ("bearer  the-key ", "the-key"),
        ("BEARER the-key", "the-key"),
        ("Bearer    ", None),  # a scheme without a key is no key (/v1 used to call it a wrong key)
        ("Basic the-key", None),
        ("the-key", None),
    ],
)
def test_v1_and_the_key_lock_read_the_header_alike(header, key):
    assert bearer_key(header) == key
    access = ApiAccess.from_settings("0.0.0.0", "the-key")

    class Request:
        headers = {} if header is None else {"authorization": header}

    try:
        access.check(Request())
        v1_passes, v1_code = True, None
    except ApiError as refused:
        v1_passes, v1_code = False, refused.code
    lock = KeyLock(None, "the-key")
    lock_passes = lock._holds_key({"server": ("127.0.0.1", 7860)}, dict(Request.headers))
    assert v1_passes is lock_passes is (key == "the-key")
    assert v1_code == (None if key == "the-key" else "missing_api_key" if key is None else "invalid_api_key")


def test_the_bearer_header_is_read_in_one_place():
    assert _modules_whose_code_holds("bearer") == {"cosyvoice_mac/api/auth.py"}


# -- the 413's sentence -----------------------------------------------------------------------------------


def _answer(middleware, scope: dict, body: bytes) -> tuple[int, bytes]:
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(middleware(scope, receive, send))
    return sent[0]["status"], b"".join(message.get("body", b"") for message in sent[1:])


def test_every_413_says_what_was_too_large_and_the_limit_in_the_same_words(tmp_path):
    assert too_large_sentence("the upload", 20 << 20) == "the upload is larger than the limit of 20 MB"
    assert too_large_sentence("the request body", 3 << 19) == "the request body is larger than the limit of 1.5 MB"
    assert too_large_sentence("the login form", 4096) == "the login form is larger than the limit of 4 KB"

    async def never(scope, receive, send):
        raise AssertionError("a body over the limit reached the app")

    scope = {"type": "http", "method": "POST", "path": "/v1/voices", "headers": [(b"content-length", b"999999999")]}
    status, body = _answer(BodyLimit(never, 20 << 20), scope, b"")
    assert status == 413 and too_large_sentence("the request body", 20 << 20).encode() in body

    json_body = [(b"content-type", b"application/json")]
    gradio = {"type": "http", "method": "POST", "path": "/gradio_api/queue/join", "headers": json_body}
    status, body = _answer(UploadNames(never, tmp_path), gradio, b"x" * (MAX_JSON_BODY + 1))
    assert status == 413 and body == too_large_sentence("the request body", MAX_JSON_BODY).encode()

    login = {"type": "http", "method": "POST", "path": "/key-login", "headers": []}
    status, body = _answer(KeyLock(never, "the-key"), login, b"key=" + b"k" * MAX_LOGIN_BODY)
    assert status == 413 and body == too_large_sentence("the login form", MAX_LOGIN_BODY).encode()


def test_the_413_sentence_is_written_once():
    assert _modules_whose_code_holds("is larger than") == {"cosyvoice_mac/api/errors.py"}


def test_the_voices_import_route_has_its_own_body_limit_the_voices_file_limit():
    async def routes(scope, receive, send):  # what the limit lets through is answered 200
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def answer(path: str, declared: int) -> tuple[int, bytes]:
        scope = {"type": "http", "method": "POST", "path": path, "headers": [(b"content-length", b"%d" % declared)]}
        return _answer(BodyLimit(routes, MAX_UPLOAD_BYTES), scope, b"")

    bigger_than_an_upload = MAX_UPLOAD_BYTES + 1  # a library: several recordings and their features
    assert answer(VOICES_IMPORT_PATH, bigger_than_an_upload)[0] == 200
    assert answer("/v1/voices", bigger_than_an_upload)[0] == 413  # every other upload keeps the one-file limit
    status, body = answer(VOICES_IMPORT_PATH, VOICE_FILE_LIMITS.file_bytes + 1)
    assert status == 413 and too_large_sentence("the request body", VOICE_FILE_LIMITS.file_bytes).encode() in body
