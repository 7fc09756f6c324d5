"""The programmatic interfaces: an OpenAI-compatible HTTP API under ``/v1`` and the page's Gradio API.

Both are served by the page's own server (:func:`serve_page`): one process, one engine, one queue.
``engine_link`` is the only module here that knows the engine; a request becomes the contract's ``Request``
where it enters (``routes``, ``gradio_api``), once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cosyvoice_mac.api.server import RunningServer

# Loaded on first use, so a client of the server (the CLI imports ``wire``) pays for no FastAPI or Gradio.
_HOMES = {
    "KEY_VARIABLE": "wire",
    "ApiAccess": "auth",
    "is_loopback": "origin_guard",
    "EngineLink": "engine_link",
    "ApiSettings": "server",
    "RunningServer": "server",
    "build_server_app": "server",
}

__all__ = [
    "KEY_VARIABLE",
    "ApiAccess",
    "ApiSettings",
    "EngineLink",
    "RunningServer",
    "build_server_app",
    "is_loopback",
    "serve_page",
]


def serve_page(
    page,
    model_host,
    *,
    bind_host: str,
    port: int,
    api_key: str | None,
    max_queue: int,
    no_auth: bool = False,
    upload_limit_bytes: int,
    origin_policy=None,
    **gradio_options,
) -> RunningServer:
    """Add the public Gradio endpoints to ``page``, queue it, mount it with ``/v1`` and start serving.

    ``origin_policy`` (api.origin_guard) refuses cross-site requests to the page and ``/v1`` alike. Bound
    beyond this computer with ``api_key``, every route needs the key (api.key_lock); ``no_auth`` says the
    user opened such a server without one on purpose (the page then warns).
    ``gradio_options`` go to ``gr.mount_gradio_app`` (allowed paths, css, ...). Raises OSError when
    ``bind_host:port`` cannot be listened on.
    """
    from cosyvoice_mac.api.auth import ApiAccess
    from cosyvoice_mac.api.engine_link import EngineLink
    from cosyvoice_mac.api.gradio_api import attach_public_api
    from cosyvoice_mac.api.server import ApiSettings, RunningServer, build_server_app

    link = EngineLink(model_host)
    access = ApiAccess.from_settings(bind_host, api_key, no_auth)
    attach_public_api(page, link, access, concurrency=max_queue + 1)
    # Generate is not limited by Gradio (the engine's queue is the bound); this only backs up the other
    # queued events (saving a voice, transcribing), so it is far above what Generate ever leaves waiting.
    page.queue(max_size=max(64, max_queue * 4), api_open=False)
    app = build_server_app(
        page, link, ApiSettings(access, upload_limit_bytes), origin_policy=origin_policy, **gradio_options
    )
    return RunningServer(app, bind_host, port)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
