"""Peak memory of the MLX engine in the mode an 8 GB Mac gets, in this process (no worker): quick to run.

    python bench/mlx_memory.py [--folder DIR] [--prompt-s 3] [--text "Hello there."] [--requests 2]
        [--stand-in-for TEXT] [--json FILE]

The full-size random-weight folder of ``bench/low_memory_rss.py`` (written there once), loaded with
``engine="mlx"`` in a process whose RAM reads as 8 GiB (so the low-memory mode is the automatic choice),
then two requests, each with a voice it has not seen. Per phase: MLX's own peak (``mx.get_peak_memory()``,
the arrays: on a Mac, Metal memory that RSS does not show) and the process's peak RSS (``VmHWM``, which on
Linux includes MLX's CPU arrays and the memory-mapped checkpoint pages); each phase's peaks start from the
end of the one before. ``weight_cache`` says whether the converted weights were there already (``warm``:
a usual start; ``cold``: the first, which also reads the checkpoints with PyTorch), each request's speech
tokens and stage times, the weights MLX holds by stage, and the machine, packages and settings. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx  # noqa: E402

from cosyvoice_mac.bench.memory import from_pretrained_with_8_gib, proc_status_kib, reset_peak  # noqa: E402
from cosyvoice_mac.mlx.convert import default_cache_dir  # noqa: E402
from cosyvoice_mac.paths import user_cache_dir  # noqa: E402

MIB = 2**20


def phase(started: float) -> dict:
    """This phase's peaks, then both peaks start again from now (each phase shows its own)."""
    status = proc_status_kib(os.getpid())
    figures = {
        "mlx_peak_mib": round(mx.get_peak_memory() / MIB),
        "mlx_active_mib": round(mx.get_active_memory() / MIB),
        "vm_hwm_mib": round(status.get("VmHWM", 0) / 1024),
        "rss_mib": round(status.get("VmRSS", 0) / 1024),
        "seconds": round(time.perf_counter() - started, 1),
    }
    mx.reset_peak_memory()
    reset_peak(os.getpid())
    return figures


def main(argv: list[str] | None = None) -> int:
    from cosyvoice_mac.engine.runtime import warmup_prompt
    from cosyvoice_mac.request import Request, Voice

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", type=Path, default=user_cache_dir() / "bench" / "random-weights-cosyvoice3")
    parser.add_argument("--prompt-s", type=float, default=3.0)
    parser.add_argument("--text", default="Hello there.")
    parser.add_argument("--requests", type=int, default=2, help="new-voice requests after the load (0: load only)")
    parser.add_argument("--stand-in-for", default="", help="what this run stands in for (kept in the JSON)")
    parser.add_argument("--json", type=Path, help="also write the JSON to this file")
    args = parser.parse_args(argv)
    from low_memory_rss import machine, mlx_weights_by_stage, packages  # the sibling bench's facts

    report: dict = {"stand_in_for": args.stand_in_for, "command": " ".join(["python", *sys.argv])}
    report.update(started_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), machine=machine())
    report.update(packages=packages(), settings={k: v for k, v in os.environ.items() if k.startswith("COSYVOICE_")})
    report.update({"folder": str(folder_ok(args.folder)), "text": args.text, "prompt_s": args.prompt_s, "phases": {}})
    cache = default_cache_dir()
    report["weight_cache"] = "off" if cache is None else "warm" if any(cache.glob("*-llm-*.safetensors")) else "cold"
    started = time.perf_counter()
    model = from_pretrained_with_8_gib(args.folder, engine="mlx", device="auto")
    report["engine"], report["low_memory"] = model.engine.engine, model.low_memory
    report["llm_precision"] = model.networks.llm_precision
    report["mlx_llm"] = model.networks.llm_choice.as_dict()
    report["mlx_limits"] = model.networks.memory_limits.as_dict()
    report["phases"]["load"] = phase(started)
    print(json.dumps({"load": report["phases"]["load"]}), file=sys.stderr, flush=True)  # a long run shows progress
    for number in range(1, args.requests + 1):
        started = time.perf_counter()
        samples = warmup_prompt(24000, args.prompt_s) * (1.0 - 0.1 * number)  # a voice it has not seen
        request = Request.build(
            args.text, Voice.from_samples(samples, 24000, transcript="A short prompt."), seed=number
        )
        results = list(model.run(request))
        report["phases"][f"request_{number}_new_voice"] = {
            **phase(started),
            "audio_samples": sum(len(result.audio) for result in results),
            "speech_tokens": sum(result.speech_token_count for result in results),
            "stage_seconds": [result.timings for result in results],
        }
        print(json.dumps({number: report["phases"][f"request_{number}_new_voice"]}), file=sys.stderr, flush=True)
    report["mlx_peak_mib"] = max(p["mlx_peak_mib"] for p in report["phases"].values())
    report["vm_hwm_mib"] = max(p["vm_hwm_mib"] for p in report["phases"].values())
    report["mlx_weights_by_stage"] = mlx_weights_by_stage(args.folder)
    report["load_average_at_end"] = os.getloadavg()
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


def folder_ok(folder: Path) -> Path:
    if not (folder / ".complete.json").is_file():
        raise SystemExit(f"no full-size random folder at {folder}: run bench/low_memory_rss.py once to write it")
    return folder


if __name__ == "__main__":
    raise SystemExit(main())
