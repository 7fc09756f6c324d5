"""Tokens/s of the MLX LLM's decoding loop against the shared PyTorch-model loop it replaced, in one run.

    python bench/mlx_decode_loop.py [--tokens 64] [--rounds 3] [--small]

The full-size CosyVoice3 LLM with seeded random weights (``--small``: a 128-wide one) decodes the same
request with the same seed through both loops, alternately (``rounds`` times each, so load on a shared
machine falls on both), every stop id masked so each run makes exactly ``tokens`` tokens. Prints JSON:
tokens/s of each loop (median), their ratio, and whether the tokens were identical.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx  # noqa: E402
import torch  # noqa: E402

from cosyvoice_mac.mlx.networks import randomize  # noqa: E402
from cosyvoice_mac.mlx.speech_lm import MlxSpeechLM  # noqa: E402
from cosyvoice_mac.models.llm import Qwen2Config, SpeechLM, SpeechLMConfig  # noqa: E402
from cosyvoice_mac.models.llm.speech_lm import ENDOFPROMPT_ID  # noqa: E402
from cosyvoice_mac.pipeline.fullsize import official_config  # noqa: E402
from cosyvoice_mac.pipeline.loading import qwen_config_for  # noqa: E402
from cosyvoice_mac.versions import COSYVOICE3  # noqa: E402

SMALL = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    rms_norm_eps=1e-6,
    rope_theta=1e6,
    vocab_size=151936,
    max_position_embeddings=4096,
)


def build(small: bool) -> MlxSpeechLM:
    if small:
        config = SpeechLMConfig(spec=COSYVOICE3, speech_token_size=6561, qwen=Qwen2Config(**SMALL))
    else:
        config = SpeechLMConfig.from_yaml(official_config("cosyvoice3")["llm"], qwen_config_for(None))
    llm = MlxSpeechLM(config)
    randomize(llm, 0)
    return llm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args(argv)
    llm = build(args.small)
    generator = torch.Generator().manual_seed(0)
    text = torch.randint(0, 150000, (1, 20), generator=generator)
    prompt_text = torch.cat(
        [torch.randint(0, 150000, (1, 10), generator=generator), torch.tensor([[ENDOFPROMPT_ID]])], 1
    )
    speech = torch.randint(0, llm.config.speech_token_size, (1, 75), generator=generator)
    embeds = llm.build_prompt_embeddings(text, prompt_text, speech)
    mx.eval(embeds)
    loops = {
        "shared_loop": lambda s: SpeechLM._decode_on_host(llm, embeds, args.tokens, args.tokens, s, None),
        "mlx_loop": None,
    }
    loops["mlx_loop"] = lambda s: llm._decode(embeds, args.tokens, args.tokens, s, None)
    rates: dict[str, list[float]] = {name: [] for name in loops}
    tokens: dict[str, list[int]] = {}
    list(loops["mlx_loop"](llm.make_sampler(seed=1)))  # warm-up
    for _ in range(args.rounds):
        for name, loop in loops.items():
            started = time.perf_counter()
            made = list(loop(llm.make_sampler(seed=1)))
            rates[name].append(len(made) / (time.perf_counter() - started))
            tokens[name] = made
    medians = {name: statistics.median(values) for name, values in rates.items()}
    report = {
        "model": "128-wide test LLM" if args.small else "full-size CosyVoice3 LLM, random weights",
        "device": str(mx.default_device()),
        "tokens": args.tokens,
        "tokens_per_s": medians,
        "runs": rates,
        "speedup": medians["mlx_loop"] / medians["shared_loop"],
        "same_tokens": tokens["mlx_loop"] == tokens["shared_loop"],
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
