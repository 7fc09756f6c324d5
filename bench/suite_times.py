"""Summarise a whole-suite run's JUnit XML as JSON: totals, the time per test file and per xdist group, the slowest.

    .venv/bin/python -m pytest -n auto --maxprocesses 4 --dist loadgroup --junitxml=run.xml  # run.sh test's pytest
    python -m bench.suite_times run.xml --wall 1234 --note "..." > bench/results/issue44_suite/<name>.json

A test's JUnit time is its setup, call and teardown together. The groups are tests/conftest.py's: the api, browser and
reliability folders each run on one worker, so a group's sum is a floor under the whole run's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter

ONE_WORKER_FOLDERS = ("api", "browser", "reliability")


def summarise(path: str, slowest: int = 40) -> dict:
    root = ElementTree.parse(path).getroot()
    files, groups, counts = Counter(), Counter(), Counter()
    tests, outcomes = [], Counter()
    for case in root.iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        seconds = float(case.get("time") or 0.0)
        parts = module.split("/")
        group = parts[1] if len(parts) > 2 and parts[1] in ONE_WORKER_FOLDERS else "spread"
        files[module + ".py"] += seconds
        counts[module + ".py"] += 1
        groups[group] += seconds
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        outcomes[outcome] += 1
        tests.append((seconds, f"{module}.py::{case.get('name')}"))
    tests.sort(reverse=True)
    return {
        "tests": dict(outcomes),
        "sum_of_test_seconds": round(sum(files.values()), 1),
        "groups_seconds": {name: round(value, 1) for name, value in groups.most_common()},
        "files": [
            {"file": name, "tests": counts[name], "seconds": round(value, 1)} for name, value in files.most_common()
        ],
        "slowest": [{"seconds": round(seconds, 1), "test": name} for seconds, name in tests[:slowest]],
    }


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", help="the run's --junitxml file")
    parser.add_argument("--wall", type=float, help="the run's wall-clock seconds (pytest's 'in N s')")
    parser.add_argument("--note", default="", help="what was run, on which tree, under which load")
    parser.add_argument("--slowest", type=int, default=40)
    args = parser.parse_args(argv)
    document = {
        "what": args.note,
        "machine": {"cpu": _cpu_name(), "cores": os.cpu_count()},
        "wall_seconds": args.wall,
        **summarise(args.junit, args.slowest),
    }
    json.dump(document, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
