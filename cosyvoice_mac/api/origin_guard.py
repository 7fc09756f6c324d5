"""Refuses requests another web site makes the browser send to this app (cross-site uploads, DNS rebinding).

A browser adds ``Origin`` (or at least ``Referer``) to every request a page sends to another site, and a plain
HTML form may POST anywhere: without this check any page the user visits could push files into the upload
folder or queue jobs. So a state-changing request (anything but GET, HEAD, OPTIONS) whose Origin, or failing
that Referer, is not this server is refused with 403, unless the user allowed that origin. A request with
neither header is not a browser's cross-site request (curl, ``gradio_client``, the OpenAI client) and passes.

When the server listens on a loopback address, a request whose ``Host`` is not a loopback name is refused as
well, whatever its method: that is how a rebinding DNS name would reach it and read the page's files.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from urllib.parse import urlsplit

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class OriginPolicy:
    """Which origins besides the server's own may change state, and whether only loopback Host names count.

    ``allowed_origins`` holds ``scheme://host[:port]`` strings as the user gave them (``*`` allows all).
    """

    allowed_origins: frozenset[str] = field(default_factory=frozenset)
    loopback_only: bool = True

    @classmethod
    def for_server(cls, host: str, allowed_origins: list[str] | tuple[str, ...] = ()) -> OriginPolicy:
        return cls(frozenset(_normalise(origin) or origin for origin in allowed_origins), is_loopback(host))

    def refusal(
        self, method: str, host: str | None, origin: str | None, referer: str | None, scheme: str = "http"
    ) -> str | None:
        """Why this request is refused, or None when it may pass."""
        if self.loopback_only and not is_loopback(_hostname(host)):
            return (
                f"refused: this app listens on this computer only, and the request named the host {host!r}. "
                "Open it as http://127.0.0.1 or http://localhost"
            )
        if method.upper() in SAFE_METHODS:
            return None
        source = origin if origin is not None else _origin_of(referer)
        if source is None:
            return None
        if "*" in self.allowed_origins or _normalise(source) in self.allowed_origins:
            return None
        if host and _normalise(source) == _normalise(f"{scheme}://{host}"):
            return None
        return (
            f"refused: this request came from the web page at {source}, not from this app's own page, so it "
            "may not change anything here. If you trust that site, start the app with --allowed-origin "
            f"{source}"
        )


class OriginGuard:
    """ASGI middleware applying an :class:`OriginPolicy` to every HTTP request (owns nothing else)."""

    def __init__(self, app, policy: OriginPolicy):
        self.app = app
        self.policy = policy

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        method = scope.get("method", "GET")
        why = self.policy.refusal(
            method,
            headers.get("host"),
            headers.get("origin"),
            headers.get("referer"),
            scope.get("scheme", "http").replace("ws", "http"),
        )
        if why is None:
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        body = why.encode("utf-8")
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _hostname(host_header: str | None) -> str | None:
    """``127.0.0.1`` from ``127.0.0.1:7860``, ``::1`` from ``[::1]:7860``."""
    if not host_header:
        return None
    try:
        return urlsplit(f"//{host_header}").hostname
    except ValueError:
        return None


def _origin_of(referer: str | None) -> str | None:
    if not referer:
        return None
    parts = urlsplit(referer)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else "null"


def _normalise(origin: str) -> str | None:
    """``scheme://host:port`` in lower case with the port spelled out; None for ``null`` or junk."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    return f"{parts.scheme.lower()}://{parts.hostname.lower()}:{port}"
