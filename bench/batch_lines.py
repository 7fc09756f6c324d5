"""Lines per minute at B=1 against larger batches through ``CosyVoice.run_batch``, full-size RANDOM weights (issue 47).

    nice python bench/batch_lines.py [--version cosyvoice3] [--device cpu] [--batches 1,2,4] [--lines 8]
                                     [--runs 1] [--json bench/results/issue47_batch/<name>.json]

Every B speaks the same lines (one request each, its own seed, one zero-shot voice), in one process, B=1
first and last so the machine's drift shows. Random weights would stop at random ids, so each line is held to
a fixed number of speech tokens (every stop id masked until then, as the other benches force their counts),
``TOKENS_PER_TEXT_ID`` per text id: the lines' lengths differ, the batch is ragged and lines leave it at
different steps. Each B's tokens are checked equal to B=1's and the waveforms' largest difference is reported.
B=1 is the solo path (``CosyVoice.run`` line after line), what long-form jobs did before.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

from cosyvoice_mac.bench.measure import synthetic_prompt
from cosyvoice_mac.pipeline import CosyVoice
from cosyvoice_mac.request import Request, Voice

TOKENS_PER_TEXT_ID = 8  # ~0.32 s of speech per text id: the lines run 2-6 s
WORDS = "the quick brown fox jumps over the lazy dog while a small bird sings in the old oak tree".split()
TRANSCRIPT = "A short prompt recording for the benchmark."


def line_texts(count: int) -> list[str]:
    """``count`` sentences of 4, 6, 8 ... words (cycling), so the batch is ragged."""
    return [f"{' '.join(WORDS[: 4 + 2 * (index % 6)]).capitalize()}." for index in range(count)]


def speak(model: CosyVoice, requests, speaker, batch: int) -> dict:
    if model.device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    started, cpu = time.perf_counter(), time.process_time()
    results = list(model.run_batch(requests, [speaker] * len(requests), batch_size=batch))
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - started
    failed = [str(result) for _, result in results if isinstance(result, Exception)]
    if failed:
        raise RuntimeError(f"lines failed: {failed}")
    by_line = sorted(results, key=lambda pair: pair[0])
    audio_s = sum(result.duration_s for _, result in by_line)
    row = {
        "batch": batch,
        "wall_s": wall,
        "cpu_s": time.process_time() - cpu,
        "lines_per_min": 60.0 * len(requests) / wall,
        "audio_s": audio_s,
        "audio_s_per_s": audio_s / wall,
        "tokens": [result.speech_token_count for _, result in by_line],
        "load_average": os.getloadavg(),
        "max_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }
    if model.device.type == "cuda":
        row["gpu_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    row["_audio"] = [result.audio for _, result in by_line]
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="cosyvoice3", choices=("cosyvoice3", "cosyvoice2"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="float32", help="as CosyVoice.random_full_size's precision")
    parser.add_argument("--batches", default="1,2,4", help="comma-separated B values; 1 is always run first and last")
    parser.add_argument("--lines", type=int, default=8)
    parser.add_argument("--runs", type=int, default=1, help="rounds over every B")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    batches = [int(value) for value in args.batches.split(",") if int(value) > 1]

    loaded = time.perf_counter()
    model = CosyVoice.random_full_size(args.version, device=args.device, precision=args.precision)
    load_s = time.perf_counter() - loaded
    llm = model.networks.llm
    llm.length_limits = lambda text_ids: (TOKENS_PER_TEXT_ID * text_ids, TOKENS_PER_TEXT_ID * text_ids)
    speaker = model.prepare_prompt(synthetic_prompt(), sample_rate=24000, transcript=TRANSCRIPT)
    voice = Voice(prepared=speaker.audio_hash, transcript=TRANSCRIPT)
    requests = [Request.build(text, voice, seed=index) for index, text in enumerate(line_texts(args.lines))]
    speak(model, requests[:2], speaker, 2)  # warm-up: kernels and allocations of both paths

    rows = []
    for _ in range(args.runs):
        for batch in (1, *batches, 1):
            rows.append(speak(model, requests, speaker, batch))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "_audio"}), flush=True)
    solo_tokens, solo_audio = rows[0]["tokens"], rows[0]["_audio"]
    for row in rows:
        if row["tokens"] != solo_tokens:
            raise AssertionError(f"B={row['batch']} made other tokens than B=1: {row['tokens']} != {solo_tokens}")
        row["max_abs_wave_diff_vs_b1"] = max(
            float(np.abs(mine - theirs).max()) for mine, theirs in zip(row.pop("_audio"), solo_audio)
        )
    solo_rate = float(np.median([row["lines_per_min"] for row in rows if row["batch"] == 1]))
    summary = {
        str(batch): {
            "lines_per_min": float(np.median([row["lines_per_min"] for row in rows if row["batch"] == batch])),
            "vs_b1": float(np.median([row["lines_per_min"] for row in rows if row["batch"] == batch])) / solo_rate,
        }
        for batch in (1, *batches)
    }
    report = {
        "what": "lines per minute through CosyVoice.run_batch, full-size random weights, B=1 first and last",
        "version": args.version,
        "device": str(model.device),
        "device_name": torch.cuda.get_device_name() if model.device.type == "cuda" else os.uname().machine,
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "precision": args.precision,
        "lines": args.lines,
        "tokens_per_text_id": TOKENS_PER_TEXT_ID,
        "load_s": load_s,
        "summary": summary,
        "rows": rows,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
