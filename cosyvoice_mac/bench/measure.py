"""Stage-by-stage speed and memory of the full-size models with RANDOM weights: the measuring code.

Compute does not depend on weight values, so random weights time the real architecture.
Decoding is forced to a fixed number of speech tokens (default 250 = 10 s of audio) by masking
every stop id, so runs are comparable across machines and with the reference's figures.

    python -m cosyvoice_mac.bench --version cosyvoice3 --devices cpu --dtypes float32,float16/float32 --runs 3
    python -m cosyvoice_mac.bench --engine mlx,torch --devices cpu --dtypes float32 --runs 1

``--engine mlx`` runs the networks (either version) on MLX (Metal on a Mac, MLX's CPU backend on Linux);
its LLM precision is ``$COSYVOICE_MLX_LLM`` (fp32, fp16, bf16, int8, int4) and its peak memory is MLX's own.

A dtype is one name for every stage (``float32``) or ``LLM/FLOW`` (``float16/float32``: on the
CPU a 16-bit LLM stores its weights in 16 bits and computes in float32). :func:`bench` loads one
configuration and times it: per stage wall and CPU seconds, real-time factor, time to first
streamed audio, LLM tokens/s, peak memory, and each stage against its floor (see
``bench/README.md``). The command line, the table and the one-process-per-configuration runs are
:mod:`cosyvoice_mac.bench.cli`; the package (``cosyvoice_mac.bench``) puts this process in the worker's
environment before torch loads.
"""

from __future__ import annotations

import functools
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Iterator

import numpy as np
import psutil
import torch

from cosyvoice_mac.bench.budget import WARM_UP_TOKENS, estimated_seconds, plan_run, worth_timing_again
from cosyvoice_mac.bench.decode import decode_report
from cosyvoice_mac.bench.faithful_frontends import use_faithful_frontends
from cosyvoice_mac.bench.floors import floors
from cosyvoice_mac.bench.machine import peak_footprint_mb
from cosyvoice_mac.device import empty_cache, select_device, synchronize
from cosyvoice_mac.pipeline.cosyvoice import CosyVoice
from cosyvoice_mac.pipeline.engines import engine_status, network_dtypes
from cosyvoice_mac.pipeline.gate import parse_choice
from cosyvoice_mac.pipeline.streaming import stream_segment
from cosyvoice_mac.versions import SAMPLE_RATE

PROMPT_SECONDS = 3.0
TOKEN_RATE = 25  # speech tokens per second of audio
PROMPT_TOKENS = 80  # what the stand-in tokenizer makes of the 3 s prompt (the floors use the real count)
FAITHFUL, STAND_IN = "faithful", "stand-in"  # the random-weight model's prompt frontends (faithful_frontends)
STAGES = ("frontend", "llm", "flow", "vocoder")
AUTO = "auto"
TEXT = "You are a helpful assistant.<|endofprompt|>The quick brown fox jumps over the dog."
REFERENCE_TEXT_IDS = 32  # the reference timing's request: 9 text + 23 prompt-text tokens


def synthetic_prompt(seconds: float = PROMPT_SECONDS, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """A voiced, speech-like test signal (harmonics with a moving pitch and syllable envelope)."""
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    pitch = 120 + 30 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / sample_rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2
    return (0.3 * voice * envelope / np.abs(voice).max()).astype(np.float32)


def _timed(device: torch.device, function):
    """(wall seconds, CPU seconds of this process, value); CPU time is less disturbed by other load."""
    synchronize(device)
    wall, cpu = time.perf_counter(), time.process_time()
    value = function()
    synchronize(device)
    return time.perf_counter() - wall, time.process_time() - cpu, value


@torch.inference_mode()
def forced_token_stream(model: CosyVoice, text_ids: torch.Tensor, speaker, count: int) -> Iterator[int]:
    """Decode exactly ``count`` speech tokens (every stop id masked), as the reference timing did."""
    llm = model.networks.llm
    sampler = llm.make_sampler(seed=0)
    stop_ids = sorted(llm.stop_ids)
    embeds = llm.build_prompt_embeddings(text_ids, text_ids[:, :0], speaker.speech_tokens)
    runner = getattr(llm, "decoding", None)  # the app's CUDA path samples on the device (min_len masks every stop)
    masks_every_stop = set(getattr(llm, "masked_before_min_len", ())) >= set(stop_ids)
    if runner is not None and runner.samples_on_device(sampler, None) and masks_every_stop:
        yield from llm._decode(embeds, count, count, sampler, None)
        return
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
    wall, cpu, speaker = _timed(device, lambda: model.prepare_prompt(prompt, sample_rate=SAMPLE_RATE))
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
    new_voice_s = time_to_first_audio(model, text_ids, speaker, tokens_to_decode, new_voice=True) if stream else None
    return {
        **timings,
        "end_to_end_s": total,
        "end_to_end_cpu_s": sum(timings[f"{stage}_cpu_s"] for stage in STAGES),
        "audio_s": audio_s,
        "rtf": total / audio_s,
        "llm_tokens_per_s": tokens_to_decode / timings["llm_s"],
        "first_audio_new_voice_s": new_voice_s,
        # a new voice's whole wait: its prompt's features (cached for a voice used before), then its first audio
        "new_voice_with_frontends_s": None if new_voice_s is None else timings["frontend_s"] + new_voice_s,
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
    frontends: str = FAITHFUL,
):
    """The model a bench measures: ``model_dir``'s, or full-size random weights whose prompt frontends are the
    released graphs' structure (``faithful``, built once per machine) or microsecond stand-ins (``stand-in``)."""
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
    model = CosyVoice.random_full_size(version, **common)
    if frontends == FAITHFUL:
        model.bench_frontends = use_faithful_frontends(model)
    elif frontends != STAND_IN:
        raise ValueError(f"frontends must be {FAITHFUL!r} or {STAND_IN!r}, got {frontends!r}")
    return model


def frontends_record(model: CosyVoice, model_dir: str | None) -> dict:
    """What encoded the prompts: the folder's own files, the faithful random-weight graphs, or the stand-ins."""
    if model_dir:
        return {"kind": "model folder"}
    record = getattr(model, "bench_frontends", None)
    return {"kind": FAITHFUL, **record} if record else {"kind": STAND_IN}


def _runs_on_a_gpu(engine: str, device: torch.device) -> bool:
    """Whether the networks run on a GPU (CUDA, MPS, MLX's Metal), whose first call loads kernels and captures
    graphs; MLX runs where its default device is, whatever torch's device."""
    if engine == "mlx":
        import mlx.core as mx

        return mx.default_device().type == mx.gpu
    return device.type in ("cuda", "mps")


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
    budget_s: float | None = None,
    frontends: str = FAITHFUL,
) -> dict:
    """Load one configuration, warm up, time ``runs`` requests; median per field (in this process).

    ``budget_s`` bounds the whole call after a slow warm-up (:mod:`cosyvoice_mac.bench.budget`): fewer
    tokens, fewer runs, no first-audio figures or the warm-up as the run; ``shortened`` in the report says so.
    """
    started = time.perf_counter()
    if threads:
        torch.set_num_threads(threads)
    device = select_device(device_name)
    rss_before = psutil.Process().memory_info().rss / 2**20
    load_s, load_cpu_s, model = _timed(
        device, lambda: load_model(version, device, dtype_name, low_memory, model_dir, engine, frontends=frontends)
    )
    if model.engine.engine != engine:
        raise SystemExit(f"--engine {engine} cannot run here: {model.engine.reason}")
    rss_loaded = psutil.Process().memory_info().rss / 2**20
    peak_after_load = peak_rss_mb()
    prompt = synthetic_prompt()
    warm_up = functools.partial(run_once, model, min(tokens, WARM_UP_TOKENS), prompt, stream=False)
    warmup_s, _, warm_up_run = _timed(device, warm_up)  # the first request: kernel loads, graph captures, compiles
    seconds_per_token = warmup_s / min(tokens, WARM_UP_TOKENS)
    seconds_left = None if budget_s is None else budget_s - (time.perf_counter() - started)
    plan = plan_run(tokens, stream, seconds_per_token, seconds_left)
    warmup_again_s = None
    if worth_timing_again(plan, warmup_s, seconds_left, on_a_gpu=_runs_on_a_gpu(engine, device)):
        warmup_again_s, _, warm_up_run = _timed(device, warm_up)
        seconds_per_token = min(warmup_s, warmup_again_s) / min(tokens, WARM_UP_TOKENS)
        seconds_left = budget_s - (time.perf_counter() - started)
        plan = plan_run(tokens, stream, seconds_per_token, seconds_left, timed_again=True)
    results = [warm_up_run] if plan.warm_up_only else []
    while len(results) < runs and not plan.warm_up_only:  # further runs only while they fit the budget
        results.append(run_once(model, plan.tokens, prompt, stream=plan.stream))
        left = None if budget_s is None else budget_s - (time.perf_counter() - started)
        if left is not None and estimated_seconds(seconds_per_token, plan.tokens, plan.stream) > left:
            break
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
        "frontends": frontends_record(model, model_dir),
        "runs": len(results),
        "tokens": plan.tokens,
        "tokens_asked": tokens,
        "budget_s": budget_s,
        "shortened": plan.shortened,
        "warmup_s": warmup_s,  # the first request after the load: captures, compiles, first kernel loads
        "warmup_again_s": warmup_again_s,  # timed again when the first's pace would have shortened the run
        "load_s": load_s,
        "load_cpu_s": load_cpu_s,
        "rss_before_load_mb": rss_before,
        "rss_after_load_mb": rss_loaded,
        "peak_rss_after_load_mb": peak_after_load,
        "median": median,
        "all_runs": results,
        "peak_rss_mb": peak_rss_mb(),
        "peak_footprint_mb": peak_footprint_mb(),  # macOS: what memory pressure counts; None elsewhere
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
    else:  # CUDA: the streamed vocoder calls replayed as graphs
        graphs = model.networks.hift.streamed_graphs  # None: no CUDA call made it
        report["vocoder_graphs"] = None if graphs is None else graphs.report()
    if measure_floors and engine == "torch":  # the floors probe PyTorch kernels
        report["floors"] = floors(model, plan.tokens, median, rates)
    if profile_decode and engine == "torch":  # ops per token (every device), kernels and GPU-busy per token (CUDA)
        report["decode"] = decode_report(model.networks.llm)
    del model
    empty_cache(device)
    return report


def _processor() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
