"""First streamed audio with a setting off and on, interleaved in one process (CUDA graphs of one part, say).

    python bench/first_audio_toggle.py --env COSYVOICE_VOCODER_GRAPHS --rounds 10
    python bench/first_audio_toggle.py --env COSYVOICE_PREFILL_GRAPHS --rounds 10  # proposal (bench/README.md)

Full-size random weights, CosyVoice3, auto precision, the pipeline bench's request (3 s prompt, 32 text ids, 250
forced tokens). Each round times, with ``--env`` set to 0 then 1 (the parts read it per call), the first audio of
a voice used before and of a new one, and the wall milliseconds of each first-chunk vocoder call (to its output on
the device). Medians, the vocoder's and the LM runner's graph reports and every round as JSON on stdout.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True, help="the setting to turn off (0) and on (1)")
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

    modes = {"off": "0", "on": "1"}
    for value in modes.values():  # warm-up: captures (the vocoder's: the second sighting of the first chunk)
        os.environ[args.env] = value
        for _ in range(2):
            first_audio(False)
        first_audio(True)
    rounds = {mode: [] for mode in modes}
    for _ in range(args.rounds):
        for mode, value in modes.items():
            os.environ[args.env] = value
            known, known_ms = first_audio(False)
            new, new_ms = first_audio(True)
            rounds[mode].append(
                {"first_audio_s": known, "new_voice_s": new, "vocoder_ms": known_ms, "new_vocoder_ms": new_ms}
            )
    report = {
        "median": {mode: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for mode, rows in rounds.items()},
        "env": args.env,
        "vocoder_graphs": None if hift.streamed_graphs is None else hift.streamed_graphs.report(),
        "llm_runner": model.networks.llm.decoding.report(),
        "rounds": rounds,
    }
    json.dump(report, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
