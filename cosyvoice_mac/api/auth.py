"""Who may use ``/v1``: anyone on this computer by default; with another bind address, only key holders.

Bound to a loopback address, the API is open unless a key was set. Bound to any other address, a key
(``--api-key`` or ``COSYVOICE_API_KEY``) is required and sent as ``Authorization: Bearer <key>``;
without one configured, every ``/v1`` request is refused with the reason, so a server opened to the
network never serves the model to anyone who finds the port, unless the user opened it on purpose
(``--no-auth``). The rest of the server (the page, the Gradio API, uploads) is locked by the same key
in ``api.key_lock``.
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass

from fastapi import Request

from cosyvoice_mac.api.errors import ApiError
from cosyvoice_mac.api.origin_guard import is_loopback
from cosyvoice_mac.wire import KEY_VARIABLE

__all__ = ["ApiAccess", "bearer_key", "is_loopback", "keys_match"]


def bearer_key(authorization: str | None) -> str | None:
    """The key an ``Authorization: Bearer <key>`` header holds (the scheme in any case, the key stripped), or
    None when the header is missing, names another scheme or holds no key. ``/v1`` and the key lock read it so."""
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return given.strip() or None


def keys_match(given: str, expected: str) -> bool:
    """Constant-time comparison, so the time of a refusal tells nothing about how much of a guess was right."""
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


@dataclass(frozen=True)
class ApiAccess:
    """The bind address, the key (None: no key configured) and whether the user opened the server to
    everyone on purpose (``--no-auth``)."""

    bind_host: str
    api_key: str | None = None
    no_auth: bool = False

    @classmethod
    def from_settings(cls, bind_host: str, api_key: str | None, no_auth: bool = False) -> "ApiAccess":
        key = api_key if api_key is not None else os.environ.get(KEY_VARIABLE)
        return cls(bind_host, key.strip() if key and key.strip() else None, no_auth)

    @property
    def exposed(self) -> bool:
        """Listening beyond this computer."""
        return not is_loopback(self.bind_host)

    @property
    def key_required(self) -> bool:
        return self.api_key is not None or (self.exposed and not self.no_auth)

    @property
    def locks_every_door(self) -> bool:
        """Exposed with a key: the page, the Gradio API and uploads need it too, not only /v1."""
        return self.exposed and self.api_key is not None

    @property
    def open_to_everyone(self) -> bool:
        """Exposed without a key because the user said --no-auth: every door is open (the page warns)."""
        return self.exposed and self.api_key is None and self.no_auth

    @property
    def refuses_all(self) -> bool:
        """Exposed without a key and without --no-auth: nothing under /v1 is served (the app refuses to
        start so; this covers a server built by other code)."""
        return self.exposed and self.api_key is None and not self.no_auth

    def check(self, request: Request) -> None:
        """FastAPI dependency: 401/403 in OpenAI's error shape unless the request may pass."""
        if not self.key_required:
            return
        if self.refuses_all:
            raise ApiError(
                403,
                f"this server listens on {self.bind_host}, beyond this computer, and has no API key, "
                f"so the API is off; restart it with --api-key KEY (or set {KEY_VARIABLE})",
                code="api_key_not_configured",
            )
        given = bearer_key(request.headers.get("authorization"))
        if given is None:
            raise ApiError(
                401, "this API needs a key: send the header 'Authorization: Bearer <key>'", code="missing_api_key"
            )
        if not keys_match(given, self.api_key):
            raise ApiError(401, "the API key is not the one this server was started with", code="invalid_api_key")
