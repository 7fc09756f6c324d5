"""Does ``torch.compile`` pay for the flow estimator and the vocoder? Eager vs compiled, one device.

    python bench/compile_probe.py --device cuda --version cosyvoice3 [--tokens 250]

Full-size random weights. Prints JSON: compile seconds, eager and compiled seconds per call
(best of ``--runs`` after a warm-up) and the largest difference between the two outputs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosyvoice_mac.device import synchronize  # noqa: E402
from cosyvoice_mac.pipeline import CosyVoice  # noqa: E402
from cosyvoice_mac.pipeline.probe import best_seconds  # noqa: E402


@torch.inference_mode()
def probe(name: str, module, inputs: tuple, device: torch.device, runs: int, **kwargs) -> dict:
    eager = module(*inputs, **kwargs)
    eager_s = best_seconds(device, lambda: module(*inputs, **kwargs), runs)
    compiled = torch.compile(module)
    started = time.perf_counter()
    out = compiled(*inputs, **kwargs)
    synchronize(device)
    compile_s = time.perf_counter() - started
    compiled_s = best_seconds(device, lambda: compiled(*inputs, **kwargs), runs)
    first = lambda value: value[0] if isinstance(value, tuple) else value  # noqa: E731
    difference = (first(out).float() - first(eager).float()).abs().max().item()
    return {
        "part": name,
        "eager_s": eager_s,
        "compiled_s": compiled_s,
        "compile_s": compile_s,
        "speedup": eager_s / compiled_s,
        "max_abs_difference": difference,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--version", default="cosyvoice3")
    parser.add_argument("--tokens", type=int, default=250)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    device = torch.device(args.device)
    model = CosyVoice.random_full_size(args.version, device=device, dtype="float32")
    frames = 2 * (80 + args.tokens)
    generator = torch.Generator().manual_seed(0)
    draw = lambda *shape: torch.randn(*shape, generator=generator).to(device)  # noqa: E731
    estimator = model.networks.flow.decoder.estimator
    estimator_inputs = (
        draw(2, 80, frames),
        torch.ones(2, 1, frames, device=device),
        draw(2, 80, frames),
        torch.full((2,), 0.3, device=device),
        draw(2, 80),
        draw(2, 80, frames),
    )
    parts = [
        ("flow estimator (one Euler step, CFG batch 2)", estimator, estimator_inputs),
        ("vocoder", model.networks.hift.inference, (draw(1, 80, 2 * args.tokens),)),
    ]
    results = []
    for name, module, inputs in parts:
        try:
            results.append(probe(name, module, inputs, device, args.runs))
        except Exception as error:  # a compiler failure is a result too
            results.append({"part": name, "error": f"{type(error).__name__}: {str(error)[:300]}"})
    print(
        json.dumps(
            {
                "device": str(device),
                "version": args.version,
                "frames": frames,
                "torch": torch.__version__,
                "results": results,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
