"""A flood of 30 requests at once and a soak of 100 jobs, from outside: one queue bound with the app's own
message, nothing lost or corrupt, memory of the page's process and of the worker flat, the temporary folder
bounded."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import soundfile
from gradio_client import handle_file

from cosyvoice_mac.app import TEMP_PREFIX
from tests.reliability.server import JOB_S, MAX_QUEUE, POST_OFF, TEMP_MAX_AGE_S

STATUS, RESULT = 3, 4
FLOOD = 30
FLOOD_TEXT = "A flood request. It has three sentences. So none ends while the others arrive."
SOAK_JOBS = 100
WARM_UP_JOBS = 15
MEMORY_SLACK = 10 * 2**20


def _generate(client, prompt, text, seed):
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


def _saved_file(app, status: str) -> Path:
    return app.outputs / re.search(r"Saved as (\S+\.wav)", status).group(1)


def _temp_result_files(app) -> list[Path]:
    """Files in the page's Gradio folder (uploads, copies of results), not the copies queued jobs hold."""
    return [
        path
        for folder in app.temp_root.glob(TEMP_PREFIX + "*")
        for path in folder.rglob("*")
        if path.is_file() and "job-prompts" not in path.parts
    ]


def test_a_flood_of_30_gets_one_bound_with_the_app_s_message_and_loses_nothing(app, speech):
    app.wait_ready()
    with ThreadPoolExecutor(max_workers=FLOOD) as pool:
        clients = list(pool.map(lambda _: app.client(), range(FLOOD)))
        jobs = [_generate(client, speech, FLOOD_TEXT, index) for index, client in enumerate(clients)]
        answers = list(pool.map(lambda job: job.result(timeout=4 * JOB_S), jobs))
    statuses = [answer[STATUS] for answer in answers]
    done = [status for status in statuses if status.startswith("✅ Done")]
    busy = [status for status in statuses if status.startswith("⚠️ Busy")]
    assert len(done) + len(busy) == FLOOD, [s for s in statuses if s not in done + busy]  # every one answered
    # The bound: some are refused, each refusal saying the queue held MAX_QUEUE; at least that many and the running one
    # are made. How many more are made depends on how many ended while the flood was still arriving (8-10 on a
    # loaded machine: the page prepares each request's prompt before it reaches the queue), so no upper count.
    assert busy and len(done) >= MAX_QUEUE + 1, (len(done), len(busy))
    for status in busy:
        assert re.search(rf"queue is full \({MAX_QUEUE} waiting.*number {MAX_QUEUE + 1} in line", status)
        assert re.search(r"try again (in about \d+ s|when one has finished)", status), status
    for status in done:
        audio, rate = soundfile.read(_saved_file(app, status))
        assert rate > 0 and len(audio) > rate // 4  # whole, readable files


@pytest.fixture(scope="module")
def soak(app, client, speech) -> dict:
    """100 jobs one after another; memory of both processes after the warm-up and at the end."""
    app.wait_ready()
    worker = app.worker_pid()

    def run(index: int) -> None:
        status = _generate(client, speech, "Hi.", index).result(timeout=JOB_S)[STATUS]
        assert status.startswith("✅ Done") and "Saved as" in status, status

    for index in range(WARM_UP_JOBS):
        run(index)
    ui_before, worker_before = app.rss(app.process.pid), app.rss(worker)
    started = time.monotonic()
    made_before = len(list(app.outputs.glob("*.wav")))
    for index in range(WARM_UP_JOBS, SOAK_JOBS):
        run(index)
    figures = {
        "ui": (ui_before, app.rss(app.process.pid)),
        "worker": (worker_before, app.rss(worker)),
        "same_worker": app.worker_pid() == worker,
        "temp_files": len(_temp_result_files(app)),
        "made": len(list(app.outputs.glob("*.wav"))) - made_before,
    }
    figures["report"] = (
        f"{SOAK_JOBS} jobs ({SOAK_JOBS - WARM_UP_JOBS} measured, {time.monotonic() - started:.0f} s); page process "
        f"{figures['ui'][0] / 2**20:.1f} -> {figures['ui'][1] / 2**20:.1f} MiB, worker "
        f"{figures['worker'][0] / 2**20:.1f} -> {figures['worker'][1] / 2**20:.1f} MiB; temp files "
        f"{figures['temp_files']}"
    )
    print(figures["report"])
    return figures


def test_a_soak_of_100_jobs_keeps_every_result_and_the_worker_flat(soak):
    assert soak["same_worker"], soak["report"]  # no restart along the way
    assert soak["made"] == SOAK_JOBS - WARM_UP_JOBS, soak["report"]  # every result saved
    before, after = soak["worker"]
    assert after - before <= MEMORY_SLACK, soak["report"]
    assert soak["temp_files"] <= 40, soak["report"]  # not one per job: the age bound deletes old copies


def test_a_soak_of_100_jobs_keeps_the_page_process_flat(soak):
    before, after = soak["ui"]
    assert after - before <= MEMORY_SLACK, soak["report"]


def test_the_temp_folder_bound_keeps_a_recent_result_playable_and_drops_old_ones(app, client, speech):
    answer = _generate(client, speech, "A recent result.", 7).result(timeout=JOB_S)
    played, _ = soundfile.read(answer[RESULT])  # what the page's player fetched, right after
    assert len(played) > 0
    copies = [path for path in _temp_result_files(app) if path.suffix == ".wav"]
    assert copies
    newest = max(copies, key=lambda path: path.stat().st_ctime)
    time.sleep(TEMP_MAX_AGE_S + max(1, TEMP_MAX_AGE_S // 4) + 2)  # its age, then one sweep
    assert not newest.exists()
    assert not [path for path in _temp_result_files(app) if time.time() - path.stat().st_ctime > TEMP_MAX_AGE_S + 5]
