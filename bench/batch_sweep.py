"""Aggregate speed, per-line RTF, first-line latency and device memory at B = 1, 4, 8, 16, 32 through
``CosyVoice.run_batch`` (issue 47's H200 targets). Full-size RANDOM weights, the same lines at every B.

    python bench/batch_sweep.py --device cuda [--version cosyvoice3] [--lines 32] [--batches 1,4,8,16,32]
                                [--runs 2] [--precision auto] [--json bench/results/issue47_batch/X.json]

Every B speaks the same ragged lines (4 to 14 words, each held to ``--tokens-per-text-id`` speech tokens a text
id, so lines leave the batch at different steps) as ``--lines`` requests with the seeds 0.. (its rounds
interleaved: each round starts one B later). Per B: the wall time of the whole set, its audio seconds over it
(aggregate audio per second), each line's RTF (the time from the start to its last sentence over its audio; a
line's wait for its group's slowest line included, as a user of a batch waits), the first line's latency (the
start to the first result), and the device's peak memory (CUDA: ``max_memory_allocated``, MLX: ``mx.get_peak_memory``,
each from a reset before the B). Random weights are held to a fixed number of tokens a line, so the counts always
agree: each B's waveforms against B=1's (``max_abs_wave_diff_vs_b1``) show whether its ids were the same (other ids
give another waveform; the same ids differ by the batched flow's and vocoder's rounding only). The LLM's step alone
at each B (``batch_lines.step_costs``) says what the decoding costs, apart from the flow and vocoder.
``--engine mlx`` runs the MLX engine (on its CPU backend off a Mac).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from batch_lines import TRANSCRIPT, StageMeter, line_texts, step_costs  # noqa: E402  (the bench folder's own helpers)

from cosyvoice_mac.bench.measure import synthetic_prompt  # noqa: E402
from cosyvoice_mac.pipeline import CosyVoice  # noqa: E402
from cosyvoice_mac.request import Request, Voice  # noqa: E402


def _synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _mlx(model: CosyVoice):
    """MLX's module when ``model`` runs on the MLX engine, else None."""
    if model.engine.engine != "mlx":
        return None
    import mlx.core as mx

    return mx


def _reset_peak(model: CosyVoice) -> None:
    if model.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(model.device)
    elif (mx := _mlx(model)) is not None:
        mx.reset_peak_memory()


def _peak_gib(model: CosyVoice) -> float | None:
    if model.device.type == "cuda":
        return torch.cuda.max_memory_allocated(model.device) / 2**30
    if (mx := _mlx(model)) is not None:
        return mx.get_peak_memory() / 2**30
    return None


def sweep_one(model: CosyVoice, requests, speaker, batch: int, meter: StageMeter | None = None) -> dict:
    """One pass of every line at ``batch``: the timings above, each line's token count and its waveform, and (with
    ``meter``) the wall seconds in each stage (on CUDA each stage synchronised at its end, so it holds its kernels)."""
    device = model.device
    _synchronise(device)
    _reset_peak(model)
    if meter is not None:
        meter.take()
    started = time.perf_counter()
    first, finished, audio_s, tokens, waves = None, {}, {}, {}, {}
    for index, result in model.run_batch(requests, [speaker] * len(requests), batch_size=batch):
        if isinstance(result, Exception):
            raise RuntimeError(f"line {index} failed: {result}")
        now = time.perf_counter() - started
        first = now if first is None else first
        finished[index] = now
        audio_s[index] = audio_s.get(index, 0.0) + result.duration_s
        tokens[index] = tokens.get(index, 0) + result.speech_token_count
        waves.setdefault(index, []).append(result.audio)
    _synchronise(device)
    wall = time.perf_counter() - started
    rtfs = [finished[index] / audio_s[index] for index in sorted(finished)]
    return {
        "batch": batch,
        "wall_s": wall,
        "audio_s": sum(audio_s.values()),
        "audio_s_per_s": sum(audio_s.values()) / wall,
        "lines_per_min": 60.0 * len(requests) / wall,
        "first_line_s": first,
        "line_rtf_median": float(np.median(rtfs)),
        "line_rtf_max": float(max(rtfs)),
        "peak_device_gib": _peak_gib(model),
        "stages_wall_s": {stage: spent[0] for stage, spent in meter.take().items()} if meter is not None else None,
        "tokens": [tokens[index] for index in sorted(tokens)],
        "_audio": [np.concatenate(waves[index]) for index in sorted(waves)],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="cosyvoice3", choices=("cosyvoice3", "cosyvoice2"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--engine", default="torch", choices=("torch", "mlx"), help="mlx: its CPU backend off a Mac")
    parser.add_argument("--precision", default="auto", help="as CosyVoice.random_full_size's precision")
    parser.add_argument("--lines", type=int, default=32)
    parser.add_argument("--batches", default="1,4,8,16,32")
    parser.add_argument("--runs", type=int, default=2, help="rounds over every B")
    parser.add_argument("--tokens-per-text-id", type=int, default=8)
    parser.add_argument("--step-tokens", type=int, default=16, help="LLM steps timed alone at each B (0: none)")
    parser.add_argument("--note", default="")
    parser.add_argument("--json", type=Path, help="written after every row")
    parser.add_argument("--model-dir", type=Path, help="a model folder instead of full-size random weights")
    args = parser.parse_args(argv)
    batches = [int(value) for value in args.batches.split(",") if value.strip()]

    loaded = time.perf_counter()
    if args.model_dir is not None:
        model = CosyVoice.from_pretrained(args.model_dir, device=args.device, engine=args.engine)
    else:
        model = CosyVoice.random_full_size(
            args.version, device=args.device, precision=args.precision, engine=args.engine
        )
    load_s = time.perf_counter() - loaded
    per_id = args.tokens_per_text_id
    model.networks.llm.length_limits = lambda text_ids: (per_id * text_ids, per_id * text_ids)
    speaker = model.prepare_prompt(synthetic_prompt(), sample_rate=24000, transcript=TRANSCRIPT)
    voice = Voice(prepared=speaker.audio_hash, transcript=TRANSCRIPT)
    requests = [Request.build(text, voice, seed=index) for index, text in enumerate(line_texts(args.lines))]
    for batch in sorted(set(batches)):  # warm-up: each B's first call (CUDA graphs, allocator) off the clock
        sweep_one(model, requests[: max(batch, 1)], speaker, batch)
    device = model.device
    report = {
        "what": "run_batch over the same lines at each B, rounds interleaved: aggregate audio seconds per second, "
        "per-line RTF (start to the line's end over its audio), first-line latency, peak device memory",
        "note": args.note,
        "version": args.version,
        "engine": args.engine,
        "device": str(device),
        "device_name": torch.cuda.get_device_name() if device.type == "cuda" else os.uname().machine,
        "torch": torch.__version__,
        "precision": args.precision,
        "lines": args.lines,
        "tokens_per_text_id": per_id,
        "load_s": load_s,
        "precision_plan": model.precision.as_dict(),
        "rows": [],
    }

    def write() -> None:
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=2, default=str))

    if args.step_tokens:
        report["llm_step"] = step_costs(model, requests[-1], speaker, batches, args.step_tokens)
        write()
    solo_audio = None
    meter = StageMeter(model)  # after the step table: it wraps decode_batch, which step_costs times alone
    for run in range(args.runs):
        for offset in range(len(batches)):
            batch = batches[(run + offset) % len(batches)]
            row = sweep_one(model, requests, speaker, batch, meter)
            row["round"] = run
            audio = row.pop("_audio")
            if batch == 1 and solo_audio is None:
                solo_audio = audio
            if solo_audio is not None:  # the counts are held fixed, so the waveforms show whether the ids were the same
                row["max_abs_wave_diff_vs_b1"] = max(
                    float(np.abs(mine - theirs).max()) if mine.shape == theirs.shape else float("inf")
                    for mine, theirs in zip(audio, solo_audio)
                )
            report["rows"].append(row)
            print(json.dumps({key: value for key, value in row.items() if key != "tokens"}), flush=True)
            write()
    solo = [row for row in report["rows"] if row["batch"] == 1]
    mismatched = [row["batch"] for row in report["rows"] if solo and row["tokens"] != solo[0]["tokens"]]
    summary = {}
    for batch in batches:
        rows = [row for row in report["rows"] if row["batch"] == batch]
        summary[f"B={batch}"] = {
            key: float(np.median([row[key] for row in rows]))
            for key in ("wall_s", "audio_s_per_s", "lines_per_min", "first_line_s", "line_rtf_median")
        }
        summary[f"B={batch}"]["peak_device_gib"] = max((row["peak_device_gib"] or 0.0) for row in rows)
    if solo:
        base = summary["B=1"]["audio_s_per_s"]
        for entry in summary.values():
            entry["vs_b1"] = entry["audio_s_per_s"] / base
    report["summary"] = summary
    report["tokens_equal_to_b1"] = not mismatched
    diffs = [row["max_abs_wave_diff_vs_b1"] for row in report["rows"] if "max_abs_wave_diff_vs_b1" in row]
    report["max_abs_wave_diff_vs_b1"] = max(diffs) if diffs else None
    report["tokens_mismatched_at"] = sorted(set(mismatched))
    write()
    print(json.dumps({"summary": summary, "tokens_equal_to_b1": not mismatched}, indent=2))
    return 0 if not mismatched else 1


if __name__ == "__main__":
    sys.exit(main())
