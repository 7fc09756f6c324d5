"""Where the time to first streamed audio goes: LLM tokens, the flow's first chunk, the vocoder.

    python bench/first_audio.py --device cuda --dtype float32

Full-size random weights, the pipeline bench's request (3 s prompt, 32 text ids, a voice used
before). The flow's and the vocoder's calls are timed (synchronised) while the first chunk is made;
the LLM's share is the time until the first chunk's tokens exist. Medians of ``--runs``; JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosyvoice_mac import bench  # noqa: E402
from cosyvoice_mac.bench_decode import synchronize  # noqa: E402


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


@torch.inference_mode()
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--version", default="cosyvoice3")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    device = torch.device(args.device)
    model = bench.load_model(args.version, device, args.dtype, False, None)
    prompt = bench.synthetic_prompt()
    bench.run_once(model, 250, prompt, stream=True)  # warm-up: kernels, graphs, the voice's flow prefix
    speaker = model.prepare_prompt(prompt, sample_rate=24000)
    text_ids = torch.tensor([model.tokenizer.encode(bench.TEXT)])[:, : bench.REFERENCE_TEXT_IDS]
    flow_calls: list[float] = []
    vocoder_calls: list[float] = []
    _timed_calls(model.networks.flow, "inference", device, flow_calls)
    _timed_calls(model.networks.hift, "inference", device, vocoder_calls)
    runs = []
    for _ in range(args.runs):
        flow_calls.clear()
        vocoder_calls.clear()
        first = bench.time_to_first_audio(model, text_ids, speaker, 250)
        flow, vocoder = sum(flow_calls), sum(vocoder_calls)
        runs.append(
            {
                "first_audio_s": first,
                "flow_s": flow,
                "vocoder_s": vocoder,
                "llm_and_rest_s": first - flow - vocoder,
                "flow_calls": len(flow_calls),
            }
        )
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    print(json.dumps({"device": str(device), "dtype": args.dtype, "median": median, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
