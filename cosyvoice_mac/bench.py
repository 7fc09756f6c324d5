"""Stage-by-stage speed and memory of the full-size models with RANDOM weights.

Compute does not depend on weight values, so random weights time the real architecture.
Decoding is forced to a fixed number of speech tokens (default 250 = 10 s of audio) by masking
every stop id, so runs are comparable across machines and with the reference's figures.

    python -m cosyvoice_mac.bench --version cosyvoice3 --devices cpu --dtypes float32,float16/float32 --runs 3
    python -m cosyvoice_mac.bench --engine mlx,torch --devices cpu --dtypes float32 --runs 1

``--engine mlx`` runs the CosyVoice3 networks on MLX (Metal on a Mac, MLX's CPU backend on Linux);
its LLM precision is ``$COSYVOICE_MLX_LLM`` (fp32, fp16, bf16, int8, int4) and its peak memory is MLX's own.

A dtype is one name for every stage (``float32``) or ``LLM/FLOW`` (``float16/float32``: on the
CPU a 16-bit LLM stores its weights in 16 bits and computes in float32). Each configuration runs
in its own process, so its peak RSS is its own. Prints a short table on stderr and one JSON
document on stdout: per stage wall and CPU seconds, real-time factor, time to first streamed
audio, LLM tokens/s, peak memory, and each stage against its floor (see ``bench/README.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import psutil
import torch

from cosyvoice_mac.bench_decode import decode_report
from cosyvoice_mac.bench_floors import floors, machine_rates
from cosyvoice_mac.device import empty_cache, select_device, select_dtype
from cosyvoice_mac.pipeline.cosyvoice import CosyVoice, _synchronize
from cosyvoice_mac.pipeline.engines import engine_status, network_dtypes
from cosyvoice_mac.pipeline.fullsize import official_config
from cosyvoice_mac.pipeline.gate import parse_choice
from cosyvoice_mac.pipeline.loading import qwen_config_for
from cosyvoice_mac.pipeline.model_dir import ModelFolder
from cosyvoice_mac.pipeline.precision_plan import plan_precision
from cosyvoice_mac.pipeline.streaming import stream_segment

PROMPT_SECONDS = 3.0
TOKEN_RATE = 25  # speech tokens per second of audio
PROMPT_TOKENS = 80  # what the stand-in tokenizer makes of the 3 s prompt (the floors use the real count)
STAGES = ("frontend", "llm", "flow", "vocoder")
# ``auto`` first (the default everywhere), then float32 and the single configurations it chooses among
DEFAULT_DTYPES = {
    "cpu": "auto,float32,float16/float32,float32/bfloat16,float16/bfloat16",
    "cuda": "auto,float32,bfloat16/float32,float32/bfloat16,bfloat16,float16/float32",
    "mps": "auto,float32,float16/float32,float32/bfloat16,float16",
}
AUTO = "auto"
TEXT = "You are a helpful assistant.<|endofprompt|>The quick brown fox jumps over the dog."
REFERENCE_TEXT_IDS = 32  # the reference timing's request: 9 text + 23 prompt-text tokens


def synthetic_prompt(seconds: float = PROMPT_SECONDS, sample_rate: int = 24000) -> np.ndarray:
    """A voiced, speech-like test signal (harmonics with a moving pitch and syllable envelope)."""
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    pitch = 120 + 30 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / sample_rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2
    return (0.3 * voice * envelope / np.abs(voice).max()).astype(np.float32)


def _timed(device: torch.device, function):
    """(wall seconds, CPU seconds of this process, value); CPU time is less disturbed by other load."""
    _synchronize(device)
    wall, cpu = time.perf_counter(), time.process_time()
    value = function()
    _synchronize(device)
    return time.perf_counter() - wall, time.process_time() - cpu, value


@torch.inference_mode()
def forced_token_stream(model: CosyVoice, text_ids: torch.Tensor, speaker, count: int) -> Iterator[int]:
    """Decode exactly ``count`` speech tokens (every stop id masked), as the reference timing did."""
    llm = model.networks.llm
    sampler = llm.make_sampler(seed=0)
    stop_ids = sorted(llm.stop_ids)
    embeds = llm.build_prompt_embeddings(text_ids, text_ids[:, :0], speaker.speech_tokens)
    decoder = llm.start_decoding(embeds, count)
    tokens: list[int] = []
    for step in range(count):
        token = sampler(decoder.logp, tokens, stop_ids)
        tokens.append(token)
        yield token
        if step + 1 < count:
            decoder.feed(token)


def time_to_first_audio(model: CosyVoice, text_ids, speaker, count: int, new_voice: bool = False) -> float:
    """Seconds from the request until the first streamed chunk of audio (the rest is not run).

    ``new_voice`` forgets the voice's cached flow prefix first, as for a voice used for the first time.
    """
    if new_voice:
        model.flow_prefixes.clear()
    started = time.perf_counter()
    chunks = stream_segment(
        model.streaming_parts(),
        forced_token_stream(model, text_ids, speaker, count),
        speaker,
        model._noise(0, 0),
        lambda: False,
    )
    next(chunks)
    first = time.perf_counter() - started
    chunks.close()  # stops the LLM thread
    return first


@torch.inference_mode()
def run_once(model: CosyVoice, tokens_to_decode: int, prompt: np.ndarray, stream: bool = True) -> dict:
    """One request, stage by stage: wall and CPU seconds per stage, RTF, tokens/s, first-audio latency."""
    device = model.device
    timings: dict[str, float | bool | None] = {}
    wall, cpu, speaker = _timed(device, lambda: model.prepare_prompt(prompt, sample_rate=24000))
    timings.update(frontend_s=wall, frontend_cpu_s=cpu)
    text_ids = torch.tensor([model.tokenizer.encode(TEXT)])[:, :REFERENCE_TEXT_IDS]  # the stand-in is 1 id a byte
    wall, cpu, tokens = _timed(device, lambda: list(forced_token_stream(model, text_ids, speaker, tokens_to_decode)))
    timings.update(llm_s=wall, llm_cpu_s=cpu)
    flow = model.networks.flow
    flow_device = next(flow.parameters()).device
    wall, cpu, mel = _timed(
        device,
        lambda: flow.inference(
            torch.tensor([tokens], device=flow_device),
            speaker.speech_tokens.to(flow_device),
            speaker.mel.to(flow_device),
            speaker.embedding.to(flow_device),
        ),
    )
    timings.update(flow_s=wall, flow_cpu_s=cpu)
    wall, cpu, (wave, _) = _timed(device, lambda: model.networks.hift.inference(mel.float()))
    timings.update(vocoder_s=wall, vocoder_cpu_s=cpu)
    audio_s = wave.shape[-1] / model.sample_rate
    total = sum(timings[f"{stage}_s"] for stage in STAGES)
    return {
        **timings,
        "end_to_end_s": total,
        "end_to_end_cpu_s": sum(timings[f"{stage}_cpu_s"] for stage in STAGES),
        "audio_s": audio_s,
        "rtf": total / audio_s,
        "llm_tokens_per_s": tokens_to_decode / timings["llm_s"],
        "first_audio_new_voice_s": time_to_first_audio(model, text_ids, speaker, tokens_to_decode, new_voice=True)
        if stream
        else None,
        "first_audio_s": time_to_first_audio(model, text_ids, speaker, tokens_to_decode) if stream else None,
        "prompt_tokens": speaker.speech_tokens.shape[1],
        "text_tokens": text_ids.shape[1],
        "mel_finite": bool(torch.isfinite(mel).all()),
        "wave_finite": bool(torch.isfinite(wave).all()),
        "load_average": os.getloadavg()[0],
    }


def peak_rss_mb() -> float:
    """This process's peak resident memory in MiB.

    On Linux ``VmHWM`` (the high-water mark of this process image): ``ru_maxrss`` would also count
    the parent's memory at the moment it started this process.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def peak_device_mb(device: torch.device) -> float | None:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    if device.type == "mps":
        return torch.mps.driver_allocated_memory() / 2**20
    return None  # MLX reports its own peak: report["mlx_memory"]


def parse_dtypes(spec: str) -> tuple[str | None, str | None]:
    """``float16`` -> (float16, float16); ``float16/float32`` -> (LLM float16, flow float32) (``int8``: LLM
    only); ``auto`` -> (None, None): each stage what ``precision="auto"`` picks."""
    if spec == AUTO:
        return None, None
    llm, _, flow = spec.partition("/")
    parse_choice(llm, "llm"), parse_choice(flow or llm, "flow")  # raise a clear error for unknown names
    return llm, flow or llm


def load_model(
    version: str,
    device: torch.device,
    dtype_spec: str,
    low_memory: bool,
    model_dir: str | None,
    engine: str = "torch",
    reprobe: bool = False,
):
    llm_dtype, flow_dtype = parse_dtypes(dtype_spec)
    if low_memory and "/" not in dtype_spec:
        llm_dtype = None  # low-memory mode picks the LLM's 16-bit dtype for the device
    common = {
        "device": device,
        "llm_dtype": llm_dtype,
        "flow_dtype": flow_dtype,
        "low_memory": low_memory,
        "precision": AUTO if dtype_spec == AUTO else "float32",
        "reprobe": reprobe,
        "engine": engine,
    }
    if model_dir:
        return CosyVoice.from_pretrained(model_dir, **common)
    return CosyVoice.random_full_size(version, **common)


def bench(
    version: str,
    device_name: str,
    dtype_name: str,
    runs: int,
    tokens: int,
    *,
    low_memory: bool = False,
    model_dir: str | None = None,
    stream: bool = True,
    measure_floors: bool = True,
    threads: int | None = None,
    rates: dict | None = None,
    profile_decode: bool = True,
    engine: str = "torch",
) -> dict:
    """Load one configuration, warm up, time ``runs`` requests; median per field (in this process)."""
    if threads:
        torch.set_num_threads(threads)
    device = select_device(device_name)
    rss_before = psutil.Process().memory_info().rss / 2**20
    load_s, load_cpu_s, model = _timed(
        device, lambda: load_model(version, device, dtype_name, low_memory, model_dir, engine)
    )
    if model.engine.engine != engine:
        raise SystemExit(f"--engine {engine} cannot run here: {model.engine.reason}")
    rss_loaded = psutil.Process().memory_info().rss / 2**20
    peak_after_load = peak_rss_mb()
    prompt = synthetic_prompt()
    run_once(model, min(tokens, 25), prompt, stream=False)  # warm-up: kernels, allocator, caches
    results = [run_once(model, tokens, prompt, stream=stream) for _ in range(runs)]
    median = {
        key: statistics.median(r[key] for r in results)
        if isinstance(results[0][key], (int, float)) and not isinstance(results[0][key], bool)
        else results[0][key]
        for key in results[0]
    }
    median["mel_finite"] = all(r["mel_finite"] for r in results)
    median["wave_finite"] = all(r["wave_finite"] for r in results)
    report = {
        "version": model.version,
        "model": model_dir or "random full-size weights",
        "device": str(device),
        "dtype": dtype_name,
        **engine_status(model),
        **(
            {"llm_dtype": model.precision.llm.choice, "flow_dtype": model.precision.flow.choice}
            if engine == "torch"
            else network_dtypes(model)
        ),  # int8 modules hold buffers, not parameters
        "precision": model.precision.as_dict(),
        "low_memory": low_memory,
        "runs": runs,
        "tokens": tokens,
        "load_s": load_s,
        "load_cpu_s": load_cpu_s,
        "rss_before_load_mb": rss_before,
        "rss_after_load_mb": rss_loaded,
        "peak_rss_after_load_mb": peak_after_load,
        "median": median,
        "all_runs": results,
        "peak_rss_mb": peak_rss_mb(),
        "peak_device_mb": peak_device_mb(device),
        "parameter_bytes": model.networks.parameter_bytes(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "processor": _processor(),
        "cuda_tf32": torch.backends.cuda.matmul.allow_tf32 if device.type == "cuda" else None,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "load_average_start": results[0]["load_average"],
        "load_average_end": os.getloadavg()[0],
    }
    if engine == "mlx":
        report["peak_device_mb"] = report["mlx_memory"]["peak_bytes"] / 2**20
    if measure_floors and engine == "torch":  # the floors probe PyTorch kernels
        report["floors"] = floors(model, tokens, median, rates)
    if profile_decode and engine == "torch":  # ops per token (every device), kernels and GPU-busy per token (CUDA)
        report["decode"] = decode_report(model.networks.llm)
    del model
    empty_cache(device)
    return report


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


def _processor() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


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
    parser.add_argument("--version", default="cosyvoice3", choices=("cosyvoice3", "cosyvoice2"))
    parser.add_argument("--devices", default="all", help="comma list of cpu, cuda, mps, auto; all: every device here")
    parser.add_argument(
        "--dtypes",
        default="default",
        help="comma list; each auto (what precision='auto' picks), float32|float16|bfloat16, or "
        "LLM/FLOW such as float16/bfloat16 (int8: the LLM's weight-only int8); default: auto, "
        "float32 and the single configurations auto chooses among",
    )
    parser.add_argument("--reprobe", action="store_true", help="measure the precision probe again for auto")
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
    parser.add_argument("--in-process", action="store_true", help="run every configuration in this process")
    parser.add_argument("--json", help="also write the JSON document to this file")
    parser.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)  # no table (a child run)
    parser.add_argument("--rates", type=json.loads, help=argparse.SUPPRESS)  # the parent's probes (a child run)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
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
        with open(args.json, "w", encoding="utf-8") as handle:
            handle.write(document)
    return 0 if all("error" not in r for r in reports) else 1


if __name__ == "__main__":
    raise SystemExit(main())
