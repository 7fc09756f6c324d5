"""The project's one device policy: which device and dtype to run on, and how much memory is in use.

``auto`` picks MPS (Apple Silicon), then CUDA, then the CPU. Asking for a device that is not there
raises :class:`DeviceError` instead of quietly running somewhere else. The environment overrides the
defaults: ``COSYVOICE_DEVICE`` (auto, mps, cuda, cuda:N, cpu) and ``COSYVOICE_DTYPE`` (float32,
float16, bfloat16). ``PYTORCH_ENABLE_MPS_FALLBACK=1`` is set by ``cosyvoice_mac/__init__.py`` before
torch is imported, so ops that MPS lacks run on the CPU.
"""

from __future__ import annotations

import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import psutil
import torch

import cosyvoice_mac
from cosyvoice_mac.errors import CosyVoiceError
from cosyvoice_mac.settings import env_flag, setting

DEVICE_ENV = setting("device").env
DTYPE_ENV = setting("dtype").env
MPS_FALLBACK_ENV = "PYTORCH_ENABLE_MPS_FALLBACK"
CUDA_GRAPHS_ENV = setting("cuda_graphs").env

# MPS convolutions before macOS 15.1 refuse an output dimension (or transposed-conv input dimension)
# above this, the time axis included (torch's Convolution.mm guard; the CPU fallback does not catch it).
MPS_CONV_LIMIT = 65536

DEVICE_CHOICES = ("auto", "mps", "cuda", "cuda:N", "cpu")
_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


def single_threaded_pool(workers: int, name: str) -> ThreadPoolExecutor:
    """A pool of ``workers`` long-lived threads whose torch ops run on one intra-op thread each.

    Why: a thread that runs torch ops on 2+ threads keeps an OpenMP team for its whole life. GNU OpenMP
    (torch on Linux) counts every team's threads, and once they outnumber the cores it stops spinning
    between parallel regions in the whole process: with ``OMP_WAIT_POLICY=PASSIVE`` every later parallel
    op (the LLM step's ~100 products a token) then sleeps and is woken (issue 47: the CPU decode step at
    0.6-0.8x its speed once the prompt encoder's helper thread had run). A team of one adds no thread.
    """
    pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
    threads = torch.get_num_threads()
    barrier = threading.Barrier(workers)  # every worker started, none taking a job twice

    def single_threaded() -> None:
        # A thread takes the process default on its first torch call; take it now, or that first call
        # would later overwrite this thread's own setting with the default restored below.
        torch.get_num_threads()
        torch.set_num_threads(1)  # this thread's own OpenMP/MKL setting
        barrier.wait()

    for future in [pool.submit(single_threaded) for _ in range(workers)]:
        future.result()
    torch.set_num_threads(threads)  # set_num_threads also set the default that later threads begin with
    return pool


class DeviceError(CosyVoiceError, RuntimeError):
    """A requested device or dtype that this machine cannot provide; the message says what to use instead."""


def cuda_graphs_wanted() -> bool:
    """Whether CUDA graphs may replay the LLM steps and the first streamed flow chunk (``COSYVOICE_CUDA_GRAPHS``)."""
    return env_flag("cuda_graphs")


def cuda_graphs_on(device: torch.device, part: str | None = None) -> bool:
    """Whether a part's work on ``device`` may be a CUDA graph: CUDA, graphs wanted, and the part's own
    setting (``part``, a yes/no row of the settings table, on unless its variable says 0) on."""
    wanted = cuda_graphs_wanted() and (part is None or env_flag(part))
    return torch.device(device).type == "cuda" and wanted


def try_cuda_capture(capture, device: torch.device):
    """``(capture(), None)``, or ``(None, why)`` when the CUDA graph capture it runs fails (an operation that
    syncs with the host, say): the stream current before it is made current again, as a failed capture can
    leave its side stream current."""
    stream = torch.cuda.current_stream(device)
    try:
        return capture(), None
    except Exception as error:  # noqa: BLE001 (any capture failure means: run eagerly)
        torch.cuda.set_stream(stream)
        return None, f"{type(error).__name__}: {error}"


def weights_signature(module: torch.nn.Module) -> tuple:
    """What a captured CUDA graph depends on besides its inputs: where (and in what dtype) the weights live."""
    return tuple((p.data_ptr(), p.dtype) for p in module.parameters())


def is_cuda(device: torch.device) -> bool:
    """Whether ``device`` is a CUDA device: where the networks reach their CUDA-only tuning (``models/cuda/``)."""
    return torch.device(device).type == "cuda"


def has_float64(device: torch.device) -> bool:
    """Whether tensors on ``device`` may be float64: everywhere but MPS, which has no float64."""
    return torch.device(device).type != "mps"


def copy_to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` (host memory) on ``device``. To CUDA it goes from pinned memory without blocking: a plain
    copy from pageable memory waits for the whole stream, so the host could not queue work ahead."""
    device = torch.device(device)
    if device.type == "cuda" and tensor.device.type == "cpu":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def mps_available() -> bool:
    return torch.backends.mps.is_available()


def cuda_available() -> bool:
    return torch.cuda.is_available()


def mps_fallback_enabled() -> bool:
    """True when torch was imported with ``PYTORCH_ENABLE_MPS_FALLBACK=1`` (it reads it only then)."""
    value = os.environ.get(MPS_FALLBACK_ENV, "")
    set_before_torch = not cosyvoice_mac._TORCH_IMPORTED_FIRST or cosyvoice_mac._MPS_FALLBACK_PRESET is not None
    return value not in ("", "0") and set_before_torch


def conv_length_limit(device: torch.device) -> int | None:
    """The longest conv axis model code may use on ``device``: MPS_CONV_LIMIT on MPS, unbounded elsewhere.

    Kept on every macOS version: the windows cost a few percent, while hitting the limit would send the
    whole job to the CPU retry.
    """
    return MPS_CONV_LIMIT if torch.device(device).type == "mps" else None


SERIAL_DEVICE_ENV = setting("serial_device").env


def serialize_device_work(device: torch.device) -> bool:
    """Whether two threads of one request must take turns on ``device``: on MPS always (torch 2.8-2.14
    can abort the process when two Python threads issue MPS work at once, pytorch issue 197805);
    elsewhere only when ``COSYVOICE_SERIAL_DEVICE=1`` forces the MPS behaviour (to measure it here)."""
    return torch.device(device).type == "mps" or os.environ.get(SERIAL_DEVICE_ENV, "") == "1"


LOW_MEMORY_ENV = setting("low_memory").env
LOW_MEMORY_MAX_RAM_BYTES = 12 * 2**30  # 8 GB Macs (and 12 GB ones) get the low-memory mode by default
# Fraction of Metal's recommended working set MPS may allocate (torch's default 1.7 lets allocations
# grow past RAM into swap; 1.0 leaves the system about a third of RAM, and a job that needs more gets
# an out-of-memory error, which the whole-job CPU retry handles).
MPS_MEMORY_FRACTION = 1.0
MPS_WATERMARK_ENV = "PYTORCH_MPS_HIGH_WATERMARK_RATIO"
_ON, _OFF = ("1", "on", "true", "yes"), ("0", "off", "false", "no")


@dataclass(frozen=True)
class LowMemoryChoice:
    """Whether the low-memory mode is on and why (the status panel and each sidecar show both)."""

    enabled: bool
    reason: str

    def as_dict(self) -> dict:
        return {"enabled": self.enabled, "reason": self.reason}


def low_memory_choice(requested: bool | None = None, total_ram_bytes: int | None = None) -> LowMemoryChoice:
    """``requested`` wins, then ``$COSYVOICE_LOW_MEMORY`` (1/0, on/off), else on at <= 12 GiB of RAM."""
    if requested is not None:
        return LowMemoryChoice(bool(requested), "asked for" if requested else "turned off")
    value = os.environ.get(LOW_MEMORY_ENV, "").strip().lower()
    if value in _ON or value in _OFF:
        return LowMemoryChoice(value in _ON, f"{LOW_MEMORY_ENV}={value}")
    if value not in ("", "auto"):
        raise DeviceError(f"{LOW_MEMORY_ENV}={value!r} is not understood; use 1 (on), 0 (off) or auto.")
    total = psutil.virtual_memory().total if total_ram_bytes is None else total_ram_bytes
    enabled = total <= LOW_MEMORY_MAX_RAM_BYTES
    relation = "<=" if enabled else ">"
    return LowMemoryChoice(enabled, f"auto: {total / 2**30:.0f} GiB RAM {relation} 12 GiB")


def limit_mps_memory(device: torch.device) -> float | None:
    """On MPS, cap the allocator at MPS_MEMORY_FRACTION unless the user set torch's own variable; the cap or None."""
    if torch.device(device).type != "mps" or os.environ.get(MPS_WATERMARK_ENV):
        return None
    torch.mps.set_per_process_memory_fraction(MPS_MEMORY_FRACTION)
    return MPS_MEMORY_FRACTION


def text_embedding_on_host(device: torch.device) -> bool:
    """Keep the LLM's text-embedding table (0.55 GB, read once per sentence) in host memory: on MPS."""
    return torch.device(device).type == "mps"


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA, MPS run asynchronously), so a clock read next is true; no-op on
    the CPU. Every stage timing and benchmark measures through this."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def between_sentences(device: torch.device) -> None:
    """Hand MPS's cached blocks back after each sentence (unified memory: the cache is the system's RAM)."""
    if torch.device(device).type == "mps":
        torch.mps.empty_cache()


def select_device(requested: str | None = None) -> torch.device:
    """The device to run on: ``requested``, else ``$COSYVOICE_DEVICE``, else ``auto``.

    ``auto`` picks mps, then cuda, then cpu. An explicit device that is missing raises DeviceError.
    """
    source = "argument"
    if requested is None:
        requested, source = os.environ.get(DEVICE_ENV) or "auto", DEVICE_ENV
    name = requested.strip().lower()
    where = f"{DEVICE_ENV}={requested}" if source == DEVICE_ENV else f"device {requested!r}"

    if name == "auto":
        if mps_available():
            if not mps_fallback_enabled():  # no op of ours needs the fallback (tests/test_mps_op_guard.py)
                warnings.warn(
                    f"torch was imported before cosyvoice_mac without {MPS_FALLBACK_ENV}=1, so an op MPS lacked "
                    "would fail instead of running on the CPU; none of this app's ops needs it. Using MPS.",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return torch.device("mps")
        if cuda_available():
            name = "cuda"
        else:
            return torch.device("cpu")

    if name == "cpu":
        return torch.device("cpu")
    if name == "mps":
        if not mps_available():
            raise DeviceError(
                f"{where} asks for Apple's MPS, which this machine does not have (it needs an Apple Silicon Mac "
                f"with macOS 12.3+ and the arm64 build of Python). Use 'auto' or 'cpu'."
            )
        if not mps_fallback_enabled():
            raise DeviceError(
                f"MPS needs {MPS_FALLBACK_ENV}=1 set before torch is imported, but torch was imported first. "
                f"Import cosyvoice_mac before torch, or start Python with {MPS_FALLBACK_ENV}=1 in the environment."
            )
        return torch.device("mps")
    if name == "cuda" or name.startswith("cuda:"):
        index_text = name.partition(":")[2] or "0"
        if not index_text.isdigit():
            raise DeviceError(f"{where} is not a device name; choose one of {', '.join(DEVICE_CHOICES)}.")
        index = int(index_text)
        count = torch.cuda.device_count() if cuda_available() else 0
        if index >= count:
            have = f"{count} CUDA device(s)" if count else "no CUDA device (or this torch build lacks CUDA)"
            raise DeviceError(
                f"{where} asks for CUDA device {index}, but this machine has {have}. Use 'auto' or 'cpu'."
            )
        return torch.device("cuda", index)
    raise DeviceError(f"{where} is not a device name; choose one of {', '.join(DEVICE_CHOICES)}.")


def select_dtype(requested: str | None = None) -> torch.dtype:
    """The compute dtype: ``requested``, else ``$COSYVOICE_DTYPE``, else float32 (the only one parity is checked in)."""
    text = requested if requested is not None else os.environ.get(DTYPE_ENV) or "float32"
    dtype = _DTYPES.get(text.strip().lower())
    if dtype is None:
        raise DeviceError(
            f"dtype {text!r} is not supported; choose float32, float16 or bfloat16 (float64 does not run on MPS)."
        )
    return dtype


@dataclass(frozen=True)
class MemoryReport:
    """Bytes in use on ``device``: tensors allocated, driver total (MPS only), and this process's RSS."""

    device: str
    allocated_bytes: int
    driver_allocated_bytes: int | None
    process_rss_bytes: int

    def __str__(self) -> str:
        mib = 1024 * 1024
        parts = [f"{self.device}: allocated {self.allocated_bytes / mib:.0f} MiB"]
        if self.driver_allocated_bytes is not None:
            parts.append(f"driver {self.driver_allocated_bytes / mib:.0f} MiB")
        parts.append(f"process RSS {self.process_rss_bytes / mib:.0f} MiB")
        return ", ".join(parts)


def memory_report(device: torch.device | str) -> MemoryReport:
    """Memory in use now: MPS current + driver allocated, CUDA allocated, process RSS (CPU tensors live in RSS)."""
    device = torch.device(device)
    allocated, driver = 0, None
    if device.type == "mps":
        allocated = torch.mps.current_allocated_memory()
        driver = torch.mps.driver_allocated_memory()
    elif device.type == "cuda":
        allocated = torch.cuda.memory_allocated(device)
    rss = psutil.Process().memory_info().rss
    return MemoryReport(str(device), int(allocated), None if driver is None else int(driver), int(rss))


def empty_cache(device: torch.device | str) -> None:
    """Give cached, unused device memory back to the system (a no-op on the CPU)."""
    device = torch.device(device)
    if device.type == "mps":
        torch.mps.empty_cache()
    elif device.type == "cuda":
        torch.cuda.empty_cache()
