"""Where the time to first streamed audio goes (LLM tokens, the flow's first chunk, the vocoder), with
the flow's first-chunk CUDA graph off and on, measured in one process.

    python bench/first_audio.py --device cuda --dtype float32

Full-size random weights, the pipeline bench's request (3 s prompt, 32 text ids). Each round
runs both modes (flow graphs off, on; the LLM keeps its graphs): a new voice first (its flow
prefix built, and on, its first chunk captured in place), then ``--runs`` requests of the voice
used before. The flow's and the vocoder's calls are timed (synchronised) while the first chunk is
made; the LLM's share is the rest. Medians; JSON on stdout.
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
from cosyvoice_mac.device import synchronize  # noqa: E402

MODES = {"eager": "0", "graphs": "1"}  # COSYVOICE_CUDA_GRAPHS, read per call by the flow


def _timed_calls(owner, name: str, device: torch.device, log: list[float]) -> None:
    original = getattr(owner, name)

    def timed(*args, **kwargs):
        synchronize(device)
        started = time.perf_counter()
        value = original(*args, **kwargs)
        synchronize(device)
        log.append(time.perf_counter() - started)
        return value

    setattr(owner, name, timed)


def _median(runs: list[dict]) -> dict:
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


@torch.inference_mode()
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--version", default="cosyvoice3")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    device = torch.device(args.device)
    model = measure.load_model(args.version, device, args.dtype, False, None)
    prompt = measure.synthetic_prompt()
    measure.run_once(model, 250, prompt, stream=True)  # warm-up: kernels, LLM graphs, a flow prefix
    speaker = model.prepare_prompt(prompt, sample_rate=24000)
    text_ids = torch.tensor([model.tokenizer.encode(measure.TEXT)])[:, : measure.REFERENCE_TEXT_IDS]
    flow_calls: list[float] = []
    vocoder_calls: list[float] = []
    _timed_calls(model.networks.flow, "inference", device, flow_calls)
    _timed_calls(model.networks.hift, "inference", device, vocoder_calls)

    def first_audio(new_voice: bool) -> dict:
        flow_calls.clear()
        vocoder_calls.clear()
        first = measure.time_to_first_audio(model, text_ids, speaker, 250, new_voice=new_voice)
        flow, vocoder = flow_calls[-1], sum(vocoder_calls)  # a new voice's prefix build is not a flow call
        return {"first_audio_s": first, "flow_s": flow, "vocoder_s": vocoder, "llm_and_rest_s": first - flow - vocoder}

    modes: dict[str, dict[str, list]] = {mode: {"new_voice": [], "used_before": []} for mode in MODES}
    for _ in range(args.rounds):
        for mode, flag in MODES.items():
            os.environ["COSYVOICE_CUDA_GRAPHS"] = flag
            modes[mode]["new_voice"].append(first_audio(new_voice=True))
            modes[mode]["used_before"] += [first_audio(new_voice=False) for _ in range(args.runs)]
    prefix = next(iter(model.flow_prefixes._entries.values()), None)
    report = {
        "device": str(device),
        "dtype": args.dtype,
        "median": {mode: {kind: _median(runs) for kind, runs in kinds.items()} for mode, kinds in modes.items()},
        "flow_graph": None
        if prefix is None or prefix.graphs is None  # no prefix, or no CUDA graph of its own
        else {
            "captures": prefix.graphs.captures,
            "capture_s": prefix.graphs.capture_seconds,
            "error": prefix.graphs.error,
        },
        "runs": modes,
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
