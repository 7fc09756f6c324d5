"""The precision probe on this machine: its timings, how long it took, and what ``auto`` picks from them.

    python bench/precision_probe.py --device cuda

Runs the probe as ``precision="auto"`` does (not cached) and, for comparison, as a CPU runs it
(a few layers, one flow block), which on a GPU times kernel launches more than arithmetic.
JSON on stdout, one summary line per version and depth on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosyvoice_mac.pipeline import probe  # noqa: E402
from cosyvoice_mac.pipeline.fullsize import official_config  # noqa: E402
from cosyvoice_mac.pipeline.loading import qwen_config_for  # noqa: E402
from cosyvoice_mac.pipeline.precision_plan import plan_precision  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--versions", default="cosyvoice3,cosyvoice2")
    args = parser.parse_args()
    device = torch.device(args.device)
    full_depth = probe.at_full_depth
    report = []
    for version in args.versions.split(","):
        config, qwen = official_config(version), qwen_config_for(None)
        for depth in ("real depth", "shallow (as on a CPU)"):
            probe.at_full_depth = full_depth if depth == "real depth" else (lambda device: False)
            started = time.perf_counter()
            timings = probe.probe(device, config, qwen)
            seconds = time.perf_counter() - started
            plan = plan_precision(device, version, config, qwen, precision="auto", timings=timings)
            report.append(
                {"version": version, "depth": depth, "probe_s": seconds, "timings": timings, "plan": plan.as_dict()}
            )
            print(f"{version} {depth}: probe {seconds:.2f} s; {plan.summary()}", file=sys.stderr, flush=True)
    probe.at_full_depth = full_depth
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
