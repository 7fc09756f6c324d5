"""Checked long jobs and "retake these": a 20-line batch made by the worker's runtime in this process (each line
checked, a failing one retaken, one that stays flagged named), then its flagged line made again in one action; a
dialogue's flagged line retaken with every other line reused, through the runner, the page, ``/v1`` and the CLI.
Every earlier take stays where it was saved."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cosyvoice_mac.engine.jobs import new_job_id
from cosyvoice_mac.engine.outputs import write_output
from cosyvoice_mac.longform import LongformError
from cosyvoice_mac.longform.retakes import LINES_SUFFIX, Retake
from cosyvoice_mac.longform.runner import Spoken, run_batch, run_dialogue
from cosyvoice_mac.pipeline.takes import FLAGGED, PASSED, Word
from cosyvoice_mac.pipeline.takes.captions import write_captions
from cosyvoice_mac.pipeline.takes.retake import next_seed
from cosyvoice_mac.pipeline.takes.thresholds import RETAKE_SEED_STRIDE

RATE = 24000
SCRIPT = "[S1] Hello there.\n[S2] This line comes out garbled.\n[S1] Goodbye for now."
CAST = {"S1": "Ann", "S2": "Bob"}
BATCH_FIRST = "Please call Stella."  # all a take that drops the rest of the line says
BATCH_LINE = f"{BATCH_FIRST} We will meet at the old railway station at noon tomorrow."


class SavingSpeak:
    """Speaks a long job's lines as the engine does, without a model: each line a short sound saved in ``outputs``
    with its sidecar and its words; a line that says "garbled" is flagged while its seed is the run's own (below
    the retake stride), and passes once retaken. ``spoken``: (text, seed) of every line it was asked for."""

    def __init__(self, outputs: Path):
        self.outputs, self.spoken, self.notes, self.glossary = outputs, [], (), ()

    def prepare(self, voices) -> None:
        list(voices)

    def styles(self, voice) -> tuple[str, ...]:
        return ()  # no saved voice has style recordings here

    def stop(self) -> None:
        pass

    def __call__(self, line) -> Spoken:
        seed = 5 if line.seed is None else line.seed  # no seed asked: the engine draws one and records it
        self.spoken.append((line.text, seed))
        seconds = 0.2 + 0.02 * len(line.text)
        audio = (0.3 * np.sin(np.arange(int(seconds * RATE)) * (seed % 7 + 2) / 20)).astype(np.float32)
        files = write_output(self.outputs, new_job_id(), audio, RATE, {"text": line.text, "seed": seed})
        words = [Word(word, 0.1 + 0.2 * i, 0.25 + 0.2 * i) for i, word in enumerate(line.text.split())]
        write_captions(files.wav_path, words)
        flagged = "garbled" in line.text and seed < RETAKE_SEED_STRIDE
        facts = {
            "seed": seed,
            "line_output": str(files.wav_path),
            "check": FLAGGED if flagged else PASSED,
            "check_notes": ["kept take 3 of 3: a phrase repeated"] if flagged else [],
        }
        return Spoken(audio, RATE, facts, [word.as_dict() for word in words])


def _dialogue(speak, stem: Path, retake=None):
    return run_dialogue(SCRIPT, CAST, ["Ann", "Bob"], speak, stem, seed=10, retake=retake)


def test_a_dialogues_flagged_line_is_retaken_with_a_new_seed_and_every_other_line_reused(tmp_path):
    speak = SavingSpeak(tmp_path / "outputs")
    first = _dialogue(speak, tmp_path / "talk")
    assert first.flagged == ["line 2: kept take 3 of 3: a phrase repeated"] and first.retaken == []
    earlier = json.loads((tmp_path / "talk").with_suffix(LINES_SUFFIX).read_text())
    assert earlier["result"] == "talk.wav" and [line["check"] for line in earlier["lines"]] == [PASSED, FLAGGED, PASSED]
    retake = Retake.flagged_of(first.audio_path)
    assert retake.numbers == {2} and retake.result == "talk.wav"

    speak.spoken.clear()
    again = _dialogue(speak, tmp_path / "talk-2", retake)
    assert speak.spoken == [("This line comes out garbled.", next_seed(11))]  # only line 2 was spoken again
    assert again.retaken == [2] and again.flagged == []
    lines = json.loads((tmp_path / "talk-2").with_suffix(LINES_SUFFIX).read_text())["lines"]
    assert [line["output"] for line in lines[::2]] == [line["output"] for line in earlier["lines"][::2]]
    assert lines[1]["earlier_takes"] == [earlier["lines"][1]["output"]] and Path(lines[1]["output"]).is_file()
    assert Path(earlier["lines"][1]["output"]).is_file()  # the earlier take stays in outputs/
    timing = [
        json.loads(stem.with_suffix(".timing.json").read_text())["lines"]
        for stem in (tmp_path / "talk", tmp_path / "talk-2")
    ]
    assert timing[0][0] == timing[1][0]  # line 1 is the same take, in the same place
    assert [word["word"] for word in again.timestamps][:2] == ["Hello", "there."]
    with pytest.raises(LongformError, match="nothing to retake"):
        Retake.flagged_of(again.audio_path)
    with pytest.raises(LongformError, match="cannot be read"):
        Retake.flagged_of(tmp_path / "never-made.wav")


class InProcessEngine:
    """The engine's face that ``EngineSpeak`` uses, over a WorkerRuntime in this process: a job runs when it is
    submitted (the worker's check, retakes and saving included)."""

    def __init__(self, worker, voice, events: list):
        self.worker, self._voice, self.events, self.results = worker, voice, events, {}
        self.voices = SimpleNamespace(style_names=lambda name: ())  # no voice here has style recordings

    def voice(self, name, style=None):
        return self._voice

    def prepare_voices(self, pairs, timeout=None):
        return {name: {} for name, _ in pairs}

    def status(self):
        return {"max_queue": 8, "batch_lines": 1}  # one line at a time: each job runs when it is submitted

    def cancel(self, job_id):
        pass

    def submit(self, job):
        self.worker.run(job, should_stop=lambda: False)
        assert self.events[-1].kind == "done", self.events[-1]
        self.results[job.job_id] = self.events[-1].result
        return job.job_id

    def result(self, job_id, timeout=None):
        return self.results.pop(job_id)


def test_a_20_line_batch_is_checked_line_by_line_and_retake_these_makes_its_flagged_line_again(
    tmp_path, make_speech, monkeypatch
):
    """The worker's own check (the recogniser-free measures) on recorded speech spoiled as the fault list says: line 1
    drops its second sentence and is retaken, line 7 is noise three times and stays flagged, named; "retake these"
    then makes line 7 again with a new seed, keeps its earlier take, and skips the 19 lines that passed."""
    from cosyvoice_mac.engine.runtime import WorkerRuntime
    from cosyvoice_mac.engine.takes import TakeChecker
    from cosyvoice_mac.longform.speakers import EngineSpeak
    from cosyvoice_mac.request import Voice
    from tests.fakes.fake_pipeline import fake_worker_config
    from tests.fakes.faulty_voice import FAULTY_FACTORY, NoRecogniserHere

    # The worker's collection after each job walks this whole test process (its own is frozen once loaded): 0.8 s a
    # line here, and not what is tested.
    monkeypatch.setattr("cosyvoice_mac.engine.runtime.release_memory", lambda *devices: None)
    speech = {"speech": str(make_speech(BATCH_LINE)), "first": str(make_speech(BATCH_FIRST))}
    faults = ["drop", "good", *["good"] * 5, "noise", "noise", "noise"]  # line 1: two takes; line 7: three
    config = fake_worker_config(tmp_path, text=BATCH_LINE, faults=faults, **speech)
    events: list = []
    worker = WorkerRuntime(replace(config, pipeline_factory=FAULTY_FACTORY, warmup_text="Hi."), events.append)
    worker.load()
    worker.takes = TakeChecker(NoRecogniserHere())
    prompt = Voice.recording(make_speech("This is the voice I would like you to copy, please.", seconds=4.0))
    speak = EngineSpeak(InProcessEngine(worker, prompt, events), default_voice="Ann", interface="cli", check=True)
    lines = ("\n".join([BATCH_LINE] * 20) + "\n").encode()
    folder = tmp_path / "batch"
    result = run_batch(lines, "txt", folder, speak, seed=100)
    assert (result.done, result.report[0]["made"]) == (20, 20) and len(worker.pipeline.seeds) == 23
    assert len(result.flagged) == 1 and result.flagged[0].startswith("line 7: kept take 1 of 3: it sounds like noise")
    first = json.loads((folder / "0001.json").read_text())
    assert first["check"] == "retaken" and first["seed"] == 100 and first["line"] == 1
    flagged = json.loads((folder / "0007.json").read_text())
    assert flagged["check"] == FLAGGED and Path(flagged["line_output"]).is_file()

    again = run_batch(lines, "txt", folder, speak, seed=100, retake_flagged=True)
    assert again.retaken == [7] and again.flagged == [] and again.report[0] == {"made": 1, "skipped": 19}
    assert worker.pipeline.seeds[-1] == next_seed(106)  # line 7's seed was 100 + 6
    remade = json.loads((folder / "0007.json").read_text())
    assert remade["check"] == PASSED and remade["earlier_takes"] == [flagged["line_output"]]
    assert Path(flagged["line_output"]).is_file() and remade["line_output"] != flagged["line_output"]


def _page(tmp_path, monkeypatch, speak):
    import cosyvoice_mac.webui.longform as page

    monkeypatch.setattr(page, "EngineSpeak", lambda *args, **kwargs: speak)
    engine = SimpleNamespace(voices=SimpleNamespace(list=lambda: [{"name": "Ann"}, {"name": "Bob"}]))
    host = SimpleNamespace(engine=engine, config=SimpleNamespace(outputs_dir=tmp_path), current=None)
    glossary = SimpleNamespace(usable_entries=lambda: ((), None))
    return page.LongformCallbacks(host, glossary)


def test_the_page_offers_retake_these_after_a_flagged_job_and_makes_only_those_lines_again(tmp_path, monkeypatch):
    speak = SavingSpeak(tmp_path / "lines")
    callbacks, tab = _page(tmp_path, monkeypatch, speak), SimpleNamespace(session_hash="tab")
    cast = [["S1", "Ann"], ["S2", "Bob"]]
    *_, (progress, message, audio, files) = callbacks.dialogue(tab, "en", SCRIPT, cast, 0.4, False, False, False, None)
    assert "The take check flagged line 2: kept take 3 of 3" in message and callbacks.retake_offered(tab)["visible"]
    assert any(name.endswith(LINES_SUFFIX) for name in files)
    assert not callbacks.retake_offered(SimpleNamespace(session_hash="another tab"))["visible"]
    speak.spoken.clear()
    *_, (progress, message, retaken_audio, files) = callbacks.retake_flagged("en", tab)
    assert speak.spoken == [("This line comes out garbled.", next_seed(5))]
    assert "Made again with new seeds: 2" in message and "flagged" not in message and retaken_audio != audio
    assert not callbacks.retake_offered(tab)["visible"]
    *_, (_, message, _, _) = callbacks.retake_flagged("en", tab)
    assert "nothing to retake" in message


def test_v1_retakes_the_flagged_lines_of_the_result_it_names(tmp_path, monkeypatch):
    import cosyvoice_mac.api.longform_routes as routes
    from cosyvoice_mac.api.auth import ApiAccess
    from cosyvoice_mac.api.errors import install_error_handlers

    monkeypatch.delenv("COSYVOICE_API_KEY", raising=False)
    speak = SavingSpeak(tmp_path / "lines")
    monkeypatch.setattr(routes, "EngineSpeak", lambda *args, **kwargs: speak)
    link = SimpleNamespace(voices=lambda: [{"name": "Ann"}, {"name": "Bob"}], check_ready=lambda: None)
    link._engine = lambda: None
    app = FastAPI()
    install_error_handlers(app, "/v1")
    glossary = SimpleNamespace(usable_entries=lambda: ((), None))
    app.include_router(
        routes.build_longform_router(link, ApiAccess.from_settings("127.0.0.1", None), tmp_path, glossary)
    )
    client = TestClient(app)

    def done(body: dict) -> dict:
        answer = client.post("/v1/longform/dialogue", json={"script": SCRIPT, "cast": CAST, "seed": 10, **body})
        events = [json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:")]
        return events[-1]

    first = done({})
    assert first["flagged"] == ["line 2: kept take 3 of 3: a phrase repeated"] and first["retaken"] == []
    assert first["files"][0].endswith(".wav") and any(name.endswith(LINES_SUFFIX) for name in first["files"])
    speak.spoken.clear()
    again = done({"retake_from": first["files"][0]})
    assert again["retaken"] == [2] and again["flagged"] == [] and len(speak.spoken) == 1, again
    for name, words in ((again["files"][0], "nothing to retake"), ("nope.wav", "no long-form result named")):
        refused = client.post("/v1/longform/dialogue", json={"script": SCRIPT, "cast": CAST, "retake_from": name})
        assert refused.status_code == 400 and words in refused.json()["error"]["message"]
        assert refused.json()["error"]["param"] == "retake_from"


def test_the_cli_retakes_the_run_beside_out_and_sends_the_apps_name_for_it(tmp_path):
    from cosyvoice_mac.cli.longform import _earlier_run
    from cosyvoice_mac.cli.main import build_parser

    out = tmp_path / "talk"
    out.with_suffix(LINES_SUFFIX).write_text(
        json.dumps({"result": "20261207-dialogue-abc.wav", "lines": [{"number": 4, "check": FLAGGED, "seed": 3}]})
    )
    args = build_parser().parse_args(["dialogue", "talk.txt", "--out", str(out), "--retake"])
    retake = _earlier_run(args)
    assert retake.numbers == {4} and retake.result == "20261207-dialogue-abc.wav"
    assert _earlier_run(build_parser().parse_args(["dialogue", "talk.txt", "--out", str(out)])) is None
    assert build_parser().parse_args(["batch", "lines.txt", "--out-dir", "b", "--retake"]).retake
