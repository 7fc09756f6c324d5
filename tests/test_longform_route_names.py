"""The long-form route names each result apart, whatever the clock says: two dialogues finishing in the same
second (the wall clock the names read stands still here) keep two sets of files. The real route runs in-process
on a stand-in engine that answers each line with a short tone at once, so no model and no server process."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cosyvoice_mac.api.auth import ApiAccess
from cosyvoice_mac.api.longform_routes import build_longform_router
from cosyvoice_mac.frontend.glossary import GlossaryStore
from cosyvoice_mac.request import Voice

RATE = 24000
ONE_SECOND = time.struct_time((2026, 12, 7, 8, 0, 0, 0, 341, 0))  # every name made here is of this second


class InstantEngine:
    """The engine calls a long job makes (submit, result, voices), each line answered with 0.2 s of tone."""

    def __init__(self):
        self.jobs = 0
        self.voices = SimpleNamespace(style_names=lambda name: ())  # no voice here has style recordings

    def voice(self, name, style=None):
        return Voice.saved_voice(name)

    def prepare_voices(self, pairs, timeout=None):
        return {name: {} for name, _ in pairs}

    def status(self):
        return {"max_queue": 8, "batch_lines": 1}

    def submit(self, job):
        self.jobs += 1
        return f"job-{self.jobs}"

    def result(self, job_id, timeout=None):
        tone = 0.1 * np.sin(np.arange(RATE // 5) * 0.05).astype(np.float32)
        return SimpleNamespace(
            samples=lambda: tone,
            sample_rate=RATE,
            seed=1,
            model="stand-in",
            output_path=None,
            output_error=None,
            check_status=None,  # not checked: no words either
            batch_size=1,
            notes=[],
            words=None,
        )

    def cancel(self, job_id):
        pass


class StandInLink:
    """What the long-form routes ask of the engine link: readiness, the saved voices and the engine."""

    def __init__(self):
        self.engine = InstantEngine()
        self.host = SimpleNamespace(current=None)

    def check_ready(self, wait_for_model=False):
        pass

    def voices(self):
        return [{"name": "Ada"}]

    def find_voice(self, name):
        return name

    def _engine(self):
        return self.engine


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    return tmp_path_factory.mktemp("outputs")


@pytest.fixture(scope="module")
def client(outputs, tmp_path_factory):
    glossary = GlossaryStore(tmp_path_factory.mktemp("cache") / "glossary.json")
    app = FastAPI()
    access = ApiAccess.from_settings("127.0.0.1", None)
    app.include_router(build_longform_router(StandInLink(), access, outputs, glossary))
    return TestClient(app)


def _done(client) -> dict:
    answer = client.post("/v1/longform/dialogue", json={"script": "Ada: Hello there.\nAda: And again."})
    assert answer.status_code == 200, answer.text
    events = [json.loads(line[len("data: ") :]) for line in answer.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "done", events
    return events[-1]


def test_dialogues_finishing_in_the_same_second_keep_their_own_files(client, outputs, monkeypatch):
    real_strftime = time.strftime
    monkeypatch.setattr(time, "strftime", lambda form, when=None: real_strftime(form, when or ONE_SECOND))
    results = [_done(client) for _ in range(4)]
    names = [next(name for name in done["files"] if name.endswith(".wav")) for done in results]
    assert all(name.startswith("20261207-080000-dialogue-") for name in names), names  # one second for all
    assert len(set(names)) == len(names), names
    folder = outputs / "longform"
    for done in results:
        for name in done["files"]:
            assert (folder / name).is_file(), name
    sidecars = sorted(folder.glob("*-dialogue-*.json"))
    assert len([path for path in sidecars if not path.name.endswith(".timing.json")]) == len(names)
