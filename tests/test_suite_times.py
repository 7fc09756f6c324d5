"""bench.suite_times: a run's JUnit XML summed per file and per one-worker group, outcomes counted."""

from __future__ import annotations

import json

from bench import suite_times

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
 <testcase classname="tests.api.test_a" name="test_one" time="2.5"/>
 <testcase classname="tests.api.test_a" name="test_two" time="1.5"><skipped message="no"/></testcase>
 <testcase classname="tests.test_b" name="test_three" time="7.0"><failure message="boom"/></testcase>
 <testcase classname="tests.browser.test_c" name="test_four[x]" time="0.25"/>
</testsuite></testsuites>
"""


def test_a_run_is_summed_per_file_and_group_with_its_outcomes(tmp_path, capsys):
    path = tmp_path / "run.xml"
    path.write_text(JUNIT)
    assert suite_times.main([str(path), "--wall", "9.5", "--note", "a run", "--slowest", "2"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["wall_seconds"] == 9.5 and document["what"] == "a run"
    assert document["tests"] == {"passed": 2, "skipped": 1, "failure": 1}
    assert document["sum_of_test_seconds"] == 11.2
    assert document["groups_seconds"] == {"spread": 7.0, "api": 4.0, "browser": 0.2}
    assert document["files"][0] == {"file": "tests/test_b.py", "tests": 1, "seconds": 7.0}
    assert document["files"][1] == {"file": "tests/api/test_a.py", "tests": 2, "seconds": 4.0}
    assert [row["test"] for row in document["slowest"]] == [
        "tests/test_b.py::test_three",
        "tests/api/test_a.py::test_one",
    ]
