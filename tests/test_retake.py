"""Retakes, through the worker's runtime (the one place every non-streamed synthesis and long-form line is made):
a test backend speaking real recorded speech drops a sentence, repeats itself, loses its ending or returns noise;
each fault is caught and the sentence retaken with a new seed, and after the last try the best take stands with a
plain note. Every take's seed and verdict reaches the result and the sidecar."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.engine.jobs import Job
from cosyvoice_mac.engine.runtime import WorkerRuntime
from cosyvoice_mac.engine.takes import TakeChecker
from cosyvoice_mac.pipeline.takes import FLAGGED, RETAKEN
from cosyvoice_mac.pipeline.takes.retake import next_seed
from cosyvoice_mac.request import Request, Voice
from cosyvoice_mac.webui.takes_view import takes_html
from tests.fakes.fake_pipeline import fake_worker_config
from tests.fakes.faulty_voice import FAULTY_FACTORY, NoRecogniserHere

FIRST = "Please call Stella and ask her to bring these things with her from the store."
TEXT = f"{FIRST} We will meet at the old railway station at noon tomorrow, and then walk home together."


@pytest.fixture(autouse=True)
def no_full_collections(monkeypatch):
    """The worker's collection after each job walks this whole test process (the worker's own is frozen once its
    model is loaded): most of a job's time here, and not what these tests look at."""
    monkeypatch.setattr("cosyvoice_mac.engine.runtime.release_memory", lambda *devices: None)


@pytest.fixture(scope="module")
def speech(make_speech):
    return {"speech": str(make_speech(TEXT)), "first": str(make_speech(FIRST))}


@pytest.fixture(scope="module")
def prompt(make_speech):
    return Voice.recording(make_speech("This is the voice I would like you to copy, please.", seconds=4.0))


def _run(tmp_path, speech, prompt, faults, recogniser, **request):
    sent: list = []
    config = replace(
        fake_worker_config(tmp_path, text=TEXT, faults=faults, **speech),
        pipeline_factory=FAULTY_FACTORY,
        warmup_text="Hi.",
    )
    worker = WorkerRuntime(config, sent.append)
    worker.load()
    if recogniser is not None:
        worker.takes = TakeChecker(recogniser)
    worker.run(Job(Request.build(TEXT, prompt, seed=7, **request)), should_stop=lambda: False)
    assert sent[-1].kind == "done", sent[-1]
    return sent[-1].result, worker.pipeline


def test_each_fault_is_caught_and_retaken_until_a_take_passes(tmp_path, speech, prompt, monkeypatch):
    monkeypatch.setenv("COSYVOICE_RETAKES", "3")
    result, voice = _run(tmp_path, speech, prompt, ["drop", "repeat", "truncate"], NoRecogniserHere(), check=True)
    takes = result.check["sentences"][0]["takes"]
    assert result.check_status == RETAKEN and result.check["sentences"][0]["kept"] == 4
    assert (
        [take["seed"] for take in takes] == voice.seeds == [7, next_seed(7), next_seed(next_seed(7)), takes[3]["seed"]]
    )
    assert any(problem.startswith("too short for the text") for problem in takes[0]["problems"])
    assert "a stretch of audio is repeated" in takes[1]["problems"]
    assert "the ending is cut off" in takes[2]["problems"]
    assert takes[3]["passed"] and takes[3]["recogniser"] == "not checked: no recogniser in this test"
    assert any(note.startswith("retaken: take 4 of 4 passed (take 1: too short") for note in result.notes)
    saved, _ = soundfile.read(result.output_path, dtype="float32")
    assert len(saved) == len(voice.audio)  # the good take is the one kept
    assert result.words[0]["word"] == "Please" and result.words[-1]["word"] == "together."
    assert Path(result.captions["srt"]).read_text().startswith("1\n00:00:0")  # beside the WAV, for the timeline
    sidecar = json.loads(Path(result.sidecar_path).read_text())
    assert sidecar["check"] == result.check and sidecar["check"]["sentences"][0]["takes"][1]["seed"] == next_seed(7)
    outputs = Path(result.output_path).parent  # every take kept, as made, for the page to play
    lengths = [len(soundfile.read(outputs / take["file"])[0]) for take in takes]
    assert lengths[0] < lengths[3] < lengths[1] and lengths[3] == len(voice.audio)  # dropped, looped, whole
    players = takes_html("en", result.check, outputs)
    assert players.count("<audio") == 4 and "Sentence 1, take 4 (seed" in players and "s1-t4.wav" in players


def test_after_the_last_retake_the_best_take_stands_with_a_note(tmp_path, speech, prompt, monkeypatch):
    monkeypatch.setenv("COSYVOICE_TAKE_CHECK", "1")  # the global switch on; the request does not say
    result, voice = _run(tmp_path, speech, prompt, ["noise", "repeat", "truncate"], None)
    sentence = result.check["sentences"][0]
    assert result.check_status == FLAGGED and len(sentence["takes"]) == 3 and len(voice.seeds) == 3
    noise, repeat, truncate = sentence["takes"]
    assert "it sounds like noise, not speech" in noise["problems"] and noise["error_rate"] is None
    assert "a phrase repeated" in repeat["problems"] and "tiny.en" in repeat["recogniser"]
    assert "the ending is cut off" in truncate["problems"] and truncate["metric"] == "WER"
    kept = sentence["takes"][sentence["kept"] - 1]
    assert sentence["kept"] != 1 and len(kept["problems"]) == min(len(take["problems"]) for take in sentence["takes"])
    note = f"kept take {sentence['kept']} of 3: {', '.join(kept['problems'])}"
    assert sentence["note"] == note and note in result.notes


def test_the_off_switches_and_a_random_weight_model_make_one_unchecked_take(tmp_path, speech, prompt, monkeypatch):
    monkeypatch.setenv("COSYVOICE_TAKE_CHECK", "1")
    result, voice = _run(tmp_path, speech, prompt, ["noise"], NoRecogniserHere(), check=False)
    assert result.check is None and result.words is None and voice.seeds == [7]
    monkeypatch.setenv("COSYVOICE_RETAKES", "0")
    result, voice = _run(tmp_path / "no-retakes", speech, prompt, ["noise"], NoRecogniserHere())
    assert result.check_status == FLAGGED and voice.seeds == [7]
    assert "kept take 1 of 1: it sounds like noise, not speech" in result.notes
    request = Request.build(TEXT, prompt, check=True)
    assert not TakeChecker.wanted(replace_model(voice, "cosyvoice3-random-weights"), request, False)
    assert TakeChecker.wanted(replace_model(voice, "cosyvoice3-0123abcd"), request, False)


def replace_model(voice, model_id):
    voice.model_id = model_id
    return voice


def test_the_kept_take_is_whole_audio_not_a_mixture(tmp_path, speech, prompt):
    result, voice = _run(tmp_path, speech, prompt, ["truncate"], NoRecogniserHere(), check=True)
    saved, _ = soundfile.read(result.output_path, dtype="float32")
    assert np.allclose(saved, np.clip(voice.audio, -0.99, 0.99), atol=1e-4)


def test_the_best_take_stands_even_when_it_came_first(tmp_path, speech, prompt):
    result, voice = _run(tmp_path, speech, prompt, ["truncate", "noise", "noise"], NoRecogniserHere(), check=True)
    assert result.check_status == FLAGGED and voice.seeds == [7, next_seed(7), next_seed(next_seed(7))]
    assert "kept take 1 of 3: the ending is cut off" in result.notes
    saved, _ = soundfile.read(result.output_path, dtype="float32")
    assert len(voice.audio) * 0.5 < len(saved) < len(voice.audio)  # the truncated take, not the noise


class RecordingEngine:
    """Takes each job and answers it at once with a second of silence, keeping the jobs it was given."""

    def __init__(self):
        self.jobs = []

    def voice(self, name):
        return Voice.builtin()

    def submit(self, job):
        self.jobs.append(job)
        return job.job_id

    def result(self, job_id, timeout=None):
        from cosyvoice_mac.engine.jobs import JobResult

        return JobResult(job_id, 24000, 1.0, "", "zero_shot", 1, 1.0, "m", "cpu", audio=np.zeros(24000, np.float32))


def test_a_long_jobs_off_switch_reaches_every_line_and_the_cli_offers_it():
    from cosyvoice_mac.cli.main import build_parser
    from cosyvoice_mac.longform.runner import LineRequest
    from cosyvoice_mac.longform.speakers import EngineSpeak

    engine = RecordingEngine()
    for check in (False, None):
        EngineSpeak(engine, check=check)(LineRequest("One line."))
    assert [job.request.check for job in engine.jobs] == [False, None]
    args = build_parser().parse_args(["dialogue", "talk.txt", "--out", "talk", "--no-check"])
    assert args.no_check


def test_a_converted_piece_is_checked_against_the_recordings_words_which_become_its_captions(
    tmp_path, make_speech, monkeypatch
):
    """Voice conversion (the preview voice, in-process): each piece is heard and compared with what the recogniser
    hears in its part of the recording; the captions carry the recording's words on the converted audio's timeline.
    A conversion follows its recording, so it is never retaken."""
    from cosyvoice_mac.conversion_request import ConversionRequest
    from tests.fakes.fake_pipeline import preview_worker_config

    monkeypatch.setenv("COSYVOICE_TAKE_CHECK", "1")  # a conversion follows the global switch
    source = make_speech("The birch canoe slid on the smooth planks.")
    sent: list = []
    worker = WorkerRuntime(preview_worker_config(tmp_path, torch_threads=1), sent.append)
    worker.load()
    voice = Voice.recording(make_speech("This is the voice I would like you to copy, please.", seconds=4.0))
    worker.run(Job(ConversionRequest.build(str(source), voice)), should_stop=lambda: False)
    result = sent[-1].result
    assert sent[-1].kind == "done" and result.check is not None, sent[-1]
    (sentence,) = result.check["sentences"]
    (take,) = sentence["takes"]
    assert take["metric"] == "WER" and "tiny.en" in take["recogniser"] and "planks" in take["heard"].lower(), take
    assert sentence["status"] == ("passed" if take["passed"] else "flagged")  # one take: a conversion is not retaken
    words = [word["word"].lower().strip(".,") for word in result.words]
    assert words[-2:] == ["smooth", "planks"] and result.words[-1]["end"] <= result.duration_s + 0.05, words
    assert Path(result.captions["vtt"]).read_text().startswith("WEBVTT")
    assert json.loads(Path(result.sidecar_path).read_text())["check"] == result.check


def test_another_kept_take_picked_on_the_page_becomes_the_output_and_the_sidecar_says_so(
    tmp_path, speech, prompt, monkeypatch
):
    """The check keeps the third take (the first dropped a sentence, the second lost its ending); the page puts the
    second in the output instead: the saved WAV is that take, its captions follow it, the sidecar records the pick,
    and every take stays in outputs/takes/ (the check's kept take can be picked back)."""
    from cosyvoice_mac.webui.takes_view import put_take_in, takes_shown

    monkeypatch.setenv("COSYVOICE_RETAKES", "2")
    result, voice = _run(tmp_path, speech, prompt, ["drop", "truncate"], NoRecogniserHere(), check=True)
    assert result.check["sentences"][0]["kept"] == 3 and result.check_status == RETAKEN
    outputs, wav = Path(result.output_path).parent, result.output_path
    files = [outputs / take["file"] for take in result.check["sentences"][0]["takes"]]
    assert [choice[1] for choice in takes_shown("en", wav)[3]["choices"]] == ["1:1", "1:2"]
    played, (check, *_, pick, use) = put_take_in("en", wav, "1:2")
    assert played == wav and "Sentence 1 now uses take 2" in check and "picked by hand" in check
    saved, _ = soundfile.read(wav, dtype="float32")
    assert len(saved) == len(soundfile.read(files[1])[0]) < len(voice.audio)  # the truncated take, as made
    sidecar = json.loads(Path(result.sidecar_path).read_text())
    sentence = sidecar["check"]["sentences"][0]
    assert sentence["kept"] == 2 and sentence["picked"] and sentence["status"] == sidecar["check"]["status"] == FLAGGED
    assert sidecar["duration_s"] == round(len(saved) / voice.sample_rate, 3) and sentence["note"] in sidecar["notes"]
    words = json.loads(Path(result.captions["json"]).read_text())
    assert words[0]["word"] == "Please" and words[-1]["end"] <= len(saved) / voice.sample_rate + 1e-3
    assert all(path.is_file() for path in files) and [c[1] for c in pick["choices"]] == ["1:1", "1:3"]
    played, (check, *_) = put_take_in("en", wav, "1:2")  # the take in the output already: nothing changes
    assert played is None and "already" in check
    assert put_take_in("en", wav, "1:3")[0] == wav  # back to the check's choice
    assert len(soundfile.read(wav)[0]) == len(voice.audio)
