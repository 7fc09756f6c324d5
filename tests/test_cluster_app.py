"""The app's queue on a real local Ray cluster: ``python app.py --cluster local:2`` (the preview voice, no
CosyVoice weights) serves ``/v1/audio/speech`` through the official OpenAI client and the page through a browser,
its jobs run on the cluster's two workers side by side, a cancel stops the job on its worker, ``/v1/models`` and
the status panel list both workers, and a worker killed mid-job leaves its job to the other. One app for the
module; the module shares the ``ray-cluster`` group with ``test_cluster.py``, so one cluster runs at a time."""

from __future__ import annotations

import io
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import openai
import pytest
import soundfile
from playwright.sync_api import expect

from cosyvoice_mac.preview import preview_available
from tests.api.conftest import LONG_TEXT, sidecar_for, wait_until_ready
from tests.browser.conftest import BROWSER_ARGS, browser_executable, open_page, start_app, stop_app
from tests.browser.helpers import fill, generate, upload_prompt
from tests.browser.helpers import wait_until_ready as wait_until_page_ready

pytestmark = pytest.mark.skipif(not preview_available(), reason="the preview voice's packages are not installed")

WORKERS = 2
TEXT = "Hello from the cluster. Two workers share the queue."
# A job long enough to be seen running (four sentences of the preview voice, a few seconds on one core)
MEDIUM_TEXT = " ".join(f"This is sentence number {n}, which is long enough to stand on its own." for n in range(4))
STOP_S = 30.0  # for a cancelled job to end on its worker, or a killed worker's job to end on the other


@pytest.fixture(scope="module")
def cluster_app(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster-app")
    (root / "models").mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("RAY_ADDRESS", raising=False)  # the flag names the cluster: local:2, started by the app
        flags = ("--model", "preview", "--max-queue", "8", "--cluster", f"local:{WORKERS}")
        app = start_app(root, root / "models", flags)
    try:
        wait_until_ready(app)
        yield app
    finally:
        stop_app(app)


@pytest.fixture(scope="module")
def client(cluster_app):
    return openai.OpenAI(base_url=cluster_app.url + "v1", api_key="unused-on-loopback", max_retries=0, timeout=300)


def _workers(app) -> list[dict]:
    """The loaded model's workers, as ``/v1/models`` lists them."""
    models = httpx.get(app.url + "v1/models", timeout=30).json()["data"]
    return next(model for model in models if model["loaded"])["workers"]


def _speak(client, text: str, **extra):
    return client.audio.speech.create(model="tts-1", voice="preview", input=text, response_format="wav", **extra)


def test_the_openai_client_is_answered_by_a_worker_of_the_cluster(client, cluster_app):
    response = _speak(client, TEXT)
    samples, rate = soundfile.read(io.BytesIO(response.content), dtype="float32")
    assert len(samples) / rate > 1.5 and np.sqrt(np.mean(np.square(samples))) > 0.01
    sidecar = sidecar_for(cluster_app, response.response.headers["x-cosyvoice-job-id"])
    names = {worker["name"] for worker in _workers(cluster_app)}
    assert sidecar["cluster_worker"] in names and sidecar["machine"] and sidecar["interface"] == "api"
    assert response.content == (cluster_app.outputs / sidecar["file"]).read_bytes()  # saved here, by the app


def test_models_lists_both_workers_with_machine_device_engine_and_load(cluster_app):
    workers = _workers(cluster_app)
    assert len(workers) == WORKERS and len({worker["name"] for worker in workers}) == WORKERS
    for worker in workers:
        assert worker["machine"] and worker["device"] == "cpu" and worker["engine"] and worker["load"] == 0
        assert not worker["lost"]


def test_a_cancel_stops_the_job_on_its_worker(client, cluster_app):
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="preview", input=LONG_TEXT, response_format="pcm", extra_body={"stream": True}
    ) as response:
        job_id = response.headers["x-cosyvoice-job-id"]
        next(response.iter_bytes())  # the job runs on a worker; closing the stream cancels it
    deadline = time.monotonic() + STOP_S
    while any(worker["load"] for worker in _workers(cluster_app)):
        assert time.monotonic() < deadline, "the cancelled job went on running on its worker"
        time.sleep(0.1)
    time.sleep(0.5)
    assert sidecar_for(cluster_app, job_id) is None  # stopped by its worker, not finished and saved
    assert len(_workers(cluster_app)) == WORKERS and not any(worker["lost"] for worker in _workers(cluster_app))


def test_the_page_generates_on_the_cluster_and_its_status_lists_the_workers(cluster_app, make_speech, request):
    before = cluster_app.output_files()
    prompt = make_speech("This is the voice I would like you to copy, please.", seconds=4.0)
    # Playwright's sync API in a thread of its own: when the browser tests ran first in this xdist worker, their
    # session-wide Playwright holds its event loop in the main thread, and a second one there is refused.
    with ThreadPoolExecutor(1) as pool:
        status = pool.submit(_generate_on_the_page, cluster_app, prompt, request).result()
    assert "Done" in status, status
    (new_file,) = cluster_app.output_files() - before
    sidecar = sidecar_for(cluster_app, new_file.rsplit("-", 1)[-1].removesuffix(".wav"))
    assert sidecar["interface"] == "page" and sidecar["cluster_worker"]


def _generate_on_the_page(cluster_app, prompt, request) -> str:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=browser_executable(), args=BROWSER_ARGS, timeout=60_000)
        try:
            with open_page(browser, cluster_app, request) as page:
                wait_until_page_ready(page)
                panel = page.locator("#cv-status-panel")
                expect(panel).to_contain_text(f"Workers: {WORKERS} on the Ray cluster")
                for worker in _workers(cluster_app):
                    expect(panel).to_contain_text(worker["name"])
                upload_prompt(page, prompt)
                fill(page, "cv-transcript", "This is the voice I would like you to copy, please.")
                fill(page, "cv-text", "Hello from the page, spoken on the cluster.")
                return generate(page)
        finally:
            browser.close()


def test_two_jobs_run_side_by_side_and_a_killed_workers_job_moves_to_the_other(client, cluster_app):
    """Last: the app keeps one worker after it."""
    answers, errors = {}, {}

    def speak(index):
        try:
            answers[index] = _speak(client, MEDIUM_TEXT, extra_body={"seed": index})
        except openai.APIError as error:
            errors[index] = error

    threads = [threading.Thread(target=speak, args=(index,)) for index in range(WORKERS)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + STOP_S
    workers = _workers(cluster_app)
    while sum(worker["load"] for worker in workers) < WORKERS:  # both busy at once
        assert time.monotonic() < deadline, "the second job waited for the first instead of running on the idle worker"
        time.sleep(0.05)
        workers = _workers(cluster_app)
    victim, survivor = workers
    os.kill(victim["pid"], signal.SIGKILL)
    for thread in threads:
        thread.join(STOP_S * 4)
    assert not errors, f"a job was lost with its worker: {errors}"
    sidecars = [sidecar_for(cluster_app, answers[index].response.headers["x-cosyvoice-job-id"]) for index in range(2)]
    assert [sidecar["cluster_worker"] for sidecar in sidecars] == [survivor["name"]] * WORKERS  # one ran again there
    workers = {worker["name"]: worker for worker in _workers(cluster_app)}
    assert workers[victim["name"]]["lost"] and not workers[survivor["name"]]["lost"]


# -- without a cluster: what becomes of a lost worker's jobs ------------------------------------------------


def test_a_lost_workers_jobs_run_once_more_elsewhere_unless_streamed_moved_before_or_none_is_left():
    from cosyvoice_mac.cluster.queue_worker import Running, after_loss
    from cosyvoice_mac.engine.jobs import Command, Job
    from cosyvoice_mac.request import Request, Voice

    ended, streamed, waiting = (
        Command("run", Job(Request.build(f"Line {number}.", Voice.builtin())), number) for number in range(3)
    )
    running = Running([ended, streamed, waiting], None, {ended.job.job_id}, {streamed.job.job_id})
    again, failing = after_loss(running, others_left=True)
    assert again == [waiting] and list(failing) == [streamed.job.job_id]
    assert "streamed audio had begun" in failing[streamed.job.job_id]
    again, failing = after_loss(Running([waiting], None, tries=1), others_left=True)  # lost twice: it fails
    assert again == [] and "moved once" in failing[waiting.job.job_id]
    again, failing = after_loss(Running([waiting], None), others_left=False)
    assert again == [] and "no other worker" in failing[waiting.job.job_id]
