"""Upload answers name no server path: Gradio's ``/gradio_api/upload`` answers each stored file's absolute path
in the server's temporary folder (which shows the user's name, the folder layout, the temp folder's name);
this answers ``upload/<digest>/<file name>``, relative to the upload folder, instead.

Gradio's clients (the page's JS, ``gradio_client``) send that name back as the file value's ``path`` and build
``/gradio_api/file=<name>`` links from it, so both are turned back into the folder's path on the way in. A
name that would leave the folder (``..``) is left as it is: Gradio then refuses it as a file it never stored.

Results live in the same folder (Gradio moves every returned file into it), so the event streams
(``/gradio_api/queue/data``, ``/gradio_api/call/<event>/<id>``) name them the same way: each file value's
``path`` and its ``/gradio_api/file=`` ``url``, message by message as they are sent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from cosyvoice_mac.api.errors import too_large_sentence

UPLOAD_ROUTE = "/gradio_api/upload"
FILE_ROUTE = "/gradio_api/file="
GRADIO_PREFIX = "/gradio_api/"
EVENT_STREAMS = ("/gradio_api/queue/data", "/gradio_api/call/")  # GET: the server-sent events of results
NAME_PREFIX = "upload/"
MAX_JSON_BODY = 16 << 20  # an event's JSON names files, it never carries them: far above any real one


class UploadNames:
    """ASGI middleware translating between ``upload/<digest>/<name>`` and ``upload_dir``'s paths.

    ``upload_dir`` is Gradio's upload folder (``GRADIO_TEMP_DIR``); it owns nothing else."""

    def __init__(self, app, upload_dir: str | Path):
        self.app = app
        folder = Path(upload_dir)
        self.folder = folder
        self.prefixes = tuple(dict.fromkeys((str(folder), str(folder.resolve()))))

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        if path.startswith(FILE_ROUTE + NAME_PREFIX):
            real = self.path_of(path[len(FILE_ROUTE) :])
            if real is not None:
                target = FILE_ROUTE + real
                scope = {**scope, "path": target, "raw_path": quote(target).encode("latin-1")}
            return await self.app(scope, receive, send)
        if scope.get("method") == "GET" and path.startswith(EVENT_STREAMS):
            return await self.app(scope, receive, self._naming_stream(send))
        if scope.get("method") != "POST" or not path.startswith(GRADIO_PREFIX):
            return await self.app(scope, receive, send)
        if path == UPLOAD_ROUTE:
            return await self.app(scope, receive, self._renaming_answer(send))
        if b"json" in dict(scope.get("headers") or []).get(b"content-type", b""):
            return await self._with_paths_restored(scope, receive, send)
        return await self.app(scope, receive, send)

    def name_of(self, path: str) -> str:
        """``upload/<digest>/<name>`` for a path in the upload folder; any other path as it is."""
        for prefix in self.prefixes:
            if path.startswith(prefix + os.sep):
                return NAME_PREFIX + Path(path[len(prefix) + 1 :]).as_posix()
        return path

    def path_of(self, name: str) -> str | None:
        """The upload folder's path for ``upload/<digest>/<name>``; None for a name that would leave it."""
        if not name.startswith(NAME_PREFIX):
            return None
        parts = PurePosixPath(name[len(NAME_PREFIX) :]).parts
        if not parts or any(part in ("", ".", "..") or "\\" in part for part in parts):
            return None
        return str(self.folder.joinpath(*parts))

    def _renaming_answer(self, send):
        start: dict = {}
        chunks: list[bytes] = []

        async def renaming_send(message):
            if message["type"] == "http.response.start":
                start.update(message)
                return None
            if message["type"] != "http.response.body":
                return await send(message)
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return None
            body = b"".join(chunks)
            if start.get("status") == 200:
                body = self._renamed(body)
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        return renaming_send

    def _naming_stream(self, send):
        """``send`` for an event stream: each message's file paths in the folder become their names (a path
        split across two messages stays as it is; Gradio sends each event whole)."""
        streaming = [False]
        olds = [(f'"{prefix}{os.sep}'.encode(), f'"{NAME_PREFIX}'.encode()) for prefix in self.prefixes]
        olds += [
            (f"{FILE_ROUTE}{prefix}{os.sep}".encode(), f"{FILE_ROUTE}{NAME_PREFIX}".encode())
            for prefix in self.prefixes
        ]

        async def naming_send(message):
            if message["type"] == "http.response.start":
                kind = dict(message.get("headers") or []).get(b"content-type", b"")
                streaming[0] = kind.startswith(b"text/event-stream")
            elif message["type"] == "http.response.body" and streaming[0]:
                body = message.get("body", b"")
                for old, new in olds:
                    body = body.replace(old, new)
                message = {**message, "body": body}
            return await send(message)

        return naming_send

    def _renamed(self, body: bytes) -> bytes:
        try:
            stored = json.loads(body)
        except ValueError:
            return body
        if not isinstance(stored, list) or not all(isinstance(item, str) for item in stored):
            return body
        return json.dumps([self.name_of(item) for item in stored]).encode("utf-8")

    async def _with_paths_restored(self, scope, receive, send):
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left before sending its body
                return await self.app(scope, _replay(message, receive), send)
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > MAX_JSON_BODY:
                return await _too_large(send)
        if NAME_PREFIX.encode() in body:
            body = self._restored(body)
            headers = [(k, v) for k, v in scope.get("headers") or [] if k.lower() != b"content-length"]
            scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
        return await self.app(scope, _replay({"type": "http.request", "body": body}, receive), send)

    def _restored(self, body: bytes) -> bytes:
        try:
            data = json.loads(body)
        except ValueError:
            return body
        return json.dumps(self._restore(data)).encode("utf-8")

    def _restore(self, value):
        if isinstance(value, list):
            return [self._restore(item) for item in value]
        if not isinstance(value, dict):
            return value
        restored = {key: self._restore(item) for key, item in value.items()}
        path = restored.get("path")
        if isinstance(path, str) and (real := self.path_of(path)) is not None:
            restored["path"] = real
        return restored


def _replay(first: dict, receive):
    """A receive that gives ``first`` once, then hands over to the connection's own."""
    pending = [first]

    async def replayed():
        return pending.pop() if pending else await receive()

    return replayed


async def _too_large(send) -> None:
    body = too_large_sentence("the request body", MAX_JSON_BODY).encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})
