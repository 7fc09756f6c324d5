"""Several new voices prepared one call each (today's path) against all of them in one call (``encode_many``).

    python bench/prompt_batch.py [--voices 4] [--rounds 3] [--low-memory both] [--version cosyvoice3]

The prompt encoder runs random-weight ONNX frontends of the released graphs' structure (``--frontends faithful``,
the default) or size-only stand-ins (``stand-in``), as ``onnx_providers.py`` keeps them under
``<user cache>/bench/`` (``--folder`` takes the real files), on the CPU provider, through
the app's own classes: ``OnDemand`` sessions (loaded per call in low-memory mode, kept otherwise), the
``PromptEncoder``. Each round, for each mode, prepares ``--voices`` different synthetic prompts (3-6 s) from
a fresh encoder: ``one_by_one`` calls ``encode`` per prompt (what a long job with N voices new to the model
did: one task per voice at its first line), ``one_call`` calls ``encode_many`` once. Modes alternate within
a round. Reported per mode: seconds (median and all), session loads of each frontend, and whether the
features equal one another's. The stand-ins' compute is not the real graphs': with them the loads are the real
cost (reading and optimising a 969 MB graph), the calls are not. JSON on stdout.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package, not an installed one

from bench.onnx_providers import CAMPPLUS, frontends_folder, synthetic_prompt  # noqa: E402
from cosyvoice_mac.bench.machine import describe_machine  # noqa: E402
from cosyvoice_mac.frontend.speaker import SpeakerEncoder  # noqa: E402
from cosyvoice_mac.frontend.speech_tokenizer import SpeechTokenizer  # noqa: E402
from cosyvoice_mac.pipeline.fullsize import official_config  # noqa: E402
from cosyvoice_mac.pipeline.loading import OnDemand  # noqa: E402
from cosyvoice_mac.pipeline.model_dir import SPEECH_TOKENIZER_FILES  # noqa: E402
from cosyvoice_mac.pipeline.speaker import PromptEncoder  # noqa: E402
from cosyvoice_mac.pipeline.types import PromptAudio  # noqa: E402

MODES = ("one_by_one", "one_call")


def make_encoder(folder: Path, version: str, low_memory: bool) -> PromptEncoder:
    """The encoder the pipeline builds (``pipeline.constructors``), on the CPU provider."""
    vocab = int(official_config(version)["llm"]["speech_token_size"])
    tokenizer = OnDemand(
        lambda: SpeechTokenizer(folder / SPEECH_TOKENIZER_FILES[version], vocab_size=vocab, map_weights=low_memory),
        keep_loaded=not low_memory,
    )
    speaker = OnDemand(lambda: SpeakerEncoder(folder / CAMPPLUS, map_weights=low_memory), keep_loaded=not low_memory)
    return PromptEncoder(tokenizer, speaker, fmax=None, model_id="bench")


def run_mode(mode: str, encoder: PromptEncoder, prompts: list[PromptAudio]) -> tuple[float, list]:
    started = time.perf_counter()
    if mode == "one_by_one":
        made = [encoder.encode(p.audio, sample_rate=p.sample_rate) for p in prompts]
    else:
        made = encoder.encode_many(prompts)
    return time.perf_counter() - started, made


def same_features(a: list, b: list) -> bool:
    return all(
        torch.equal(x.speech_tokens, y.speech_tokens) and torch.equal(x.embedding, y.embedding)
        for x, y in zip(a, b, strict=True)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--voices", type=int, default=4, help="new voices prepared per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--low-memory", choices=("on", "off", "both"), default="both")
    parser.add_argument("--version", default="cosyvoice3", choices=sorted(SPEECH_TOKENIZER_FILES))
    parser.add_argument("--folder", type=Path, help="a folder with the ONNX files (default: --frontends's, cached)")
    parser.add_argument("--frontends", choices=("faithful", "stand-in"), default="faithful")
    args = parser.parse_args()
    host = {"chip": describe_machine().chip, "cores": os.cpu_count()}
    report: dict = {"voices": args.voices, "rounds": args.rounds, "host": host}
    folder = args.folder or frontends_folder(args.version, args.frontends, report)
    prompts = [
        PromptAudio(synthetic_prompt(3.0 + (index % 4), seed=index)[0].numpy(), 16000) for index in range(args.voices)
    ]
    settings = {"on": [True], "off": [False], "both": [True, False]}[args.low_memory]
    for low_memory in settings:
        rows: dict = {mode: {"seconds": [], "tokenizer_loads": [], "speaker_loads": []} for mode in MODES}
        outputs: dict = {}
        for round_index in range(args.rounds):
            order = MODES if round_index % 2 == 0 else MODES[::-1]
            for mode in order:
                encoder = make_encoder(folder, args.version, low_memory)
                seconds, outputs[mode] = run_mode(mode, encoder, prompts)
                rows[mode]["seconds"].append(round(seconds, 4))
                rows[mode]["tokenizer_loads"].append(encoder.speech_tokenizer.loads)
                rows[mode]["speaker_loads"].append(encoder.speaker_encoder.loads)
        for row in rows.values():
            row["median_s"] = statistics.median(row["seconds"])
        rows["one_call_over_one_by_one"] = round(rows["one_call"]["median_s"] / rows["one_by_one"]["median_s"], 3)
        rows["same_features"] = same_features(outputs["one_by_one"], outputs["one_call"])
        report["low_memory" if low_memory else "resident"] = rows
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
