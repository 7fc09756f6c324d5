"""The API's link to the engine, in this process with a stand-in engine (no app, no model): a followed job
wakes the event loop only when the engine sends an event, a follower that leaves cancels its job, a taken
voice name is a 409 by the error's type (not its words), and what the APIs document is the request's rule."""

from __future__ import annotations

import asyncio
import re
import selectors
import threading
import time
from types import SimpleNamespace

import gradio as gr
import pytest
from gradio.utils import get_function_description

from cosyvoice_mac.api import voice_door
from cosyvoice_mac.api.auth import ApiAccess
from cosyvoice_mac.api.engine_link import EngineLink
from cosyvoice_mac.api.errors import ApiError
from cosyvoice_mac.api.gradio_api import attach_public_api
from cosyvoice_mac.api.routes import SpeechBody
from cosyvoice_mac.engine import EngineError, JobResult, VoiceExists
from cosyvoice_mac.engine.jobqueue import JobQueue
from cosyvoice_mac.engine.messages import Done
from cosyvoice_mac.request import LUFS_RANGE, SPEED_RANGE, Request, Voice

IDLE_S = 0.5


class StandInEngine:
    """The engine's listening, submitting and cancelling, with a real JobQueue's feeds; runs nothing."""

    def __init__(self):
        self.queue = JobQueue(4, threading.RLock())
        self.submitted, self.cancelled = [], []
        self.save_error: Exception | None = None

    def subscribe(self, wake=None):
        return self.queue.subscribe(wake)

    def unsubscribe(self, feed):
        self.queue.unsubscribe(feed)

    def submit(self, job):
        self.submitted.append(job)

    def cancel(self, job_id):
        self.cancelled.append(job_id)

    def save_voice_from_audio(self, name, audio_path, transcript, timeout=None):
        raise self.save_error


def _link() -> tuple[EngineLink, StandInEngine]:
    engine = StandInEngine()
    host = SimpleNamespace(engine=engine, current=None, status=lambda: {"state": "ready"})
    return EngineLink(host), engine


def _request() -> Request:
    return Request.build("Hello there.", Voice.builtin(), seed=1)


def _result(job_id: str) -> JobResult:
    return JobResult(job_id, 24000, 1.0, "Hello there.", "cross_lingual", 1, 1.0, "stand-in", "cpu")


class CountingSelector(selectors.DefaultSelector):
    """Counts how often the event loop wakes to look for work."""

    def __init__(self):
        super().__init__()
        self.wakes = 0

    def select(self, timeout=None):
        self.wakes += 1
        return super().select(timeout)


def test_a_followed_job_wakes_the_loop_only_when_the_engine_sends_an_event():
    link, engine = _link()
    selector = CountingSelector()
    loop = asyncio.SelectorEventLoop(selector)

    async def follow_one():
        ticket = link.submit(_request(), "api")
        pieces = link.follow(ticket)
        waiting = asyncio.ensure_future(pieces.__anext__())
        await asyncio.sleep(0.05)  # the follower is now waiting on its feed
        before = selector.wakes
        sender = threading.Timer(IDLE_S, lambda: engine.queue.emit(Done(ticket.job_id, _result(ticket.job_id))))
        sender.start()
        started = time.monotonic()
        result = await waiting
        waited, idle_wakes = time.monotonic() - started, selector.wakes - before
        await pieces.aclose()
        return ticket, result, waited, idle_wakes

    try:
        ticket, result, waited, idle_wakes = loop.run_until_complete(follow_one())
    finally:
        loop.close()
    assert result.job_id == ticket.job_id
    assert waited == pytest.approx(IDLE_S, abs=0.2)  # handed over as soon as the engine sent it
    assert idle_wakes <= 3, f"the loop woke {idle_wakes} times in {IDLE_S} s of waiting (polling)"
    assert engine.cancelled == []  # it finished: nothing to cancel
    assert engine.queue._subscribers == []  # and its feed was closed


def test_a_follower_that_leaves_before_the_end_cancels_its_job():
    link, engine = _link()

    async def leave_early():
        ticket = link.submit(_request(), "api")
        pieces = link.follow(ticket)
        waiting = asyncio.ensure_future(pieces.__anext__())
        await asyncio.sleep(0.05)
        waiting.cancel()  # what the route does when the client has gone
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await pieces.aclose()
        return ticket

    ticket = asyncio.run(leave_early())
    assert engine.cancelled == [ticket.job_id]
    assert engine.queue._subscribers == []


@pytest.mark.parametrize(
    "error, status, code",
    [
        (VoiceExists("the name 'Ada' is taken"), 409, "voice_exists"),  # its own words need not say "exists"
        (EngineError("the prompt copy already exists on disk and cannot be replaced"), 400, "invalid_voice"),
    ],
)
def test_a_taken_voice_name_is_a_409_by_the_errors_type(monkeypatch, tmp_path, error, status, code):
    link, engine = _link()
    engine.save_error = error
    monkeypatch.setattr(voice_door, "judge_voice_audio", lambda path: SimpleNamespace(ok=True, problem=None))
    with pytest.raises(ApiError) as caught:
        link.create_voice("Ada", str(tmp_path / "ada.wav"), None)
    assert (caught.value.status, caught.value.code, caught.value.param) == (status, code, "name")
    assert caught.value.message == str(error)


def _documented_range(description: str, unit: str = "") -> tuple[float, float]:
    found = re.search(rf"(-?[\d.]+) to (-?[\d.]+){unit}", description)
    assert found, description
    return float(found.group(1)), float(found.group(2))


def test_the_documented_speed_and_loudness_ranges_are_the_requests_rules():
    with gr.Blocks() as page:
        pass
    attach_public_api(page, link=None, access=ApiAccess.from_settings("127.0.0.1", None), concurrency=1)
    synthesize = next(function.fn for function in page.fns.values() if function.api_name == "synthesize")
    _, parameters, _ = get_function_description(synthesize)  # what Gradio documents, e.g. to MCP clients
    assert _documented_range(parameters["speed"]) == SPEED_RANGE
    assert _documented_range(parameters["loudness_lufs"], " LUFS") == LUFS_RANGE
    schema = SpeechBody.model_json_schema()["properties"]
    assert _documented_range(schema["speed"]["description"]) == SPEED_RANGE
    assert _documented_range(schema["loudness_lufs"]["description"], " LUFS") == LUFS_RANGE
