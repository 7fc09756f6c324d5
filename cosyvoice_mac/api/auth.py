"""Who may use ``/v1``: anyone on this computer by default; with another bind address, only key holders.

Bound to a loopback address, the API is open unless a key was set. Bound to any other address, a key
(``--api-key`` or ``COSYVOICE_API_KEY``) is required and sent as ``Authorization: Bearer <key>``;
without one configured, every ``/v1`` request is refused with the reason, so a server opened to the
network never serves the model to anyone who finds the port.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from dataclasses import dataclass

from fastapi import Request

from cosyvoice_mac.api.errors import ApiError
from cosyvoice_mac.wire import KEY_VARIABLE


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: only "localhost" is known to stay on this machine
        return False


@dataclass(frozen=True)
class ApiAccess:
    """The bind address and the key (None: no key configured)."""

    bind_host: str
    api_key: str | None = None

    @classmethod
    def from_settings(cls, bind_host: str, api_key: str | None) -> "ApiAccess":
        key = api_key if api_key is not None else os.environ.get(KEY_VARIABLE)
        return cls(bind_host, key.strip() if key and key.strip() else None)

    @property
    def key_required(self) -> bool:
        return self.api_key is not None or not is_loopback(self.bind_host)

    @property
    def refuses_all(self) -> bool:
        """Open to the network without a key: nothing under /v1 is served."""
        return self.api_key is None and not is_loopback(self.bind_host)

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
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            raise ApiError(
                401, "this API needs a key: send the header 'Authorization: Bearer <key>'", code="missing_api_key"
            )
        if not hmac.compare_digest(given.strip().encode("utf-8"), self.api_key.encode("utf-8")):
            raise ApiError(401, "the API key is not the one this server was started with", code="invalid_api_key")
