"""Which kernels the flow's first streamed chunk spends its GPU time in, per dtype and backend setting.

    python bench/flow_kernels.py --device cuda

Full-size random CosyVoice3 flow built on the device, the pipeline's first-chunk shape (a 3 s
prompt cut to end one first hop before the chunk grid, a 50-token cached prefix, 13 new tokens),
eager. Per variant: GPU-busy and wall ms of one profiled call, and the kernels that take the most
GPU time (name, count, total ms). JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosyvoice_mac.bench.decode import cuda_profile  # noqa: E402
from cosyvoice_mac.models.flow import Flow, FlowConfig  # noqa: E402
from cosyvoice_mac.pipeline.fullsize import official_config  # noqa: E402

PROMPT, CUT, PREFIX, NEW = 75, 10, 50, 13


def top_kernels(events: list[dict], count: int = 12) -> list[dict]:
    by_name: dict[str, list[float]] = defaultdict(list)
    for event in events:
        by_name[event["name"][:110]].append(float(event["dur"]))
    ranked = sorted(by_name.items(), key=lambda item: -sum(item[1]))[:count]
    return [{"kernel": name, "count": len(d), "total_ms": sum(d) / 1e3} for name, d in ranked]


@torch.inference_mode()
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    with device:
        flow = Flow(FlowConfig.from_yaml(official_config("cosyvoice3")["flow"])).eval()
    generator = torch.Generator().manual_seed(0)
    vocab = flow.config.vocab_size
    prompt = [
        torch.randint(0, vocab, (1, PROMPT - CUT), generator=generator).to(device),
        torch.randn(1, 2 * (PROMPT - CUT), 80, generator=generator).to(device) - 5,
        torch.randn(1, 192, generator=generator).to(device),
    ]
    tokens = torch.randint(0, vocab, (1, NEW), generator=generator).to(device)
    variants = {
        "float32": {},
        "float32 cudnn.benchmark": {"benchmark": True},
        "float32 no cudnn": {"cudnn": False},
        "float32 tf32": {"tf32": True},
        "bfloat16": {"dtype": torch.bfloat16},
    }
    report = {}
    for name, variant in variants.items():
        torch.backends.cudnn.benchmark = variant.get("benchmark", False)
        torch.backends.cudnn.enabled = variant.get("cudnn", True)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = variant.get("tf32", False)
        flow.to(variant.get("dtype", torch.float32))
        prefix = flow.build_prefix(*prompt, tokens=PREFIX)

        def chunk(prefix=prefix):
            return flow.inference(tokens, *prompt, streaming=True, finalize=False, prefix=prefix)

        os.environ["COSYVOICE_CUDA_GRAPHS"] = "0"
        chunk(), chunk()  # warm-up (and the benchmark's autotuning)
        events: list[dict] = []
        profiled = cuda_profile(device, chunk, kernel_events=events)
        report[name] = {
            "gpu_busy_ms": profiled["gpu_busy_ms"],
            "wall_ms": profiled["wall_ms"],
            "kernels": profiled["kernels"],
            "top": top_kernels(events),
        }
        print(f"{name}: {profiled['gpu_busy_ms']:.1f} ms GPU, {profiled['kernels']} kernels", file=sys.stderr)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
