"""Where the pipeline bench's LLM stage goes: prompt embeddings, prefill to the first token, per token, the tail.

    python bench/llm_stage.py --device cuda --dtype float16 --tokens 250 --rounds 3

The pipeline bench's ``llm_s`` is ``build_prompt_embeddings`` plus ``SpeechLM._decode`` of 250 forced tokens (prefill
included); ``bench/llm_sampling.py`` times tokens after the first only. This splits the stage the way the pipeline
runs it (full-size CosyVoice3 LM, random weights, the product's decoding options, the bench's 80 prompt tokens and
32 text ids), medians over rounds after a warm-up, and profiles the prefill (to the first token) and the tail (after
the last token) on CUDA: kernels, GPU-busy and wall milliseconds. ``--pipeline`` loads the whole model as the pipeline
bench does (auto precision, flow and vocoder beside the LM), splits its stage the same way, and also times the bench's
own stage (``bench_stage_s``). JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))


def main() -> None:
    import torch

    from bench.llm_sampling import _full_size_lm
    from cosyvoice_mac.bench.decode import cuda_profile
    from cosyvoice_mac.device import synchronize
    from cosyvoice_mac.models.llm import ENDOFPROMPT_ID

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--tokens", type=int, default=250)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pipeline", action="store_true", help="the pipeline bench's model, prompt and stage")
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    bench_stage = None
    if args.pipeline:  # the whole model as the pipeline bench loads it (auto precision), its prompt and text
        from cosyvoice_mac.bench import measure

        model = measure.load_model("cosyvoice3", device, "auto", False, None)
        lm = model.networks.llm
        speaker = model.prepare_prompt(measure.synthetic_prompt(), sample_rate=24000)
        speech = speaker.speech_tokens
        text_ids = torch.tensor([model.tokenizer.encode(measure.TEXT)])[:, : measure.REFERENCE_TEXT_IDS]

        def bench_stage():
            return measure._timed(
                device, lambda: list(measure.forced_token_stream(model, text_ids, speaker, args.tokens))
            )[0]
    else:
        lm = _full_size_lm(device, dtype)
        generator = torch.Generator().manual_seed(1)
        speech = torch.randint(0, lm.config.speech_token_size, (1, 80), generator=generator)
        text_ids = torch.randint(0, 1000, (1, 32), generator=generator)
        text_ids[0, -1] = ENDOFPROMPT_ID  # CosyVoice3's prompt text ends so

    def request(marks: dict) -> None:
        with torch.inference_mode():
            started = time.perf_counter()
            embeds = lm.build_prompt_embeddings(text_ids, text_ids[:, :0], speech)
            marks["embeddings_ms"] = 1e3 * (time.perf_counter() - started)
            count = 0
            for _ in lm._decode(embeds, args.tokens, args.tokens, lm.make_sampler(seed=0), None):
                count += 1
                now = time.perf_counter()
                if count == 1:
                    marks["first_token_ms"] = 1e3 * (now - started)
                last = now
            synchronize(device)
            ended = time.perf_counter()
        marks.update(
            per_token_ms=1e3 * (last - started - marks["first_token_ms"] / 1e3) / max(count - 1, 1),
            tail_ms=1e3 * (ended - last),
            total_ms=1e3 * (ended - started),
            tokens=count,
        )

    request({})  # warm-up: captures, compiles
    rounds = []
    for _ in range(args.rounds):
        marks: dict = {}
        request(marks)
        rounds.append(marks)
    report = {
        "device": str(device),
        "dtype": str(next(lm.parameters()).dtype),
        "pipeline": args.pipeline,
        "bench_stage_s": [bench_stage() for _ in range(args.rounds)] if bench_stage else None,
        "median": {key: statistics.median(r[key] for r in rounds) for key in rounds[0]},
        "rounds": rounds,
        "runner": lm.decoding.report() if hasattr(lm.decoding, "report") else None,
    }
    if device.type == "cuda":

        def to_first_token():
            with torch.inference_mode():
                embeds = lm.build_prompt_embeddings(text_ids, text_ids[:, :0], speech)
                tokens = lm._decode(embeds, args.tokens, args.tokens, lm.make_sampler(seed=0), None)
                next(tokens)
                tokens.close()

        report["prefill_profile"] = cuda_profile(device, to_first_token)
        prefill_kernels: list = []
        cuda_profile(device, to_first_token, prefill_kernels)
        by_name: dict = {}
        for event in prefill_kernels:
            entry = by_name.setdefault(event["name"][:90], [0, 0.0])
            entry[0] += 1
            entry[1] += float(event["dur"])
        report["prefill_top_kernels"] = sorted(
            ({"name": k, "count": c, "us": round(us, 1)} for k, (c, us) in by_name.items()), key=lambda e: -e["us"]
        )[:15]
    json.dump(report, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
