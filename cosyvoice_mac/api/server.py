"""One server for the page and the APIs: a FastAPI app with ``/v1`` first and the Gradio page mounted at
the root, run by uvicorn on one port, in one process, in front of one engine and its one queue.

Every request passes, outermost first: the origin guard (foreign sites, names the server does not answer
to), the key lock (a server open to the network), upload names (no server path in an upload's answer),
the public-endpoints rule of Gradio's REST route, the ``/v1`` body limit.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI
from fastapi import Request as HttpRequest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Mount

from cosyvoice_mac.api.auth import ApiAccess
from cosyvoice_mac.api.convert_routes import build_convert_router
from cosyvoice_mac.api.engine_link import EngineLink
from cosyvoice_mac.api.errors import ApiError, install_error_handlers, too_large, too_large_sentence
from cosyvoice_mac.api.gradio_api import PUBLIC_ENDPOINTS
from cosyvoice_mac.api.key_lock import KeyLock
from cosyvoice_mac.api.longform_routes import BATCH_PATH, build_longform_router
from cosyvoice_mac.api.routes import build_router
from cosyvoice_mac.api.sessions import SessionBound
from cosyvoice_mac.api.upload_names import UploadNames
from cosyvoice_mac.api.voice_file_routes import build_voice_file_router
from cosyvoice_mac.frontend.glossary import glossary_store
from cosyvoice_mac.request import MAX_BATCH_UPLOAD_BYTES, MAX_UPLOAD_BYTES, VOICE_FILE_LIMITS
from cosyvoice_mac.wire import VOICES_IMPORT_PATH

API_PREFIX = "/v1"
GRADIO_CALL_PREFIX = "/gradio_api/call/"
MAX_SPEECH_BODY_BYTES = 1 << 20  # a speech request is JSON text: 1 MB holds far more than the text limit
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ApiSettings:
    """How the API is exposed: who may use it and how large an upload may be."""

    access: ApiAccess
    upload_limit_bytes: int = MAX_UPLOAD_BYTES


class BodyLimit:
    """ASGI middleware: refuses a ``/v1`` body over its limit with a 413, by its declared length at once,
    else as soon as the bytes received pass the limit (chunked uploads)."""

    def __init__(self, app, upload_limit_bytes: int):
        self.app, self.upload_limit_bytes = app, upload_limit_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(API_PREFIX):
            return await self.app(scope, receive, send)
        limit = MAX_SPEECH_BODY_BYTES if scope["path"].endswith("/speech") else self.upload_limit_bytes
        if scope["path"] == BATCH_PATH:  # several recordings at once; the route holds each to the one-file limit
            limit = max(limit, MAX_BATCH_UPLOAD_BYTES)
        if scope["path"] == VOICES_IMPORT_PATH:  # a voices file: several recordings and their features
            limit = max(limit, VOICE_FILE_LIMITS.file_bytes)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            response = too_large("the request body", limit).response()
            return await response(scope, receive, send)
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message.get("type") == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise StarletteHTTPException(413, too_large_sentence("the request body", limit))
            return message

        await self.app(scope, limited_receive, send)


class PublicGradioCalls:
    """ASGI middleware: Gradio's REST route ``/gradio_api/call/<name>`` answers only the public endpoints.
    (The page itself triggers its events through the queue, by index, never through this route.)"""

    def __init__(self, app, public: tuple[str, ...]):
        self.app, self.public = app, public

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(GRADIO_CALL_PREFIX):
            name = scope["path"][len(GRADIO_CALL_PREFIX) :].split("/", 1)[0]
            if name not in self.public:
                response = ApiError(
                    404, f"there is no public endpoint {name!r}; see /gradio_api/info", code="not_found"
                ).response()
                return await response(scope, receive, send)
        return await self.app(scope, receive, send)


def build_server_app(page, link: EngineLink, settings: ApiSettings, origin_policy=None, **gradio_options) -> FastAPI:
    """The combined app: ``/v1`` routes, then the page (``gradio_options`` go to ``gr.mount_gradio_app``)."""
    import gradio as gr
    from gradio.utils import get_upload_folder

    app = FastAPI(title="CosyVoice for Mac", docs_url=None, redoc_url=None, openapi_url=None)
    install_error_handlers(app, API_PREFIX)
    app.add_middleware(BodyLimit, upload_limit_bytes=settings.upload_limit_bytes)
    app.add_middleware(PublicGradioCalls, public=PUBLIC_ENDPOINTS)
    app.add_middleware(SessionBound, page=page)  # Gradio's per-session memory: bounded (api/sessions.py)
    app.add_middleware(UploadNames, upload_dir=get_upload_folder())
    if settings.access.locks_every_door:  # open to the network: no door without the key
        app.add_middleware(KeyLock, api_key=settings.access.api_key)
    if origin_policy is not None:  # outermost: a cross-site request is refused before anything reads it
        from cosyvoice_mac.api.origin_guard import OriginGuard

        app.add_middleware(OriginGuard, policy=origin_policy)
    app.include_router(build_router(link, settings.access, settings.upload_limit_bytes))
    app.include_router(build_convert_router(link, settings.access, settings.upload_limit_bytes))
    app.include_router(build_voice_file_router(link, settings.access, settings.upload_limit_bytes))
    config = link.host.config
    glossary = glossary_store(config.cache_dir)
    app.include_router(
        build_longform_router(link, settings.access, Path(config.outputs_dir), glossary, settings.upload_limit_bytes)
    )
    app.include_router(_no_such_route(settings.access))
    return gr.mount_gradio_app(app, page, path="", **gradio_options)


def _no_such_route(access) -> APIRouter:
    """Last under /v1: a path no route takes is answered in OpenAI's shape, not by the page's mount (which would
    answer Gradio's bare ``{"detail": "Not Found"}``)."""
    router = APIRouter(prefix=API_PREFIX, dependencies=[Depends(access.check)])

    @router.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
    async def no_such_route(rest: str, request: HttpRequest):
        raise ApiError(404, f"there is no route {request.method} {request.url.path}", code="not_found")

    return router


class RunningServer:
    """Owns the listening socket and the uvicorn server thread. Raises OSError when the address is taken
    or not this machine's (before anything else starts)."""

    def __init__(self, app: FastAPI, host: str, port: int):
        import uvicorn

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind((host.strip("[]"), port))
            self.socket.listen(128)
        except OSError:
            self.socket.close()
            raise
        self.host, self.port = host, self.socket.getsockname()[1]
        self.app = app
        self.loop: asyncio.AbstractEventLoop | None = None
        self.server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
        )
        serve = self.server.serve

        async def serve_and_remember_the_loop(sockets=None):
            self.loop = asyncio.get_running_loop()
            await serve(sockets)

        self.server.serve = serve_and_remember_the_loop
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, name="cosyvoice-server", daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started and self.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not self.server.started:
            self.close()
            raise OSError(f"the server did not start on {host}:{port}")

    @property
    def url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}/"

    def close(self) -> None:
        """Stop serving. The page's open streams (each tab's heartbeat) are told to end first: uvicorn would
        otherwise wait for them, then cancel them with a traceback in the console."""
        self._end_streams()
        self.server.should_exit = True
        self.thread.join(10.0)
        self.socket.close()

    def _end_streams(self) -> None:
        """Set the stop event of each mounted app that has one (Gradio's, which its heartbeat streams wait on),
        in the server's own event loop (an asyncio.Event is not set safely from another thread)."""
        events = [getattr(route.app, "stop_event", None) for route in self.app.routes if isinstance(route, Mount)]
        events = [event for event in events if isinstance(event, asyncio.Event)]
        if not events or self.loop is None or self.loop.is_closed():
            return
        for event in events:
            self.loop.call_soon_threadsafe(event.set)
