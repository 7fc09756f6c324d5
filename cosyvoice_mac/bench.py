"""Stage-by-stage speed and memory of the full-size models with RANDOM weights.

Compute does not depend on weight values, so random weights time the real architecture.
Decoding is forced to a fixed number of speech tokens (default 250 = 10 s of audio) by masking
every stop id, so runs are comparable across machines and with the reference's figures.

    python -m cosyvoice_mac.bench --version cosyvoice3 --devices cpu --dtypes float32 --runs 3

Prints one JSON document (and a short table on stderr).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from typing import Iterator

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from cosyvoice_mac.device import empty_cache, select_device  # noqa: E402
from cosyvoice_mac.pipeline.cosyvoice import CosyVoice, _synchronize  # noqa: E402
from cosyvoice_mac.pipeline.streaming import stream_segment  # noqa: E402

PROMPT_SECONDS = 3.0
TOKEN_RATE = 25  # speech tokens per second of audio


def synthetic_prompt(seconds: float = PROMPT_SECONDS, sample_rate: int = 24000) -> np.ndarray:
    """A voiced, speech-like test signal (harmonics with a moving pitch and syllable envelope)."""
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    pitch = 120 + 30 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / sample_rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2
    return (0.3 * voice * envelope / np.abs(voice).max()).astype(np.float32)


def _timed(device: torch.device, function):
    _synchronize(device)
    started = time.perf_counter()
    value = function()
    _synchronize(device)
    return time.perf_counter() - started, value


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


def time_to_first_audio(model: CosyVoice, text_ids, speaker, count: int) -> tuple[float, float]:
    """Seconds until the first streamed chunk, and until the whole stream, for ``count`` tokens."""
    started = time.perf_counter()
    chunks = stream_segment(model, forced_token_stream(model, text_ids, speaker, count), speaker,
                            model._noise(0, 0), lambda: False)
    next(chunks)
    first = time.perf_counter() - started
    for _ in chunks:
        pass
    return first, time.perf_counter() - started


@torch.inference_mode()
def run_once(model: CosyVoice, tokens_to_decode: int, prompt: np.ndarray, stream: bool = True) -> dict:
    device = model.device
    frontend_s, speaker = _timed(device, lambda: model.prepare_prompt(prompt, sample_rate=24000))
    text = "You are a helpful assistant.<|endofprompt|>The quick brown fox jumps over the dog."
    text_ids = torch.tensor([model.tokenizer.encode(text)])
    llm_s, tokens = _timed(device, lambda: list(forced_token_stream(model, text_ids, speaker, tokens_to_decode)))
    flow_device = next(model.networks.flow.parameters()).device
    flow_s, mel = _timed(device, lambda: model.networks.flow.inference(
        torch.tensor([tokens], device=flow_device), speaker.speech_tokens.to(flow_device),
        speaker.mel.to(flow_device), speaker.embedding.to(flow_device)))
    vocoder_s, (wave, _) = _timed(device, lambda: model.networks.hift.inference(mel.float()))
    audio_s = wave.shape[-1] / model.sample_rate
    total = frontend_s + llm_s + flow_s + vocoder_s
    first_audio_s, stream_total_s = time_to_first_audio(model, text_ids, speaker, tokens_to_decode) if stream else (None, None)
    return {
        "first_audio_s": first_audio_s, "stream_total_s": stream_total_s,
        "frontend_s": frontend_s, "llm_s": llm_s, "flow_s": flow_s, "vocoder_s": vocoder_s,
        "end_to_end_s": total, "audio_s": audio_s, "rtf": total / audio_s,
        "llm_tokens_per_s": tokens_to_decode / llm_s,
    }


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def peak_device_mb(device: torch.device) -> float | None:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    if device.type == "mps":
        return torch.mps.driver_allocated_memory() / 2**20
    return None


def bench(version: str, device_name: str, dtype_name: str, runs: int, tokens: int) -> dict:
    device = select_device(device_name)
    load_s, model = _timed(device, lambda: CosyVoice.random_full_size(version, device=device, dtype=dtype_name))
    prompt = synthetic_prompt()
    run_once(model, min(tokens, 25), prompt, stream=False)  # warm-up: kernels, allocator, caches
    results = [run_once(model, tokens, prompt) for _ in range(runs)]
    median = {key: statistics.median(r[key] for r in results) if results[0][key] is not None else None
              for key in results[0]}
    report = {
        "version": version, "device": str(device), "dtype": dtype_name, "runs": runs, "tokens": tokens,
        "load_s": load_s, "median": median, "all_runs": results, "peak_rss_mb": peak_rss_mb(),
        "peak_device_mb": peak_device_mb(device), "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__, "machine": platform.machine(), "load_average": os.getloadavg(),
    }
    del model
    empty_cache(device)
    return report


def _table(reports: list[dict]) -> str:
    lines = [f"{'device':8} {'dtype':9} {'frontend':>9} {'llm':>7} {'flow':>7} {'vocoder':>8} "
             f"{'e2e':>7} {'RTF':>6} {'tok/s':>6} {'1st audio':>9} {'RSS MB':>7}"]
    for r in reports:
        m = r["median"]
        lines.append(f"{r['device']:8} {r['dtype']:9} {m['frontend_s']:9.2f} {m['llm_s']:7.2f} {m['flow_s']:7.2f} "
                     f"{m['vocoder_s']:8.2f} {m['end_to_end_s']:7.2f} {m['rtf']:6.2f} "
                     f"{m['llm_tokens_per_s']:6.1f} {m['first_audio_s'] or float('nan'):9.2f} {r['peak_rss_mb']:7.0f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--version", default="cosyvoice3", choices=("cosyvoice3", "cosyvoice2"))
    parser.add_argument("--devices", default="auto", help="comma list of cpu, cuda, mps, auto")
    parser.add_argument("--dtypes", default="float32", help="comma list of float32, float16, bfloat16")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=250, help="speech tokens to decode (25 = 1 s)")
    args = parser.parse_args(argv)
    reports = [
        bench(args.version, device, dtype, args.runs, args.tokens)
        for device in args.devices.split(",") for dtype in args.dtypes.split(",")
    ]
    print(_table(reports), file=sys.stderr)
    print(json.dumps({"benchmarks": reports}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
