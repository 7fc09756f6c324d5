"""Issue 47: the engine's queue coalesces waiting non-streamed jobs into one batch on the worker.

The queue's choice (pure), the worker's batch (in-process: a job failing or cancelled alone, the rest intact),
one engine with a worker process (coalescing within the bounded wait, B reported in the status and the
sidecars, a streamed job alone), and a job's audio alone and batched on the tiny real model.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_mac.engine import jobs
from cosyvoice_mac.engine.jobqueue import JobQueue
from cosyvoice_mac.engine.jobs import Job
from cosyvoice_mac.engine.messages import Cancelled, Done, Failed, Progress
from tests.fakes.fake_pipeline import fake_request, fake_worker_config, quick_engine, started


def _door_job(text: str, door: str, **options) -> Job:
    return Job(fake_request(text, **options), interface=door)


def test_a_batch_takes_the_doors_in_turn_and_never_passes_a_job_that_runs_alone():
    book = JobQueue(8, threading.RLock())
    first_api = [book.add(_door_job(f"api {index}", "api")) for index in range(3)]
    book.add(_door_job("page 0", "page"))
    streamed = book.add(_door_job("streamed", "page", stream=True))
    book.add(_door_job("api 3", "api"))

    batch = book.start_batch(4)
    assert [record.job.text for record in batch] == ["api 0", "page 0", "api 1", "api 2"]  # the page's job not last
    assert book.running is first_api[0] and {book.position(record.job.job_id) for record in batch} == {0}
    assert [record.job.text for record in book.pending] == ["streamed", "api 3"]  # nothing passed the streamed job
    assert book.start_batch(4) == []  # one batch at a time
    book.finish(batch[1], jobs.CANCELLED, "cancelled while batched")
    assert book.start_batch(4) == [] and len(book.batch) == 3  # the others still run
    for record in book.batch[:]:
        book.finish(record, jobs.DONE, "done")
    assert book.start_batch(4) == [streamed]  # a streamed job runs alone
    book.finish(streamed, jobs.DONE, "done")
    assert [record.job.text for record in book.start_batch(4)] == ["api 3"]


def test_on_a_cluster_jobs_start_beside_those_running_and_keep_their_order():
    book = JobQueue(8, threading.RLock())
    api = [book.add(_door_job(f"api {index}", "api")) for index in range(2)]
    streamed = book.add(_door_job("streamed", "page", stream=True))
    assert book.start_batch(1) == [api[0]] and book.start_batch(1) == []  # a worker process: one at a time
    assert book.start_batch(1, alongside=True) == [api[1]]  # a cluster's worker with room: beside it
    assert book.start_batch(4, alongside=True) == [streamed]  # a streamed job still runs alone (on its worker)
    assert {book.position(record.job.job_id) for record in (*api, streamed)} == {0} and not book.pending
    book.finish(api[0], jobs.DONE, "done")
    assert book.batch == [api[1], streamed]


@pytest.fixture(scope="module")
def fake_runtime(tmp_path_factory):
    """A worker runtime in this process over the fake pipeline, speaking up to 4 jobs together."""
    from cosyvoice_mac.engine.runtime import WorkerRuntime

    sent: list = []
    runtime = WorkerRuntime(fake_worker_config(tmp_path_factory.mktemp("batch-runtime"), batch=4), sent.append)
    runtime.load()
    runtime.sent = sent
    return runtime


def _terminal(sent: list, job: Job):
    return [event for event in sent if event.job_id == job.job_id and event.terminal]


def test_in_a_batch_a_failing_or_cancelled_job_ends_alone_and_the_others_are_as_alone(fake_runtime):
    sent = fake_runtime.sent
    sent.clear()
    first = Job(fake_request("One. Two.", seed=3))
    bad = Job(fake_request("This has [bad] markup.", seed=4))
    cancelled = Job(fake_request("Three. Four. Five.", seed=5))
    last = Job(fake_request("Six.", seed=6))

    def cancelled_after_its_first_piece() -> bool:
        return any(isinstance(event, Progress) and event.job_id == cancelled.job_id for event in sent)

    never = lambda: False  # noqa: E731
    fake_runtime.run_batch(
        [first, bad, cancelled, last], [never, never, cancelled_after_its_first_piece, never], [None] * 4
    )
    assert fake_runtime.pipeline.batches[-1] == [job.request.text for job in (first, bad, cancelled, last)]
    (failed,) = _terminal(sent, bad)
    assert isinstance(failed, Failed) and "[bad]" in failed.message and failed.fault == "input"
    (stopped,) = _terminal(sent, cancelled)
    assert isinstance(stopped, Cancelled)
    assert len([event for event in sent if isinstance(event, Progress) and event.job_id == cancelled.job_id]) == 1
    batched = {}
    for job in (first, last):
        (done,) = _terminal(sent, job)
        assert isinstance(done, Done) and done.result.batch_size == 4
        batched[job.job_id] = sf.read(done.result.output_path, dtype="float32")[0]
        assert json.loads(Path(done.result.sidecar_path).read_text(encoding="utf-8"))["batch_size"] == 4
    sent.clear()
    for job in (first, last):  # the same jobs alone
        fake_runtime.run(Job(job.request), lambda: False)
    alone = [event.result for event in sent if isinstance(event, Done)]
    assert [result.batch_size for result in alone] == [1, 1]
    for job, result in zip((first, last), alone):
        assert np.array_equal(sf.read(result.output_path, dtype="float32")[0], batched[job.job_id])


def test_the_engine_coalesces_waiting_jobs_and_keeps_a_streamed_one_alone(tmp_path):
    with started(quick_engine(fake_worker_config(tmp_path, batch=3))) as engine:
        assert engine.status()["batch_lines"] == 3
        streamed = engine.submit(fake_request("Streamed alone.", stream=True))
        doors = ("api", "page", "cli")
        together = [engine.submit(_door_job(f"Line {index}.", door)) for index, door in enumerate(doors)]
        assert engine.result(streamed, timeout=30).batch_size == 1
        assert [engine.result(job_id, timeout=30).batch_size for job_id in together] == [3, 3, 3]


class _RecordingEngine:
    """The parts of an Engine that EngineSpeak uses: records what was submitted, waited for and cancelled."""

    def __init__(self, batch_lines: int):
        self.batch_lines = batch_lines
        self.submitted: list[Job] = []
        self.waited: list[tuple[str, int]] = []  # (job id, jobs submitted by then)
        self.cancelled: list[str] = []
        self.voices = SimpleNamespace(style_names=lambda name: ())  # no voice here has style recordings

    def status(self) -> dict:
        return {"batch_lines": self.batch_lines, "max_queue": 8}

    def voice(self, name, style=None):
        return fake_request("x").voice

    def prepare_voices(self, pairs, timeout=None) -> dict:
        return {name: {} for name, _ in pairs}

    def submit(self, job: Job) -> str:
        self.submitted.append(job)
        return job.job_id

    def result(self, job_id: str, timeout=None):
        from types import SimpleNamespace

        self.waited.append((job_id, len(self.submitted)))
        audio = np.full(2400, 0.1, np.float32)
        return SimpleNamespace(
            samples=lambda: audio, sample_rate=24000, seed=1, model="fake", output_path=None, output_error=None,
            batch_size=self.batch_lines, check_status=None, notes=[], words=None,
        )  # fmt: skip

    def cancel(self, job_id: str) -> bool:
        self.cancelled.append(job_id)
        return True


def test_a_line_batch_hands_the_engine_a_batch_of_lines_and_cancels_those_sent_ahead_when_stopped(tmp_path):
    from cosyvoice_mac.longform.runner import run_batch
    from cosyvoice_mac.longform.speakers import EngineSpeak

    lines = "".join(f"Line {number}.\n" for number in range(5))
    engine = _RecordingEngine(batch_lines=3)
    result = run_batch(lines, "txt", tmp_path / "all", EngineSpeak(engine, default_voice="Anna"), seed=7)
    assert result.done == 5 and [job.request.text for job in engine.submitted] == [f"Line {n}." for n in range(5)]
    assert engine.waited[0] == (engine.submitted[0].job_id, 3)  # the first line waited with two more in the queue
    assert [job.request.seed for job in engine.submitted] == [7, 8, 9, 10, 11]  # each line's own seed, as alone
    assert engine.cancelled == []

    engine = _RecordingEngine(batch_lines=16)  # a GPU's batch: still no more than half the queue's 8 places
    run_batch(lines, "txt", tmp_path / "wide", EngineSpeak(engine, default_voice="Anna"), seed=7)
    assert engine.waited[0] == (engine.submitted[0].job_id, 4)

    engine = _RecordingEngine(batch_lines=3)
    asked = []
    stopped = run_batch(
        lines, "txt", tmp_path / "stopped", EngineSpeak(engine, default_voice="Anna"),
        on_progress=lambda progress: asked.append(progress.done), should_stop=lambda: len(asked) >= 2,
    )  # fmt: skip
    assert stopped.stopped and stopped.done == 2
    waited = {job_id for job_id, _ in engine.waited}
    assert engine.cancelled == [job.job_id for job in engine.submitted if job.job_id not in waited] != []


def test_on_the_tiny_model_a_job_batched_sounds_as_it_does_alone(tmp_path_factory, make_speech):
    """The worker's batch passes each job its own voice and seed: the same tokens, so the same audio (within the
    batched flow's and vocoder's rounding, tests/test_batched_parity.py), as the job alone."""
    from cosyvoice_mac.engine.runtime import WorkerRuntime
    from cosyvoice_mac.engine.worker import WorkerConfig
    from cosyvoice_mac.request import Request, Voice
    from tests.fakes.onnx_models import make_tiny_model_dir

    folder = tmp_path_factory.mktemp("tiny-batch")
    config = WorkerConfig(
        model_dir=str(make_tiny_model_dir("cosyvoice3", folder / "model")),
        device="cpu",
        outputs_dir=str(folder / "outputs"),
        cache_dir=str(folder / "cache"),
        warmup_text="Hi.",
    )
    sent: list = []
    runtime = WorkerRuntime(config, sent.append)
    runtime.load()
    voice = Voice.recording(make_speech("The prompt voice speaks.", seconds=3.0), transcript="The prompt voice speaks.")
    line = Request.build("A short line.", voice, seed=11)
    longer = Request.build("A second line, rather longer, so that the batch is ragged.", voice, seed=12)
    never = lambda: False  # noqa: E731
    runtime.run(Job(line), never)
    runtime.run_batch([Job(longer), Job(line)], [never, never], [None, None])
    done = [event.result for event in sent if isinstance(event, Done)]
    assert [result.batch_size for result in done] == [1, 2, 2]
    alone, batched = (sf.read(result.output_path, dtype="float32")[0] for result in (done[0], done[2]))
    assert alone.shape == batched.shape and np.allclose(alone, batched, atol=1e-3)


def test_a_checked_job_in_a_batch_is_checked_and_an_unchecked_one_is_not(fake_runtime):
    """Issue 46 x 47: a batch's lines are checked after it is made (retaken alone when they fail)."""
    sent = fake_runtime.sent
    sent.clear()
    checked, unchecked = Job(fake_request("Seven.", seed=7, check=True)), Job(fake_request("Eight.", seed=8))
    fake_runtime.run_batch([checked, unchecked], [lambda: False] * 2, [None] * 2)
    assert fake_runtime.pipeline.batches[-1] == ["Seven.", "Eight."]
    (done,) = _terminal(sent, checked)
    assert isinstance(done, Done) and done.result.check is not None and done.result.check_status is not None
    (alone,) = _terminal(sent, unchecked)
    assert isinstance(alone, Done) and alone.result.check is None


def test_a_text_with_inline_tags_or_a_styled_voice_is_spoken_alone():
    """The batch path plans one voice and no pauses or speed runs: such requests take the solo path."""
    from dataclasses import replace

    from cosyvoice_mac.engine.jobqueue import batchable

    assert batchable(Job(fake_request("Plain words.")))
    assert not batchable(Job(fake_request("Plain [pause 300ms] words.")))
    from cosyvoice_mac.request import Request, Voice

    styled = Request.build("Plain words.", replace(Voice.saved_voice("Ann", transcript="Hi."), style="happy"))
    assert not batchable(Job(styled))
