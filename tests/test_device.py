"""The device policy: what ``auto`` picks, refusing missing devices, env overrides, memory reports."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import cosyvoice_mac
from cosyvoice_mac import device
from cosyvoice_mac.device import DeviceError, empty_cache, memory_report, select_device, select_dtype
from cosyvoice_mac.heap import return_freed_heap


@pytest.fixture
def machine(monkeypatch):
    """Pretend this machine has the given accelerators: ``machine(mps=True, cuda_count=2)``."""
    monkeypatch.delenv(device.DEVICE_ENV, raising=False)
    monkeypatch.delenv(device.DTYPE_ENV, raising=False)

    def configure(mps: bool = False, cuda_count: int = 0):
        monkeypatch.setattr(device, "mps_available", lambda: mps)
        monkeypatch.setattr(device, "cuda_available", lambda: cuda_count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda_count)
        monkeypatch.setattr(device, "mps_fallback_enabled", lambda: True)

    return configure


@pytest.mark.parametrize(
    ("mps", "cuda_count", "expected"),
    [(True, 1, "mps"), (False, 1, "cuda:0"), (False, 0, "cpu")],
)
def test_auto_prefers_mps_then_cuda_then_cpu(machine, mps, cuda_count, expected):
    machine(mps=mps, cuda_count=cuda_count)
    assert select_device() == torch.device(expected)
    assert select_device("auto") == torch.device(expected)


@pytest.mark.parametrize(("requested", "named"), [("mps", "MPS"), ("cuda", "CUDA"), ("cuda:1", "CUDA device 1")])
def test_missing_device_is_an_error_not_a_silent_fallback(machine, requested, named):
    machine(mps=False, cuda_count=1 if requested == "cuda:1" else 0)
    with pytest.raises(DeviceError, match=named) as raised:
        select_device(requested)
    assert "'auto' or 'cpu'" in str(raised.value)


def test_cuda_index_within_range_is_selected(machine):
    machine(cuda_count=2)
    assert select_device("cuda:1") == torch.device("cuda", 1)
    assert select_device("CUDA") == torch.device("cuda", 0)


def test_unknown_device_name_lists_the_choices(machine):
    with pytest.raises(DeviceError, match="auto, mps, cuda, cuda:N, cpu"):
        select_device("gpu")
    with pytest.raises(DeviceError, match="not a device name"):
        select_device("cuda:x")


def test_environment_overrides_auto_and_argument_overrides_environment(machine, monkeypatch):
    machine(mps=True)
    monkeypatch.setenv(device.DEVICE_ENV, "cpu")
    assert select_device() == torch.device("cpu")
    assert select_device("mps") == torch.device("mps")
    monkeypatch.setenv(device.DEVICE_ENV, "cuda")
    with pytest.raises(DeviceError, match=f"{device.DEVICE_ENV}=cuda"):
        select_device()


def test_mps_without_the_cpu_fallback_is_refused(machine, monkeypatch):
    machine(mps=True)
    monkeypatch.undo()  # restore the real mps_fallback_enabled; keep pretending MPS exists
    monkeypatch.setattr(device, "mps_available", lambda: True)
    monkeypatch.setattr(cosyvoice_mac, "_TORCH_IMPORTED_FIRST", True)
    monkeypatch.setattr(cosyvoice_mac, "_MPS_FALLBACK_PRESET", None)
    with pytest.raises(DeviceError, match="PYTORCH_ENABLE_MPS_FALLBACK=1"):
        select_device("mps")
    monkeypatch.setattr(cosyvoice_mac, "_TORCH_IMPORTED_FIRST", False)
    assert select_device("mps") == torch.device("mps")


def _import_report(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != device.MPS_FALLBACK_ENV}
    result = subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, timeout=120, check=True
    )
    return result.stdout.strip()


def test_importing_the_package_enables_the_mps_fallback_before_torch_loads():
    report = (
        "import os, cosyvoice_mac.device as d; "
        "print(os.environ.get('PYTORCH_ENABLE_MPS_FALLBACK'), d.mps_fallback_enabled())"
    )
    assert _import_report(report) == "1 True"
    assert _import_report("import torch; " + report) == "1 False"  # too late: torch read it already
    assert _import_report(report, PYTORCH_ENABLE_MPS_FALLBACK="0") == "0 False"  # the user's choice stands


def test_dtype_defaults_to_float32_and_follows_the_environment(machine, monkeypatch):
    assert select_dtype() == torch.float32
    monkeypatch.setenv(device.DTYPE_ENV, "bf16")
    assert select_dtype() == torch.bfloat16
    assert select_dtype("float16") == torch.float16
    with pytest.raises(DeviceError, match="float64"):
        select_dtype("float64")


def test_memory_report_counts_process_memory_on_cpu():
    grown = []
    for _ in range(3):  # a thread an earlier test left may free memory meanwhile: one clean look suffices
        return_freed_heap()  # else the block may reuse pages this process freed but kept resident (RSS unchanged)
        before = memory_report("cpu")
        block = torch.ones(64 * 1024 * 1024 // 4)  # 64 MiB, touched
        after = memory_report("cpu")
        del block
        assert before.allocated_bytes == after.allocated_bytes == 0
        assert after.driver_allocated_bytes is None
        assert "cpu" in str(after) and "RSS" in str(after)
        grown.append(after.process_rss_bytes - before.process_rss_bytes)
        if grown[-1] >= 48 * 1024 * 1024:
            break
    assert max(grown) >= 48 * 1024 * 1024, grown


def test_memory_report_and_empty_cache_use_the_mps_counters(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: 5 * 1024 * 1024)
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 7 * 1024 * 1024)
    monkeypatch.setattr(torch.mps, "empty_cache", lambda: calls.append("mps"))
    report = memory_report("mps")
    assert (report.allocated_bytes, report.driver_allocated_bytes) == (5 * 1024 * 1024, 7 * 1024 * 1024)
    assert "allocated 5 MiB" in str(report) and "driver 7 MiB" in str(report)
    empty_cache("mps")
    empty_cache("cpu")
    assert calls == ["mps"]


def test_memory_report_and_empty_cache_use_the_cuda_counters(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda dev: 3 * 1024 * 1024)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("cuda"))
    report = memory_report("cuda:0")
    assert report.allocated_bytes == 3 * 1024 * 1024 and report.driver_allocated_bytes is None
    empty_cache("cuda")
    assert calls == ["cuda"]


def test_auto_warns_and_picks_mps_when_torch_came_first_without_the_fallback(machine, monkeypatch):
    machine(mps=True)
    monkeypatch.undo()
    monkeypatch.setattr(device, "mps_available", lambda: True)
    monkeypatch.setattr(cosyvoice_mac, "_TORCH_IMPORTED_FIRST", True)
    monkeypatch.setattr(cosyvoice_mac, "_MPS_FALLBACK_PRESET", None)
    with pytest.warns(RuntimeWarning, match="none of this app's ops needs it"):
        assert select_device("auto") == torch.device("mps")


def test_an_old_cosyvoice2_snapshot_is_named_with_its_fix(tmp_path):
    from cosyvoice_mac.pipeline.model_dir import ModelFolderError, detect_version

    (tmp_path / "cosyvoice.yaml").write_text("")
    with pytest.raises(ModelFolderError, match="CosyVoice-300M"):
        detect_version(tmp_path)  # a real v1 folder
    (tmp_path / "speech_tokenizer_v2.onnx").write_bytes(b"")
    with pytest.raises(ModelFolderError, match=r"old snapshot of CosyVoice2-0\.5B.*bash run.sh download cosyvoice2"):
        detect_version(tmp_path)


def test_a_single_threaded_pool_runs_torch_on_one_thread_and_later_threads_keep_the_default():
    """Its threads add no OpenMP workers (issue 47: a long-lived 2-thread team slowed every parallel op)."""
    import threading

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        pool = device.single_threaded_pool(2, "test-single")
        seen = {pool.submit(torch.get_num_threads).result() for _ in range(4)}
        pool.shutdown()
        later = []
        thread = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
        thread.start()
        thread.join()
        assert seen == {1}
        assert torch.get_num_threads() == 2 and later == [2]
    finally:
        torch.set_num_threads(before)
