"""Time a speaker-cache hit saves, on the full-size model with random weights.

    python bench/cache_hit.py [--version cosyvoice3] [--prompt WAV] [--repeats 3] [--threads 2]
                              [--device cpu] [--model DIR] [--synthesize]

Prints one JSON object (seconds; medians of ``--repeats`` runs after one warm-up):

* ``content_hash``: audio.py's hash of the decoded 16 kHz prompt, the cache key (the worker
  computes it once per distinct upload and then remembers it by the file's bytes);
* ``miss``: what a new voice costs: ``pipeline.prepare_prompt`` (decoding, trimming, speech
  tokens, speaker vector, prompt mel) plus writing the entry (``cache_write``);
* ``hit_memory``: the same voice again in the same worker (LRU); ``hit_disk``: after a restart
  (a fresh cache reading safetensors + JSON);
* ``saved_memory`` / ``saved_disk``: ``miss`` minus the hit;
* with ``--synthesize``: one short sentence with the cached prompt (``synthesis``), for proportion.

Without ``--model`` the networks are full size with random weights and the speech tokenizer and
speaker encoder are the pipeline's stand-ins (``CosyVoice.random_full_size``), because the official
ONNX files are not shipped; with ``--model DIR`` an official folder, ONNX files included, is used.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from cosyvoice_mac.engine.cache import SpeakerCache  # noqa: E402
from cosyvoice_mac.engine.runtime import prompt_content_hash, warmup_prompt  # noqa: E402
from cosyvoice_mac.pipeline import CosyVoice  # noqa: E402

PARITY_PROMPT = Path(__file__).resolve().parents[2] / "shared" / "parity" / "prompt.wav"


def timed(function) -> tuple[float, object]:
    started = time.perf_counter()
    value = function()
    return time.perf_counter() - started, value


def median_of(repeats: int, function) -> float:
    function()  # warm-up: lazy imports, allocator pools, ONNX sessions
    return statistics.median(timed(function)[0] for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="cosyvoice3", choices=["cosyvoice3", "cosyvoice2"])
    parser.add_argument("--model", help="an official model folder (default: full size, random weights)")
    parser.add_argument("--prompt", help="prompt WAV (default: shared/parity/prompt.wav, else a test signal)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--synthesize", action="store_true", help="also time one sentence with the cached prompt")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None

    load_s, pipeline = timed(
        lambda: (
            CosyVoice.from_pretrained(args.model, device=args.device)
            if args.model
            else CosyVoice.random_full_size(args.version, device=args.device)
        )
    )
    if args.prompt or PARITY_PROMPT.is_file():
        prompt, rate, source = str(args.prompt or PARITY_PROMPT), None, str(args.prompt or PARITY_PROMPT)
    else:
        prompt, rate, source = warmup_prompt(24000), 24000, "synthetic test signal"
    key = prompt_content_hash(prompt, rate)
    model_id = pipeline.model_id

    with tempfile.TemporaryDirectory(prefix="cache-bench-") as root:

        def miss():
            cache = SpeakerCache(Path(root) / f"miss-{time.perf_counter_ns()}")
            return cache.get_or_extract(model_id, key, lambda: pipeline.prepare_prompt(prompt, rate))

        extract = median_of(args.repeats, lambda: pipeline.prepare_prompt(prompt, rate))
        miss_s = median_of(args.repeats, miss)
        warm = SpeakerCache(Path(root) / "warm")
        speaker, _ = warm.get_or_extract(model_id, key, lambda: pipeline.prepare_prompt(prompt, rate))
        hit_memory = median_of(args.repeats, lambda: warm.lookup(model_id, key))
        hit_disk = median_of(args.repeats, lambda: SpeakerCache(Path(root) / "warm").lookup(model_id, key))
        hash_s = median_of(args.repeats, lambda: prompt_content_hash(prompt, rate))

    report = {
        "model": args.model or f"{args.version} full size, random weights, stand-in prompt encoders",
        "device": str(pipeline.device),
        "threads": args.threads,
        "repeats": args.repeats,
        "load_before": load_before,
        "prompt": source,
        "prompt_tokens": int(speaker.speech_tokens.shape[1]),
        "load": round(load_s, 3),
        "content_hash": round(hash_s, 4),
        "extract": round(extract, 4),
        "miss": round(miss_s, 4),
        "cache_write": round(max(0.0, miss_s - extract), 4),
        "hit_memory": round(hit_memory, 6),
        "hit_disk": round(hit_disk, 4),
        "saved_memory": round(miss_s - hit_memory, 4),
        "saved_disk": round(miss_s - hit_disk, 4),
    }
    if args.synthesize:
        seconds, pieces = timed(lambda: list(pipeline.synthesize("Hello there.", speaker=speaker, seed=0)))
        report["synthesis"] = round(seconds, 3)
        report["synthesis_audio_s"] = round(float(sum(len(p.audio) for p in pieces)) / pipeline.sample_rate, 3)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
