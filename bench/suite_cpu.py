"""Where a test selection's CPU goes, by kind of process, as JSON: the pytest process itself, the app servers it
starts, their fork servers (which import torch once), the model workers they fork, CLI runs, other children.

``/usr/bin/time`` misses process trees nobody waits for (an app's forked workers); here every Python process the
run starts records its own CPU seconds at exit (``bench/suite_cpu_recorder/sitecustomize.py``). Non-Python processes
(chromium, espeak-ng) are not counted. Run it on a quiet machine; its numbers are CPU seconds, steadier than wall.

``python -m bench.suite_cpu [--note TEXT] -- tests/api`` (everything after ``--`` goes to pytest)
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RECORDER = Path(__file__).resolve().parent / "suite_cpu_recorder"


def kind(record: dict) -> str:
    """What a recorded process was, from its program (the command line's first word) and how it ended."""
    program = record["argv"][0] if record["argv"] else ""
    pytest_run = program.endswith(os.path.join("pytest", "__main__.py"))
    if record["how"] in ("os._exit", "sigterm") and not pytest_run:
        return "forked model worker"
    if pytest_run:
        return "pytest (tests in process)"
    if program.endswith("app.py"):
        return "app server"
    if program == "-c" and "torch" in record["imported"]:
        return "fork server or spawned worker (imports torch)"
    if program.endswith("__main__.py"):
        return "CLI or bench run"
    return "other Python process"


def summary(records: list[dict]) -> dict:
    seconds, counts = collections.Counter(), collections.Counter()
    for record in records:
        name = kind(record)
        seconds[name] += record["cpu_s"]
        counts[name] += 1
    return {
        "cpu_s": round(sum(seconds.values()), 1),
        "by_kind": {
            name: {"cpu_s": round(value, 1), "processes": counts[name]} for name, value in seconds.most_common()
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--note", default="")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    pytest_args = [a for a in args.pytest_args if a != "--"] or ["tests"]
    log = Path(tempfile.mkdtemp(prefix="suite-cpu-")) / "processes.jsonl"
    env = {
        **os.environ,
        "SUITE_CPU_FILE": str(log),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(RECORDER), os.environ.get("PYTHONPATH", "")])),
        "OMP_WAIT_POLICY": "PASSIVE",
    }
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    last = (done.stdout.strip().splitlines() or [""])[-1]
    print(
        json.dumps(
            {"selection": pytest_args, "note": args.note, "wall_s": round(wall, 1), "pytest": last, **summary(records)},
            indent=1,
        )
    )
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
