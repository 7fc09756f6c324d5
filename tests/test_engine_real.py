"""The engine driving the REAL pipeline on tiny model folders in the official layout.

The weights are random (so the audio is noise), but every step is the real one: model loading,
warm-up, ONNX feature extraction, LLM, flow, vocoder, the speaker cache and the outputs.
"""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.engine import Engine, JobCancelled, JobFailed, WorkerConfig
from cosyvoice_mac.request import Request, Voice
from cosyvoice_mac.sound.wav import pcm16
from tests.fakes.fake_pipeline import WRAPPED_REAL_FACTORY, result_and_events, submit_and_wait
from tests.fakes.onnx_models import make_tiny_model_dir

DEADLINE = 120.0
LONG_TEXT = (
    "This sentence is long enough to keep the tiny model busy for a while, "
    "and then it goes on a little further so that there is time to interrupt it."
)


def _config(tmp_path, version="cosyvoice3", **changes) -> WorkerConfig:
    model_dir = make_tiny_model_dir(version, tmp_path / f"{version}_model")
    options = dict(
        model_dir=str(model_dir),
        device="cpu",
        outputs_dir=str(tmp_path / "outputs"),
        cache_dir=str(tmp_path / "cache"),
        torch_threads=1,
    )
    return WorkerConfig(**{**options, **changes})


def _engine(config) -> Engine:
    return Engine(config, stop_timeout_s=5.0, cancel_grace_s=10.0, start_timeout_s=DEADLINE)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    engine = _engine(_config(tmp_path_factory.mktemp("real")))
    assert engine.start(timeout=DEADLINE), engine.status()
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def voice(make_speech):
    return str(make_speech("This is the voice I would like you to copy, please.", seconds=4.0))


def _audible(audio: np.ndarray) -> bool:
    return audio.size > 0 and bool(np.isfinite(audio).all()) and float(np.sqrt(np.mean(audio**2))) > 1e-4


def test_ready_only_after_a_real_warm_up(engine):
    status = engine.status()
    assert status["state"] == "ready" and status["version"] == "cosyvoice3"
    assert status["device"] == "cpu" and status["dtype"] == "float32" and status["fell_back"] is False
    assert status["model"].startswith("cosyvoice3_model-")
    assert status["memory"]["rss_bytes"] > 0 and status["queue_length"] == 0


def test_cache_hit_on_the_second_request_and_after_restart(engine, voice):
    job = Request.build(
        "Hello there.", Voice.recording(voice, transcript="This is the voice I would like you to copy.")
    )
    first = engine.result(engine.submit(job), timeout=DEADLINE)
    extractions = engine.status()["feature_extractions"]
    assert not first.cache_hit and extractions >= 1 and _audible(first.samples())
    assert first.mode == "zero_shot" and first.sample_rate == 24000

    second = engine.result(engine.submit(Request.build("Hello again.", Voice.recording(voice))), timeout=DEADLINE)
    assert second.cache_hit and second.prompt_hash == first.prompt_hash and second.mode == "cross_lingual"
    assert engine.status()["feature_extractions"] == extractions  # feature extraction not called
    assert second.timings["prompt"] < first.timings["prompt"]

    assert engine.restart(timeout=DEADLINE)
    third = engine.result(engine.submit(Request.build("After a restart.", Voice.recording(voice))), timeout=DEADLINE)
    assert third.cache_hit and engine.status()["feature_extractions"] == 0
    assert _audible(third.samples())


def test_outputs_hold_the_real_result(engine, voice):
    result = engine.result(engine.submit(Request.build("Save this.", Voice.recording(voice), seed=3)), timeout=DEADLINE)
    sidecar = json.loads(open(result.sidecar_path, encoding="utf-8").read())
    assert sidecar["seed"] == 3 and sidecar["model"] == result.model and sidecar["device"] == "cpu"
    assert sidecar["version"] == "cosyvoice3" and sidecar["prompt_hash"] == result.prompt_hash
    assert {"llm", "flow", "vocoder", "total"} <= set(sidecar["timings"])
    saved, rate = soundfile.read(result.output_path, dtype="int16")  # the data chunk, whatever chunks surround it
    assert rate == result.sample_rate and saved.tobytes() == pcm16(result.samples())


def test_same_seed_gives_the_same_audio(engine, voice):
    runs = [
        engine.result(engine.submit(Request.build("Repeat me.", Voice.recording(voice), seed=11)), DEADLINE)
        for _ in range(2)
    ]
    assert np.array_equal(runs[0].samples(), runs[1].samples())


def test_cancel_a_running_real_job(engine, voice):
    job_id, _ = submit_and_wait(engine, Request.build(LONG_TEXT, Voice.recording(voice)), "started", DEADLINE)
    engine.cancel(job_id)
    with pytest.raises(JobCancelled):
        engine.result(job_id, timeout=DEADLINE)
    assert engine.status()["state"] == "ready"


def test_kill_9_loses_no_waiting_job(engine, voice):
    pid = engine.status()["worker_pid"]
    running, _ = submit_and_wait(engine, Request.build(LONG_TEXT, Voice.recording(voice)), "started", DEADLINE)
    waiting = [engine.submit(Request.build(f"Number {i}.", Voice.recording(voice))) for i in range(2)]
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(JobFailed, match="SIGKILL"):
        engine.result(running, timeout=DEADLINE)
    results = [engine.result(job_id, timeout=DEADLINE) for job_id in waiting]
    assert all(_audible(result.samples()) and result.cache_hit for result in results)
    assert engine.status()["worker_pid"] not in (None, pid)


def test_device_error_is_retried_on_the_cpu(tmp_path, voice):
    config = _config(
        tmp_path, pipeline_factory=WRAPPED_REAL_FACTORY, device="auto", pipeline_kwargs={"home_device": "mps"}
    )
    with _engine(config) as engine:
        assert engine.start(timeout=DEADLINE) and engine.status()["device"] == "mps"
        request = Request.build("[device-error] Try me.", Voice.recording(voice))
        retried = engine.result(engine.submit(request), DEADLINE)
        assert retried.fell_back_to_cpu and retried.device == "cpu" and "MPS device" in retried.fallback_reason
        assert _audible(retried.samples())
        after = engine.result(engine.submit(Request.build("Home again.", Voice.recording(voice))), DEADLINE)
        assert after.device == "mps" and not after.fell_back_to_cpu and engine.status()["fell_back"] is False


def test_a_voice_saved_from_a_recording_is_ready_before_any_generation(engine, make_speech):
    recording = str(make_speech("A different speaker saves this voice for later.", seconds=3.5))
    extractions = engine.status()["feature_extractions"]
    saved = engine.save_voice_from_audio(
        "Real voice", recording, "A different speaker saves this voice.", timeout=DEADLINE
    )
    assert saved["model_id"] == engine.status()["model"]
    assert engine.status()["feature_extractions"] == extractions + 1
    request = Request.build("Spoken by the saved voice.", engine.voice("Real voice"))
    result = engine.result(engine.submit(request), DEADLINE)
    assert result.cache_hit and result.prompt_hash == saved["audio_hash"] and result.mode == "zero_shot"
    assert engine.status()["feature_extractions"] == extractions + 1 and _audible(result.samples())


def test_streaming_sends_playable_chunks_before_the_job_ends(engine, voice):
    request = Request.build(LONG_TEXT, Voice.recording(voice), seed=5, stream=True)
    result, events = result_and_events(engine, request, DEADLINE)
    chunks = [event.audio for event in events if event.kind == "progress"]
    assert len(chunks) >= 2 and events[-1].kind == "done"
    assert all(event.sample_rate == 24000 for event in events if event.kind == "progress")
    assert np.allclose(np.concatenate(chunks), result.samples(), atol=1e-4)  # the saved file holds what was streamed
    assert os.path.isfile(result.output_path) and _audible(result.samples())


def test_a_voice_prepared_for_streaming_starts_without_building_its_flow_prefix(engine, make_speech):
    recording = str(make_speech("Someone new will stream with this voice very soon.", seconds=3.5))
    before = engine.status()
    prepared = engine.prepare_voice(recording, streaming=True, timeout=DEADLINE)
    after = engine.status()
    assert prepared["streaming_ready"] and prepared["model_id"] == after["model"]
    assert after["feature_extractions"] == before["feature_extractions"] + 1
    assert after["flow_prefix_builds"] == before["flow_prefix_builds"] + 1
    request = Request.build(LONG_TEXT, Voice.recording(recording), seed=5, stream=True)
    result = engine.result(engine.submit(request), DEADLINE)
    assert result.cache_hit and _audible(result.samples())
    assert engine.status()["flow_prefix_builds"] == after["flow_prefix_builds"]  # the request used the prepared one
    again = engine.prepare_voice(recording, streaming=True, timeout=DEADLINE)
    assert again["source"] in ("memory", "disk")
    assert engine.status()["flow_prefix_builds"] == after["flow_prefix_builds"]
