"""A full queue, from outside, through two doors: each says when to retry in the way its clients can read (the
Gradio API in its message, ``/v1`` in ``Retry-After`` and its message alike), and neither points at a header
the other never sends. (Which door gets the freed places is ``tests/test_engine_jobs.py``'s.)"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request

from tests.reliability.server import JOB_S, MAX_QUEUE, SYNTHESIZE_TAIL

SENTENCE = "This is sentence number {} of a request long enough to keep the queue busy."
LONG = " ".join(SENTENCE.format(index) for index in range(6))


def _v1(app, text: str, seed: int):
    body = {"model": "tts-1", "voice": "preview", "input": text, "response_format": "wav", "seed": seed}
    request = urllib.request.Request(
        app.url + "v1/audio/speech",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=4 * JOB_S) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.headers, refused.read()  # headers: looked up case-blind


def _gradio_http(app, text: str) -> str:
    body = json.dumps({"data": [text, "preview", "", "", 1, 1.0, False, None, *SYNTHESIZE_TAIL]}).encode()
    call = urllib.request.Request(
        app.url + "gradio_api/call/synthesize", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(call, timeout=JOB_S) as answer:
        event_id = json.loads(answer.read())["event_id"]
    with urllib.request.urlopen(f"{app.url}gradio_api/call/synthesize/{event_id}", timeout=4 * JOB_S) as answer:
        return answer.read().decode()


def test_a_full_queue_tells_each_door_when_to_retry_in_its_own_way(app):
    app.wait_ready()
    answers = []
    fillers = [
        threading.Thread(target=lambda seed=seed: answers.append(_v1(app, LONG, seed))) for seed in range(MAX_QUEUE + 1)
    ]
    for filler in fillers:
        filler.start()
        time.sleep(0.2)
    time.sleep(1.0)
    try:
        gradio = _gradio_http(app, "Refused, I expect.")
        status, headers, body = _v1(app, "Refused as well.", 99)
    finally:
        for filler in fillers:
            filler.join(4 * JOB_S)
    assert "event: error" in gradio and "queue is full" in gradio, gradio[-800:]
    assert "Retry-After" not in gradio and re.search(r"try again (in about \d+ s|when one has finished)", gradio)
    assert status == 429, (status, body[:500])
    message = json.loads(body)["error"]["message"]
    seconds = headers.get("Retry-After")
    assert seconds and seconds.isdigit() and "queue is full" in message and "header" not in message, (headers, message)
    said = re.search(r"try again in about (\d+) s", message)
    assert said is None or said.group(1) == seconds, (message, seconds)  # the same number in both
    assert sum(1 for code, _, _ in answers if code == 200) >= MAX_QUEUE  # the fillers themselves got in
