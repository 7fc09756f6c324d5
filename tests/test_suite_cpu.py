"""bench/suite_cpu.py: every Python process a run starts records its CPU, forked children included."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from bench.suite_cpu import RECORDER, kind, summary

FORKING_CHILD = """
import os, time
pid = os.fork()
if pid == 0:
    sum(range(2_000_000))
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_a_process_and_the_child_it_forks_each_record_their_cpu(tmp_path):
    log = tmp_path / "processes.jsonl"
    env = {**os.environ, "SUITE_CPU_FILE": str(log), "PYTHONPATH": str(RECORDER)}
    subprocess.run([sys.executable, "-c", FORKING_CHILD], env=env, check=True, timeout=60)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(record["how"] for record in records) == ["exit", "os._exit"]
    child = next(record for record in records if record["how"] == "os._exit")
    assert child["cpu_s"] > 0 and child["pid"] != next(r["pid"] for r in records if r["how"] == "exit")


def test_processes_are_summed_by_kind():
    records = [
        {"argv": ["/x/pytest/__main__.py", "-q"], "how": "exit", "imported": ["torch"], "cpu_s": 10.0},
        {
            "argv": ["app.py", "--models-dir", "/tmp/pytest-of-me/m"],
            "how": "exit",
            "imported": ["gradio"],
            "cpu_s": 5.0,
        },
        {"argv": ["app.py", "--port", "1"], "how": "os._exit", "imported": ["torch"], "cpu_s": 3.0},
        {
            "argv": ["-c", "from multiprocessing.forkserver import main"],
            "how": "exit",
            "imported": ["torch"],
            "cpu_s": 2.0,
        },
    ]
    assert kind(records[2]) == "forked model worker"
    assert kind(records[1]) == "app server"  # its folders' names hold "pytest"; its program is the app
    result = summary(records)
    assert result["cpu_s"] == 20.0
    assert result["by_kind"]["app server"] == {"cpu_s": 5.0, "processes": 1}
    assert result["by_kind"]["fork server or spawned worker (imports torch)"]["cpu_s"] == 2.0
