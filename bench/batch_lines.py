"""Lines per minute at B=1 against B=N through ``CosyVoice.run_batch``, and where each one's time goes, per stage
(issue 47). Full-size RANDOM weights.

    nice python bench/batch_lines.py [--version cosyvoice3] [--device cpu] [--batch 4] [--lines 4] [--runs 2]
                                     [--tokens-per-text-id 8] [--every-stage] [--step-batches 1,4,8]
                                     [--json bench/results/issue47_batch/X.json]

Configurations, interleaved round by round (each round starts one configuration later, so drift and other load
spread over all of them): ``B=1`` (the solo path, ``CosyVoice.run`` line after line: what long-form jobs did
before), ``B=N`` as the device's rule batches (``pipeline/batch.py`` ``batched_stages``) and, with
``--every-stage``, ``B=N`` with the LLM, the flow and the vocoder all batched (the rule GPUs get). Each
configuration's time is split into stages: the LLM (prefills and decoding), the flow, the vocoder, and the rest
(text front-end, prompt embeddings, copies), each by wall clock and by this process's CPU time (which other load on
the cores disturbs less). Before timing, the floors: the LLM step's bytes over the measured memory bandwidth, the
flow's counted FLOPs over the measured matrix rate, and from them the predicted ratio of each stage. Then the
LLM's decoding step alone at each of ``--step-batches`` (what the LLM stage would cost at a B the whole run
does not reach: the flow and the vocoder cost the same at any B where they run line by line).

Random weights would stop at random ids, so each line is held to a fixed number of speech tokens (every stop id
masked until then), ``--tokens-per-text-id`` per text id: the lines' lengths differ, the batch is ragged and lines
leave it at different steps. Every configuration's tokens are checked equal to B=1's, and its waveforms' largest
difference from B=1's is reported.
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
import torch.nn.functional as F

from cosyvoice_mac.bench.floors import BANDWIDTH_BYTES, MATMUL_DIM, flow_flops, llm_bytes_per_token
from cosyvoice_mac.bench.measure import synthetic_prompt
from cosyvoice_mac.pipeline import CosyVoice
from cosyvoice_mac.pipeline import batch as batching
from cosyvoice_mac.pipeline.probe import best_seconds, probe_clock
from cosyvoice_mac.pipeline.prompts import plan_request
from cosyvoice_mac.request import Request, Voice

WORDS = "the quick brown fox jumps over the lazy dog while a small bird sings in the old oak tree".split()
TRANSCRIPT = "A short prompt recording for the benchmark."
STAGES = ("llm", "flow", "vocoder")


def line_texts(count: int) -> list[str]:
    """``count`` sentences of 4, 6, 8 ... words (cycling), so the batch is ragged."""
    return [f"{' '.join(WORDS[: 4 + 2 * (index % 6)]).capitalize()}." for index in range(count)]


class StageMeter:
    """Wall and CPU seconds spent inside each stage's entry points (wrapped on this model only)."""

    def __init__(self, model: CosyVoice):
        self.spent: dict[str, list[float]] = {}
        flow = model.networks.flow
        model._speech_tokens = self._timed("llm", model._speech_tokens)  # the solo path's LLM, prefill included
        batching.decode_batch = self._timed("llm", batching.decode_batch)
        flow.inference = self._timed("flow", flow.inference)
        flow.inference_batch = self._timed("flow", flow.inference_batch)
        model._vocode = self._timed("vocoder", model._vocode)
        batching.vocode_batch = self._timed("vocoder", batching.vocode_batch)

    def _timed(self, stage: str, function):
        def timed(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                if torch.cuda.is_initialized():  # a stage's kernels finish inside its own time
                    torch.cuda.synchronize()
                spent = self.spent.setdefault(stage, [0.0, 0.0])
                spent[0] += time.perf_counter() - wall
                spent[1] += time.process_time() - cpu

        return timed

    def take(self) -> dict[str, list[float]]:
        spent, self.spent = self.spent, {}
        return spent


def speak(model: CosyVoice, meter: StageMeter, requests, speaker, batch: int, every_stage: bool) -> dict:
    saved = dict(batching.BATCHED_STAGES)
    if every_stage:
        batching.BATCHED_STAGES[batching.runs_on(model)] = batching.EVERY_STAGE
    stages_run = batching.batched_stages(batching.runs_on(model)) if batch > 1 else frozenset()
    meter.take()
    load_before = os.getloadavg()
    started, cpu = time.perf_counter(), time.process_time()
    try:
        results = list(model.run_batch(requests, [speaker] * len(requests), batch_size=batch))
    finally:
        batching.BATCHED_STAGES.clear()
        batching.BATCHED_STAGES.update(saved)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    failed = [str(result) for _, result in results if isinstance(result, Exception)]
    if failed:
        raise RuntimeError(f"lines failed: {failed}")
    spent = meter.take()
    stages = {stage: {"wall_s": spent.get(stage, [0, 0])[0], "cpu_s": spent.get(stage, [0, 0])[1]} for stage in STAGES}
    measured = {"wall_s": wall, "cpu_s": cpu}
    stages["rest"] = {key: total - sum(s[key] for s in stages.values()) for key, total in measured.items()}
    by_line = sorted(results, key=lambda pair: pair[0])
    return {
        "batch": batch,
        "every_stage": every_stage,
        "batched_stages": sorted(stages_run),
        "wall_s": wall,
        "cpu_s": cpu,
        "lines_per_min": 60.0 * len(requests) / wall,
        "lines_per_cpu_min": 60.0 * len(requests) / cpu,
        "stages": stages,
        "tokens": [result.speech_token_count for _, result in by_line],
        "audio_s": sum(result.duration_s for _, result in by_line),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "max_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "_audio": [result.audio for _, result in by_line],
    }


@torch.inference_mode()
def ceilings(device: torch.device, rows: int) -> dict:
    """Memory bandwidth and float32 matrix rate of this machine. On a CPU timed by this process's CPU time and
    multiplied by its threads (what both cores give when nothing else runs: a shared machine's wall clock would
    measure the other programs too); elsewhere by the wall clock, as ``bench.floors`` does."""
    clock, threads = probe_clock(device), torch.get_num_threads() if device.type == "cpu" else 1
    data = torch.ones(BANDWIDTH_BYTES // 4, device=device)
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(rows, MATMUL_DIM, generator=generator).to(device)
    w = torch.randn(2 * MATMUL_DIM, MATMUL_DIM, generator=generator).to(device)
    return {
        "memory_bandwidth": threads * BANDWIDTH_BYTES / best_seconds(device, lambda: data.sum(), 10, clock),
        "matmul": threads * 4 * rows * MATMUL_DIM**2 / best_seconds(device, lambda: F.linear(a, w), 10, clock),
        "clock": "cpu time x threads" if device.type == "cpu" else "wall",
    }


def predicted(model: CosyVoice, tokens: list[int], prompt_tokens: int, batch: int) -> dict:
    """Each stage's floor at B=1 and B=``batch`` (every stage batched) from this machine's measured ceilings."""
    device = model.device
    llm, flow = model.networks.llm, model.networks.flow
    frames = [2 * (prompt_tokens + count) for count in tokens]
    measured = ceilings(device, rows=2 * max(frames))
    bandwidth, rate = measured["memory_bandwidth"], measured["matmul"]
    step_bytes = llm_bytes_per_token(llm, prompt_tokens + max(tokens) // 2)
    row_flops = 2 * llm_bytes_per_token(llm, 0) / llm.backbone.norm.weight.element_size()  # 2 FLOPs a weight
    longest = max(frames)
    longest_flops = flow_flops(flow, longest)  # counted once; the others scaled by their frames (attention: < 8 %)
    line_flops = [longest_flops * count / longest for count in frames]
    groups = [list(range(start, min(start + batch, len(tokens)))) for start in range(0, len(tokens), batch)]
    llm_batched = 0.0
    for group in groups:  # every step reads the weights once and does each line still decoding's arithmetic
        for step in range(max(tokens[i] for i in group)):
            active = sum(tokens[i] > step for i in group)
            llm_batched += max(step_bytes / bandwidth, active * row_flops / rate)
    floors = {
        "llm": {"b1_s": sum(tokens) * max(step_bytes / bandwidth, row_flops / rate), "bn_s": llm_batched},
        "flow": {
            "b1_s": sum(line_flops) / rate,
            "bn_s": sum(len(g) * max(line_flops[i] for i in g) for g in groups) / rate,
        },
    }
    for stage in floors.values():
        stage["b1_over_bn"] = stage["b1_s"] / stage["bn_s"]
    return {
        "memory_bandwidth_gb_s": bandwidth / 1e9,
        "matmul_gflop_s": rate / 1e9,
        "ceilings_clock": measured["clock"],
        "llm_bytes_per_step": step_bytes,
        "llm_flops_per_line_step": row_flops,
        "flow_frames": frames,
        "flow_flops": line_flops,
        "floors": floors,
        "how": "LLM: steps x max(bytes a step / bandwidth, lines x 2 x weights / matmul rate); flow: counted FLOPs "
        "(all Euler steps, CFG batch 2) / matmul rate, batched lines padded to their group's longest",
    }


def step_costs(model: CosyVoice, request, speaker, batches: list[int], steps: int) -> dict:
    """The LLM's decoding step alone at each B: wall and CPU ms a step of ``decode_batch`` over B equal lines (its
    B prefills timed apart and taken off: a run of ``steps + 1`` tokens minus a run of 1), and the solo path's
    (``llm.generate``) for reference. What e2e's LLM stage would be at a B the whole run does not reach."""
    llm = model.networks.llm
    plan = plan_request(model.version, model.normalizer, request)  # the texts as the pipeline hands them on
    text = torch.tensor([model.tokenizer.encode(plan.segments[0].llm_text)])
    prompt_text = torch.tensor([model.tokenizer.encode(plan.llm_prompt_text)])
    limits = llm.length_limits

    def timed(function):
        wall, cpu = time.perf_counter(), time.process_time()
        function()
        return time.perf_counter() - wall, time.process_time() - cpu

    def run(batch: int, tokens: int):
        llm.length_limits = lambda text_ids: (tokens, tokens)
        lines = [
            llm.batch_line(text, prompt_text, speaker.speech_tokens, llm.make_sampler(seed=row)) for row in range(batch)
        ]
        return timed(lambda: batching.decode_batch(llm, lines))

    def solo(tokens: int):
        llm.length_limits = lambda text_ids: (tokens, tokens)
        return timed(lambda: list(llm.generate(text, prompt_text, speaker.speech_tokens, llm.make_sampler(seed=0))))

    costs = {}
    try:
        for name, measure in [("solo", solo), *((f"B={b}", lambda n, b=b: run(b, n)) for b in batches)]:
            prefill, whole = measure(1), measure(steps + 1)
            costs[name] = {
                "wall_ms_per_step": 1000 * (whole[0] - prefill[0]) / steps,
                "cpu_ms_per_step": 1000 * (whole[1] - prefill[1]) / steps,
                "prefill_wall_s": prefill[0],
                "load_average": os.getloadavg(),
            }
            print(json.dumps({"step": name, **costs[name]}), flush=True)
    finally:
        llm.length_limits = limits
    return costs


def summarise(rows: list[dict], configs: list[tuple[str, int, bool]]) -> dict:
    def median(name, pick):
        return float(np.median([pick(row) for row in rows if row["config"] == name]))

    solo = configs[0][0]
    summary = {}
    for name, _, _ in configs:
        entry = {key: median(name, lambda row, key=key: row[key]) for key in ("wall_s", "cpu_s", "lines_per_min")}
        entry["stages"] = {
            stage: {key: median(name, lambda row, s=stage, k=key: row["stages"][s][k]) for key in ("wall_s", "cpu_s")}
            for stage in (*STAGES, "rest")
        }
        summary[name] = entry
    for name, entry in summary.items():
        entry["vs_b1_by_wall"] = summary[solo]["wall_s"] / entry["wall_s"]
        entry["vs_b1_by_cpu"] = summary[solo]["cpu_s"] / entry["cpu_s"]
        for stage, spent in entry["stages"].items():
            solo_stage = summary[solo]["stages"][stage]
            spent["b1_over_this_wall"] = solo_stage["wall_s"] / max(spent["wall_s"], 1e-9)
            spent["b1_over_this_cpu"] = solo_stage["cpu_s"] / max(spent["cpu_s"], 1e-9)
    return summary


def planned_tokens(model: CosyVoice, requests, per_id: int) -> list[int]:
    """The speech tokens each (one-sentence) line is held to: ``per_id`` a text id of its first sentence."""
    return [
        per_id * len(model.tokenizer.encode(plan_request(model.version, model.normalizer, r).segments[0].llm_text))
        for r in requests
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="cosyvoice3", choices=("cosyvoice3", "cosyvoice2"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="float32", help="as CosyVoice.random_full_size's precision")
    parser.add_argument("--batch", type=int, default=4, help="B to compare with B=1")
    parser.add_argument("--lines", type=int, default=4)
    parser.add_argument("--runs", type=int, default=2, help="rounds over every configuration")
    parser.add_argument("--tokens-per-text-id", type=int, default=8, help="8: lines of ~0.32 s of speech a text id")
    parser.add_argument("--every-stage", action="store_true", help="also B=N with the flow and vocoder batched")
    parser.add_argument("--step-batches", default="1,4,8", help="B values of the LLM step timed alone ('' for none)")
    parser.add_argument("--step-tokens", type=int, default=16, help="steps timed at each of those B")
    steps = "the flow's Euler steps (default: the model's 10); each is the same work, so a busy machine may run fewer"
    parser.add_argument("--flow-steps", type=int, help=steps)
    parser.add_argument("--note", default="", help="what else the JSON should say (the machine, its load)")
    parser.add_argument("--json", type=Path, help="written after every row, so a run stopped early keeps its rows")
    tiny = "a model folder instead of full-size random weights (a tiny one checks the bench itself)"
    parser.add_argument("--model-dir", type=Path, help=tiny)
    args = parser.parse_args(argv)

    loaded = time.perf_counter()
    if args.model_dir is not None:
        model = CosyVoice.from_pretrained(args.model_dir, device=args.device)
    else:
        model = CosyVoice.random_full_size(args.version, device=args.device, precision=args.precision)
    load_s = time.perf_counter() - loaded
    if args.flow_steps:
        model.networks.flow.decoder.config.n_timesteps = args.flow_steps
    per_id = args.tokens_per_text_id
    model.networks.llm.length_limits = lambda text_ids: (per_id * text_ids, per_id * text_ids)
    speaker = model.prepare_prompt(synthetic_prompt(), sample_rate=24000, transcript=TRANSCRIPT)
    voice = Voice(prepared=speaker.audio_hash, transcript=TRANSCRIPT)
    requests = [Request.build(text, voice, seed=index) for index, text in enumerate(line_texts(args.lines))]
    meter = StageMeter(model)
    speak(model, meter, [Request.build("Hello.", voice, seed=0)], speaker, 1, False)  # warm-up: first calls' costs

    prompt_tokens = int(speaker.speech_tokens.shape[1])
    configs = [("B=1", 1, False), (f"B={args.batch}", args.batch, False)]
    if args.every_stage:
        configs.append((f"B={args.batch} every stage", args.batch, True))
    rows: list[dict] = []
    report = {
        "what": "lines per minute through CosyVoice.run_batch at B=1 against B=N, per stage, full-size random weights,"
        " configurations interleaved round by round (medians over rounds)",
        "note": args.note,
        "version": args.version,
        "device": str(model.device),
        "device_name": torch.cuda.get_device_name() if model.device.type == "cuda" else os.uname().machine,
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "omp": {key: os.environ.get(key) for key in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")},
        "precision": args.precision,
        "lines": args.lines,
        "tokens_per_text_id": per_id,
        "flow_steps": model.networks.flow.decoder.config.n_timesteps,
        "prompt_tokens": prompt_tokens,
        "load_s": load_s,
        "prediction": predicted(model, planned_tokens(model, requests, per_id), prompt_tokens, args.batch),
        "rows": rows,
    }
    print(json.dumps({"prediction": report["prediction"]}), flush=True)

    def write() -> None:
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=2, default=str))

    step_batches = [int(value) for value in args.step_batches.split(",") if value.strip()]
    llm_step = step_costs(model, requests[-1], speaker, step_batches, args.step_tokens) if step_batches else None
    report["llm_step"] = llm_step
    write()
    audio: list[list[np.ndarray]] = []
    for run in range(args.runs):
        for offset in range(len(configs)):
            name, batch, every_stage = configs[(run + offset) % len(configs)]
            row = speak(model, meter, requests, speaker, batch, every_stage)
            row["config"], row["round"] = name, run
            audio.append(row.pop("_audio"))
            rows.append(row)
            print(json.dumps(row), flush=True)
            solo = next(index for index, each in enumerate(rows) if each["batch"] == 1)
            for each, waves in zip(rows, audio):
                if each["tokens"] != rows[solo]["tokens"]:
                    raise AssertionError(f"{each['config']} made other tokens than B=1: {each['tokens']}")
                diff = max(float(np.abs(mine - theirs).max()) for mine, theirs in zip(waves, audio[solo]))
                each["max_abs_wave_diff_vs_b1"] = diff
            done = [config for config in configs if any(r["config"] == config[0] for r in rows)]
            report["summary"] = summarise(rows, done)
            write()
    print(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
