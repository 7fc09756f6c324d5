"""``bash run.sh doctor``: the machine's facts, the engine probes, the report a Mac user attaches.

The end-to-end run (a full-size random-weight synthesis on PyTorch CPU and on MLX's CPU backend, the
report file, the table) is the CI check the Mac checklist leans on; the parts around it are checked
with the machine's real answers and, where a Mac is needed, with the Mac's answers simulated.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from cosyvoice_mac.bench import budget, doctor, machine
from tests.parity.common import one_version_copy, parity_dir, versions_in_manifest


def test_the_cpu_flags_are_the_ones_proc_cpuinfo_lists():
    facts = machine.describe_machine()
    if sys.platform != "linux":
        pytest.skip("reads /proc/cpuinfo")
    listed = set()
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("flags"):
                listed = set(line.split(":", 1)[1].split())
                break
    assert facts.cpu_flags == [flag for flag in machine.CPU_FLAGS_OF_INTEREST if flag in listed]
    assert facts.cores >= 1 and facts.memory_gib > 0 and facts.python_architecture
    assert facts.under_rosetta is False and facts.packages["torch"]


def test_an_x86_python_on_apple_silicon_is_named_as_running_under_rosetta(monkeypatch):
    answers = {
        "sysctl.proc_translated": "1",
        "machdep.cpu.brand_string": "Apple M2",
        "hw.optional.arm.FEAT_BF16": "1",
        "hw.optional.arm.FEAT_I8MM": "0",
    }
    monkeypatch.setattr(machine.sys, "platform", "darwin")
    monkeypatch.setattr(machine, "_sysctl", answers.get)
    monkeypatch.setattr(machine.platform, "mac_ver", lambda: ("14.5", ("", "", ""), "x86_64"))
    monkeypatch.setattr(machine.platform, "machine", lambda: "x86_64")
    facts = machine.describe_machine()
    assert facts.under_rosetta and facts.os == "macOS" and facts.os_version == "14.5"
    assert facts.chip == "Apple M2" and facts.cpu_flags == ["FEAT_BF16"]
    line = doctor.table({"machine": facts.as_dict(), "onnx_providers": [], "engines": []}).splitlines()[0]
    assert "UNDER ROSETTA" in line and "arm64 Python" in line


def test_native_python_on_a_mac_is_not_flagged(monkeypatch):
    monkeypatch.setattr(machine.sys, "platform", "darwin")
    monkeypatch.setattr(machine, "_sysctl", {"sysctl.proc_translated": "0"}.get)
    assert machine.under_rosetta() is False


def test_each_engine_probe_runs_or_says_why_not():
    probes = {probe.name: probe for probe in machine.probe_engines()}
    assert set(probes) == {"torch/cpu", "torch/cuda", "torch/mps", "mlx/default"}
    assert probes["torch/cpu"].works and probes["torch/cpu"].seconds is not None
    import torch

    assert probes["torch/cuda"].works == torch.cuda.is_available()
    if not torch.cuda.is_available():
        assert "no CUDA device" in probes["torch/cuda"].detail
    if not torch.backends.mps.is_available():
        assert not probes["torch/mps"].works and "MPS" in probes["torch/mps"].detail
    mlx_installed = machine._package_version("mlx") is not None
    assert probes["mlx/default"].works == mlx_installed, probes["mlx/default"].detail


def test_onnxruntime_providers_are_timed_on_a_real_graph():
    results = {row["provider"]: row for row in machine.probe_onnx_providers(runs=3)}
    assert results["CPUExecutionProvider"]["loads"] is True
    assert results["CPUExecutionProvider"]["ms_per_run"] > 0
    assert "AzureExecutionProvider" not in results  # remote calls: nothing to measure here


def test_peak_footprint_is_a_mac_figure():
    if sys.platform == "darwin":
        assert machine.peak_footprint_mb() > 10  # this Python process itself
    else:
        assert machine.peak_footprint_mb() is None


@pytest.mark.mac
@pytest.mark.skipif(sys.platform != "darwin", reason="reads phys_footprint through libproc (macOS)")
def test_peak_footprint_grows_with_a_big_allocation_on_a_mac():
    before = machine.peak_footprint_mb()
    block = bytearray(300 * 2**20)
    block[::4096] = b"x" * len(block[::4096])
    assert machine.peak_footprint_mb() >= before + 250


def test_a_failed_synthesis_or_parity_makes_the_report_unhealthy():
    ok_row = {"name": "torch/cpu", "works": True, "synthesis": {"ok": True}, "parity": {"ok": True}}
    assert doctor.healthy({"engines": [ok_row, {"name": "torch/cuda", "works": False}]})
    assert not doctor.healthy({"engines": [{**ok_row, "synthesis": {"ok": False, "error": "exit status 1"}}]})
    assert not doctor.healthy({"engines": [{**ok_row, "parity": {"ok": False}}]})
    assert doctor.healthy({"engines": [{**ok_row, "parity": {"ok": None, "skipped": "no checkout"}}]})


def test_short_requests_are_refused_with_the_reason(capsys):
    with pytest.raises(SystemExit):
        doctor.main(["--tokens", "10"])
    assert "--tokens must be at least 25" in capsys.readouterr().err


def test_a_slow_engine_gets_a_shorter_request_and_each_shortening_is_said():
    asked = budget.plan_run(100, True, seconds_per_token=1.0, seconds_left=None)
    assert asked == budget.RunPlan(100, True)  # no budget: what was asked
    assert budget.plan_run(100, True, 1.0, 150.0) == budget.RunPlan(100, True)  # 100 tokens + 2 first audios fit
    shorter = budget.plan_run(100, True, 1.0, 100.0)
    assert (shorter.tokens, shorter.stream, shorter.warm_up_only) == (50, True, False)
    assert shorter.shortened.startswith("50 of 100 tokens (1.00 s a token in the warm-up, 100 s of the budget left")
    unstreamed = budget.plan_run(100, True, 1.0, 60.0)
    assert (unstreamed.tokens, unstreamed.stream) == (50, False) and "no first-audio figures" in unstreamed.shortened
    cold = budget.plan_run(100, True, 1.0, 10.0)
    assert cold.warm_up_only and cold.tokens == 25 and "the warm-up is the measured run" in cold.shortened
    assert budget.plan_run(60, False, 1.0, 55.0).tokens == 50  # whole seconds below an odd request
    again = budget.plan_run(100, True, 1.0, 10.0, timed_again=True)
    assert again.warm_up_only and again.shortened.startswith("the second warm-up is the measured run, no first")
    assert "cold" not in again.shortened and "1.00 s a token in the second warm-up" in again.shortened


def test_a_warm_up_is_timed_again_where_it_would_shorten_the_run_and_another_fits_or_the_first_was_a_gpu_s():
    """On the H100 the first 25 tokens took 55 s and the default doctor's share left 8 s after them: a GPU's
    second warm-up is short (no captures), a CPU's is as long as its first, so only the GPU's is tried there."""
    shortened = budget.plan_run(100, True, 1.0, 60.0)
    for on_a_gpu in (False, True):
        assert budget.worth_timing_again(shortened, warm_up_s=25.0, seconds_left=60.0, on_a_gpu=on_a_gpu)
        assert not budget.worth_timing_again(budget.plan_run(100, True, 1.0, 500.0), 25.0, 500.0, on_a_gpu)  # fits
        assert not budget.worth_timing_again(budget.plan_run(100, True, 1.0, None), 25.0, None, on_a_gpu)  # no budget
        assert not budget.worth_timing_again(budget.plan_run(100, True, 1.0, -1.0), 25.0, -1.0, on_a_gpu)  # spent
    assert not budget.worth_timing_again(shortened, warm_up_s=55.0, seconds_left=8.0, on_a_gpu=False)
    assert budget.worth_timing_again(shortened, warm_up_s=55.0, seconds_left=8.0, on_a_gpu=True)


def test_the_default_doctor_keeps_every_engine_within_five_minutes(tmp_path, monkeypatch, capsys):
    """Every child (two engines' synthesis and parity) takes all the time it is allowed: the run still ends
    within the default five minutes, and an engine too slow for its share is said, not failed."""
    clock = [0.0]
    children: list[tuple[str, float]] = []

    def slow_child(command, *, timeout, **_):
        children.append((" ".join(command), timeout))
        clock[0] += timeout  # the worst case: each child runs until it is stopped
        raise subprocess.TimeoutExpired(command, timeout)

    works = [machine.Probe("torch", "cpu", True, "ok"), machine.Probe("mlx", "default", True, "mlx 0.29")]
    monkeypatch.setattr(doctor, "probe_engines", lambda: works)
    monkeypatch.setattr(doctor, "probe_onnx_providers", lambda: [])
    monkeypatch.setattr(doctor, "parity_folder", lambda: tmp_path)
    monkeypatch.setattr(doctor.subprocess, "run", slow_child)
    monkeypatch.setattr(doctor.time, "monotonic", lambda: clock[0])

    def first_build(version, frontends):  # a machine's first doctor builds the faithful frontends: not its minutes
        clock[0] += 100.0
        return {"kind": frontends, "version": version}

    monkeypatch.setattr(doctor, "prepare_frontends", first_build)
    # Nothing failed: all was too slow (at load 16 on this 2-core machine both engines and MLX's parity tests
    # were; the parity timeout read as FAILED, and the doctor exited 1 with no failure in its table).
    assert doctor.main(["--json", str(tmp_path / "doctor.json")]) == 0
    assert len(children) == 4 and clock[0] == 100.0 + 60 * doctor.DEFAULT_MINUTES  # the build, then the minutes
    assert all("--frontends faithful" in command for command, _ in children[::2])  # the syntheses' encoders
    budgets = [float(c.split("--budget-s ")[1].split()[0]) for c, _ in children if "--budget-s" in c]
    assert len(budgets) == 2 and all(b < timeout for b, (_, timeout) in zip(budgets, children[::2]))
    table = capsys.readouterr().out
    assert table.count("too slow here: its load") == 2 and table.count("parity: too slow here") == 2
    assert "FAILED" not in table and "--minutes gives it more" in table
    document = json.loads((tmp_path / "doctor.json").read_text())
    assert [row["synthesis"]["ok"] for row in document["engines"]] == [None, None]  # slow is not broken
    assert [row["parity"]["ok"] for row in document["engines"]] == [None, None] and document["healthy"] is True
    assert document["frontends"] == {"kind": "faithful", "version": "cosyvoice3"}


def test_a_shortened_run_is_said_under_its_row():
    document = {
        "machine": machine.describe_machine().as_dict(),
        "onnx_providers": [],
        "engines": [
            {
                "name": "mlx/default",
                "works": True,
                "synthesis": {
                    "ok": True,
                    "tokens_per_s": 0.4,
                    "rtf": 60.0,
                    "first_audio_s": None,
                    "first_audio_new_voice_s": None,
                    "peak_memory_mb": 3000.0,
                    "shortened": "the warm-up is the measured run (cold: first-call costs included)",
                },
            }
        ],
    }
    row, note = doctor.table(document).splitlines()[-2:]
    assert row.startswith("mlx/default") and "0.4" in row
    assert (
        note.strip()
        == "shorter run, in the doctor's time: the warm-up is the measured run (cold: first-call costs included)"
    )


def _doctor(tmp_path, *arguments: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / "doctor.json"
    done = subprocess.run(
        [sys.executable, "-m", "cosyvoice_mac.bench.doctor", "--json", str(report), *arguments],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done, json.loads(report.read_text())


def test_doctor_synthesises_on_pytorch_cpu_and_writes_its_report(tmp_path):
    """The CI run on PyTorch: full-size random weights, one short request, the table and doctor.json. CosyVoice2:
    the same doctor for 60 % of CosyVoice3's CPU time here (its flow is the smaller)."""
    # An hour: the request as asked even on a loaded machine (a shorter one would have no first-audio figures).
    # The stand-in frontends: the faithful ones' first build (a 0.5 GB export) is no test's to pay.
    arguments = ("--tokens", "25", "--minutes", "60", "--no-parity", "--engines", "torch/cpu")
    arguments += ("--frontends", "stand-in")
    done, document = _doctor(tmp_path, *arguments, "--version", "cosyvoice2")
    assert document["version"] == "cosyvoice2"
    assert document["healthy"] and document["machine"]["cores"] >= 1 and document["frontends"] == {"kind": "stand-in"}
    (row,) = document["engines"]
    result = row["synthesis"]
    assert row["name"] == "torch/cpu" and result["ok"] and result["tokens"] == 25 and result["engine_used"] == "torch"
    assert result["tokens_per_s"] > 0 and result["rtf"] > 0 and result["first_audio_s"] > 0
    assert result["peak_memory_mb"] > 100 and abs(result["audio_s"] - 1.0) < 0.1
    assert "torch/cpu" in done.stdout  # the table names the engine it ran


@pytest.mark.skipif(machine._package_version("mlx") is None, reason="needs mlx (mlx[cpu] on Linux)")
@pytest.mark.skipif(doctor.parity_folder() is None, reason="needs the parity folder (../shared/parity)")
def test_doctor_checks_mlx_against_the_golden_vectors(tmp_path):
    """The CI run on MLX's CPU backend: the probe and the parity verdict (a full-size synthesis on mlx-cpu takes
    many minutes on two cores: MLX's CPU convolutions are slow; on a Mac the same row times Metal). The parity
    folder given holds the cheaper version only: every case of both versions runs in test_parity_mlx.py itself,
    and test_mlx_cosyvoice2_engine.py checks that the doctor's row runs the cases of each version a folder holds."""
    held = versions_in_manifest(parity_dir())
    cheaper = "cosyvoice3" if "cosyvoice3" in held else held[0]  # its MLX cases take a third of CosyVoice2's here
    folder = one_version_copy(parity_dir(), cheaper, tmp_path / "parity")
    done, document = _doctor(
        tmp_path, "--no-synthesis", "--engines", "mlx/default", env={"COSYVOICE_PARITY_DIR": str(folder)}
    )
    assert document["parity_folder"] == str(folder)
    (row,) = document["engines"]
    assert row["works"] and "mlx" in row["detail"] and "synthesis" not in row
    assert row["parity"]["ok"] is True, row["parity"]
    assert re.search(r"\b([1-9]\d*) passed", row["parity"]["summary"]), row["parity"]
    assert "mlx/default" in done.stdout


def test_probe_rows_that_do_not_work_say_why_in_the_table():
    document = {
        "machine": machine.describe_machine().as_dict(),
        "onnx_providers": [{"provider": "CPUExecutionProvider", "loads": True, "ms_per_run": 0.5}],
        "engines": [
            {"name": "torch/mps", "works": False, "detail": "MPS is not available on this Mac"},
            {"name": "torch/cpu", "works": True, "synthesis": {"ok": False, "error": "exit status 1: boom"}},
        ],
    }
    text = doctor.table(document)
    assert "MPS is not available on this Mac" in text and "synthesis FAILED: exit status 1: boom" in text
    assert "CPUExecutionProvider 0.50 ms" in text


def test_the_new_voice_cell_is_the_whole_wait_with_the_prompt_encoded():
    """A new voice waits for its prompt's features and then its first chunk: the table shows the sum, and a report
    made before the frontends were timed with it shows its first chunk alone."""
    result = {"ok": True, "tokens_per_s": 20.0, "rtf": 1.5, "first_audio_s": 2.95, "peak_memory_mb": 5000.0}
    document = {"machine": machine.describe_machine().as_dict(), "onnx_providers": [], "engines": []}
    for extra, shown in (
        ({"first_audio_new_voice_s": 3.62, "new_voice_with_frontends_s": 4.81}, "4.81"),
        (
            {"first_audio_new_voice_s": 3.62},
            "3.62",
        ),
    ):
        document["engines"] = [{"name": "torch/cpu", "works": True, "synthesis": {**result, **extra}}]
        cells = doctor.table(document).splitlines()[-1].split()
        assert cells[4:6] == ["2.95", shown], cells
