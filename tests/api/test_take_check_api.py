"""The take check at the doors: ``/v1/audio/speech/with-timestamps`` on the app's preview voice (real speech,
checked and timed by the worker's recogniser), the ``X-CosyVoice-Check`` header it shares with
``/v1/audio/speech``, and what the command line prints and writes from a result."""

from __future__ import annotations

import base64
import json

import httpx
import numpy as np
import pytest
import srt

from cosyvoice_mac.api.routes import check_headers
from cosyvoice_mac.api.streams import check_facts
from cosyvoice_mac.api.timestamps import character_alignment
from cosyvoice_mac.cli.main import build_parser
from cosyvoice_mac.cli.takes import say_check, write_captions_beside
from cosyvoice_mac.engine.jobs import JobResult
from tests.api.conftest import sidecar_for

pytest.importorskip("faster_whisper")

TEXT = "Please call Stella and ask her to bring these things with her from the store."


def test_with_timestamps_answers_audio_words_and_the_check(api_app):
    body = {"model": "tts-1", "input": TEXT, "voice": "preview", "response_format": "pcm", "seed": 3}
    answer = httpx.post(api_app.url + "v1/audio/speech/with-timestamps", json=body, timeout=300)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-cosyvoice-check"] == "passed"
    data = answer.json()
    samples = np.frombuffer(base64.b64decode(data["audio_base64"]), dtype="<i2")
    duration = len(samples) / int(answer.headers["x-cosyvoice-sample-rate"])
    assert [word["word"] for word in data["words"]] == TEXT.split()  # the text's words, as written
    starts = [word["start"] for word in data["words"]]
    assert starts == sorted(starts) and 0 <= starts[0] < 1.0 and data["words"][-1]["end"] <= duration + 0.05
    alignment = data["alignment"]
    assert "".join(alignment["characters"]) == TEXT
    assert len(alignment["character_start_times_seconds"]) == len(TEXT) == len(alignment["character_end_times_seconds"])
    sidecar = sidecar_for(api_app, data["job_id"])
    assert sidecar["check"]["status"] == "passed" and sidecar["check"]["sentences"][0]["takes"][0]["metric"] == "WER"
    refused = httpx.post(api_app.url + "v1/audio/speech/with-timestamps", json={**body, "check": False}, timeout=60)
    assert refused.status_code == 400 and "check" in refused.text


def _result(check: dict | None, words=None) -> JobResult:
    return JobResult("job", 24000, 1.0, TEXT, "zero_shot", 1, 1.0, "m", "cpu", check=check, words=words)


def test_the_header_says_retaken_or_flagged_with_the_note_and_nothing_when_unchecked():
    flagged = {"status": "flagged", "sentences": [{"note": "kept take 3 of 3: WER 40 %, a phrase repeated"}]}
    assert check_headers(_result(flagged)) == {
        "x-cosyvoice-check": "flagged",
        "x-cosyvoice-check-note": "kept take 3 of 3: WER 40 %, a phrase repeated",
    }
    assert check_headers(_result({"status": "passed", "sentences": [{"note": None}]})) == {
        "x-cosyvoice-check": "passed"
    }
    assert check_headers(_result(None)) == {}
    assert check_facts(_result(flagged)) == {"check": "flagged", "check_note": flagged["sentences"][0]["note"]}
    assert check_facts(_result(None)) == {}  # the stream's done event says nothing of a check that did not run


def test_the_cli_warns_on_a_flagged_take_and_writes_the_captions_asked_for(tmp_path, capsys):
    args = build_parser().parse_args(["synth", "--voice", "preview", "--text", "Hi.", "--out", "x.wav", "--no-check"])
    assert args.no_check and args.captions is None
    say_check("flagged", ["kept take 3 of 3: WER 40 %"])
    words = [{"word": "Hello", "start": 0.1, "end": 0.5}, {"word": "there.", "start": 0.6, "end": 0.9}]
    path = write_captions_beside(tmp_path / "out.wav", words, "srt")
    assert path == tmp_path / "out.srt" and [cue.content for cue in srt.parse(path.read_text())] == ["Hello there."]
    assert json.loads(write_captions_beside(tmp_path / "out.wav", words, "json").read_text()) == words
    assert write_captions_beside(tmp_path / "none.wav", None, "vtt") is None
    said = capsys.readouterr().err
    assert "warning: the take check flagged this take (the best one is kept): kept take 3 of 3: WER 40 %" in said
    assert "no captions: the take check (which times the words) was off" in said


def test_elevenlabs_alignment_gives_the_pause_to_the_space():
    aligned = character_alignment([{"word": "Hi", "start": 0.0, "end": 0.2}, {"word": "you", "start": 0.5, "end": 0.8}])
    assert aligned["characters"] == ["H", "i", " ", "y", "o", "u"]
    assert aligned["character_start_times_seconds"] == [0.0, 0.1, 0.2, 0.5, 0.6, 0.7]
    assert aligned["character_end_times_seconds"][2] == 0.5
