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


@pytest.mark.parametrize("job, message", [
    (Job(text="  "), "empty"),
    (Job(text="x" * (jobs.MAX_TEXT_CHARS + 1)), "limit"),
    (Job(text="hi", prompt_audio="/no/such/file.wav"), "does not exist"),
    (Job(text="hi", prompt_audio=np.zeros(10, np.float32)), "prompt_sample_rate"),
    (Job(text="hi", prompt_audio="/no/such.wav", voice="alice"), "not both"),
    (Job(text="hi", speed=0), "speed"),
    (Job(text="hi", speed=float("nan")), "speed"),
    (Job(text="hi", seed=-1), "seed"),
    (Job(text="hi", prompt_audio=[0.0, 1.0]), "numpy array"),
    (Job(text="hi", speed=1.5, stream=True), "cannot be used while streaming"),
])
def test_bad_jobs_are_refused_with_the_field_named(job, message):
    with pytest.raises(EngineError, match=message):
        job.validate()


def test_mode_follows_the_pipeline_rule():
    assert Job(text="a", instruct="happy", prompt_text="b").mode == "instruct"
    assert Job(text="a", prompt_text="b").mode == "zero_shot"
    assert Job(text="a").mode == "cross_lingual"


def test_queue_keeps_order_bound_and_positions():
    book = JobQueue(3, threading.RLock())
    records = [book.add(Job(text=f"job {i}")) for i in range(3)]
    with pytest.raises(QueueFull, match="3 jobs waiting"):
        book.add(Job(text="one too many"))
    assert [book.position(r.job.job_id) for r in records] == [1, 2, 3]

    first = book.start_next()
    assert first is records[0] and book.start_next() is None  # one job runs at a time
    assert [book.position(r.job.job_id) for r in records] == [0, 1, 2]
    book.add(Job(text="fits again"))  # the running job no longer counts against the bound

    book.remove_waiting(records[1], "cancelled before it started")
    assert book.position(records[2].job.job_id) == 1
    with pytest.raises(JobCancelled, match="before it started"):
        book.result(records[1].job.job_id, timeout=0)

    book.finish(first, jobs.DONE, "done")
    assert book.start_next() is records[2]
    kinds = [event.kind for event in book.events(records[1].job.job_id, timeout=1)]
    assert kinds == ["queued", "position", "cancelled"]


def test_requeued_job_runs_first():
    book = JobQueue(4, threading.RLock())
    a, b = book.add(Job(text="a")), book.add(Job(text="b"))
    assert book.start_next() is a
    book.requeue_first(a)
    assert [book.position(r.job.job_id) for r in (a, b)] == [1, 2]


def test_unknown_job_and_duplicate_ids_are_refused():
    book = JobQueue(2, threading.RLock())
    job = Job(text="a")
    book.add(job)
    with pytest.raises(EngineError, match="already submitted"):
        book.add(job)
    with pytest.raises(EngineError, match="unknown job"):
        book.get("nope")
    with pytest.raises(TimeoutError):
        book.result(job.job_id, timeout=0.01)


def test_a_failing_listener_does_not_break_the_queue():
    book = JobQueue(2, threading.RLock())
    book.add_callback(lambda event: 1 / 0)
    heard = book.subscribe()
    record = book.add(Job(text="a"))
    assert heard.get(timeout=1).job_id == record.job.job_id


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
    code = ("import sys, cosyvoice_mac.engine as e; e.Job(text='hi', stream=True).validate(); "
            "e.TranscriberProcess().close(); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("error, expected", [
    (RuntimeError("The operator 'aten::foo' is not currently implemented for the MPS device."), True),
    (RuntimeError("MPS backend out of memory (MPS allocated: 17.00 GB)"), True),
    (TypeError("Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64."), True),
    (RuntimeError("CUDA error: device-side assert triggered"), True),
    (RuntimeError("shape mismatch between timestamps and tokens"), False),
    (ValueError("MPS is mentioned but this is bad input"), False),
    (KeyError("mps"), False),
])
def test_device_errors_are_told_apart_from_other_failures(error, expected):
    from cosyvoice_mac.engine.runtime import is_device_error

    assert is_device_error(error) is expected


def test_a_full_queue_names_the_place_and_when_to_retry():
    import threading as _threading
    import time as _time

    from cosyvoice_mac.engine.jobqueue import JobQueue
    from cosyvoice_mac.engine import jobs as _jobs

    line = JobQueue(1, _threading.RLock())
    first = line.add(Job(text="a"))
    line.start_next()
    line.add(Job(text="b"))
    with pytest.raises(QueueFull) as unknown:
        line.add(Job(text="c"))
    assert unknown.value.position == 2 and unknown.value.retry_after_s is None
    assert "number 2 in line" in str(unknown.value) and "when one has finished" in str(unknown.value)
    first.sent_at = _time.monotonic() - 12.0  # it ran 12 s
    line.finish(first, _jobs.DONE, "done")
    line.start_next()  # "b" runs from now
    line.add(Job(text="d"))
    with pytest.raises(QueueFull) as known:
        line.add(Job(text="e"))
    assert known.value.retry_after_s == pytest.approx(12.0, abs=1.0)
    assert "try again in about 12 s" in str(known.value)


def test_old_finished_jobs_forget_their_saved_audio_but_keep_their_facts():
    import threading as _threading

    import numpy as np

    from cosyvoice_mac.engine import jobs as _jobs
    from cosyvoice_mac.engine.jobqueue import KEEP_AUDIO, JobQueue
    from cosyvoice_mac.engine.jobs import JobResult

    line = JobQueue(4, _threading.RLock())
    records = []
    for index in range(KEEP_AUDIO + 3):
        record = line.add(Job(text=f"job {index}"))
        line.start_next()
        result = JobResult(job_id=record.job.job_id, audio=np.ones(24000, np.float32), sample_rate=24000,
                           text="t", mode="cross_lingual", seed=1, speed=1.0, model="m", device="cpu",
                           output_path=f"/outputs/{index}.wav" if index else None)
        line.finish(record, _jobs.DONE, "done", result)
        records.append(record)
    kept = [record.terminal.result.audio.size for record in records]
    assert kept[0] == 24000  # never saved: its samples are the only copy
    assert kept[1:3] == [0, 0] and all(size == 24000 for size in kept[-KEEP_AUDIO:])
    assert line.result(records[1].job.job_id, 0).output_path == "/outputs/1.wav"
