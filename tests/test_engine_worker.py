"""The engine with a real worker process around the fake pipeline: queue, cancel, restart, crashes,
device fallback, speaker cache, outputs and named voices. Every wait has a deadline."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import threading
import time

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.engine import EngineError, Job, JobCancelled, JobFailed, QueueFull, VoiceError
from cosyvoice_mac.request import Request, Voice
from cosyvoice_mac.sound.wav import read_wav_info
from tests.fakes.fake_pipeline import fake_request, fake_worker_config, quick_engine, started, submit_and_wait, tone

DEADLINE = 60.0
SLOW = "[slow] " + " ".join(f"Sentence {i}." for i in range(12))  # 12 x 0.25 s, cancellable


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    engine = started(quick_engine(fake_worker_config(tmp_path_factory.mktemp("engine"), extract_s=0.3, segment_s=0.25)))
    yield engine
    engine.close()


def _started(engine, job: Job) -> str:
    """Submit ``job`` and return once the worker is inside it (a stuck job never shows progress)."""
    job_id, _ = submit_and_wait(engine, job, "started" if "[hang]" in job.text else "progress", DEADLINE)
    if "[hang]" in job.text:  # a stuck job sends nothing more: give the worker time to get past its start
        time.sleep(0.5)
    return job_id


def test_one_job_at_a_time_in_submission_order_and_a_bounded_queue(engine):
    heard = engine.subscribe()
    try:
        running = _started(engine, fake_request(SLOW))
        waiting = [engine.submit(fake_request(f"Job {i}.")) for i in range(engine.queue.max_waiting)]
        assert [engine.position(job_id) for job_id in [running, *waiting]] == list(range(len(waiting) + 1))
        assert engine.status()["queue_length"] == len(waiting)
        with pytest.raises(QueueFull, match="queue is full"):
            engine.submit(fake_request("One too many."))
        for job_id in [running, *waiting]:
            engine.result(job_id, timeout=DEADLINE)
        assert engine.position(running) is None
    finally:
        engine.unsubscribe(heard)
    order = []
    while not heard.empty():
        event = heard.get_nowait()
        if event.kind in ("started", "done"):
            order.append((event.kind, event.job_id))
    expected = [(kind, job_id) for job_id in [running, *waiting] for kind in ("started", "done")]
    assert order[-len(expected) :] == expected  # each job starts only after the previous one is done


def test_cancel_a_waiting_job_and_a_running_one(engine):
    running = _started(engine, fake_request(SLOW))
    waiting = engine.submit(fake_request("Never runs."))
    assert engine.cancel(waiting) is True
    with pytest.raises(JobCancelled, match="before it started"):
        engine.result(waiting, timeout=0)

    with engine.subscribe() as heard:
        assert engine.cancel(running) is True
        with pytest.raises(JobCancelled):
            engine.result(running, timeout=DEADLINE)
        finished = [event for event in heard.of(running, timeout=1) if event.kind == "progress"]
    # stopped at the next sentence, not after all 12 (counted, not timed: a loaded machine is slow, not wrong)
    assert len(finished) <= 2
    assert engine.cancel(running) is False
    assert engine.result(engine.submit(fake_request("Still works.")), timeout=DEADLINE).segment_count == 1


def test_restart_cancels_the_running_job_and_overlapping_restarts_do_one(engine):
    before = engine.status()
    running = _started(engine, fake_request(SLOW))
    waiting = engine.submit(fake_request("After the restart."))
    outcomes = []
    threads = [threading.Thread(target=lambda: outcomes.append(engine.restart(timeout=DEADLINE))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE)
    assert outcomes == [True, True]
    after = engine.status()
    assert after["restarts"] == before["restarts"] + 1
    assert after["worker_pid"] != before["worker_pid"] and after["state"] == "ready"
    with pytest.raises(JobCancelled, match="engine restarted"):
        engine.result(running, timeout=0)
    assert engine.result(waiting, timeout=DEADLINE).text == "After the restart."


def test_kill_9_fails_the_running_job_and_keeps_the_waiting_ones(engine):
    before = engine.status()
    running = _started(engine, fake_request(SLOW))
    waiting = [engine.submit(fake_request(f"Kept {i}.")) for i in range(3)]
    os.kill(before["worker_pid"], signal.SIGKILL)
    with pytest.raises(JobFailed, match="SIGKILL") as failure:
        engine.result(running, timeout=DEADLINE)
    assert "Submit this job again" in str(failure.value)
    results = [engine.result(job_id, timeout=DEADLINE) for job_id in waiting]
    assert [result.text for result in results] == ["Kept 0.", "Kept 1.", "Kept 2."]
    after = engine.status()
    assert after["worker_pid"] not in (None, before["worker_pid"]) and after["restarts"] == before["restarts"] + 1


def test_a_stuck_job_that_ignores_cancel_gets_its_worker_restarted(engine):
    before = engine.status()
    stuck = _started(engine, fake_request("[hang] Stuck here. Forever."))
    engine.cancel(stuck)
    with pytest.raises(JobCancelled, match="did not stop within"):
        engine.result(stuck, timeout=DEADLINE)
    assert engine.result(engine.submit(fake_request("Next.")), timeout=DEADLINE).segment_count == 1
    assert engine.status()["worker_pid"] != before["worker_pid"]


def test_a_job_past_its_time_limit_is_stopped(engine):
    engine.job_timeout_s = 0.5
    try:
        stuck = _started(engine, fake_request("[hang] Too long. Really."))
        with pytest.raises(JobFailed, match="longer than the limit of 0.5 s"):
            engine.result(stuck, timeout=DEADLINE)
    finally:
        engine.job_timeout_s = None
    assert engine.result(engine.submit(fake_request("Fine.")), timeout=DEADLINE)


def test_restart_forces_a_stuck_worker_down(engine):
    stuck = _started(engine, fake_request("[hang] Stuck. Here."))
    started = time.monotonic()
    assert engine.restart(timeout=DEADLINE) is True
    assert time.monotonic() - started < DEADLINE / 2
    with pytest.raises(JobCancelled, match="restarted"):
        engine.result(stuck, timeout=0)


def test_second_request_for_a_voice_skips_extraction_and_the_cache_survives_restart(engine, tmp_path):
    prompt = tone(3.0, frequency=171.0)
    first = engine.result(engine.submit(Request.build("One.", Voice.from_samples(prompt, 24000))), DEADLINE)
    extractions = engine.status()["feature_extractions"]
    assert first.cache_hit is False and first.timings["prompt"] >= 0.3

    second = engine.result(engine.submit(Request.build("Two.", Voice.from_samples(prompt, 24000))), DEADLINE)
    assert second.cache_hit is True and second.prompt_hash == first.prompt_hash
    assert engine.status()["feature_extractions"] == extractions  # feature extraction not called
    assert second.timings["prompt"] < first.timings["prompt"]

    path = tmp_path / "same-voice.wav"
    soundfile.write(path, prompt, 24000, subtype="FLOAT")  # the same recording, uploaded as a file
    assert engine.restart(timeout=DEADLINE)
    third = engine.result(engine.submit(Request.build("Three.", Voice.recording(str(path)))), DEADLINE)
    status = engine.status()
    assert third.cache_hit is True and third.prompt_hash == first.prompt_hash
    assert status["feature_extractions"] == 0 and status["cache"]["disk_hits"] == 1


def test_results_are_saved_with_sidecar_and_info(engine):
    job = Job(
        Request.build(
            "Saved words. Two sentences!",
            Voice.from_samples(tone(), 24000, transcript="the prompt"),
            seed=42,
            speed=1.25,
        )
    )
    result = engine.result(engine.submit(job), timeout=DEADLINE)
    assert result.output_error is None
    assert re.fullmatch(rf"\d{{8}}-\d{{6}}-{job.job_id[:8]}\.wav", os.path.basename(result.output_path))
    sidecar = json.loads(open(result.sidecar_path, encoding="utf-8").read())
    expected = {
        "text": job.text,
        "mode": "zero_shot",
        "instruct": None,
        "seed": 42,
        "speed": 1.25,
        "model": result.model,
        "device": "cpu",
        "prompt_hash": result.prompt_hash,
    }
    assert {key: sidecar[key] for key in expected} == expected
    assert set(sidecar["timings"]) >= {"prompt", "synthesis", "total"}
    assert json.loads(read_wav_info(result.output_path)["ICMT"]) == sidecar
    saved, rate = soundfile.read(result.output_path, dtype="float32")
    assert rate == result.sample_rate and np.abs(saved - result.samples()).max() < 1e-3
    assert result.segment_count == 2 and result.seed == 42


def test_unwritable_outputs_still_return_the_audio(tmp_path):
    config = fake_worker_config(tmp_path)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    config.outputs_dir = str(blocker / "outputs")
    with quick_engine(config) as engine:
        assert engine.start(timeout=DEADLINE)
        result = engine.result(engine.submit(fake_request("Keep me.")), timeout=DEADLINE)
    assert result.output_path is None and "could not save the result" in result.output_error
    assert result.samples().size > 0 and np.abs(result.samples()).max() > 0.1


def test_named_voices_reuse_cached_features(engine, make_speech):
    path = make_speech("Hello there, this is the narrator speaking.", seconds=3.0)  # a tone is no voice to save
    first_id = engine.submit(Request.build("Hello.", Voice.recording(str(path), transcript="hello there")))
    first = engine.result(first_id, timeout=DEADLINE)
    name = f"Narrator {first_id[:6]}"
    saved = engine.save_voice(name, first_id)
    assert saved["audio_hash"] == first.prompt_hash and name in [v["name"] for v in engine.voices.list()]

    extractions = engine.status()["feature_extractions"]
    again = engine.result(engine.submit(Request.build("Again.", engine.voice(name))), timeout=DEADLINE)
    assert again.cache_hit and again.prompt_hash == first.prompt_hash and again.mode == "zero_shot"
    assert engine.status()["feature_extractions"] == extractions

    shutil.rmtree(os.path.join(engine.config.cache_dir, "speakers"))  # the OS purged the cache folder
    assert engine.restart(timeout=DEADLINE)
    rebuilt = engine.result(engine.submit(Request.build("Rebuilt.", engine.voice(name))), timeout=DEADLINE)
    assert not rebuilt.cache_hit and rebuilt.prompt_hash == first.prompt_hash  # from the voice's own audio copy
    assert engine.status()["feature_extractions"] == 1

    engine.voices.rename(name, name + " 2")
    with pytest.raises(VoiceError, match="^there is no saved voice named"):  # refused at submission
        engine.voice(name)
    renamed = Request.build("Gone.", engine.voice(name + " 2"))
    engine.voices.delete(name + " 2")
    engine.voices.save(name + " 2", audio_hash=first.prompt_hash, model_id=first.model)
    engine.voices.delete(name + " 2")
    with pytest.raises(VoiceError, match="^there is no saved voice named"):  # deleted after it was built
        engine.submit(renamed)
    engine.voices.save(name + " 2", audio_hash=first.prompt_hash, model_id=first.model)
    engine.voices.delete(name + " 2")
    assert name + " 2" not in [v["name"] for v in engine.voices.list()]


def test_bad_input_fails_the_job_only(engine):
    with pytest.raises(JobFailed, match="unknown markup"):
        engine.result(engine.submit(fake_request("[bad] markup")), timeout=DEADLINE)
    assert engine.result(engine.submit(fake_request("Fine again.")), timeout=DEADLINE)


def test_device_error_retries_once_on_cpu_then_falls_back_for_good(tmp_path):
    config = fake_worker_config(tmp_path, home_device="mps")
    with quick_engine(config) as engine:
        heard = engine.subscribe()
        assert engine.start(timeout=DEADLINE) and engine.status()["device"] == "mps"
        first_id, retry = submit_and_wait(engine, fake_request("[device-error] Hello."), "retry", DEADLINE)
        assert "MPS device" in retry.message
        first = engine.result(first_id, timeout=DEADLINE)
        assert first.fell_back_to_cpu and first.device == "cpu" and "MPS" in first.fallback_reason
        assert "retried on the CPU" in engine.queue.get(first_id).terminal.message

        normal = engine.result(engine.submit(fake_request("Back home.")), timeout=DEADLINE)
        assert normal.device == "mps" and not normal.fell_back_to_cpu
        assert engine.status()["fell_back"] is False

        for text in ("[device-error] Once.", "[device-error] Twice."):
            assert engine.result(engine.submit(fake_request(text)), timeout=DEADLINE).fell_back_to_cpu
        status = engine.status()
        assert status["device"] == "cpu" and status["fell_back"] is True
        assert "2 jobs in a row" in status["fallback_reason"]
        later = engine.result(engine.submit(fake_request("Stays on the CPU.")), timeout=DEADLINE)
        assert later.device == "cpu" and not later.fell_back_to_cpu
        kinds = []
        while not heard.empty():
            kinds.append(heard.get_nowait().kind)
        assert "device_fallback" in kinds


def test_a_model_that_cannot_load_is_reported_and_refuses_jobs(tmp_path):
    with quick_engine(fake_worker_config(tmp_path, fail_load=True), max_load_failures=2) as engine:
        assert engine.start(timeout=DEADLINE) is False
        status = engine.status()
        assert status["state"] == "error" and "llm.pt is missing" in status["last_error"]
        with pytest.raises(EngineError, match="not available"):
            engine.submit(fake_request("Hello."))


def test_silent_warm_up_never_reports_ready(tmp_path):
    with quick_engine(fake_worker_config(tmp_path, silent=True), max_load_failures=1) as engine:
        assert engine.start(timeout=DEADLINE) is False
        assert "silent" in engine.status()["last_error"]


def test_close_stops_the_worker_process(tmp_path):
    engine = quick_engine(fake_worker_config(tmp_path))
    assert engine.start(timeout=DEADLINE)
    pid = engine.status()["worker_pid"]
    engine.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid)
    with pytest.raises(EngineError):
        engine.submit(fake_request("Too late."))


def test_close_while_the_model_loads_ends_the_worker_at_once(tmp_path):
    """A loading worker reads no command until it is ready and holds no work: it is not given the polite stop's
    grace (10 s here), which Ctrl-C during a model load used to wait out."""
    from cosyvoice_mac.engine import Engine

    engine = Engine(fake_worker_config(tmp_path, load_s=60.0), stop_timeout_s=10.0)
    engine.start(wait=False)
    deadline = time.monotonic() + DEADLINE
    while engine.status().get("worker_pid") is None:
        assert time.monotonic() < deadline, engine.status()
        time.sleep(0.05)
    pid = engine.status()["worker_pid"]
    assert engine.status()["state"] == "starting"
    started_at = time.monotonic()
    engine.close()
    assert time.monotonic() - started_at < 5.0
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_stopped_worker_is_noticed_killed_and_replaced_keeping_the_queue(tmp_path):
    """SIGSTOP mid-job: the status says so within the bound, the job fails saying why, the queue survives."""
    engine = started(quick_engine(fake_worker_config(tmp_path, segment_s=0.25), liveness_timeout_s=1.5))
    try:
        before = engine.status()
        running = _started(engine, fake_request(SLOW))
        waiting = [engine.submit(fake_request(f"Kept {i}.")) for i in range(2)]
        os.kill(before["worker_pid"], signal.SIGSTOP)
        stopped_at = time.monotonic()
        seen = set()
        while time.monotonic() - stopped_at < 10 and engine.position(running) == 0:
            seen.add(engine.status()["state"])
            time.sleep(0.05)
        assert "unresponsive" in seen
        with pytest.raises(JobFailed, match="stopped answering") as failure:
            engine.result(running, timeout=DEADLINE)
        assert time.monotonic() - stopped_at < 30.0  # the bound is generous: the state above is the check
        assert "kept the waiting jobs" in str(failure.value)
        assert [engine.result(job_id, timeout=DEADLINE).text for job_id in waiting] == ["Kept 0.", "Kept 1."]
        after = engine.status()
        assert after["worker_pid"] != before["worker_pid"] and after["state"] == "ready"
    finally:
        engine.close()


def test_a_busy_worker_is_not_taken_for_a_stopped_one(tmp_path):
    """A job that hangs inside the model keeps its heartbeat: only the job timeout or Stop end it."""
    engine = started(quick_engine(fake_worker_config(tmp_path), liveness_timeout_s=1.0))
    try:
        pid = engine.status()["worker_pid"]
        stuck = _started(engine, fake_request("[hang] Busy. Very busy."))
        time.sleep(3.0)
        assert engine.status()["state"] == "ready" and engine.status()["worker_pid"] == pid
        engine.cancel(stuck)
        with pytest.raises(JobCancelled):
            engine.result(stuck, timeout=DEADLINE)
    finally:
        engine.close()


def test_ten_restarts_at_once_are_one_and_a_job_that_never_began_runs_after_it(engine):
    before = engine.status()
    running = _started(engine, fake_request(SLOW))
    outcomes = []
    threads = [threading.Thread(target=lambda: outcomes.append(engine.restart(timeout=DEADLINE))) for _ in range(10)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    queued_meanwhile = engine.submit(fake_request("Submitted during the restart."))
    for thread in threads:
        thread.join(DEADLINE)
    assert outcomes == [True] * 10
    assert engine.status()["restarts"] == before["restarts"] + 1
    with pytest.raises(JobCancelled, match="nobody pressed Stop"):
        engine.result(running, timeout=0)
    assert engine.result(queued_meanwhile, timeout=DEADLINE).text == "Submitted during the restart."
