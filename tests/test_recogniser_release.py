"""The low-memory (8 GB) worker lets the take check's recogniser go once it has been idle (``RECOGNISER_IDLE_S``,
made short here through ``serve_commands``' ``idle_s``): the worker's command loop, in this process, over a real
pipe, on a backend that says the text with recorded speech, so the check loads the recogniser for real. In the
normal mode the recogniser stays for the worker's life."""

from __future__ import annotations

import multiprocessing
import threading
import time
import weakref
from dataclasses import replace

import pytest

from cosyvoice_mac.engine.jobs import Command, Job
from cosyvoice_mac.engine.runtime import WorkerRuntime
from cosyvoice_mac.engine.worker import CANCEL_SLOTS, serve_commands
from cosyvoice_mac.request import Request, Voice
from tests.fakes.fake_pipeline import fake_worker_config
from tests.fakes.faulty_voice import FAULTY_FACTORY

pytest.importorskip("faster_whisper")

TEXT = "Please call Stella and ask her to bring these things with her from the store."
NO_CANCEL = [-1] * CANCEL_SLOTS  # no job asked to stop (the worker's cancel slots)


def test_the_low_memory_worker_frees_the_recogniser_after_its_idle_time_and_the_normal_one_keeps_it(
    tmp_path, make_speech, monkeypatch
):
    # The worker's collection after each job walks this whole test process (its own is frozen once loaded).
    monkeypatch.setattr("cosyvoice_mac.engine.runtime.release_memory", lambda *devices: None)
    config = fake_worker_config(tmp_path, text=TEXT, speech=str(make_speech(TEXT)))
    sent: list = []
    worker = WorkerRuntime(replace(config, pipeline_factory=FAULTY_FACTORY, warmup_text="Hi."), sent.append)
    worker.load()
    prompt = Voice.recording(make_speech("This is the voice I would like you to copy, please.", seconds=4.0))
    commands, ui = multiprocessing.Pipe()

    # The normal mode: a checked job loads the recogniser, and it stays (the loop never waits on a timer).
    ui.send(Command("run", job=Job(Request.build(TEXT, prompt, seed=7, check=True)), seq=1))
    ui.send(Command("stop"))
    serve_commands(worker, commands, NO_CANCEL, idle_s=0.0)
    assert sent[-1].kind == "done" and sent[-1].result.check_status == "passed", sent[-1]
    transcriber = worker.takes.recogniser.transcriber
    assert transcriber.loaded, "the checked job did not load the recogniser"
    model = weakref.ref(next(iter(transcriber._models.values())))

    # The 8 GB mode: with no command for idle_s, the loop lets the model go; the memory goes with it.
    worker.pipeline.low_memory = True
    serving = threading.Thread(target=serve_commands, args=(worker, commands, NO_CANCEL), kwargs={"idle_s": 0.2})
    serving.start()
    deadline = time.monotonic() + 10
    while transcriber.loaded and time.monotonic() < deadline:
        time.sleep(0.05)
    ui.send(Command("stop"))
    serving.join(timeout=10)
    assert not serving.is_alive()
    assert transcriber.loaded == [] and model() is None  # no one holds the Whisper model any more
