"""The ``glossary`` command through the running app (``GET`` and ``PUT /v1/glossary``): the app's glossary is
the one its worker applies, wherever the app keeps its cache (``--cache-dir``), so list, import and export
read and write that one, not this machine's default cache. The CSV is checked here first, as locally."""

from __future__ import annotations

import httpx

from cosyvoice_mac.cli.remote import PROBE_TIMEOUT_S, AppClient, AppError
from cosyvoice_mac.frontend.glossary import GlossaryEntry, check_entries
from cosyvoice_mac.wire import GLOSSARY_PATH

TIMEOUT_S = 60.0


def glossary_in_app(app: AppClient) -> tuple[GlossaryEntry, ...]:
    """The app's glossary. AppError with the app's reason (e.g. its glossary file is damaged, and how to mend it)."""
    answer = _ask(app, "GET")
    try:
        rows = answer.json()["data"]
        entries = [GlossaryEntry(row["key"], row["replacement"], row.get("language", "all")) for row in rows]
        return check_entries(entries)
    except (ValueError, KeyError, TypeError) as error:
        raise AppError(f"the app at {app.url} sent a glossary this command cannot read ({error})") from None


def replace_glossary_in_app(app: AppClient, entries: tuple[GlossaryEntry, ...]) -> int:
    """Store ``entries`` (checked) as the app's whole glossary; how many the app kept."""
    body = {"entries": [{"key": e.key, "replacement": e.replacement, "language": e.language} for e in entries]}
    return len(_ask(app, "PUT", json=body).json()["data"])


def _ask(app: AppClient, method: str, **content) -> httpx.Response:
    try:
        timeout = httpx.Timeout(PROBE_TIMEOUT_S, read=TIMEOUT_S)
        answer = app.http.request(method, GLOSSARY_PATH, timeout=timeout, **content)
    except httpx.TransportError as error:
        raise AppError(f"the connection to the app at {app.url} broke off ({type(error).__name__})") from None
    if answer.status_code != 200:
        raise app.explain(answer)
    return answer
