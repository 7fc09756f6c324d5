"""Locks every door of a server opened to the network with its key: the page, its assets, the Gradio API,
uploads and files (``/v1`` keeps its own check, ``api.auth.ApiAccess``, which answers in OpenAI's shape).

A request passes with ``Authorization: Bearer <key>`` (``gradio_client`` sends it with ``headers=``, curl
with ``-H``) or with the page's key cookie. A browser gets the cookie once: any page it opens without one
answers a small key form; posting the right key to ``/key-login`` sets an HttpOnly, SameSite=Strict cookie
and goes back to the page. The cookie holds an HMAC of the key, never the key itself, and lapses when the
server is restarted with another key.

Why a cookie of our own and not Gradio's ``auth=``: Gradio's login knows users and passwords, not a bearer
key, so API clients would need a second way in; its checks cover Gradio's routes only (not ``/v1``, not a
route added beside it); and its cookie is ``SameSite=None; Secure`` (dropped by browsers on plain http) with
an unsecured copy that any site's form post carries. One middleware in front of everything, with a cookie
every same-origin request of Gradio's JS client carries (fetch, the queue's event stream, ``<audio src>``),
locks all routes, present and future, the same way.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import html
import re
from urllib.parse import parse_qs

from cosyvoice_mac.api.auth import bearer_key, keys_match
from cosyvoice_mac.api.errors import too_large_sentence

API_PREFIX = "/v1"
LOGIN_PATH = "/key-login"
COOKIE = "cosyvoice-key"  # the name's stem: each port has its own cookie (cookie_name)
FAILED_LOGIN_DELAY_S = 1.0  # slows a guesser down; a person who mistyped barely notices
MAX_LOGIN_BODY = 4096
SAFE_TARGET = re.compile(r"/(?!/)[!-~]*")  # a path on this server: "!"-"~" is printable ASCII, no space
NEEDS_KEY = (
    "this server is open to the network and locked with a key: send the header 'Authorization: Bearer <key>' "
    "with the key it was started with (--api-key), or open the page in a browser and enter the key"
)


class KeyLock:
    """ASGI middleware: refuses every request outside ``/v1`` that holds neither the key nor the page's key
    cookie (401; a browser's page request gets the key form), and serves the form's ``/key-login``."""

    def __init__(self, app, api_key: str):
        self.app = app
        self.api_key = api_key
        self.cookie_value = hmac.new(api_key.encode("utf-8"), b"cosyvoice-page", hashlib.sha256).hexdigest()

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or _under(scope["path"], API_PREFIX):
            return await self.app(scope, receive, send)
        if scope["type"] == "http" and scope["path"] == LOGIN_PATH:
            return await self._login(scope, receive, send)
        headers = _headers(scope)
        if self._holds_key(scope, headers):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        if scope.get("method") in ("GET", "HEAD") and "text/html" in headers.get("accept", ""):
            return await _answer(send, 401, _form(_local_target(scope)), "text/html")
        await _answer(send, 401, NEEDS_KEY, "text/plain", [(b"www-authenticate", b'Bearer realm="cosyvoice-mac"')])

    def _holds_key(self, scope, headers: dict[str, str]) -> bool:
        given = bearer_key(headers.get("authorization"))
        if given is not None and keys_match(given, self.api_key):
            return True
        cookie = _cookies(headers.get("cookie", "")).get(cookie_name(scope))
        return cookie is not None and keys_match(cookie, self.cookie_value)

    async def _login(self, scope, receive, send):
        if scope["method"] != "POST":
            return await _answer(send, 200, _form("/"), "text/html")
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if len(body) > MAX_LOGIN_BODY:
                return await _answer(send, 413, too_large_sentence("the login form", MAX_LOGIN_BODY), "text/plain")
            if not message.get("more_body"):
                break
        fields = parse_qs(body.decode("utf-8", "replace"))
        given = (fields.get("key") or [""])[0].strip()
        target = _safe_target((fields.get("next") or ["/"])[0])
        if not given or not keys_match(given, self.api_key):
            await asyncio.sleep(FAILED_LOGIN_DELAY_S)
            return await _answer(send, 401, _form(target, wrong=True), "text/html")
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        cookie = f"{cookie_name(scope)}={self.cookie_value}; Path=/; HttpOnly; SameSite=Strict{secure}"
        await _answer(
            send, 303, "", "text/plain", [(b"location", target.encode("utf-8")), (b"set-cookie", cookie.encode())]
        )


def cookie_name(scope) -> str:
    """The key cookie's name for the port this request came in on: a browser sends a host's cookies to every
    port of it, so two apps on one machine (each with its own key) would otherwise overwrite each other's."""
    server = scope.get("server") or ()
    return f"{COOKIE}-{server[1]}" if len(server) > 1 and server[1] else COOKIE


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


def _headers(scope) -> dict[str, str]:
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers") or []}


def _cookies(header: str) -> dict[str, str]:
    pairs = (item.strip().partition("=") for item in header.split(";"))
    return {name: value for name, _, value in pairs if name}


def _local_target(scope) -> str:
    query = scope.get("query_string", b"").decode("latin-1")
    return _safe_target(scope["path"] + (f"?{query}" if query else ""))


def _safe_target(target: str) -> str:
    """Only a path on this server, else ``/``: one leading ``/``, then printable ASCII without spaces or
    backslashes. Browsers drop tabs and newlines from a ``Location`` and read ``\\`` as ``/``, so
    ``/<TAB>/evil.example`` or ``/\\evil.example`` would become ``//evil.example``: another site."""
    if not SAFE_TARGET.fullmatch(target) or "\\" in target:
        return "/"
    return target


async def _answer(send, status: int, text: str, content_type: str, extra: list | None = None) -> None:
    body = text.encode("utf-8")
    headers = [
        (b"content-type", f"{content_type}; charset=utf-8".encode()),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _form(target: str, wrong: bool = False) -> str:
    """The key form, in both of the page's languages (it is shown before the page and its language menu)."""
    warning = '<p class="wrong">That is not this server\'s key. / 密钥不对。</p>' if wrong else ""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>CosyVoice for Mac: key</title>
<style>body{{font-family:system-ui,sans-serif;max-width:28rem;margin:4rem auto;padding:0 1rem}}
input{{font-size:1rem;padding:.4rem;width:100%;box-sizing:border-box;margin:.4rem 0}}
button{{font-size:1rem;padding:.4rem 1rem}}.wrong{{color:#b00020}}</style></head>
<body><h1>CosyVoice for Mac</h1>
<p>This server is open to the network and locked with a key. Enter the key it was started with
(<code>--api-key</code>).</p>
<p>此服务器对网络开放，需要密钥。请输入启动时设置的密钥（<code>--api-key</code>）。</p>
{warning}<form method="post" action="{LOGIN_PATH}">
<input type="hidden" name="next" value="{html.escape(target, quote=True)}">
<label for="key">Key / 密钥</label>
<input id="key" name="key" type="password" autocomplete="current-password" autofocus required>
<button type="submit">Open / 打开</button></form></body></html>
"""
