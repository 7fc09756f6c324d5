"""Prompt transcription in its own process: the words come back, the parent never loads torch, and a
recogniser that fails, dies, hangs or idles is handled without hanging the caller."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from cosyvoice_mac.engine import TranscriberProcess, TranscriptionFailed
from cosyvoice_mac.engine import transcriber as transcriber_module
from cosyvoice_mac.engine.asr import word_error_rate

SENTENCE = "This is the voice I would like you to copy, please."
DEADLINE_S = 240  # torch import and model load in the child on two busy cores


def exit_at_once(requests, replies) -> None:
    """A child that dies before answering (stands in for a crash inside the recogniser)."""
    raise SystemExit(3)


def never_answer(requests, replies) -> None:
    """A child that takes requests and never answers (stands in for a stuck recogniser)."""
    while True:
        if requests.recv() is None:
            return


@pytest.fixture(scope="module")
def spoken(make_speech):
    return make_speech(SENTENCE)  # its natural length: a cut repetition would add words


def test_the_words_come_back_and_the_asking_process_never_loads_torch(spoken):
    code = (
        "import json, sys\n"
        "from cosyvoice_mac.engine import TranscriberProcess\n"
        "transcriber = TranscriberProcess()\n"
        f"text = transcriber.transcribe({str(spoken)!r})\n"
        "pid = transcriber.pid\n"
        "transcriber.close()\n"
        "print(json.dumps({'text': text, 'torch': 'torch' in sys.modules, 'pid': pid, 'after': transcriber.pid}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=DEADLINE_S)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["torch"] is False
    assert word_error_rate(SENTENCE, report["text"]) < 0.2, report["text"]
    assert report["pid"] and report["after"] is None


def test_a_file_that_is_not_audio_is_explained_and_the_process_is_reused(tmp_path, spoken):
    notes = tmp_path / "notes.wav"
    notes.write_text("meeting notes, not a recording")
    transcriber = TranscriberProcess(idle_s=1.0)
    try:
        with pytest.raises(TranscriptionFailed, match="not an audio file"):
            transcriber.transcribe(notes)
        pid = transcriber.pid
        assert pid is not None
        assert word_error_rate(SENTENCE, transcriber.transcribe(spoken)) < 0.2
        assert transcriber.pid == pid  # the loaded model serves the next request
        deadline = time.monotonic() + 30
        while transcriber.pid is not None:  # idle for idle_s: the process ends
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        transcriber.close()
    with pytest.raises(TranscriptionFailed, match="shutting down"):
        transcriber.transcribe(spoken)


def test_a_recogniser_that_dies_is_reported_and_started_again_next_time(spoken, monkeypatch):
    monkeypatch.setattr(transcriber_module, "transcriber_main", exit_at_once)
    transcriber = TranscriberProcess()
    try:
        for _ in range(2):
            with pytest.raises(TranscriptionFailed, match="stopped unexpectedly"):
                transcriber.transcribe(spoken)
    finally:
        transcriber.close()


def test_a_recogniser_that_never_answers_is_stopped(spoken, monkeypatch):
    monkeypatch.setattr(transcriber_module, "transcriber_main", never_answer)
    transcriber = TranscriberProcess(silence_s=1.0)
    started = time.monotonic()
    try:
        with pytest.raises(TranscriptionFailed, match="no answer for 1 s"):
            transcriber.transcribe(spoken)
        assert time.monotonic() - started < 30 and transcriber.pid is None
    finally:
        transcriber.close()
