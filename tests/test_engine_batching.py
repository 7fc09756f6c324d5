"""Issue 47: the engine's queue coalesces waiting non-streamed jobs into one batch on the worker.

The queue's choice (pure), the worker's batch (in-process: a job failing or cancelled alone, the rest intact),
one engine with a worker process (coalescing within the bounded wait, B reported in the status and the
sidecars, a streamed job alone), and a job's audio alone and batched on the tiny real model.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

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
