"""The whole non-streaming flow on a GPU, float32 against bfloat16: wall per call, GPU-busy time, kernels.

    python bench/flow_dtype_cuda.py --device cuda [--calls 7]

Full-size random CosyVoice3 (or ``--version cosyvoice2``) flow built on the device, the bench's request
shape (80 prompt tokens, 250 new, 2 mel frames a token), eager as the pipeline runs it. The calls of the
two dtypes alternate, so a drifting clock or a busy host disturbs both alike. Tells a flow bound by its
GPU work (busy ~ wall) from one bound by launching its kernels (busy << wall), where a faster dtype
cannot pay. JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosyvoice_mac.bench.decode import cuda_profile  # noqa: E402
from cosyvoice_mac.device import synchronize  # noqa: E402
from cosyvoice_mac.models.flow import Flow, FlowConfig  # noqa: E402
from cosyvoice_mac.pipeline.fullsize import official_config  # noqa: E402

PROMPT_TOKENS, NEW_TOKENS = 80, 250
DTYPES = (torch.float32, torch.bfloat16)


@torch.inference_mode()
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--version", default="cosyvoice3", choices=("cosyvoice3", "cosyvoice2"))
    parser.add_argument("--calls", type=int, default=7)
    args = parser.parse_args()
    device = torch.device(args.device)
    flows = {}
    for dtype in DTYPES:
        with device:
            flows[dtype] = Flow(FlowConfig.from_yaml(official_config(args.version)["flow"])).eval().to(dtype)
    generator = torch.Generator().manual_seed(0)
    vocab = flows[torch.float32].config.vocab_size
    inputs = (
        torch.randint(0, vocab, (1, NEW_TOKENS), generator=generator).to(device),
        torch.randint(0, vocab, (1, PROMPT_TOKENS), generator=generator).to(device),
        torch.randn(1, 2 * PROMPT_TOKENS, 80, generator=generator).to(device) - 5,
        torch.randn(1, 192, generator=generator).to(device),
    )

    def call(dtype):
        return flows[dtype].inference(*inputs)

    walls: dict[torch.dtype, list[float]] = {dtype: [] for dtype in DTYPES}
    for dtype in DTYPES:
        call(dtype), call(dtype)  # warm-up: kernels, allocator, cuDNN's choices
    for _ in range(args.calls):
        for dtype in DTYPES:
            synchronize(device)
            started = time.perf_counter()
            call(dtype)
            synchronize(device)
            walls[dtype].append(time.perf_counter() - started)
    report = {"version": args.version, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
    for dtype in DTYPES:
        profiled = cuda_profile(device, lambda dtype=dtype: call(dtype))
        name = str(dtype).removeprefix("torch.")
        report[name] = {
            "wall_ms_median": 1e3 * statistics.median(walls[dtype]),
            "wall_ms": [round(1e3 * w, 2) for w in walls[dtype]],
            "profiled_gpu_busy_ms": profiled["gpu_busy_ms"],
            "profiled_wall_ms": profiled["wall_ms"],
            "kernels": profiled["kernels"],
        }
        print(
            f"{name}: {report[name]['wall_ms_median']:.1f} ms wall, {profiled['gpu_busy_ms']:.1f} ms GPU, "
            f"{profiled['kernels']} kernels",
            file=sys.stderr,
        )
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
