"""The page under trouble: a damaged voice list, restarts pressed at once, a hung worker, a full queue."""

from __future__ import annotations

import re
import threading
import time
from types import SimpleNamespace

import pytest

from cosyvoice_mac.engine.host import Settings
from cosyvoice_mac.engine.jobs import Job
from cosyvoice_mac.webui.callbacks import Callbacks
from cosyvoice_mac.webui.state import Session
from tests.fakes.fake_pipeline import fake_request, started_fake_host


def test_a_damaged_voice_list_is_named_on_the_page(live):
    callbacks = live
    callbacks.voices.save("alice", audio_hash="a" * 64, model_id="m")
    callbacks.voices.index_path.write_text("{damaged")
    assert [value for _, value in callbacks.voice_choices("en")] == ["", "alice"]  # restored, still listed
    panel = callbacks.status_panel("en")
    assert "Saved voices" in panel and "voices.json.unreadable-" in panel and "restored" in panel
    assert "已保存的声音" in callbacks.status_panel("zh")


# -- a running fake engine ---------------------------------------------------------------------------


STATUS = 3
SLOW = "[slow] " + " ".join(f"Sentence {i}." for i in range(16))


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("live")
    host = started_fake_host(root, max_queue=2, segment_s=0.25, stop_s=2.0)
    yield Callbacks(host, Settings(root / "cache"))
    host.close()


def _generate_in_background(callbacks, prompt, session_id):
    updates: list = []
    request = SimpleNamespace(session_hash=session_id)

    def run():
        updates.extend(
            callbacks.generate("en", prompt, "", "", SLOW, "cross_lingual", "", 1, 1.0, False, Session(), request)
        )

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 30
    while callbacks.host.engine.status()["running"] is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.6)  # inside the job (the worker said "started")
    return thread, updates


@pytest.fixture(scope="module")
def prompt(make_speech) -> str:
    return str(make_speech("This is the voice I would like you to copy.", seconds=4.0))


def test_a_job_ended_by_someone_else_s_restart_says_why_not_stopped(live, prompt):
    thread, updates = _generate_in_background(live, prompt, "owner")
    assert list(live.restart("en"))[-1][0].startswith("✅")  # another session presses Restart
    thread.join(60)
    final = updates[-1][STATUS]
    assert "Stopped." not in final
    assert "Not finished" in final and "restarted" in final and "nobody pressed Stop" in final


def test_only_the_owner_s_stop_reads_stopped(live, prompt):
    thread, updates = _generate_in_background(live, prompt, "owner")
    live.stop(SimpleNamespace(session_hash="someone-else"))  # another tab's Stop leaves this job alone
    time.sleep(0.5)
    assert live.host.engine.status()["running"] is not None
    live.stop(SimpleNamespace(session_hash="owner"))
    thread.join(60)
    assert updates[-1][STATUS] == "⏹ Stopped."


def test_a_request_over_the_queue_bound_gets_the_place_it_would_have_had_and_when_to_retry(live, prompt):
    engine = live.host.engine

    engine.result(engine.submit(fake_request("One quick job to learn the running time.")), timeout=60)
    thread, _ = _generate_in_background(live, prompt, "first")
    # the same door as the page (the queue keeps a share of its places for each door that competes)
    waiting = [engine.submit(Job(fake_request(SLOW), interface="page")) for _ in range(live.host.config.max_queue)]
    try:
        refused = list(
            live.generate(
                "en",
                prompt,
                "",
                "",
                "Hello.",
                "cross_lingual",
                "",
                1,
                1.0,
                False,
                Session(),
                SimpleNamespace(session_hash="late"),
            )
        )
        message = refused[-1][STATUS]
        assert "number 3 in line" in message and "Nothing was queued" in message
        assert re.search(r"try again in about \d+ s", message), message
    finally:
        for job_id in waiting:
            engine.cancel(job_id)
        live.stop(SimpleNamespace(session_hash="first"))
        thread.join(60)
