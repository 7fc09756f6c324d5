"""Kill -9 and SIGSTOP of the worker, ten Restart presses at once (after the speaker cache was damaged), a voice library
damaged before the start and a full outputs disk: each time the page says what happened and keeps working."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
from gradio_client import handle_file

from tests.reliability.conftest import KEPT_VOICE
from tests.reliability.server import HANG_TIMEOUT_S, JOB_S, POST_OFF

STATUS, RESULT = 3, 4
LONG_TEXT = " ".join(f"This is sentence number {i} of a long request." for i in range(1, 5))
# A job still running when the worker is killed or frozen, on any machine: the preview voice speaks the 4 sentences
# above in under 2 s on a quick one, which a SIGKILL or SIGSTOP sent after "1 running" could miss; 40 take far longer
# (the job ends at the signal, so the length costs nothing).
UNFINISHED_TEXT = " ".join(f"This is sentence number {i} of a long request." for i in range(1, 41))


def _generate(app, client, prompt, text, seed=1):
    return app.call(
        client,
        "/generate",
        "en",
        handle_file(prompt),
        "",
        "",
        text,
        "cross_lingual",
        "",
        seed,
        1.0,
        False,
        *POST_OFF,
        True,
    )


def _submit(client, prompt, text, seed=1):
    return client.submit(
        "en",
        handle_file(prompt),
        "",
        "",
        text,
        "cross_lingual",
        "",
        seed,
        1.0,
        False,
        *POST_OFF,
        True,
        api_name="/generate",
    )


def _wait_running(app, client, timeout=JOB_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "1 running" in app.status(client):
            return
        time.sleep(0.05)
    raise AssertionError(app.status(client))


def test_a_voice_library_damaged_before_the_start_is_reported_and_set_aside(app, client):
    assert "voices.json" in app.log() and "set aside" in app.log()  # said at start
    panel = app.status(client)
    assert "Saved voices" in panel and "voices.json.unreadable-" in panel
    names = [choice[1] for choice in app.call(client, "/on_load", "en")[0]["choices"]]
    assert KEPT_VOICE in names  # the last good copy serves
    assert list((app.cache / "voices").glob("voices.json.unreadable-*"))


def test_kill_9_mid_job_fails_that_job_with_the_reason_and_keeps_the_queue(app, client, speech):
    running = _submit(client, speech, UNFINISHED_TEXT)
    _wait_running(app, client)
    waiting = [_submit(app.client(), speech, f"Waiting job {i}.", seed=i) for i in range(2)]
    time.sleep(0.5)
    pid = app.worker_pid()
    os.kill(pid, signal.SIGKILL)
    first = running.result(timeout=JOB_S)
    assert "SIGKILL" in first[STATUS] and "Submit this job again" in first[STATUS]
    for job in waiting:
        assert job.result(timeout=JOB_S)[STATUS].startswith("✅ Done"), "a waiting job was lost"
    app.wait_ready()
    assert app.worker_pid() != pid


def test_sigstop_is_noticed_the_job_fails_saying_so_and_the_worker_is_replaced(app, client, speech):
    running = _submit(client, speech, UNFINISHED_TEXT)
    _wait_running(app, client)
    waiting = _submit(app.client(), speech, "Queued behind a frozen worker.")
    pid = app.worker_pid()
    os.kill(pid, signal.SIGSTOP)
    stopped_at, seen = time.monotonic(), ""
    try:
        while time.monotonic() - stopped_at < 4 * HANG_TIMEOUT_S and "not answering" not in seen:
            seen = app.status(client)
            time.sleep(0.2)
        assert "not answering" in seen  # the page's state
        first = running.result(timeout=JOB_S)
    finally:
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGCONT)
    assert "stopped answering" in first[STATUS] and "kept the waiting jobs" in first[STATUS]
    assert time.monotonic() - stopped_at < HANG_TIMEOUT_S + 15
    assert waiting.result(timeout=JOB_S)[STATUS].startswith("✅ Done")
    app.wait_ready()
    assert app.worker_pid() != pid


def test_ten_restart_presses_at_once_make_one_restart_and_a_job_meanwhile_is_not_told_stopped(app, client, speech):
    """Also damages the speaker cache first: the new worker must read it as a miss, not fail."""
    app.wait_ready()
    assert _generate(app, client, speech, "Fill the cache.")[STATUS].startswith("✅ Done")
    entries = list(app.cache.glob("speakers/v*/*/*.safetensors"))
    assert entries
    for entry in entries:
        entry.write_bytes(b"\x00garbage" * 10)
    for facts in app.cache.glob("speakers/v*/*/*.json"):
        facts.write_text("{broken")
    workers, watching = set(), threading.Event()

    def watch():
        while not watching.is_set():
            pid = app.worker_pid()
            if pid:
                workers.add(pid)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    job = _submit(app.client(), speech, LONG_TEXT)  # a session of its own, as another visitor's
    _wait_running(app, client)
    started = time.monotonic()
    presses = [app.client().submit("en", api_name="/restart") for _ in range(10)]
    answers = [press.result(timeout=2 * JOB_S) for press in presses]
    elapsed = time.monotonic() - started
    outcome = job.result(timeout=JOB_S)[STATUS]
    watching.set()
    watcher.join()
    assert all(answer[0].startswith("✅ The model is ready") for answer in answers), answers
    assert len(workers) == 2, workers  # the old worker and one new one: not eleven
    assert elapsed < 45, elapsed
    assert "Stopped." not in outcome and (
        "Not finished" in outcome and "restarted" in outcome or outcome.startswith("✅ Done")
    ), outcome
    assert _generate(app, client, speech, "Read the damaged cache.")[STATUS].startswith("✅ Done")


def test_a_full_outputs_disk_still_returns_the_audio_and_leaves_no_partial_file(app, client, speech, full_disk):
    before = {path.name for path in app.outputs.iterdir()}
    full_disk.fill()
    try:
        answer = _generate(app, client, speech, "Nowhere to save this.")
    finally:
        full_disk.free()
    assert "Not saved" in answer[STATUS] and "disk is full" in answer[STATUS], (full_disk.kind, answer[STATUS])
    assert answer[RESULT] is not None  # the audio itself came back
    after = {path.name for path in app.outputs.iterdir()} - {"filler.bin"}
    assert after == before - {"filler.bin"}, after - before  # nothing half-written
    assert _generate(app, client, speech, "Room again.")[STATUS].startswith("✅ Done")
