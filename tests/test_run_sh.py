"""run.sh and .ci/run: verbs, exit statuses, the set-up stamp, the message when no Python fits.

Each test copies the script into a temporary project whose ``.venv/bin/python`` is a stand-in that
logs ``pip`` and ``pytest`` calls, so no test installs anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

FAKE_PYTHON = """#!/usr/bin/env bash
# Stand-in for .venv/bin/python: logs pip and pytest calls, runs everything else with the real Python.
log="$(cd "$(dirname "$0")/../.." && pwd)/calls.log"
if [ "${1:-}" = -m ] && [ "${2:-}" = pip ]; then echo "$*" >>"$log"; exit 0; fi
if [ "${1:-}" = -m ] && [ "${2:-}" = pytest ]; then
  echo "$* OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-}" >>"$log"; exit "${FAKE_PYTEST_STATUS:-0}"
fi
exec "%s" "$@"
"""


def _run(command: list[str], cwd: Path, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=cwd, env=env or dict(os.environ), capture_output=True, text=True, timeout=timeout
    )


@dataclass
class FakeProject:
    """A copy of run.sh + pyproject.toml whose .venv/bin/python only logs pip and pytest calls."""

    root: Path

    def calls(self) -> list[str]:
        log = self.root / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    def run(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return _run(["bash", "run.sh", *args], self.root, env)


@pytest.fixture
def project(tmp_path) -> FakeProject:
    shutil.copy(REPO_ROOT / "run.sh", tmp_path / "run.sh")
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON % sys.executable)
    python.chmod(0o755)
    return FakeProject(tmp_path)


def test_unknown_verb_prints_usage_and_exits_2_without_setting_up(tmp_path):
    shutil.copy(REPO_ROOT / "run.sh", tmp_path / "run.sh")
    result = _run(["bash", "run.sh", "frobnicate"], tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: bash run.sh")
    assert "unknown command 'frobnicate'" in result.stderr
    assert not (tmp_path / ".venv").exists()


def test_help_prints_usage_and_succeeds(tmp_path):
    shutil.copy(REPO_ROOT / "run.sh", tmp_path / "run.sh")
    result = _run(["bash", "run.sh", "help"], tmp_path)
    assert result.returncode == 0 and result.stdout.startswith("usage: bash run.sh")


def test_setup_installs_torch_first_then_skips_until_the_spec_changes(project):
    first = project.run("setup")
    assert first.returncode == 0, first.stderr
    calls = project.calls()
    assert len(calls) == 3
    assert calls[0].endswith("pip install --disable-pip-version-check torch==2.13.0")
    assert "-e .[test,preview,coreml,lint,cluster] torch==2.13.0" in calls[1]
    assert calls[2].endswith("--no-deps resemblyzer==0.1.4")
    assert (project.root / ".venv" / ".setup-stamp").is_file()

    started = time.monotonic()
    again = project.run("setup")
    assert again.returncode == 0 and project.calls() == calls  # nothing re-installed
    assert time.monotonic() - started < 30  # the calls above are the check; a loaded machine is only slower

    with (project.root / "pyproject.toml").open("a") as spec:
        spec.write("\n# a new dependency would go here\n")
    assert project.run("setup").returncode == 0
    assert len(project.calls()) == 6  # the three set-up installs again


@pytest.mark.parametrize("status", [0, 1, 5])
def test_test_verb_runs_pytest_verbosely_and_returns_its_status(project, status):
    env = {**os.environ, "FAKE_PYTEST_STATUS": str(status)}
    env.pop("OMP_WAIT_POLICY", None)
    result = project.run("test", "-k", "audio", env=env)
    assert result.returncode == status, result.stderr
    pytest_call = project.calls()[-1]
    assert pytest_call == "-m pytest -v -k audio OMP_WAIT_POLICY=PASSIVE"


def test_the_whole_suite_is_linted_first_then_spread_over_the_cores(project):
    ruff = project.root / ".venv" / "bin" / "ruff"  # a linter that logs its calls and passes
    ruff.write_text('#!/usr/bin/env bash\necho "ruff $*" >>"$(dirname "$0")/../../calls.log"\n')
    ruff.chmod(0o755)
    assert project.run("test").returncode == 0
    assert project.calls()[-3:] == [
        "ruff check .",
        "ruff format --check --quiet .",
        "-m pytest -v -n auto --maxprocesses 4 --dist loadgroup OMP_WAIT_POLICY=PASSIVE",
    ]


def test_no_suitable_python_gives_a_clear_message(tmp_path):
    shutil.copy(REPO_ROOT / "run.sh", tmp_path / "run.sh")
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    tools = tmp_path / "bin"  # everything on the usual PATH except Python
    tools.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
        for entry in Path(folder).iterdir() if Path(folder).is_dir() else []:
            if not entry.name.startswith("python") and not (tools / entry.name).exists():
                (tools / entry.name).symlink_to(entry)
    env = {"PATH": str(tools), "HOME": str(tmp_path)}
    result = _run(["bash", "run.sh", "setup"], tmp_path, env)
    assert result.returncode == 1
    assert "needs Python 3.10, 3.11 or 3.12" in result.stderr
    assert not (tmp_path / ".venv").exists()


@pytest.mark.parametrize(("suite_status", "ci_status"), [(0, 0), (1, 1), (5, 1)])
def test_ci_fails_on_failed_tests_and_on_no_tests(tmp_path, suite_status, ci_status):
    (tmp_path / ".ci").mkdir()
    shutil.copy(REPO_ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    (tmp_path / "run.sh").write_text(f'[ "$1" = test ] && exit {suite_status}\nexit 99\n')
    tools = tmp_path / "bin"  # present already, so CI installs nothing here
    tools.mkdir()
    for name in ("espeak-ng", "chromium"):
        (tools / name).write_text("#!/bin/sh\n")
        (tools / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}
    result = _run(["bash", ".ci/run"], tmp_path, env)
    assert result.returncode == ci_status
    if suite_status == 5:
        assert "collected no tests" in result.stdout


def _fake_mac(tmp_path: Path, macos_version: str) -> dict:
    """PATH with ``uname`` answering Darwin/arm64 and ``sw_vers`` answering ``macos_version``."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    (bin_dir / "uname").write_text('#!/usr/bin/env bash\n[ "${1:-}" = -m ] && echo arm64 || echo Darwin\n')
    (bin_dir / "sw_vers").write_text(f"#!/usr/bin/env bash\necho {macos_version}\n")
    for tool in ("uname", "sw_vers"):
        (bin_dir / tool).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


@pytest.mark.parametrize("version", ["13.6.1", "12.7", "unknown-text"])
def test_macos_before_14_is_refused_with_what_to_do(project, tmp_path, version):
    result = project.run("setup", env=_fake_mac(tmp_path, version))
    assert result.returncode == 1
    assert f"macOS {version}" in result.stderr and "macOS 14 (Sonoma) or newer" in result.stderr
    assert "Software Update" in result.stderr and project.calls() == []  # nothing installed


@pytest.mark.parametrize("version", ["14.0", "15.1.1", "26.2"])
def test_macos_14_or_newer_passes_the_check(project, tmp_path, version):
    result = project.run("setup", env=_fake_mac(tmp_path, version))
    assert "Sonoma" not in result.stderr, result.stderr
