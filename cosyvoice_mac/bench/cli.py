"""The benchmark's command line: which configurations to run, each in its own process, and the table.

    python -m cosyvoice_mac.bench --version cosyvoice3 --devices cuda --dtypes auto,float32 --runs 2

Prints a short table on stderr and one JSON document on stdout (``--json FILE`` too); the measuring
is :func:`cosyvoice_mac.bench.measure.bench`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import torch

from cosyvoice_mac.bench.faithful_frontends import faithful_frontends_folder
from cosyvoice_mac.bench.floors import machine_rates
from cosyvoice_mac.bench.measure import AUTO, FAITHFUL, PROMPT_TOKENS, STAND_IN, bench, parse_dtypes
from cosyvoice_mac.device import empty_cache, select_device, select_dtype
from cosyvoice_mac.paths import atomic_write
from cosyvoice_mac.pipeline.fullsize import official_config
from cosyvoice_mac.pipeline.loading import qwen_config_for
from cosyvoice_mac.pipeline.model_dir import ModelFolder
from cosyvoice_mac.pipeline.precision_plan import plan_precision
from cosyvoice_mac.settings import add_argument

# ``auto`` first (the default everywhere), then float32 and the single configurations it chooses among
DEFAULT_DTYPES = {
    "cpu": "auto,float32,float16/float32,float32/bfloat16,float16/bfloat16",
    "cuda": "auto,float32,float16/float32,float32/bfloat16,float16/bfloat16,bfloat16",
    "mps": "auto,float32,float16/float32,float32/bfloat16,float16",
}


def bench_isolated(args: argparse.Namespace, device: str, dtype: str, engine: str = "torch") -> dict:
    """Run one configuration in a fresh process (its own peak RSS and device memory) and read its JSON."""
    command = [
        sys.executable,
        "-m",
        "cosyvoice_mac.bench",
        "--in-process",
        "--quiet",
        "--devices",
        device,
        "--dtypes",
        dtype,
        "--version",
        args.version,
        "--runs",
        str(args.runs),
        "--tokens",
        str(args.tokens),
        "--engine",
        engine,
    ]
    command += ["--low-memory"] * args.low_memory + ["--no-stream"] * (not args.stream)
    command += ["--no-floors"] * (not args.floors) + (["--model", args.model] if args.model else [])
    command += ["--threads", str(args.threads)] if args.threads else []
    command += ["--no-decode-profile"] * (not args.decode_profile)
    command += ["--budget-s", str(args.budget_s)] if args.budget_s else []
    command += ["--frontends", args.frontends]
    if args.floors and engine == "torch":  # probed here, so the child's peak memory never includes the probes
        device_type = select_device(device)
        flow_dtype = parse_dtypes(dtype)[1]
        flow_dtype = planned_auto_flow_dtype(args, device_type) if flow_dtype is None else select_dtype(flow_dtype)
        rates = machine_rates(device_type, flow_dtype, 2 * (PROMPT_TOKENS + args.tokens))
        empty_cache(device_type)  # hand the probes' device memory back before the child starts
        command += ["--rates", json.dumps(rates)]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        return {
            "device": device,
            "dtype": dtype,
            "engine": engine,
            "error": f"exit status {done.returncode} (see stderr above)",
        }
    return json.loads(done.stdout)["benchmarks"][0]


def planned_auto_flow_dtype(args: argparse.Namespace, device: torch.device) -> torch.dtype:
    """The flow dtype ``auto`` picks here (probing now, so the child finds the timings cached)."""
    if args.model:
        folder = ModelFolder.open(args.model)
        config, qwen, version = folder.config, qwen_config_for(folder), folder.version
    else:
        config, qwen, version = official_config(args.version), qwen_config_for(None), args.version
    started = time.perf_counter()
    plan = plan_precision(
        device, version, config, qwen, precision=AUTO, low_memory=args.low_memory, reprobe=args.reprobe
    )
    probe = "cached" if plan.from_cache else f"probed in {time.perf_counter() - started:.1f} s"
    print(f"auto on {device} ({probe}): {plan.summary()}", file=sys.stderr, flush=True)
    return plan.flow_dtype


def available_devices() -> list[str]:
    """cpu, then cuda and mps where this machine has them."""
    return ["cpu"] + ["cuda"] * torch.cuda.is_available() + ["mps"] * torch.backends.mps.is_available()


def _decode_cell(report: dict, what: str) -> str:
    decode = report.get("decode") or {}
    value = decode.get("dispatch", {}).get("work") if what == "ops" else decode.get("cuda", {}).get("kernels_per_token")
    return "-" if value is None else f"{value:.0f}"


def _ratio(floor: dict | None, stage: str) -> str:
    value = (floor or {}).get(stage, {}).get("x_floor")
    return f"{value:.2f}" if value else "-"


def table(reports: list[dict]) -> str:
    lines = [
        (
            f"{'device':7} {'llm/flow dtype':22} {'mem':3} {'front':>6} {'llm':>7} {'flow':>7} {'voc':>6} {'e2e':>7} "
            f"{'RTF':>5} {'tok/s':>6} {'1st':>6} {'1st new':>7} {'RSS MB':>7} {'dev MB':>7} "
            f"{'llm/fl':>5} {'flow/fl':>7} {'load':>5} "
            f"{'ops/tok':>7} {'kern/tok':>8}"
        )
    ]
    for r in reports:
        if "error" in r:
            lines.append(f"{r['device']:7} {r['dtype']:22} failed: {r['error']}")
            continue
        m = r["median"]
        first = f"{m['first_audio_s']:6.2f}" if m.get("first_audio_s") else "     -"
        first_new = f"{m['first_audio_new_voice_s']:7.2f}" if m.get("first_audio_new_voice_s") else "      -"
        device_mb = f"{r['peak_device_mb']:7.0f}" if r.get("peak_device_mb") else "      -"
        finite = "" if m["mel_finite"] and m["wave_finite"] else "  NaN!"
        lines.append(
            f"{'mlx' if r.get('engine') == 'mlx' else r['device']:7} "
            f"{('auto ' if r['dtype'] == AUTO else '') + r['llm_dtype'] + '/' + r['flow_dtype']:22} "
            f"{'low' if r['low_memory'] else '':3} "
            f"{m['frontend_s']:6.2f} {m['llm_s']:7.2f} {m['flow_s']:7.2f} {m['vocoder_s']:6.2f} "
            f"{m['end_to_end_s']:7.2f} "
            f"{m['rtf']:5.2f} {m['llm_tokens_per_s']:6.1f} {first} {first_new} {r['peak_rss_mb']:7.0f} {device_mb} "
            f"{_ratio(r.get('floors'), 'llm'):>5} {_ratio(r.get('floors'), 'flow'):>7} {r['load_average_start']:5.1f} "
            f"{_decode_cell(r, 'ops'):>7} {_decode_cell(r, 'kernels'):>8}{finite}"
        )
    threads = {r.get("torch_threads") for r in reports if "error" not in r}
    lines.append(
        f"torch threads: {', '.join(map(str, sorted(threads)))}; seconds are medians; "
        "x/fl = measured / floor (1.00 = at the floor); load = 1-min load average at the start; "
        "1st = first streamed audio for a voice used before, 1st new = for a new voice; "
        "ops/tok = ATen ops per decoded token as the host issues them (a CUDA graph replay is none), "
        "kern/tok = CUDA kernels per token (profiler)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cosyvoice_mac.bench", description=__doc__.split("\n")[0])
    add_argument(parser, "version")
    parser.add_argument("--devices", default="all", help="comma list of cpu, cuda, mps, auto; all: every device here")
    parser.add_argument(
        "--dtypes",
        default="default",
        help="comma list; each auto (what precision='auto' picks), float32|float16|bfloat16, or "
        "LLM/FLOW such as float16/bfloat16 (int8: the LLM's weight-only int8); default: auto, "
        "float32 and the single configurations auto chooses among",
    )
    add_argument(parser, "reprobe")
    parser.add_argument("--engine", default="torch", help="comma list of torch, mlx (each runs every device/dtype)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=250, help="speech tokens to decode (25 = 1 s)")
    parser.add_argument("--low-memory", action="store_true", help="the 8 GB-Mac mode (16-bit LLM weights)")
    parser.add_argument("--model", help="a real model folder instead of random full-size weights")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--no-stream", dest="stream", action="store_false", help="skip time to first audio")
    parser.add_argument("--no-floors", dest="floors", action="store_false", help="skip the floor measurements")
    parser.add_argument(
        "--no-decode-profile",
        dest="decode_profile",
        action="store_false",
        help="skip counting ops (and on CUDA kernels) per decoded token",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        help="seconds each configuration may take: after a slow warm-up, a shorter request (the report says so)",
    )
    parser.add_argument(
        "--frontends",
        choices=(FAITHFUL, STAND_IN),
        default=FAITHFUL,
        help="random weights' prompt frontends: ONNX graphs of the released speech tokenizer's and CAM++'s "
        "structure (built once per machine, minutes) or stand-ins of microseconds (default: faithful)",
    )
    parser.add_argument("--in-process", action="store_true", help="run every configuration in this process")
    parser.add_argument("--json", help="also write the JSON document to this file")
    parser.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)  # no table (a child run)
    parser.add_argument("--rates", type=json.loads, help=argparse.SUPPRESS)  # the parent's probes (a child run)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.frontends == FAITHFUL and not args.model and not args.in_process:
        faithful_frontends_folder(args.version)  # built here once, so no child's time or peak memory holds the build
    reports = []
    for device in available_devices() if args.devices == "all" else args.devices.split(","):
        device_type = select_device(device).type
        dtypes = DEFAULT_DTYPES.get(device_type, "auto,float32") if args.dtypes == "default" else args.dtypes
        for dtype, engine in [(d, e) for d in dtypes.split(",") for e in args.engine.split(",")]:
            parse_dtypes(dtype)
            if args.in_process:
                reports.append(
                    bench(
                        args.version,
                        device,
                        dtype,
                        args.runs,
                        args.tokens,
                        low_memory=args.low_memory,
                        model_dir=args.model,
                        stream=args.stream,
                        measure_floors=args.floors,
                        threads=args.threads,
                        rates=args.rates,
                        profile_decode=args.decode_profile,
                        engine=engine,
                        budget_s=args.budget_s,
                        frontends=args.frontends,
                    )
                )
            else:
                reports.append(bench_isolated(args, device, dtype, engine))
            if not args.quiet:
                print(table(reports[-1:]).splitlines()[1], file=sys.stderr, flush=True)
    if not args.quiet:
        print(table(reports), file=sys.stderr)
    document = json.dumps({"benchmarks": reports}, indent=1)
    print(document)
    if args.json:
        atomic_write(args.json, document.encode("utf-8"))
    return 0 if all("error" not in r for r in reports) else 1
