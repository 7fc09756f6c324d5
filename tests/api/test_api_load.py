"""The API under load and under clients that leave: a flood against a queue of 8 gets 429s with
Retry-After and loses nothing; a client that disconnects frees its job."""

from __future__ import annotations

import asyncio
import time

import httpx
import numpy as np
import soundfile

from tests.api.conftest import LONG_TEXT, sidecar_for

FLOOD = 50


async def _flood(url: str) -> list[tuple[int, str, httpx.Response]]:
    limits = httpx.Limits(max_connections=FLOOD, max_keepalive_connections=FLOOD)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:

        async def one(index: int):
            text = f"Request number {index} of the flood."
            body = {"model": "tts-1", "voice": "preview", "input": text, "response_format": "pcm", "seed": index}
            return index, text, await client.post(url + "v1/audio/speech", json=body)

        return await asyncio.gather(*(one(index) for index in range(FLOOD)))


def test_a_flood_gets_429s_with_retry_after_and_every_accepted_request_finishes_intact(api_app):
    answers = asyncio.run(_flood(api_app.url))
    statuses = [answer.status_code for _, _, answer in answers]
    accepted = [(index, text, answer) for index, text, answer in answers if answer.status_code == 200]
    refused = [answer for _, _, answer in answers if answer.status_code == 429]
    assert len(accepted) + len(refused) == FLOOD, statuses
    assert len(accepted) >= 8  # eight wait at once (one more when the first has started by then)
    assert refused, "a queue of 8 took 50 requests at once"
    for answer in refused:
        assert int(answer.headers["retry-after"]) >= 1
        assert answer.json()["error"]["code"] == "queue_full"
    for index, text, answer in accepted:
        samples = np.frombuffer(answer.content, dtype="<i2").astype(np.float32) / 32768.0
        assert abs(len(samples) / 24000 - float(answer.headers["x-cosyvoice-duration"])) < 1e-3
        assert np.sqrt(np.mean(samples**2)) > 0.01, f"request {index} came back silent"
        sidecar = sidecar_for(api_app, answer.headers["x-cosyvoice-job-id"])
        assert sidecar is not None and sidecar["text"] == text and sidecar["seed"] == index
        saved, _ = soundfile.read(str(api_app.outputs / sidecar["file"]), dtype="int16")
        assert saved.tobytes() == answer.content  # the file holds exactly the samples this client got
    # The refused ones left no trace, and a request after the flood is served at once.
    after = {"model": "tts-1", "voice": "preview", "input": "After the flood.", "response_format": "pcm"}
    retry = httpx.post(api_app.url + "v1/audio/speech", json=after, timeout=300)
    assert retry.status_code == 200


def test_a_client_that_leaves_mid_stream_frees_its_job(api_app):
    body = {"model": "tts-1", "voice": "preview", "input": LONG_TEXT, "response_format": "pcm", "stream": True}
    with httpx.stream("POST", api_app.url + "v1/audio/speech", json=body, timeout=300) as response:
        job_id = response.headers["x-cosyvoice-job-id"]
        next(response.iter_raw())  # the first piece came; then the client goes away
    _assert_cancelled(api_app, job_id)


def test_a_client_that_gives_up_waiting_frees_its_job(api_app):
    body = {"model": "tts-1", "voice": "preview", "input": LONG_TEXT + " Never heard.", "response_format": "wav"}
    try:
        httpx.post(api_app.url + "v1/audio/speech", json=body, timeout=1.0)
    except httpx.TimeoutException:
        pass
    time.sleep(1.0)  # the server looks for a gone client twice a second
    _assert_cancelled(api_app, None, text=body["input"])


def _assert_cancelled(api_app, job_id: str | None, text: str | None = None) -> None:
    """A later job finishing means the earlier one ended (jobs run in order); a cancelled job saves nothing."""
    later = httpx.post(
        api_app.url + "v1/audio/speech",
        timeout=300,
        json={"model": "tts-1", "voice": "preview", "input": "Next please.", "response_format": "pcm"},
    )
    assert later.status_code == 200
    if job_id is not None:
        assert sidecar_for(api_app, job_id) is None, "the job ran to the end after its client had left"
    else:
        import json

        texts = [json.loads(path.read_text())["text"] for path in api_app.outputs.glob("*.json")]
        assert text not in texts, "the job ran to the end after its client had left"
