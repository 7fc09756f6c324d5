"""How a worker process starts (``engine/start_method.py``): forked from a server that imported torch once, on
Linux while the environment is the one that server started with; a fresh interpreter otherwise."""

from __future__ import annotations

import sys

import psutil
import pytest

from cosyvoice_mac.engine import start_method
from cosyvoice_mac.engine.worker import WorkerConfig, WorkerProcess
from cosyvoice_mac.preview import PIPELINE_FACTORY


@pytest.fixture
def fresh_server_record(monkeypatch):
    """As if no fork server had been started by this process yet."""
    monkeypatch.setattr(start_method, "_server_environment", None)


def test_macos_starts_every_worker_in_a_fresh_interpreter(monkeypatch, fresh_server_record):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert not start_method.fork_server_usable()
    assert start_method.worker_context().get_start_method() == "spawn"
    assert start_method._server_environment is None  # no server was asked for


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux's start")
def test_linux_forks_from_the_server_until_the_environment_changes(monkeypatch, fresh_server_record):
    monkeypatch.setenv("COSYVOICE_START_METHOD_PROBE", "one")
    assert start_method.worker_context().get_start_method() == "forkserver"
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "another test")  # rewritten by pytest for every test: no change
    assert start_method.worker_context().get_start_method() == "forkserver"
    monkeypatch.setenv("COSYVOICE_START_METHOD_PROBE", "two")  # the server's torch read another environment
    assert start_method.worker_context().get_start_method() == "spawn"
    assert start_method.worker_context("forkserver").get_start_method() == "forkserver"  # asked for by name


def test_an_unknown_method_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown start method 'fork'.*auto, spawn, forkserver"):
        start_method.worker_context("fork")


def _worker_environment(worker: WorkerProcess) -> dict[str, str]:
    """The environment the worker process started with (a forked one inherits its server's, a spawned one ours)."""
    entries = open(f"/proc/{worker.pid}/environ", "rb").read().split(b"\0")
    return dict(entry.decode().split("=", 1) for entry in entries if b"=" in entry)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the child's environment from /proc")
def test_a_worker_started_after_an_environment_change_sees_the_new_value(monkeypatch):
    config = WorkerConfig(model_dir=None, pipeline_factory=PIPELINE_FACTORY, outputs_dir=None)
    for value in ("before", "after"):
        monkeypatch.setenv("COSYVOICE_START_METHOD_PROBE", value)
        worker = WorkerProcess(config)
        try:
            assert worker.receive(timeout=60), "the worker said nothing"
            assert _worker_environment(worker)["COSYVOICE_START_METHOD_PROBE"] == value
            worker_process = psutil.Process(worker.pid)  # named so, whichever way it started
            assert start_method.looks_like_worker(worker_process.name(), " ".join(worker_process.cmdline()))
            assert worker_process.name() == start_method.WORKER_NAME
        finally:
            worker.stop(timeout=10)


def test_a_worker_is_told_from_the_other_children_of_the_app():
    server = "python -c from multiprocessing.forkserver import main; main(8, 9, ['cosyvoice_mac.engine.runtime'])"
    tracker = "python -c from multiprocessing.resource_tracker import main;main(7)"
    assert start_method.looks_like_worker(start_method.WORKER_NAME, server)  # forked: its server's command line
    assert not start_method.looks_like_worker("python", server)  # the fork server itself
    assert not start_method.looks_like_worker("python", tracker)
    spawned = "python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)"
    assert start_method.looks_like_worker("python", spawned)
