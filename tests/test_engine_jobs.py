"""Jobs, the job queue (order, bound, positions, cancel) and thread QoS, without a worker process."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

from cosyvoice_mac.engine import jobs, qos
from cosyvoice_mac.engine.jobqueue import JobQueue
from cosyvoice_mac.engine.jobs import EngineError, Job, JobCancelled, QueueFull
from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.request import MAX_TEXT_CHARS, Request, Voice
from tests.fakes.fake_pipeline import fake_request, fake_voice


def _job(text: str) -> Job:
    return Job(fake_request(text))


@pytest.mark.parametrize(
    "build, code",
    [
        (lambda voice: Request.build("  ", voice), "text_empty"),
        (lambda voice: Request.build("x" * (MAX_TEXT_CHARS + 1), voice), "text_too_long"),
        (lambda voice: Request.build("hi", Voice.recording("/no/such/file.wav")), "prompt_missing"),
        (lambda voice: Request.build("hi", Voice(samples=np.zeros(10, np.float32))), "prompt_samples"),
        (lambda voice: Request.build("hi", Voice(audio=voice.audio, saved="alice")), "voice_ambiguous"),
        (lambda voice: Request.build("hi", None), "prompt_needed"),
        (lambda voice: Request.build("hi", voice, speed=0), "speed_invalid"),
        (lambda voice: Request.build("hi", voice, speed=float("nan")), "speed_invalid"),
        (lambda voice: Request.build("hi", voice, seed=-1), "seed_invalid"),
        (lambda voice: Request.build("hi", voice, seed=True), "seed_invalid"),
        (lambda voice: Request.build("hi", Voice(samples=[0.0, 1.0], sample_rate=16000)), "prompt_samples"),
        (lambda voice: Request.build("hi", voice, speed=1.5, stream=True), "speed_stream"),
        (lambda voice: Request(text="hi", voice=voice, mode="whisper"), "mode_unknown"),
    ],
)
def test_bad_requests_are_refused_with_the_field_and_rule_named(build, code):
    with pytest.raises(RequestError) as raised:
        build(fake_voice())
    assert raised.value.code == code and str(raised.value)


def test_the_mode_is_derived_once_from_the_stripped_strings():
    voice = fake_voice(transcript="b")
    assert Request.build("a", voice, instruct="happy").mode == "instruct"
    assert Request.build("a", voice).mode == "zero_shot"
    assert Request.build("a", fake_voice(transcript="  ")).mode == "cross_lingual"
    assert Request.build("a", voice, instruct="   ").mode == "zero_shot"


def test_queue_keeps_order_bound_and_positions():
    book = JobQueue(3, threading.RLock())
    heard = book.subscribe()
    records = [book.add(_job(f"job {i}")) for i in range(3)]
    with pytest.raises(QueueFull, match="3 jobs waiting"):
        book.add(_job("one too many"))
    assert [book.position(r.job.job_id) for r in records] == [1, 2, 3]

    first = book.start_next()
    assert first is records[0] and book.start_next() is None  # one job runs at a time
    assert [book.position(r.job.job_id) for r in records] == [0, 1, 2]
    book.add(_job("fits again"))  # the running job no longer counts against the bound

    book.remove_waiting(records[1], "cancelled before it started")
    assert book.position(records[2].job.job_id) == 1
    with pytest.raises(JobCancelled, match="before it started"):
        book.result(records[1].job.job_id, timeout=0)

    book.finish(first, jobs.DONE, "done")
    assert book.start_next() is records[2]
    assert [event.kind for event in heard.of(records[1].job.job_id, timeout=1)] == ["queued", "queued", "cancelled"]
    heard.close()
    assert book.running.terminal is None and records[1].terminal.message == "cancelled before it started"


def test_requeued_job_runs_first():
    book = JobQueue(4, threading.RLock())
    a, b = book.add(_job("a")), book.add(_job("b"))
    assert book.start_next() is a
    book.requeue_first(a)
    assert [book.position(r.job.job_id) for r in (a, b)] == [1, 2]


def test_unknown_job_and_duplicate_ids_are_refused():
    book = JobQueue(2, threading.RLock())
    job = _job("a")
    book.add(job)
    with pytest.raises(EngineError, match="already submitted"):
        book.add(job)
    with pytest.raises(EngineError, match="unknown job"):
        book.get("nope")
    with pytest.raises(TimeoutError):
        book.result(job.job_id, timeout=0.01)


def test_a_closed_listener_hears_nothing_more_and_finished_jobs_keep_only_their_end():
    book = JobQueue(2, threading.RLock())
    with book.subscribe() as heard:
        record = book.add(_job("a"))
        assert heard.get(timeout=1).job_id == record.job.job_id
    book.add(_job("b"))
    assert heard.empty() and not book._subscribers
    book.start_next()
    book.finish(record, jobs.DONE, "done")
    assert not hasattr(record, "events") and record.terminal.kind == "done"


def test_qos_is_a_quiet_no_op_off_macos():
    if sys.platform == "darwin":
        pytest.skip("checks the non-macOS path")
    assert qos.set_ui_thread_qos() is False
    assert qos.set_worker_thread_qos() is False
    with pytest.raises(ValueError, match="unknown QoS class"):
        qos.set_thread_qos("turbo")


def test_qos_calls_pthread_with_the_right_class(monkeypatch):
    calls = []

    class FakeLibSystem:
        def pthread_set_qos_class_self_np(self, qos_class, priority):
            calls.append((qos_class, priority))
            return 0

    FakeLibSystem.pthread_set_qos_class_self_np.argtypes = None
    monkeypatch.setattr(qos.sys, "platform", "darwin")
    monkeypatch.setattr(qos, "_libsystem", lambda: _Namespace(FakeLibSystem().pthread_set_qos_class_self_np))
    assert qos.set_ui_thread_qos() and qos.set_worker_thread_qos()
    assert calls == [(0x21, 0), (0x19, 0)]


class _Namespace:
    def __init__(self, function):
        self.pthread_set_qos_class_self_np = _Callable(function)


class _Callable:
    """A stand-in for a ctypes function: accepts argtypes/restype, forwards the call."""

    def __init__(self, function):
        self.function = function

    def __call__(self, *args):
        return self.function(*args)


def test_ui_side_of_the_engine_does_not_import_torch():
    code = (
        "import sys, cosyvoice_mac.engine as e, cosyvoice_mac.request as r, cosyvoice_mac.engine.messages; "
        "e.Job(r.Request.build('hi', r.Voice(saved='x'), stream=True)); "
        "e.TranscriberProcess().close(); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    "error, expected",
    [
        (RuntimeError("The operator 'aten::foo' is not currently implemented for the MPS device."), True),
        (RuntimeError("MPS backend out of memory (MPS allocated: 17.00 GB)"), True),
        (TypeError("Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64."), True),
        (RuntimeError("CUDA error: device-side assert triggered"), True),
        (RuntimeError("shape mismatch between timestamps and tokens"), False),
        (ValueError("MPS is mentioned but this is bad input"), False),
        (KeyError("mps"), False),
    ],
)
def test_device_errors_are_told_apart_from_other_failures(error, expected):
    from cosyvoice_mac.engine.runtime import is_device_error

    assert is_device_error(error) is expected


def test_a_full_queue_names_the_place_and_when_to_retry():
    import threading as _threading
    import time as _time

    from cosyvoice_mac.engine import jobs as _jobs
    from cosyvoice_mac.engine.jobqueue import JobQueue

    line = JobQueue(1, _threading.RLock())
    first = line.add(_job("a"))
    line.start_next()
    line.add(_job("b"))
    with pytest.raises(QueueFull) as unknown:
        line.add(_job("c"))
    assert unknown.value.position == 2 and unknown.value.retry_after_s is None
    assert "number 2 in line" in str(unknown.value) and "when one has finished" in str(unknown.value)
    first.sent_at = _time.monotonic() - 12.0  # it ran 12 s
    line.finish(first, _jobs.DONE, "done")
    line.start_next()  # "b" runs from now
    line.add(_job("d"))
    with pytest.raises(QueueFull) as known:
        line.add(_job("e"))
    assert known.value.retry_after_s == pytest.approx(12.0, abs=1.0)
    assert "try again in about 12 s" in str(known.value)


def _door_job(text: str, door: str) -> Job:
    return Job(fake_request(text), interface=door)


def test_one_door_alone_may_fill_the_line_but_two_share_it():
    book = JobQueue(4, threading.RLock())
    for index in range(4):
        book.add(_door_job(f"api {index}", "api"))  # alone: every place
    with pytest.raises(QueueFull, match="4 jobs waiting"):
        book.add(_door_job("api 4", "api"))
    book.fail_waiting(jobs.CANCELLED, "cleared")

    mixed = JobQueue(4, threading.RLock())  # a mixed flood: /v1 arrives first and takes every place
    for index in range(4):
        mixed.add(_door_job(f"api {index}", "api"))
    with pytest.raises(QueueFull):
        mixed.add(_door_job("gradio 0", "gradio_api"))  # refused, but the Gradio door now counts
    for turn in range(6):  # places free one by one while both doors keep asking
        mixed.finish(mixed.start_next(), jobs.DONE, "done")
        for door in ("api", "gradio_api"):
            try:
                mixed.add(_door_job(f"{door} {turn}", door))
            except QueueFull as refused:
                assert "try again" in str(refused)
    doors = [record.job.interface for record in mixed.pending]
    assert doors.count("api") == 2 and doors.count("gradio_api") == 2, doors  # 4 places, 2 doors: 2 each

    shared = JobQueue(4, threading.RLock())
    shared.add(_door_job("page 0", "page"))
    shared.add(_door_job("api 0", "api"))
    shared.add(_door_job("api 1", "api"))
    with pytest.raises(QueueFull, match="number 4 in line; the 1 place.s. left are kept for requests from elsewhere"):
        shared.add(_door_job("api 2", "api"))
    shared.add(_door_job("page 1", "page"))  # the page's share is still free


def test_finished_jobs_are_kept_small_and_bounded():
    from cosyvoice_mac.engine.jobqueue import KEEP_AUDIO, KEEP_FINISHED
    from cosyvoice_mac.engine.messages import Done, WorkerStatus

    book = JobQueue(2, threading.RLock())
    status = WorkerStatus("m", "v", "cpu", "cpu", "float32", 24000, precision={"plan": [list(range(100))] * 10})
    heard, ids = book.subscribe(), []
    for index in range(KEEP_FINISHED + 20):
        record = book.add(_job(f"job {index}"))
        book.start_next()
        result = jobs.JobResult(record.job.job_id, 24000, 1.0, "t", "cross_lingual", 1, 1.0, "m", "cpu")
        result.audio = np.zeros(24000, np.float32)  # unsaved (a full disk): the samples travel with it
        book.end(record, Done(record.job.job_id, result, status=status))
        ids.append(record.job.job_id)
    assert heard.get(timeout=1).kind == "queued" and any(  # listeners got the status whole
        event.kind == "done" and event.status is status for event in list(heard.queue)
    )
    heard.close()
    kept = [book.find(job_id) for job_id in ids]
    assert kept[:20] == [None] * 20 and all(kept[20:])  # at most KEEP_FINISHED remembered
    assert all(record.terminal.status is None for record in kept[20:])
    with_audio = [record for record in kept[20:] if record.terminal.result.audio is not None]
    assert with_audio == kept[-KEEP_AUDIO:]
