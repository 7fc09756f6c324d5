"""The bound on Gradio's per-session memory (api/sessions.py), on a page of Gradio's own state holder."""

from __future__ import annotations

import asyncio
import datetime
import threading
from collections import OrderedDict
from types import SimpleNamespace

from cosyvoice_mac.api.sessions import SessionBound


class _Holder:
    """Gradio's StateHolder as the bound uses it: sessions in use order, when each was used, a lock."""

    def __init__(self):
        self.session_data, self.time_last_used, self.lock, self.deleted = OrderedDict(), {}, threading.Lock(), []

    def use(self, session: str, ago_s: float = 0.0) -> None:
        self.session_data[session] = object()
        self.session_data.move_to_end(session)
        self.time_last_used[session] = datetime.datetime.now() - datetime.timedelta(seconds=ago_s)

    def delete_state(self, session: str) -> None:
        self.deleted.append(session)


def _page(holder, pending=()):
    return SimpleNamespace(
        state_holder=holder, _queue=SimpleNamespace(pending_event_ids_session={s: {1} for s in pending})
    )


async def _heartbeat_open(bound: SessionBound, session: str, hold: asyncio.Event) -> None:
    async def app(scope, receive, send):
        await hold.wait()

    bound.app = app
    await bound({"type": "http", "path": f"/gradio_api/heartbeat/{session}"}, None, None)


def test_idle_sessions_past_the_bound_are_forgotten_and_open_pages_and_running_events_kept():
    holder = _Holder()
    bound = SessionBound(None, _page(holder, pending=["running"]), max_idle=3, idle_ttl_s=600)
    holder.use("browser-tab")
    holder.use("running")
    for index in range(10):
        holder.use(f"api-call-{index}")

    async def scenario():
        hold = asyncio.Event()
        tab = asyncio.create_task(_heartbeat_open(bound, "browser-tab", hold))
        await asyncio.sleep(0)
        forgotten = bound.sweep()
        hold.set()
        await tab
        return forgotten

    forgotten = asyncio.run(scenario())
    assert forgotten == [f"api-call-{index}" for index in range(7)]
    assert list(holder.session_data) == ["browser-tab", "running", "api-call-7", "api-call-8", "api-call-9"]
    assert holder.deleted == forgotten and not set(forgotten) & set(holder.time_last_used)
    assert bound.sweep() == ["browser-tab"]  # its page closed: idle now, and older than the 3 kept
    holder.use("api-call-9", ago_s=700)  # used longer ago than the idle limit: forgotten even within the bound
    assert "api-call-9" in bound.sweep()


class _Messages:
    """One session's queue of event messages, as the bound asks it: empty or not."""

    def __init__(self, waiting: int = 0):
        self.waiting = waiting

    def empty(self) -> bool:
        return self.waiting == 0


def test_sessions_whose_events_ended_are_not_busy_and_their_empty_bookkeeping_goes():
    """Gradio empties a session's set of event ids when its events end but keeps the set: such a session is
    idle (before the fix every REST call's session counted as busy and was never forgotten)."""
    holder = _Holder()
    for index in range(6):
        holder.use(f"rest-call-{index}")
    holder.use("running")
    event_ids = {f"rest-call-{index}": set() for index in range(6)} | {"running": {"e1"}, "unread": set()}
    messages = {session: _Messages() for session in event_ids} | {"unread": _Messages(waiting=1)}
    queue = SimpleNamespace(pending_event_ids_session=event_ids, pending_messages_per_session=messages)
    bound = SessionBound(None, SimpleNamespace(state_holder=holder, _queue=queue), max_idle=2, idle_ttl_s=600)
    assert bound.sweep() == [f"rest-call-{index}" for index in range(4)]
    assert list(holder.session_data) == ["rest-call-4", "rest-call-5", "running"]
    # the forgotten sessions' empty sets and queues are gone; the kept, the running and the unread stay
    assert set(event_ids) == {"rest-call-4", "rest-call-5", "running", "unread"}
    assert set(messages) == set(event_ids)
