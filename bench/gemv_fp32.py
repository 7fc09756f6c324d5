"""The speech LM's matrix-vector products at float32, by implementation, against the bytes floor.

    python bench/gemv_fp32.py --device cuda --repeats 20

A decoded token multiplies one hidden vector by every weight of the LM once: per layer q/k/v (1152 x 896),
o (896 x 896), gate/up (9728 x 896) and down (896 x 4864), 24 layers, then the speech head (6761 x 896):
364 M float32 weights, 1.46 GB read per token. Each implementation runs one token's products (separate
weights per layer, so nothing stays in L2) inside a CUDA graph (on a CPU, called directly); reported: ms per
token, the effective bandwidth, and the largest error against a float64 product relative to the largest output.

Implementations: ``linear`` is ``F.linear`` (cuBLAS; what the model calls), ``mv`` is ``torch.mv``,
``reduce`` is ``(W * x).sum(-1)`` compiled by inductor (a reduction kernel per shape, its own sum order);
``--autotune`` adds ``linear_autotuned`` (inductor's max-autotune picks a Triton template or cuBLAS per shape).
JSON on stdout.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LAYER_SHAPES = ((1152, 896), (896, 896), (9728, 896), (896, 4864))  # (rows, columns): qkv, o, gate/up, down
HEAD_SHAPE = (6761, 896)


def _weights(device, layers: int):
    import torch

    generator = torch.Generator(device=device).manual_seed(0)
    shapes = [shape for _ in range(layers) for shape in LAYER_SHAPES] + [HEAD_SHAPE]
    weights = [torch.randn(shape, device=device, generator=generator) * shape[1] ** -0.5 for shape in shapes]
    inputs = {cols: torch.randn(cols, device=device, generator=generator) for cols in {c for _, c in shapes}}
    return weights, inputs


def _implementations(autotune: bool):
    import torch
    import torch.nn.functional as F

    reduce = torch.compile(lambda x, w: (w * x).sum(-1), dynamic=False)
    found = {
        "linear": lambda x, w: F.linear(x[None], w)[0],
        "mv": lambda x, w: torch.mv(w, x),
        "reduce": reduce,
    }
    if autotune:  # inductor benchmarks its Triton matmul templates against cuBLAS per shape (minutes)
        tuned = torch.compile(lambda x, w: F.linear(x[None], w)[0], mode="max-autotune-no-cudagraphs", dynamic=False)
        found["linear_autotuned"] = tuned
    return found


def _token(impl, weights, inputs):
    return [impl(inputs[w.shape[1]], w) for w in weights]


def measure(args) -> dict:
    import torch

    from cosyvoice_mac.device import synchronize

    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False  # strict float32, as the product's fp32 mode
    weights, inputs = _weights(device, args.layers)
    total_bytes = sum(w.numel() * w.element_size() for w in weights)
    reference = [(w.double() @ inputs[w.shape[1]].double()) for w in weights[:4] + weights[-1:]]
    rows = {}
    for name, impl in _implementations(args.autotune).items():
        with torch.inference_mode():
            for _ in range(3):  # compiles and cuBLAS workspaces before the capture (the CPU's checked outputs)
                outputs = _token(impl, weights, inputs)
            replay = functools.partial(_token, impl, weights, inputs)
            if device.type == "cuda":
                synchronize(device)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    outputs = _token(impl, weights, inputs)
                replay = graph.replay
            times = []
            for _ in range(args.repeats):
                synchronize(device)
                start = time.perf_counter()
                replay()
                synchronize(device)
                times.append(time.perf_counter() - start)
        checked = outputs[:4] + outputs[-1:]
        error = max(float((o.double() - r).abs().max() / r.abs().max()) for o, r in zip(checked, reference))
        seconds = statistics.median(times)
        rows[name] = {
            "ms_per_token": round(seconds * 1e3, 4),
            "gb_per_s": round(total_bytes / seconds / 1e9, 1),
            "max_rel_error_vs_fp64": error,
        }
        line = f"{name:16s} {seconds * 1e3:8.3f} ms  {total_bytes / seconds / 1e9:7.1f} GB/s  err {error:.2e}"
        print(line, file=sys.stderr)
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else args.device,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "layers": args.layers,
        "bytes_per_token": total_bytes,
        "implementations": rows,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--autotune", action="store_true", help="also inductor's max-autotune matmul")
    args = parser.parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device here")
    if args.autotune and not args.device.startswith("cuda"):
        parser.error("--autotune measures inductor's CUDA matmul templates; use it with --device cuda")
    print(json.dumps(measure(args), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
