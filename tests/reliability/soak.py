"""A soak of alternating Gradio-API and ``/v1`` jobs with the preview voice, and the memory it leaves.

Shared by ``tests/reliability/test_load.py`` (a short soak on the suite's app) and ``bench/soak_memory.py``
(150 jobs on an app of its own, printing JSON). Memory is the resident set of the page's process and of the
model worker, sampled every few jobs after a warm-up; the growth is the slope of a least-squares line through
ALL the samples (MB per 100 jobs), so a steady climb and a single step both count.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from pathlib import Path

import numpy as np

from tests.reliability.server import JOB_S, SYNTHESIZE_TAIL, AppServer

PREVIEW = "preview"
# Texts of several lengths, in turn: a worker whose buffers grow to the longest text seen shows it early.
TEXTS = (
    "Hi.",
    "A somewhat longer request, with a second clause.",
    "Here are two sentences. The second one is a little longer than the first.",
    "Short again.",
)
MB = 1e6


def slope_per_100(jobs: list[int], values: list[float]) -> float:
    """MB per 100 jobs of the least-squares line through every (jobs, bytes) sample."""
    if len(jobs) < 2:
        return 0.0
    slope = np.polyfit(np.asarray(jobs, float), np.asarray(values, float), 1)[0]
    return float(slope * 100 / MB)


def text(index: int) -> str:
    return TEXTS[(index // 2) % len(TEXTS)]


def speak_v1(app: AppServer, index: int) -> None:
    body = {"model": "tts-1", "voice": PREVIEW, "input": text(index), "response_format": "wav", "seed": index}
    request = urllib.request.Request(
        app.url + "v1/audio/speech",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=JOB_S) as answer:
        audio = answer.read()
    assert audio[:4] == b"RIFF" and len(audio) > 1000, audio[:200]


def speak_gradio(app: AppServer, client, index: int) -> None:
    """``/synthesize`` through gradio_client (one session for all its calls)."""
    path, facts = client.submit(text(index), PREVIEW, "", "", index, 1.0, api_name="/synthesize").result(timeout=JOB_S)
    assert Path(path).is_file() and facts["duration_s"] > 0, facts
    Path(path).unlink(missing_ok=True)  # the client's download, not the app's


def speak_gradio_http(app: AppServer, index: int) -> None:
    """``/synthesize`` as curl calls it (docs/api.md): POST the inputs, then read the event's stream. Every call is a
    session of its own, as with any client that sends no session hash."""
    body = json.dumps({"data": [text(index), PREVIEW, "", "", index, 1.0, False, None, *SYNTHESIZE_TAIL]}).encode()
    call = urllib.request.Request(
        app.url + "gradio_api/call/synthesize", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(call, timeout=JOB_S) as answer:
        event_id = json.loads(answer.read())["event_id"]
    with urllib.request.urlopen(f"{app.url}gradio_api/call/synthesize/{event_id}", timeout=JOB_S) as answer:
        stream = answer.read().decode()
    assert "event: complete" in stream and "duration_s" in stream, stream[-500:]


def soak(app: AppServer, jobs: int, every: int, warm_up: int, log=None) -> dict:
    """Run ``warm_up`` then ``jobs`` alternating jobs; the samples and the slopes (see the module docstring).
    With $PROBE_DIR set, each sample also sends SIGUSR2 to both processes (a probe's sitecustomize dumps its
    heap there)."""
    app.wait_ready()
    client = app.client()
    worker = app.worker_pid()
    probing = bool(os.environ.get("PROBE_DIR"))

    def one(index: int) -> None:  # /v1, gradio_client, /v1, the Gradio API over plain HTTP, ...
        if index % 2:
            speak_v1(app, index)
        elif index % 4:
            speak_gradio_http(app, index)
        else:
            speak_gradio(app, client, index)

    for index in range(warm_up):
        one(index)
    samples: dict[str, list] = {"jobs": [], "ui": [], "worker": []}
    started = time.monotonic()
    for done in range(jobs + 1):
        if done % every == 0 or done == jobs:
            samples["jobs"].append(done)
            samples["ui"].append(app.rss(app.process.pid))
            samples["worker"].append(app.rss(worker))
            if probing:
                for pid in (app.process.pid, worker):
                    os.kill(pid, signal.SIGUSR2)
            if log is not None:
                print(
                    f"{done} jobs: page {samples['ui'][-1] / MB:.1f} MB, worker {samples['worker'][-1] / MB:.1f} MB",
                    file=log,
                    flush=True,
                )
        if done < jobs:
            one(warm_up + done)
    return {
        "jobs": jobs,
        "warm_up": warm_up,
        "seconds": round(time.monotonic() - started, 1),
        "same_worker": app.worker_pid() == worker,
        "ui_mb_per_100_jobs": round(slope_per_100(samples["jobs"], samples["ui"]), 2),
        "worker_mb_per_100_jobs": round(slope_per_100(samples["jobs"], samples["worker"]), 2),
        "samples": {
            "jobs": samples["jobs"],
            "ui_mb": [round(value / MB, 2) for value in samples["ui"]],
            "worker_mb": [round(value / MB, 2) for value in samples["worker"]],
        },
    }


def run_soak(root: Path, jobs: int, every: int, warm_up: int, log=None) -> dict:
    """``soak`` on an app of its own under ``root`` (a patient hang timeout: this measures memory, not hangs)."""
    app = AppServer(root, extra_args=["--hang-timeout", "60"]).start()
    try:
        return soak(app, jobs, every, warm_up, log)
    finally:
        app.stop()
