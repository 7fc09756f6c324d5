"""First streamed audio with CosyVoice3's streamed vocoder calls eager and as CUDA graphs, in one process.

    python bench/vocoder_graphs.py --rounds 8

Full-size random weights, auto precision on CUDA, the pipeline bench's request (3 s prompt, 32 text ids, 250
forced tokens). Each round times, for the vocoder graphs off then on (``COSYVOICE_VOCODER_GRAPHS``, read per
call), the first audio of a voice used before and of a new one, and the wall milliseconds of each first-chunk
vocoder call (to its output on the device). Medians and every round as JSON on stdout.
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
from cosyvoice_mac.models.vocoder.graphs import VOCODER_GRAPHS_ENV  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=250)
    parser.add_argument("--device", default="cuda")  # another device runs both modes eagerly (a smoke test)
    args = parser.parse_args()
    device = torch.device(args.device)
    model = measure.load_model("cosyvoice3", device, "auto", False, None)
    speaker = model.prepare_prompt(measure.synthetic_prompt(), sample_rate=24000)
    text_ids = torch.tensor([model.tokenizer.encode(measure.TEXT)])[:, : measure.REFERENCE_TEXT_IDS]
    hift = model.networks.hift
    inference, calls = hift.inference, []

    def timed_inference(*a, **k):
        started = time.perf_counter()
        result = inference(*a, **k)
        synchronize(device)
        calls.append(1e3 * (time.perf_counter() - started))
        return result

    hift.inference = timed_inference

    def first_audio(new_voice: bool) -> tuple[float, float]:
        calls.clear()
        seconds = measure.time_to_first_audio(model, text_ids, speaker, args.tokens, new_voice=new_voice)
        return seconds, calls[0]

    modes = {"eager": "0", "graphs": "1"}
    for value in modes.values():  # warm-up: captures (the graphs: the second sighting of the first chunk)
        os.environ[VOCODER_GRAPHS_ENV] = value
        for _ in range(2):
            first_audio(False)
        first_audio(True)
    rounds = {mode: [] for mode in modes}
    for _ in range(args.rounds):
        for mode, value in modes.items():
            os.environ[VOCODER_GRAPHS_ENV] = value
            known, known_ms = first_audio(False)
            new, new_ms = first_audio(True)
            rounds[mode].append(
                {"first_audio_s": known, "new_voice_s": new, "vocoder_ms": known_ms, "new_vocoder_ms": new_ms}
            )
    report = {
        "median": {mode: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for mode, rows in rounds.items()},
        "graphs": hift.streamed_graphs.report(),
        "rounds": rounds,
    }
    json.dump(report, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
