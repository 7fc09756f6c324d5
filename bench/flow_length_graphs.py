"""The whole non-streaming flow on CUDA: eager against its length-bucket graph (``models/cuda/flow_length_graphs.py``).

    python bench/flow_length_graphs.py [--version cosyvoice3] [--calls 7] [--tokens 250,236]

Full-size random flow built on the device, the bench's request shape (80 prompt tokens, then each
``--tokens`` count: 2 mel frames a token; 250 = 660 frames, padded to the bucket of 704), float32 and
bfloat16. Per dtype and length: the eager call and the graph's replay alternating (wall medians), the
capture's cost (the bucket's second call), GPU-busy time and kernels of each (the profiler), the device memory
the graphs hold, and the largest difference between the replayed and the eager mel. JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosyvoice_mac.bench.decode import cuda_profile  # noqa: E402
from cosyvoice_mac.device import CUDA_GRAPHS_ENV, synchronize  # noqa: E402
from cosyvoice_mac.models.flow import Flow, FlowConfig  # noqa: E402
from cosyvoice_mac.pipeline.fullsize import official_config  # noqa: E402

PROMPT_TOKENS = 80


def timed(device, call) -> tuple[float, torch.Tensor]:
    synchronize(device)
    started = time.perf_counter()
    mel = call()
    synchronize(device)
    return time.perf_counter() - started, mel


@torch.inference_mode()
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--version", default="cosyvoice3", choices=("cosyvoice3", "cosyvoice2"))
    parser.add_argument("--calls", type=int, default=7)
    parser.add_argument("--tokens", default="250,236", help="new speech tokens per call, comma-separated")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # strict fp32, as the parity runs
    generator = torch.Generator().manual_seed(0)
    report: dict = {"version": args.version, "device": torch.cuda.get_device_name(device), "runs": []}
    for dtype_name in args.dtypes.split(","):
        config = FlowConfig.from_yaml(official_config(args.version)["flow"])
        with device:
            flow = Flow(config).eval().to(getattr(torch, dtype_name))
        vocab = flow.config.vocab_size
        prompt = (
            torch.randint(0, vocab, (1, PROMPT_TOKENS), generator=generator).to(device),
            torch.randn(1, 2 * PROMPT_TOKENS, 80, generator=generator).to(device) - 5,
            torch.randn(1, 192, generator=generator).to(device),
        )
        for count in (int(n) for n in args.tokens.split(",")):
            tokens = torch.randint(0, vocab, (1, count), generator=generator).to(device)

            def eager(flow=flow, tokens=tokens):
                os.environ[CUDA_GRAPHS_ENV] = "0"
                try:
                    return flow.inference(tokens, *prompt)
                finally:
                    os.environ[CUDA_GRAPHS_ENV] = "1"

            def graphed(flow=flow, tokens=tokens):
                return flow.inference(tokens, *prompt)

            reserved_before = torch.cuda.memory_reserved(device)
            flow.cuda_graphs(device)  # the flow's graph owners, made now if it has none yet
            captures_before = flow.length_graphs.captures
            first_s, _ = timed(device, graphed)  # the bucket's first call runs eagerly (unless another length saw it)
            second_s, _ = timed(device, graphed)  # captured here (if not already)
            walls = {"eager": [], "graph": []}
            mels = {}
            for _ in range(args.calls):
                for mode, call in (("eager", eager), ("graph", graphed)):
                    seconds, mels[mode] = timed(device, call)
                    walls[mode].append(seconds)
            row = {
                "dtype": dtype_name,
                "tokens": count,
                "frames": 2 * (PROMPT_TOKENS + count),
                "buckets_held": sorted(flow.length_graphs.graphs),
                "captured_now": flow.length_graphs.captures - captures_before,
                "first_call_s": round(first_s, 4),
                "second_call_s": round(second_s, 4),
                "graph_error": flow.length_graphs.error,
                "reserved_mb_added": round((torch.cuda.memory_reserved(device) - reserved_before) / 2**20, 1),
                "max_abs_diff": float((mels["graph"] - mels["eager"]).abs().max()),
                "mel_abs_max": float(mels["eager"].abs().max()),
            }
            for mode, call in (("eager", eager), ("graph", graphed)):
                profiled = cuda_profile(device, call)
                row[mode] = {
                    "wall_ms_median": round(1e3 * statistics.median(walls[mode]), 2),
                    "gpu_busy_ms": profiled["gpu_busy_ms"],
                    "kernels": profiled["kernels"],
                }
            report["runs"].append(row)
            print(
                f"{dtype_name} {row['frames']} frames: eager {row['eager']['wall_ms_median']:.1f} ms "
                f"(GPU {row['eager']['gpu_busy_ms']:.1f}), graph {row['graph']['wall_ms_median']:.1f} ms "
                f"(GPU {row['graph']['gpu_busy_ms']:.1f}); capture call {second_s * 1e3:.0f} ms; "
                f"+{row['reserved_mb_added']} MB; diff {row['max_abs_diff']:.2e}",
                file=sys.stderr,
            )
        del flow
        torch.cuda.empty_cache()
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
