"""Where a NEW voice's first streamed audio goes, today's path against this tree's, in one process.

    python bench/new_voice.py --device cpu --dtype auto --rounds 2

Full-size random weights, the pipeline bench's request (3 s prompt, 32 text ids). Each round, for each
mode, times the prompt's features (speech tokens, speaker vector, prompt mel: one after the other or
side by side), the first audio of a voice used before, and of a new one (its flow prefix built first);
``new_voice_with_frontends_s`` is a new voice's whole wait (its features, then its first audio) and
``new_with_frontends_over_seen`` that against a known voice's (cached features). The prompt's encoders are
random-weight graphs of the released speech tokenizer's and CAM++'s structure (``--frontends faithful``, the
default: :mod:`cosyvoice_mac.bench.faithful_frontends`, built once per machine) or stand-ins of microseconds.
Modes: ``before`` = the LLM decodes on past the first chunk's tokens on a CPU and the frontends run one
after the other (the tree before issue 29); ``after`` = this tree's defaults; ``built`` = this tree's defaults
but a new voice's prefix built before its first chunk instead of recorded by it (off CUDA).
``--engine mlx`` runs the MLX engine (a Mac's default; MLX on the CPU elsewhere).
On CUDA ``after`` also builds a new voice's prefix and first chunk from the flow's shared graphs
(``COSYVOICE_FLOW_SHARED_GRAPHS``). Medians and every run as JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosyvoice_mac.bench import measure  # noqa: E402
from cosyvoice_mac.pipeline import streaming  # noqa: E402

HELD = streaming.HOLD_LLM_FOR_FIRST_CHUNK
RECORDS = streaming.StreamingParts.records_new_prefixes
MODES = ("before", "after", "built")


def set_mode(model, mode: str) -> None:
    """``before``: today's behaviour (no CPU hold, frontends in a row); ``after``: this tree's."""
    streaming.HOLD_LLM_FOR_FIRST_CHUNK = ("cuda",) if mode == "before" else HELD
    encoder = model.prompt_encoder
    keep = mode != "before"
    type(encoder).concurrent = property(lambda self, keep=keep: keep)  # the bench's switch, this process only
    os.environ["COSYVOICE_FLOW_SHARED_GRAPHS"] = "0" if mode == "before" else "1"
    built = mode in ("before", "built")
    streaming.StreamingParts.records_new_prefixes = (lambda self, plan: False) if built else RECORDS


def one_round(model, prompt, text_ids) -> dict:
    started = time.perf_counter()
    speaker = model.prepare_prompt(prompt, sample_rate=24000)
    row = {"frontend_s": time.perf_counter() - started, **model.prompt_encoder.last_timings}
    for name, new_voice in (("first_audio", False), ("first_audio_new_voice", True), ("first_audio_seen_again", False)):
        cpu = time.process_time()  # a busy shared machine disturbs wall time far more than this process's CPU time
        row[f"{name}_s"] = measure.time_to_first_audio(model, text_ids, speaker, 250, new_voice=new_voice)
        row[f"{name}_cpu_s"] = time.process_time() - cpu
    row["new_over_seen"] = row["first_audio_new_voice_s"] / row["first_audio_s"]
    row["new_over_seen_cpu"] = row["first_audio_new_voice_cpu_s"] / row["first_audio_cpu_s"]
    # What a new voice's request waits for: its prompt's features, then its first audio (prefix built on the way);
    # a known voice's features are cached, so it waits for its first audio alone.
    row["new_voice_with_frontends_s"] = row["frontend_s"] + row["first_audio_new_voice_s"]
    row["new_with_frontends_over_seen"] = row["new_voice_with_frontends_s"] / row["first_audio_s"]
    row["load_average"] = os.getloadavg()[0]
    return row


@torch.inference_mode()
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--version", default="cosyvoice3")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--modes", default="before,after")
    parser.add_argument("--engine", default="torch", choices=("torch", "mlx"))
    parser.add_argument(
        "--frontends",
        default=measure.FAITHFUL,
        choices=(measure.FAITHFUL, measure.STAND_IN),
        help="the prompt's encoders: graphs of the released structures (their real cost) or microsecond stand-ins",
    )
    args = parser.parse_args()
    modes = args.modes.split(",")
    if unknown := [mode for mode in modes if mode not in MODES]:
        parser.error(f"--modes: {', '.join(unknown)} unknown; use one or more of {', '.join(MODES)}")
    device = torch.device(args.device)
    model = measure.load_model(
        args.version, device, args.dtype, False, None, engine=args.engine, frontends=args.frontends
    )
    prompt = measure.synthetic_prompt()
    measure.run_once(model, 25, prompt, stream=True)  # warm-up: kernels, graphs, a prefix
    text_ids = torch.tensor([model.tokenizer.encode(measure.TEXT)])[:, : measure.REFERENCE_TEXT_IDS]
    runs: dict[str, list[dict]] = {mode: [] for mode in modes}
    for _ in range(args.rounds):  # interleaved, so the machine's load falls on both alike
        for mode in modes:
            set_mode(model, mode)
            runs[mode].append(one_round(model, prompt, text_ids))
            print(mode, json.dumps({k: round(v, 3) for k, v in runs[mode][-1].items()}), file=sys.stderr, flush=True)
    median = {mode: {key: statistics.median(r[key] for r in rows) for key in rows[0]} for mode, rows in runs.items()}
    report = {
        "device": str(device),
        "engine": args.engine,
        "dtype": args.dtype,
        "precision": model.precision.as_dict(),
        "frontends": measure.frontends_record(model, None),
        "prompt_tokens": model.prepare_prompt(prompt, sample_rate=24000).speech_tokens.shape[1],
        "median": median,
        "runs": runs,
        "torch_threads": torch.get_num_threads(),
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
