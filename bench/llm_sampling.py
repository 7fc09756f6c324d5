"""The speech LM's tokens per second with the sampler on the host (before) and on the device (after), one process.

    python bench/llm_sampling.py --device cuda --dtypes float16,bfloat16,float32 --tokens 250 --rounds 3

Full-size CosyVoice3 LM with random weights, the bench's prompt, forced decoding (every stop id masked:
min_len = max_len = ``--tokens``) through ``SpeechLM._decode``, the path the pipeline uses. Per dtype and
variant (host sampler / device sampler, each with the plain or the ``torch.compile``-fused step under the
graphs): ms per token from the first token to the last (prefill excluded), medians of interleaved rounds,
the profiler's kernels and GPU-busy ms per token, and whether the two samplers chose the same ids for the
same seed, and the ids eager decoding (no graphs, SDPA) chose. JSON on stdout, a table on stderr.

``--rounding auto,eager,inductor`` also varies how a fused step rounds (``DecodeOptions.eager_rounding``): as eager
does (projections and norms as opaque operations, inductor's ``emulate_precision_casts`` on), or inductor's own way;
``auto`` (the default) is the product's choice. ``same_ids_as_eager`` says whether the ids stay eager's.

``--attention sdpa,products`` also varies how a decoded position attends (``DecodeOptions.
attention_by_products``: SDPA, or two products and a softmax); ``auto`` (the default) is the product's choice.

``--compile MODE/DYNAMIC`` (e.g. ``max-autotune-no-cudagraphs/none``, ``default/true``) compiles the fused
step with that ``torch.compile`` mode and ``dynamic`` setting instead of the product's defaults, to measure
them; ``warmup_s`` is the first request's time (its compiles and captures).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))


def _full_size_lm(device, dtype):
    spec = importlib.util.spec_from_file_location("decode_step", HERE / "bench" / "decode_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._full_size_lm("cosyvoice3", device, dtype)


def _run(lm, embeds, tokens: int, seed: int) -> tuple[list[int], float]:
    import torch

    from cosyvoice_mac.device import synchronize

    sampler = lm.make_sampler(seed=seed)
    ids, first = [], 0.0
    with torch.inference_mode():
        for token in lm._decode(embeds, tokens, tokens, sampler, None):
            if not ids:
                first = time.perf_counter()
            ids.append(token)
    synchronize(embeds.device)
    return ids, (time.perf_counter() - first) / max(len(ids) - 1, 1)


def _first_difference(ids: list[int], reference: list[int]) -> int | None:
    return next((i for i, (a, b) in enumerate(zip(ids, reference)) if a != b), None)


def _compile_setting(text: str) -> tuple[str | None, bool | None]:
    """``MODE/DYNAMIC`` -> (torch.compile's ``mode``, ``dynamic``), or argparse's error naming what is allowed."""
    mode, _, dynamic = text.partition("/")
    dynamics = {"none": None, "true": True, "false": False}
    if not mode or dynamic not in dynamics:
        raise argparse.ArgumentTypeError(f"{text!r}: use MODE/DYNAMIC, e.g. default/none or default/true")
    return (None if mode == "default" else mode), dynamics[dynamic]


def _top_kernels(events: list[dict], steps: int, count: int) -> list[dict]:
    """The ``count`` kernels with the most GPU time: name, launches and microseconds per token."""
    totals: dict[str, list[float]] = {}
    for event in events:
        entry = totals.setdefault(event["name"][:120], [0, 0.0])
        entry[0] += 1
        entry[1] += float(event["dur"])
    ranked = sorted(totals.items(), key=lambda item: -item[1][1])[:count]
    return [{"name": name, "per_token": n / steps, "us_per_token": us / steps} for name, (n, us) in ranked]


def _names(allowed: tuple[str, ...]):
    def parse(text: str) -> list[str]:
        names = text.split(",")
        unknown = [name for name in names if name not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"{text!r}: use one or more of {', '.join(allowed)}")
        return names

    return parse


def measure(dtype_name: str, args) -> list[dict]:
    import torch

    from cosyvoice_mac.bench.decode import cuda_profile
    from cosyvoice_mac.bench.opcount import prompt_embeddings
    from cosyvoice_mac.models.llm import DecodeOptions
    from cosyvoice_mac.models.llm.decoding import DecodeRunner

    device, dtype = torch.device(args.device), getattr(torch, dtype_name)
    lm = _full_size_lm(device, dtype)
    embeds = prompt_embeddings(lm).to(device=device, dtype=dtype)
    samplers = [name == "device" for name in args.sampler.split(",")]
    attentions = {"auto": None, "sdpa": False, "products": True}
    roundings = {"auto": None, "eager": True, "inductor": False}
    variants = [
        (on, fuse, attention, rounding)
        for rounding in args.rounding
        for attention in args.attention
        for fuse in (False, True)
        if fuse in args.fuse
        for on in (False, True)
        if on in samplers
    ]
    # one runner (cache, graphs) per variant, so switching variants between rounds recaptures nothing
    runners = {
        v: DecodeRunner(
            lm,
            DecodeOptions(
                cuda_graphs=True,
                device_sampling=v[0],
                fuse=v[1],
                attention_by_products=attentions[v[2]],
                eager_rounding=roundings[v[3]],
            ),
        )
        for v in variants
    }
    times = {v: [] for v in variants}
    lm.decoding = DecodeRunner(lm, DecodeOptions(cuda_graphs=False, attention_by_products=False))
    eager = _run(lm, embeds, args.tokens, seed=0)[0]
    ids = {}
    warmup = {}
    for variant in variants:  # warm-up: captures (and compiles) for every bucket
        lm.decoding = runners[variant]
        started = time.perf_counter()
        ids[variant] = _run(lm, embeds, args.tokens, seed=0)[0]
        warmup[variant] = time.perf_counter() - started
    for _ in range(args.rounds):
        for variant in variants:
            lm.decoding = runners[variant]
            times[variant].append(_run(lm, embeds, args.tokens, seed=0)[1])
    rows = []
    for on, fuse, attention, rounding in variants:
        variant = on, fuse, attention, rounding
        lm.decoding = runners[variant]
        steps = min(args.tokens, 120)
        kernel_events = []
        profiled = {}
        if device.type == "cuda":
            profiled = cuda_profile(device, lambda: _run(lm, embeds, steps, seed=0), kernel_events)
        ms = 1e3 * statistics.median(times[variant])
        host = ids.get((False, fuse, attention, rounding))  # None when only the device sampler runs
        rows.append(
            {
                "dtype": dtype_name,
                "sampler": "device" if on else "host",
                "fused": fuse,
                "attention": attention,
                "rounding": rounding,
                "eager_rounding": lm.decoding.keeps_eager_rounding(),
                "ms_per_token": ms,
                "tok_per_s": 1e3 / ms,
                "ms_runs": [1e3 * t for t in times[variant]],
                "warmup_s": warmup[variant],
                "compile": list(args.compile) if args.compile else None,
                "kernels_per_token": profiled.get("kernels", 0) / steps,
                "gpu_busy_ms_per_token": profiled.get("gpu_busy_ms", 0) / steps,
                "graph_launches_per_token": profiled.get("graph_launches", 0) / steps,
                "top_kernels": _top_kernels(kernel_events, steps, args.top_kernels),
                "same_ids_as_host": None if host is None else ids[variant] == host,
                "first_difference": _first_difference(ids[variant], host or []),
                "same_ids_as_eager": ids[variant] == eager,
                "first_difference_from_eager": _first_difference(ids[variant], eager),
                "ids": ids[variant],
                "graph_error": lm.decoding.graph_error,
                "fuse_error": lm.decoding.fuse_error,
                "mode": lm.decoding.mode,
                "samples_on_device": lm.decoding.samples_on_device(lm.make_sampler(0), None),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtypes", default="float16,bfloat16,float32")
    parser.add_argument("--tokens", type=int, default=250)
    parser.add_argument("--top-kernels", type=int, default=0, help="list the N kernels with the most GPU time")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--fuse", default="plain", type=_names(("plain", "fused")), help="plain, fused or plain,fused: the step"
    )
    parser.add_argument("--compile", type=_compile_setting, help="MODE/DYNAMIC of the fused step's torch.compile")
    parser.add_argument(
        "--attention", default="auto", type=_names(("auto", "sdpa", "products")), help="auto, sdpa and/or products"
    )
    parser.add_argument(
        "--rounding", default="auto", type=_names(("auto", "eager", "inductor")), help="auto, eager and/or inductor"
    )
    parser.add_argument("--sampler", default="host,device", type=_names(("host", "device")), help="host and/or device")
    args = parser.parse_args()
    args.fuse = [name == "fused" for name in args.fuse]
    args.sampler = ",".join(args.sampler)
    import torch

    if args.compile:  # the runner calls torch.compile(fn): give that call the mode and dynamic setting measured
        mode, dynamic = args.compile
        torch.compile = functools.partial(torch.compile, mode=mode, dynamic=dynamic)

    rows = []
    for dtype in args.dtypes.split(","):
        rows += measure(dtype, args)
    json.dump(
        {"torch": torch.__version__, "tokens": args.tokens, "rounds": args.rounds, "rows": rows}, sys.stdout, indent=1
    )
    print(
        f"{'dtype':9} {'sampler':7} {'fused':5} {'attend':8} {'rounds':6} {'ms/tok':>7} {'tok/s':>6} {'kern/tok':>8} "
        f"{'busy ms':>7} "
        "same as host, from; as eager, from",
        file=sys.stderr,
    )
    for r in rows:
        print(
            f"{r['dtype']:9} {r['sampler']:7} {str(r['fused']):5} {r['attention']:8} {r['rounding']:6} "
            f"{r['ms_per_token']:7.3f} "
            f"{r['tok_per_s']:6.0f} {r['kernels_per_token']:8.1f} {r['gpu_busy_ms_per_token']:7.3f} "
            f"{r['same_ids_as_host']} {r['first_difference']}; "
            f"{r['same_ids_as_eager']} {r['first_difference_from_eager']}",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
