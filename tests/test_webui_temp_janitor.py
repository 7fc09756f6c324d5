"""Gradio's temporary folder is bounded by age: old uploads and result copies go, recent ones and the copies
queued jobs hold stay."""

from __future__ import annotations

import os
import time

from cosyvoice_mac.webui.temp_janitor import TempJanitor


def _file(path, age_s: float):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"RIFF")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_old_copies_go_recent_ones_and_job_prompts_stay(tmp_path):
    now = time.time()
    old = _file(tmp_path / "aaaa" / "result.wav", 0)
    handed_out_again = _file(tmp_path / "bbbb" / "result.wav", -3000)  # Gradio touched it 3000 s later
    held = _file(tmp_path / "job-prompts" / "job.wav", 0)
    janitor = TempJanitor(tmp_path, max_age_s=3600)
    assert janitor.sweep(now=now + 1800) == 0
    assert janitor.sweep(now=now + 3700) == 1
    assert not old.exists() and not (tmp_path / "aaaa").exists()  # the emptied folder goes too
    assert handed_out_again.exists()  # a player showing it still plays
    assert held.exists()  # a queued job's prompt belongs to the job


def test_the_thread_sweeps_on_its_own_and_stops(tmp_path):
    janitor = TempJanitor(tmp_path, max_age_s=0.5, every_s=0.1).start()
    try:
        copy = _file(tmp_path / "cccc" / "result.wav", 0)
        deadline = time.monotonic() + 10
        while copy.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not copy.exists()
    finally:
        janitor.stop()
    assert not janitor._thread.is_alive()
