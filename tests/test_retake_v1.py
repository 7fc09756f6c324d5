"""Retakes through ``/v1`` itself: the app's server and model host in front of a worker process whose backend says
the text with recorded speech, its first take dropping the second sentence. The worker's own check (the bundled
recogniser and the recogniser-free measures) catches it and makes the sentence again: the answer's
``X-CosyVoice-Check`` header says ``retaken`` with the note, the answer is the whole take, and every take is kept in
outputs/. A streamed sentence is never replaced: its dropped take is flagged in the SSE ``done`` event.

Not in tests/api: that folder's modules share one xdist worker (for its preview-voice app), and this module serves
its own backend; on its own it runs beside them."""

from __future__ import annotations

import base64
import json
from dataclasses import replace

import gradio as gr
import httpx
import numpy as np
import pytest
import soundfile

from cosyvoice_mac.api import serve_page
from cosyvoice_mac.engine import Engine
from cosyvoice_mac.engine.host import HostConfig, ModelHost
from cosyvoice_mac.engine.takes import TAKES_FOLDER
from tests.api.conftest import sidecar_for
from tests.fakes.faulty_voice import FAULTY_FACTORY

pytest.importorskip("faster_whisper")

FIRST = "Please call Stella and ask her to bring these things with her from the store."
TEXT = f"{FIRST} We will meet at the old railway station at noon tomorrow, and then walk home together."
FAULTS = ["drop", "good", "drop"]  # the first job: dropped, then whole; the streamed job: dropped


@pytest.fixture(scope="module")
def faulty_server(tmp_path_factory, make_speech):
    root = tmp_path_factory.mktemp("retake-api")
    (root / "models").mkdir()
    speech = {"speech": str(make_speech(TEXT)), "first": str(make_speech(FIRST))}

    def faulty_engine(config, **options):  # the preview voice has no folder: the faulty backend stands in
        faulty = replace(
            config,
            pipeline_factory=FAULTY_FACTORY,
            pipeline_kwargs={"text": TEXT, "faults": FAULTS, **speech},
            model_dir=config.model_dir or "preview-stand-in",
            warmup_text="Hi.",
        )
        return Engine(faulty, stop_timeout_s=5.0, cancel_grace_s=5.0, **options)

    host = ModelHost(
        HostConfig(
            models_dir=root / "models",
            outputs_dir=root / "outputs",
            cache_dir=root / "cache",
            device="cpu",
            max_queue=2,
            start_timeout_s=120,
            preview=True,
        ),
        engine_factory=faulty_engine,
    )
    host.start()
    assert host.engine.start(wait=True, timeout=120), host.status()
    with gr.Blocks() as page:
        gr.Markdown("page")
    server = serve_page(
        page, host, bind_host="127.0.0.1", port=0, api_key=None, max_queue=2, upload_limit_bytes=1 << 20
    )
    server.outputs = root / "outputs"  # what sidecar_for reads
    yield server
    server.close()
    host.close()


BODY = {"model": "tts-1", "input": TEXT, "voice": "preview", "seed": 7, "check": True}


def test_a_dropped_sentence_is_retaken_by_v1_and_the_header_says_so(faulty_server, make_speech):
    answer = httpx.post(faulty_server.url + "v1/audio/speech", json={**BODY, "response_format": "wav"}, timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-cosyvoice-check"] == "retaken"
    assert answer.headers["x-cosyvoice-check-note"].startswith("retaken: take 2 of 2 passed (take 1: too short")
    whole, _ = soundfile.read(make_speech(TEXT))
    saved = faulty_server.outputs / answer.headers["x-cosyvoice-file"]
    assert answer.content == saved.read_bytes()
    samples, rate = soundfile.read(saved)
    assert abs(len(samples) / rate - len(whole) / 22050) < 0.5  # the whole take is the answer, not the dropped one
    sidecar = sidecar_for(faulty_server, answer.headers["x-cosyvoice-job-id"])
    sentence = sidecar["check"]["sentences"][0]
    assert sidecar["check"]["status"] == "retaken" and sentence["kept"] == 2
    dropped, whole_take = sentence["takes"]
    assert not dropped["passed"] and whole_take["passed"] and dropped["seed"] != whole_take["seed"]
    assert whole_take["metric"] == "WER"  # the recogniser heard the kept take
    files = [faulty_server.outputs / take["file"] for take in sentence["takes"]]
    assert all(file.parent.parent.name == TAKES_FOLDER for file in files)
    lengths = [len(soundfile.read(file)[0]) for file in files]
    assert lengths[0] < lengths[1] / 1.5  # both takes stay in outputs/, the dropped one short


def test_a_streamed_dropped_sentence_is_flagged_in_the_done_event(faulty_server):
    body = {**BODY, "response_format": "pcm", "stream_format": "sse"}
    answer = httpx.post(faulty_server.url + "v1/audio/speech", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    events = [json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:")]
    audio = b"".join(base64.b64decode(event["audio"]) for event in events if event["type"] == "speech.audio.delta")
    assert len(np.frombuffer(audio, dtype="<i2")) > 0  # heard before it was judged
    done = events[-1]
    assert done["type"] == "speech.audio.done" and done["check"] == "flagged", done
    assert "too short for the text" in done["check_note"]
