"""API tests: the real app (``python app.py``) with the preview voice on a free port, queue of 8, called by
real clients (the ``openai`` package, ``gradio_client``, ``curl``, ``httpx``).

One app serves the module's tests; ``ready_app`` waits until its model answers, so no test sees a 503
from a model that is still loading.
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.browser.conftest import RunningApp, start_app, stop_app

READY_S = 240.0
# Two segments of the preview voice (it merges sentences into 60-80 token pieces): a stream of two pieces.
LONG_TEXT = " ".join(f"This is sentence number {n}, which is long enough to stand on its own." for n in range(10))


def wait_until_ready(app: RunningApp, headers: dict | None = None) -> None:
    """Until a speech request is answered with audio (503 while the model loads)."""
    deadline = time.monotonic() + READY_S
    body = {"model": "tts-1", "input": "Ready?", "voice": "preview", "response_format": "pcm"}
    while time.monotonic() < deadline:
        answer = httpx.post(app.url + "v1/audio/speech", json=body, headers=headers or {}, timeout=120)
        if answer.status_code == 200:
            return
        assert answer.status_code == 503, answer.text
        time.sleep(0.5)
    pytest.fail(f"the model did not become ready within {READY_S} s:\n{app.log.read_text()}")


@pytest.fixture(scope="session")
def api_app(tmp_path_factory):
    """The app with no model folder (the preview voice speaks), bound to 127.0.0.1, no API key."""
    root = tmp_path_factory.mktemp("api-app")
    app = start_app(root, root / "models", ("--model", "preview", "--max-queue", "8"))
    try:
        wait_until_ready(app)
        yield app
    finally:
        stop_app(app)


def sidecar_for(app: RunningApp, job_id: str) -> dict | None:
    """The sidecar of the job with ``job_id`` (outputs are named after its first 8 characters)."""
    import json

    found = sorted(app.outputs.glob(f"*-{job_id[:8]}.json")) if app.outputs.is_dir() else []
    return json.loads(found[0].read_text()) if found else None
