"""Peak memory of a worker process as Linux counts it, and the worker's model factory on a simulated 8 GB Mac.

``bench/low_memory_rss.py`` starts the app's worker with :func:`from_pretrained_with_8_gib` as its
pipeline factory: ``CosyVoice.from_pretrained`` unchanged, in a process whose RAM reads as 8 GiB, so the
low-memory mode is the automatic choice exactly as on an 8 GB Mac. :class:`PeakSampler` follows the
worker and its children from ``/proc``: the kernel's own peak (``VmHWM``, which counts every resident
page, memory-mapped file pages included) and sampled sums over the process tree.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psutil

EIGHT_GIB = 8 * 2**30


class _MachineWithRam:
    """``psutil`` as the device policy sees it, with ``virtual_memory().total`` set to ``total`` bytes."""

    def __init__(self, total: int):
        self.total = total

    def virtual_memory(self):
        return psutil.virtual_memory()._replace(total=self.total)

    def __getattr__(self, name: str):
        return getattr(psutil, name)


def from_pretrained_with_8_gib(model_dir, **options):
    """``CosyVoice.from_pretrained(model_dir, **options)`` in a process whose RAM reads as 8 GiB."""
    from cosyvoice_mac import device
    from cosyvoice_mac.pipeline import CosyVoice

    device.psutil = _MachineWithRam(EIGHT_GIB)
    return CosyVoice.from_pretrained(model_dir, **options)


def proc_status_kib(pid: int) -> dict[str, int]:
    """The ``Vm*``/``Rss*`` lines of ``/proc/<pid>/status`` in KiB (empty once the process is gone).

    Without ``/proc`` (macOS) only ``VmRSS``, from psutil: the peaks are then the sampled ones.
    """
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        try:
            return {"VmRSS": psutil.Process(pid).memory_info().rss // 1024}
        except psutil.Error:
            return {}
    except OSError:
        return {}
    values = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name.startswith(("Vm", "Rss")) and rest.strip().endswith("kB"):
            values[name] = int(rest.split()[0])
    return values


def reset_peak(pid: int) -> bool:
    """Start ``VmHWM`` again from the current RSS (``clear_refs`` 5); False where the kernel refuses."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class PeakSampler:
    """Owns a thread that samples the RSS of process ``pid`` and its descendants every ``period_s``.

    ``peak(phase)`` closes a phase: the worker's ``VmHWM`` over it (the exact peak), the largest sampled
    sum over the worker and its children, and the anonymous/file split of the worker at that sample.
    """

    def __init__(self, pid: int, period_s: float = 0.02, timeline_every_s: float | None = None):
        self.pid, self.period_s = pid, period_s
        self.timeline: list[tuple[float, float, float]] = []  # (s since start, anon MiB, file MiB), when asked for
        self._timeline_every_s = timeline_every_s
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._best: dict = {}
        self.hwm_resets: bool | None = None  # whether VmHWM could be restarted for each phase
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def _sample(self) -> dict:
        worker = proc_status_kib(self.pid)
        children_kib = 0
        try:
            for child in psutil.Process(self.pid).children(recursive=True):
                children_kib += proc_status_kib(child.pid).get("VmRSS", 0)
        except psutil.Error:
            pass
        return {
            "tree_mib": (worker.get("VmRSS", 0) + children_kib) / 1024,
            "children_mib": children_kib / 1024,
            "anon_mib": worker.get("RssAnon", 0) / 1024,
            "file_mib": worker.get("RssFile", 0) / 1024,
        }

    def _run(self) -> None:
        next_point = 0.0
        while not self._stop.is_set():
            sample = self._sample()
            elapsed = time.monotonic() - self._started
            if self._timeline_every_s and elapsed >= next_point:
                self.timeline.append((round(elapsed, 2), round(sample["anon_mib"]), round(sample["file_mib"])))
                next_point = elapsed + self._timeline_every_s
            with self._lock:
                if sample["tree_mib"] > self._best.get("tree_mib", -1.0):
                    self._best = sample
            time.sleep(self.period_s)

    def peak(self) -> dict:
        """This phase's peaks (MiB); the next phase starts now."""
        with self._lock:
            best, self._best = self._best, {}
        status = proc_status_kib(self.pid)
        kernel_peak = status.get("VmHWM", 0) / 1024  # 0 where the kernel does not say (macOS)
        result = {"worker_vm_hwm_mib": kernel_peak or best.get("tree_mib", 0.0), "sampled_tree_peak": best}
        result["rss_now_mib"] = status.get("VmRSS", 0) / 1024
        if self.hwm_resets is not False:
            self.hwm_resets = reset_peak(self.pid)
        return result

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(1.0)
