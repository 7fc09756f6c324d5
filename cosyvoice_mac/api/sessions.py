"""Keeps the memory Gradio holds per session bounded.

Gradio makes a session state for every session hash it sees (a copy of the page's configuration, about
200 KB for this page) and keeps it until 10,000 sessions exist. A browser tab is one session, but every
call of the Gradio API without a session of its own (``curl`` on ``/gradio_api/call/synthesize``, as the
README shows) is a new one, so the page's process grew by ~12 MB per 100 such jobs, without end.

:class:`SessionBound` is an ASGI middleware that knows which sessions are a page open in a browser (their
``/gradio_api/heartbeat/<session>`` stream is connected) and, at most every ``SWEEP_EVERY_S``, forgets the
state of the others once they are idle: kept are the open pages, every session with an event waiting or
running, and the ``MAX_IDLE_SESSIONS`` idle ones used last (for at most ``IDLE_TTL_S``), so a client that
calls the page's events one after another keeps its session between calls. A forgotten session's queue of
event messages goes too, once it has been quiet for ``MESSAGES_KEPT_S`` (Gradio keeps 2,000 of them), and so
does every finished session's empty queue and empty set of event ids: Gradio keeps the set of a session whose
events all ended (emptied, never removed), which made every session look busy, so none was ever forgotten and
the page's process kept ~250 KB per REST call. A tab closed and reopened after its state was forgotten starts
afresh, as after a restart.
"""

from __future__ import annotations

import datetime
import threading
import time

HEARTBEAT_PREFIX = "/gradio_api/heartbeat/"
MAX_IDLE_SESSIONS = 4
IDLE_TTL_S = 300.0
SWEEP_EVERY_S = 2.0
MESSAGES_KEPT_S = 60.0  # a REST caller reads its result's messages after its call: they wait that long at least


class SessionBound:
    """ASGI middleware (see the module docstring). ``page`` is the mounted gr.Blocks: its ``state_holder``
    (Gradio's session states) and its queue's pending events are read when a sweep runs."""

    def __init__(self, app, page, max_idle: int = MAX_IDLE_SESSIONS, idle_ttl_s: float = IDLE_TTL_S):
        self.app, self.page = app, page
        self.max_idle, self.idle_ttl_s = max_idle, idle_ttl_s
        self._open_pages: dict[str, int] = {}  # session -> heartbeat streams connected now
        self._lock = threading.Lock()
        self._last_sweep = 0.0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        if not path.startswith(HEARTBEAT_PREFIX):
            try:
                return await self.app(scope, receive, send)
            finally:
                self.maybe_sweep()
        session = path[len(HEARTBEAT_PREFIX) :].split("/", 1)[0]
        with self._lock:
            self._open_pages[session] = self._open_pages.get(session, 0) + 1
        try:
            return await self.app(scope, receive, send)
        finally:
            with self._lock:
                left = self._open_pages.pop(session, 1) - 1
                if left > 0:
                    self._open_pages[session] = left

    def maybe_sweep(self) -> None:
        now = time.monotonic()
        if now - self._last_sweep >= SWEEP_EVERY_S:
            self._last_sweep = now
            self.sweep()

    def sweep(self) -> list[str]:
        """Forget the idle sessions past the bound; the ones forgotten."""
        holder = getattr(self.page, "state_holder", None)
        queue = getattr(self.page, "_queue", None)
        if holder is None:
            return []
        event_ids = getattr(queue, "pending_event_ids_session", None) or {}
        pending = {session for session, ids in list(event_ids.items()) if ids}  # ended events leave an empty set
        with self._lock:
            open_pages = set(self._open_pages)
        cutoff = datetime.datetime.now() - datetime.timedelta(seconds=self.idle_ttl_s)
        with holder.lock:
            idle = [
                session
                for session in list(holder.session_data)  # least recently used first
                if session not in open_pages and session not in pending
            ]
            kept = set(idle[-self.max_idle :]) if self.max_idle else set()
            forgotten = [
                session
                for session in idle
                if session not in kept or holder.time_last_used.get(session, cutoff) <= cutoff
            ]
            quiet = datetime.datetime.now() - datetime.timedelta(seconds=MESSAGES_KEPT_S)
            for session in forgotten:
                holder.delete_state(session)  # what Gradio itself does for an expired state (its callbacks)
                holder.session_data.pop(session, None)
                last_used = holder.time_last_used.pop(session, None)
                messages = getattr(queue, "pending_messages_per_session", None)
                if messages is not None and last_used is not None and last_used <= quiet:
                    messages.pop(session, None)  # its event's words were read long ago (or never will be)
            self._drop_finished_queues(queue, set(holder.session_data) | open_pages | pending)
        return forgotten

    @staticmethod
    def _drop_finished_queues(queue, in_use: set[str]) -> None:
        """Gradio's per-session bookkeeping of sessions not in use whose events all ended and were read: the
        empty set of event ids and the empty queue of messages (a caller still to read its result finds its
        messages waiting: that queue is not empty). Runs on the event loop, so no event is submitted meanwhile."""
        event_ids = getattr(queue, "pending_event_ids_session", None)
        messages = getattr(queue, "pending_messages_per_session", None)
        if event_ids is None or messages is None:
            return
        for session in [session for session, ids in list(event_ids.items()) if not ids and session not in in_use]:
            waiting = messages.get(session)
            if waiting is None or waiting.empty():
                event_ids.pop(session, None)
                messages.pop(session, None)
