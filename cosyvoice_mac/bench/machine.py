"""What this machine is and which engines work on it: the first half of ``bash run.sh doctor``.

Facts, not guesses: the OS and its version, the chip (``sysctl`` on macOS, ``/proc/cpuinfo`` on Linux)
with the instruction sets our kernels care about, memory, and the Python interpreter's architecture
(an x86_64 Python on an Apple Silicon Mac runs under Rosetta, where neither MPS nor MLX exists). Each
engine and device is tried with a small computation, so "available" means "ran here".
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

# The CPU features that change which kernels run (bf16 dot products, AMX tiles, AVX2 at least).
CPU_FLAGS_OF_INTEREST = ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")
PACKAGES = ("torch", "mlx", "onnxruntime", "numpy", "gradio", "coremltools")


@dataclass
class Machine:
    """The machine's identity as a bug report needs it."""

    os: str
    os_version: str
    chip: str
    cpu_flags: list[str]
    cores: int
    memory_gib: float
    python: str
    python_architecture: str
    under_rosetta: bool
    packages: dict[str, str | None] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def _sysctl(name: str) -> str | None:
    try:
        done = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def _cpuinfo() -> tuple[str, list[str]]:
    """(model name, flags of interest) from /proc/cpuinfo; ("", []) where there is none."""
    name, flags = "", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not name:
                    name = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return name, [flag for flag in CPU_FLAGS_OF_INTEREST if flag in flags]


def under_rosetta() -> bool:
    """True when this process is an x86_64 program translated by Rosetta 2 on Apple Silicon."""
    return sys.platform == "darwin" and _sysctl("sysctl.proc_translated") == "1"


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _memory_bytes() -> int:
    import psutil

    return psutil.virtual_memory().total


def describe_machine() -> Machine:
    if sys.platform == "darwin":
        os_name, os_version = "macOS", platform.mac_ver()[0]
        chip = _sysctl("machdep.cpu.brand_string") or platform.processor()
        flags = [name for name in ("FEAT_BF16", "FEAT_I8MM") if _sysctl(f"hw.optional.arm.{name}") == "1"]
    else:
        os_name, os_version = platform.system(), platform.release()
        chip, flags = _cpuinfo()
        chip = chip or platform.processor() or platform.machine()
    return Machine(
        os=os_name,
        os_version=os_version,
        chip=chip,
        cpu_flags=flags,
        cores=os.cpu_count() or 1,
        memory_gib=round(_memory_bytes() / 2**30, 1),
        python=platform.python_version(),
        python_architecture=platform.machine(),
        under_rosetta=under_rosetta(),
        packages={name: _package_version(name) for name in PACKAGES},
    )


@dataclass
class Probe:
    """One engine on one device: did a small computation run, how long it took, or why not."""

    engine: str
    device: str
    works: bool
    detail: str = ""
    seconds: float | None = None

    @property
    def name(self) -> str:
        return f"{self.engine}/{self.device}"


def _timed_probe(engine: str, device: str, run) -> Probe:
    started = time.perf_counter()
    try:
        detail = run()
    except Exception as error:  # noqa: BLE001 - any failure means "does not work here", and says why
        return Probe(engine, device, False, f"{type(error).__name__}: {error}"[:300])
    return Probe(engine, device, True, detail or "", round(time.perf_counter() - started, 4))


def _torch_probe(device_type: str) -> str:
    import torch

    if device_type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("no CUDA device (torch.cuda.is_available() is False)")
    if device_type == "mps" and not torch.backends.mps.is_available():
        built = torch.backends.mps.is_built()
        raise RuntimeError("this PyTorch has no MPS support" if not built else "MPS is not available on this Mac")
    device = torch.device(device_type)
    left = torch.randn(256, 256, generator=torch.Generator().manual_seed(0)).to(device)
    product = (left @ left).sum().item()
    if product != product:  # NaN: the device computes garbage
        raise RuntimeError("a 256x256 matmul gave NaN")
    return torch.cuda.get_device_name(device) if device_type == "cuda" else f"torch {torch.__version__}"


def _mlx_probe() -> str:
    import mlx.core as mx

    left = mx.random.normal((256, 256), key=mx.random.key(0))
    product = mx.sum(left @ left)
    mx.eval(product)
    return f"mlx {_package_version('mlx') or '?'} on {mx.default_device()}"


def probe_engines() -> list[Probe]:
    """Every engine/device pair this project can run, each tried with a small computation."""
    probes = [_timed_probe("torch", kind, lambda kind=kind: _torch_probe(kind)) for kind in ("cpu", "cuda", "mps")]
    probes.append(_timed_probe("mlx", "default", _mlx_probe))
    return probes


def _tiny_onnx_graph() -> bytes:
    """A 64-channel Conv + MatMul graph: the two op kinds that dominate the prompt frontends' graphs."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    conv_weight = numpy_helper.from_array(rng.standard_normal((64, 64, 3)).astype(np.float32), "conv_weight")
    matrix = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "matrix")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["input", "conv_weight"], ["conv"], pads=[1, 1]),
            helper.make_node("Transpose", ["conv"], ["frames"], perm=[0, 2, 1]),
            helper.make_node("MatMul", ["frames", "matrix"], ["output"]),
        ],
        "doctor",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 64, 500])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 500, 64])],
        initializer=[conv_weight, matrix],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def probe_onnx_providers(runs: int = 20) -> list[dict]:
    """Each onnxruntime execution provider this build offers: does a session use it, and ms per run."""
    try:
        import numpy as np
        import onnxruntime
    except ImportError as error:
        return [{"provider": "onnxruntime", "loads": False, "detail": str(error)}]
    graph, results = _tiny_onnx_graph(), []
    sample = np.random.default_rng(1).standard_normal((1, 64, 500)).astype(np.float32)
    for provider in onnxruntime.get_available_providers():
        if provider in ("AzureExecutionProvider",):  # a remote-call provider, nothing to run locally
            continue
        try:
            session = onnxruntime.InferenceSession(graph, providers=[provider])
            if provider not in session.get_providers():
                raise RuntimeError(f"the session fell back to {session.get_providers()}")
            session.run(None, {"input": sample})  # the first run compiles
            started = time.perf_counter()
            for _ in range(runs):
                session.run(None, {"input": sample})
            milliseconds = (time.perf_counter() - started) / runs * 1000
            results.append({"provider": provider, "loads": True, "ms_per_run": round(milliseconds, 3)})
        except Exception as error:  # noqa: BLE001 - a provider that fails is reported with its reason
            results.append({"provider": provider, "loads": False, "detail": f"{type(error).__name__}: {error}"[:300]})
    return results


class _RusageInfoV4(ctypes.Structure):
    """The head of macOS's ``rusage_info_v4`` up to the lifetime peak footprint (see <sys/resource.h>)."""

    _fields_ = [
        ("ri_uuid", ctypes.c_uint8 * 16),
        *[
            (name, ctypes.c_uint64)
            for name in (
                "ri_user_time",
                "ri_system_time",
                "ri_pkg_idle_wkups",
                "ri_interrupt_wkups",
                "ri_pageins",
                "ri_wired_size",
                "ri_resident_size",
                "ri_phys_footprint",
                "ri_proc_start_abstime",
                "ri_proc_exit_abstime",
                "ri_child_user_time",
                "ri_child_system_time",
                "ri_child_pkg_idle_wkups",
                "ri_child_interrupt_wkups",
                "ri_child_pageins",
                "ri_child_elapsed_abstime",
                "ri_diskio_bytesread",
                "ri_diskio_byteswritten",
                "ri_cpu_time_qos_default",
                "ri_cpu_time_qos_maintenance",
                "ri_cpu_time_qos_background",
                "ri_cpu_time_qos_utility",
                "ri_cpu_time_qos_legacy",
                "ri_cpu_time_qos_user_initiated",
                "ri_cpu_time_qos_user_interactive",
                "ri_billed_system_time",
                "ri_serviced_system_time",
                "ri_logical_writes",
                "ri_lifetime_max_phys_footprint",
            )
        ],
        ("ri_tail", ctypes.c_uint64 * 16),  # the fields after it, which we do not read
    ]


RUSAGE_INFO_V4 = 4


def peak_footprint_mb(pid: int | None = None) -> float | None:
    """macOS: the process's lifetime peak ``phys_footprint`` (what Activity Monitor calls Memory), MiB.

    The number the system's memory pressure counts, GPU (unified) memory included; None elsewhere.
    """
    if sys.platform != "darwin":
        return None
    try:
        libproc = ctypes.CDLL("/usr/lib/libproc.dylib")
        info = _RusageInfoV4()
        if libproc.proc_pid_rusage(pid or os.getpid(), RUSAGE_INFO_V4, ctypes.byref(info)) != 0:
            return None
    except OSError:
        return None
    return info.ri_lifetime_max_phys_footprint / 2**20
