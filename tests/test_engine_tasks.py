"""Worker tasks: saving a voice straight from a recording (features extracted in the worker, before any
generation), tasks between jobs, and tasks that meet a dead, restarting, loading or closing worker.
The worker is a real process around the fake pipeline; every wait has a deadline."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import soundfile

from cosyvoice_mac.engine import EngineError, TaskFailed, VoiceError, jobs
from cosyvoice_mac.engine.voice_library import VoiceAudioRefused, VoiceTranscriptRefused
from cosyvoice_mac.request import Request
from tests.fakes.fake_pipeline import fake_request, fake_worker_config, quick_engine, started, submit_and_wait, tone

DEADLINE = 60.0
SLOW = "[slow] " + " ".join(f"Sentence {i}." for i in range(8))  # 8 x 0.25 s


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    engine = started(quick_engine(fake_worker_config(tmp_path_factory.mktemp("tasks"), extract_s=0.3, segment_s=0.25)))
    yield engine
    engine.close()


@pytest.fixture
def recording(tmp_path, make_speech):
    """``make(number)``: a recording of someone speaking, of its own for each number (the speech at another
    level, so another content hash): a tone is no voice, and the library refuses it."""
    speech, rate = soundfile.read(
        make_speech("Somebody reads a sentence for this voice.", seconds=3.0), dtype="float32"
    )

    def make(number: float) -> str:
        path = tmp_path / f"voice-{number:g}.wav"
        soundfile.write(path, speech * (number / 400.0), rate, subtype="PCM_16")
        return str(path)

    return make


def test_a_voice_is_saved_from_a_recording_before_any_generation_and_reused(engine, recording):
    path = recording(141.0)
    extractions = engine.status()["feature_extractions"]
    saved = engine.save_voice_from_audio("Aunt May", path, "  hello there  ", timeout=DEADLINE)
    assert saved["name"] == "Aunt May" and saved["transcript"] == "hello there"
    assert saved["model_id"] == engine.status()["model"] and saved["audio_file"]
    assert engine.status()["feature_extractions"] == extractions + 1  # done in the worker, now
    assert os.path.isfile(engine.voices.get("Aunt May")["audio_path"])  # a copy outlives the upload

    request = Request.build("Spoken by a saved voice.", engine.voice("Aunt May"))
    result = engine.result(engine.submit(request), timeout=DEADLINE)
    assert result.cache_hit and result.prompt_hash == saved["audio_hash"] and result.mode == "zero_shot"
    assert engine.status()["feature_extractions"] == extractions + 1

    again = engine.save_voice_from_audio("Aunt May, again", path, None, timeout=DEADLINE)
    assert again["audio_hash"] == saved["audio_hash"] and again["transcript"] is None
    assert engine.status()["feature_extractions"] == extractions + 1  # the same recording: from the cache


def test_bad_names_files_and_audio_are_refused_with_a_reason(engine, recording, tmp_path):
    path = recording(150.0)
    with pytest.raises(VoiceError, match="needs a name"):
        engine.save_voice_from_audio("   ", path)
    engine.save_voice_from_audio("Taken", path, timeout=DEADLINE)
    with pytest.raises(EngineError, match="already exists"):
        engine.save_voice_from_audio("Taken", recording(151.0), timeout=DEADLINE)
    assert engine.save_voice_from_audio("Taken", recording(152.0), overwrite=True, timeout=DEADLINE)
    with pytest.raises(EngineError, match="does not exist"):
        engine.save_voice_from_audio("Nowhere", tmp_path / "missing.wav")
    notes = tmp_path / "notes.wav"
    notes.write_text("meeting notes, not a recording")
    with pytest.raises(VoiceAudioRefused, match="not an audio file"):  # the one prompt check, before the worker
        engine.save_voice_from_audio("Notes", notes, timeout=DEADLINE)
    assert "Notes" not in [voice["name"] for voice in engine.voices.list()]
    with pytest.raises(TaskFailed, match="unknown task"):
        engine.run_task("paint", {}, timeout=DEADLINE)
    assert engine.result(engine.submit(fake_request("Still working.")), timeout=DEADLINE)


def test_a_voice_no_job_could_use_is_refused_before_the_worker_and_keeps_what_was_saved(engine, recording, tmp_path):
    """One rule at every door that saves or changes a voice (the page, the API and the CLI end here): a name the
    built-in voice answers to, a transcript the request contract refuses, and a pure tone (which has sound and
    length, but no one speaking: the speech detector conversion uses refuses it) were all saved before."""
    pure_tone = tmp_path / "tone.wav"
    soundfile.write(pure_tone, tone(3.0, frequency=220.0), 24000, subtype="PCM_16")
    engine.save_voice_from_audio("Kept", recording(212.0), "What the recording says.", timeout=DEADLINE)
    kept = engine.voices.get("Kept")
    extractions = engine.status()["feature_extractions"]
    with pytest.raises(VoiceAudioRefused, match="tone.wav holds no speech") as refused:
        engine.save_voice_from_audio("Tone", pure_tone, timeout=DEADLINE)
    assert refused.value.problem == "not_speech" and refused.value.field == "audio"
    with pytest.raises(VoiceError, match="built-in preview voice") as refused:
        engine.save_voice_from_audio("Preview", recording(210.0), timeout=DEADLINE)
    assert refused.value.field == "name"
    with pytest.raises(VoiceTranscriptRefused, match="1,001 characters; the limit is 1,000") as refused:
        engine.save_voice_from_audio("Wordy", recording(211.0), "x" * 1001, timeout=DEADLINE)
    assert refused.value.field == "transcript"
    with pytest.raises(VoiceAudioRefused, match="no speech"):
        engine.replace_voice("Kept", pure_tone, timeout=DEADLINE)
    with pytest.raises(VoiceError, match="built-in preview voice"):
        engine.voices.rename("Kept", " PREVIEW ")
    with pytest.raises(VoiceTranscriptRefused, match="the limit is 1,000"):
        engine.voices.set_transcript("Kept", "y" * 100_000)
    assert engine.voices.get("Kept") == kept  # its recording, name and transcript as they were
    assert engine.status()["feature_extractions"] == extractions  # all refused before the worker was asked
    assert not {"Tone", "Preview", "preview", "Wordy"} & {voice["name"] for voice in engine.voices.list()}
    engine.voices.delete("Kept")


def _saved_for_another_model(engine, name: str, path: str, digit: str) -> dict:
    """A saved voice whose features were made by another model (as after a model switch): its audio is kept."""
    return engine.voices.save(name, audio_hash=digit * 64, model_id="another-model", audio=path)


def test_a_jobs_voices_are_prepared_together_in_one_task_and_a_broken_one_is_named(engine, recording):
    engine.save_voice_from_audio("Cached", recording(190.0), timeout=DEADLINE)
    for name, frequency, digit in (("Moved 1", 191.0, "1"), ("Moved 2", 192.0, "2"), ("Broken", 193.0, "3")):
        _saved_for_another_model(engine, name, recording(frequency), digit)
    Path(engine.voices.get("Broken")["audio_path"]).write_text("the stored recording was damaged")
    before = engine.status()["feature_extractions"]

    outcomes = engine.prepare_voices(["Cached", "Moved 1", "Moved 2", "Broken", "Moved 1"], timeout=DEADLINE)

    assert list(outcomes) == ["Cached", "Moved 1", "Moved 2", "Broken"]  # in order, each once
    assert outcomes["Cached"]["cache"] == "memory"
    assert outcomes["Moved 1"]["cache"] == outcomes["Moved 2"]["cache"] == "extracted"
    assert "not an audio file this app can read" in outcomes["Broken"]["error"]
    assert engine.status()["feature_extractions"] == before + 2
    result = engine.result(engine.submit(Request.build("Now known.", engine.voice("Moved 2"))), timeout=DEADLINE)
    assert result.cache_hit and result.prompt_hash == outcomes["Moved 2"]["audio_hash"]
    assert engine.prepare_voices(["Moved 1"], timeout=DEADLINE)["Moved 1"]["cache"] == "memory"
    assert engine.status()["feature_extractions"] == before + 2
    with pytest.raises(VoiceError, match="no saved voice named 'Nobody'"):  # refused before the worker
        engine.prepare_voices(["Moved 1", "Nobody"], timeout=DEADLINE)
    assert engine.prepare_voices([], timeout=DEADLINE) == {}


def test_a_task_runs_after_the_running_job_and_before_the_waiting_ones(engine, recording):
    heard = engine.subscribe()
    try:
        running, _ = submit_and_wait(engine, fake_request(SLOW), "progress", DEADLINE)
        waiting = engine.submit(fake_request("Next in line."))
        saved_at = {}

        def save():
            engine.save_voice_from_audio("Between jobs", recording(160.0), timeout=DEADLINE)
            saved_at["t"] = time.monotonic()

        saver = threading.Thread(target=save)
        saver.start()
        saver.join(DEADLINE)
        assert "t" in saved_at
        engine.result(waiting, timeout=DEADLINE)
    finally:
        engine.unsubscribe(heard)
    kinds = []
    while not heard.empty():
        event = heard.get_nowait()
        if event.job_id in (running, waiting) and event.kind in ("started", "done"):
            kinds.append((event.kind, event.job_id))
    assert kinds == [("started", running), ("done", running), ("started", waiting), ("done", waiting)]
    assert engine.result(running, timeout=0) and engine.position(waiting) is None


def test_a_timed_out_task_is_forgotten_and_its_late_answer_dropped(tmp_path, recording):
    with quick_engine(fake_worker_config(tmp_path, extract_s=2.0)) as slow_engine:
        assert slow_engine.start(timeout=DEADLINE)
        with pytest.raises(TimeoutError, match="within 0.3 s"):
            slow_engine.save_voice_from_audio("Late", recording(170.0), timeout=0.3)
        assert "Late" not in [voice["name"] for voice in slow_engine.voices.list()]
        assert slow_engine.result(slow_engine.submit(fake_request("After the late answer.")), timeout=DEADLINE)
        assert not slow_engine.tasks._tickets


def test_a_task_waits_for_the_model_to_load(tmp_path, recording):
    with quick_engine(fake_worker_config(tmp_path, load_s=1.5)) as loading:
        loading.start(wait=False)
        assert loading.status()["state"] == "starting"
        saved = loading.save_voice_from_audio("Patient", recording(180.0), timeout=DEADLINE)
        assert saved["model_id"] == loading.status()["model"] and loading.status()["state"] == "ready"


def test_a_task_fails_when_the_worker_dies_during_it_and_the_engine_recovers(tmp_path, recording):
    with quick_engine(fake_worker_config(tmp_path, extract_s=3.0)) as fragile:  # the warm-up extracts too
        assert fragile.start(timeout=DEADLINE)
        outcome = {}

        def save():
            try:
                fragile.save_voice_from_audio("Doomed", recording(190.0), timeout=DEADLINE)
            except Exception as error:  # what the caller sees
                outcome["error"] = error

        saver = threading.Thread(target=save)
        saver.start()
        deadline = time.monotonic() + DEADLINE
        while not any(ticket.sent for ticket in list(fragile.tasks._tickets.values())):
            assert time.monotonic() < deadline, "the task was never sent"
            time.sleep(0.05)
        os.kill(fragile.status()["worker_pid"], signal.SIGKILL)
        saver.join(DEADLINE)
        assert isinstance(outcome.get("error"), TaskFailed) and "try again" in str(outcome["error"])
        deadline = time.monotonic() + DEADLINE
        while fragile.status()["state"] != "ready":
            assert time.monotonic() < deadline, fragile.status()
            time.sleep(0.1)


def test_closing_the_engine_fails_its_tasks_and_refuses_new_ones(tmp_path, recording):
    loading = quick_engine(fake_worker_config(tmp_path, load_s=30.0))
    loading.start(wait=False)
    outcome = {}

    def save():
        try:
            loading.save_voice_from_audio("Never", recording(200.0), timeout=DEADLINE)
        except Exception as error:
            outcome["error"] = error

    saver = threading.Thread(target=save)
    saver.start()
    time.sleep(0.3)
    loading.close()
    saver.join(DEADLINE)
    assert isinstance(outcome.get("error"), TaskFailed) and "shut down" in str(outcome["error"])
    with pytest.raises(EngineError, match="not running"):
        loading.run_task(jobs.TASK_EXTRACT_PROMPT, {"audio": recording(201.0)})
