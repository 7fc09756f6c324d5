"""The host's cost of sampling a batch's rows each decoding step: ``sampling.sample_rows`` against each row's
sampler called alone (what ``decode_batch`` did before), over the same random log-probabilities, with the ids
checked equal. Host-only work, so this CPU's figure bounds the host share of a batched CUDA step.

    python bench/sample_rows_cost.py [--rows 32] [--steps 60] [--vocab 6561]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cosyvoice_mac.models.llm.sampling import RasSampler, sample_rows  # noqa: E402


def timed_steps(pick, rows: int, logps: list[torch.Tensor]) -> tuple[float, list[list[int]]]:
    """Seconds a step of ``pick(samplers, logp, histories)`` and the ids each row drew."""
    samplers = [RasSampler(seed=row) for row in range(rows)]
    histories: list[list[int]] = [[] for _ in range(rows)]
    started = time.perf_counter()
    for logp in logps:
        for history, token in zip(histories, pick(samplers, logp, histories)):
            history.append(token)
    return (time.perf_counter() - started) / len(logps), histories


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--vocab", type=int, default=6561)
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    logps = [
        torch.log_softmax(2.5 * torch.randn(args.rows, args.vocab, generator=generator), 1) for _ in range(args.steps)
    ]
    ignores = [()] * args.rows
    together_s, together = timed_steps(lambda s, logp, h: sample_rows(s, logp, h, ignores), args.rows, logps)
    alone_s, alone = timed_steps(lambda s, logp, h: [p(logp[i], h[i], ()) for i, p in enumerate(s)], args.rows, logps)
    print(
        json.dumps(
            {
                "what": "host seconds a decoding step to sample every row: sample_rows against each sampler alone",
                "rows": args.rows,
                "steps": args.steps,
                "vocab": args.vocab,
                "torch_threads": torch.get_num_threads(),
                "load_average": os.getloadavg(),
                "sample_rows_ms_per_step": 1000 * together_s,
                "row_by_row_ms_per_step": 1000 * alone_s,
                "same_ids": together == alone,
            },
            indent=1,
        )
    )
    return 0 if together == alone else 1


if __name__ == "__main__":
    raise SystemExit(main())
