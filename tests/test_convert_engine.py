"""Voice conversion through the engine (the preview backend in a real worker process): the one queue, a typed
result, the sidecar's mode, source hash and duration, progress per piece, and a cancel that keeps nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.conversion_request import ConversionRequest
from cosyvoice_mac.engine import Engine
from cosyvoice_mac.engine.jobs import JobCancelled, JobFailed
from cosyvoice_mac.request import PostSettings, Voice
from tests.fakes.fake_pipeline import preview_worker_config, result_and_events, submit_and_wait

DEADLINE = 180.0


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    config = preview_worker_config(tmp_path_factory.mktemp("convert-engine"), torch_threads=1)
    engine = Engine(config, stop_timeout_s=5.0, start_timeout_s=DEADLINE)
    engine.outputs = Path(config.outputs_dir)
    assert engine.start(timeout=DEADLINE), engine.status()
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def prompt(make_speech):
    return str(make_speech("This is the voice I would like you to copy, please.", seconds=4.0))


@pytest.fixture(scope="module")
def long_source(make_speech, tmp_path_factory):
    """~40 s: two pieces, so a cancel can land between them."""
    speech, rate = soundfile.read(make_speech("The birch canoe slid on the smooth planks."), dtype="float32")
    pause = np.zeros(int(0.7 * rate), np.float32)
    path = tmp_path_factory.mktemp("long") / "long.wav"
    soundfile.write(path, np.concatenate([speech, pause] * int(40 / (len(speech) / rate + 0.7))), rate)
    return path


def test_a_conversion_job_saves_its_wav_and_a_voice_conversion_sidecar(engine, prompt, make_speech):
    source = make_speech("Glue the sheet to the dark blue background.")
    request = ConversionRequest.build(str(source), Voice.recording(prompt), post=PostSettings(loudness_lufs=-20.0))
    result, events = result_and_events(engine, request, DEADLINE)
    seconds = soundfile.info(str(source)).duration
    assert result.mode == "voice_conversion" and result.is_conversion and result.text == ""
    assert result.source_duration_s == pytest.approx(seconds, abs=0.01) and len(result.source_hash) == 64
    assert abs(result.duration_s - seconds) < 0.05
    sidecar = json.loads(open(result.sidecar_path).read())
    assert sidecar["mode"] == "voice_conversion" and sidecar["source"] == source.name
    assert sidecar["source_hash"] == result.source_hash and sidecar["source_duration_s"] == result.source_duration_s
    assert sidecar["post"]["target_lufs"] == -20.0 and "glossary" not in sidecar
    assert [e.kind for e in events if e.kind == "progress"] == ["progress"]


def test_noise_fails_with_the_sentence_and_the_engine_goes_on(engine, prompt, tmp_path):
    noise = tmp_path / "noise.wav"
    soundfile.write(noise, 0.3 * np.random.default_rng(2).standard_normal(48000).astype(np.float32), 16000)
    job_id = engine.submit(ConversionRequest.build(str(noise), Voice.recording(prompt)))
    with pytest.raises(JobFailed, match="no speech to convert"):
        engine.result(job_id, timeout=DEADLINE)
    assert engine.status()["state"] == "ready"


def test_cancel_keeps_nothing_half_written(engine, prompt, long_source):
    outputs = engine.outputs
    before = set(outputs.iterdir()) if outputs.exists() else set()
    request = ConversionRequest.build(str(long_source), Voice.recording(prompt))
    job_id, event = submit_and_wait(engine, request, {"progress"}, DEADLINE)
    assert (event.segment_index, event.segment_count) == (0, 2)
    assert engine.cancel(job_id)
    with pytest.raises(JobCancelled):
        engine.result(job_id, timeout=DEADLINE)
    after = set(outputs.iterdir()) if outputs.exists() else set()
    assert after == before  # no WAV, no sidecar, no temporary file
