"""Times candidate rewrites of two pieces of a decoded token, each inside a CUDA graph, before they go in.

    python bench/step_pieces.py --device cuda --out pieces.json

* ``ranking``: the device sampler's head (``DeviceRas._ranked_head``): the top 25 of 6761 unique int64 keys.
  One ``topk`` over all of them (today), against two stages: the top 25 of each of C chunks, then of their
  C x 25 winners (keys are unique, so the two stages pick exactly the same head), and sorts.
* ``residual``: a projection and its residual add (o_proj 896 -> 896, down_proj 4864 -> 896, 24 layers, own
  weights so nothing stays in L2): ``x + F.linear(a, W)`` (two kernels) against ``torch.addmm(x, a, W.T)``.

Each variant's graph replays a piece ``--repeat`` times; the JSON gives microseconds per piece and whether its
result equals today's bit for bit. Not a timed test.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

VOCAB, TOP_K, ID_BITS = 6761, 25, 13


def _graph_time(work, repeat: int, replays: int) -> float:
    """Microseconds per ``work()`` call, captured ``repeat`` times in one graph and replayed ``replays`` times."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            work()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeat):
            work()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / (replays * repeat)


def _ranking_variants(device) -> dict:
    probs = torch.softmax(torch.randn(VOCAB, device=device) * 3, dim=0)
    probs[100:140] = probs[99]  # ties, ranked by ascending id
    ids = torch.arange(VOCAB, device=device)
    keys = (probs.view(torch.int32).long() << ID_BITS) | ((1 << ID_BITS) - 1 - ids)
    out = torch.empty(TOP_K, dtype=torch.long, device=device)

    def one_topk():
        out.copy_(keys.topk(TOP_K).values)

    def sorted_all():
        out.copy_(keys.sort(descending=True).values[:TOP_K])

    def two_stage(chunks: int, final_sort: bool):
        length = -(-VOCAB // chunks)
        padded = torch.full((chunks * length,), -1, dtype=torch.long, device=device)

        def run():
            padded[:VOCAB].copy_(keys)
            winners = padded.view(chunks, length).topk(TOP_K, dim=1).values.flatten()
            head = winners.sort(descending=True).values[:TOP_K] if final_sort else winners.topk(TOP_K).values
            out.copy_(head)

        return run

    variants = {"topk": one_topk, "sort": sorted_all}
    for chunks in (8, 16, 32, 64, 128):
        variants[f"two_stage_{chunks}"] = two_stage(chunks, False)
        variants[f"two_stage_{chunks}_sort"] = two_stage(chunks, True)
    expected = keys.topk(TOP_K).values
    return variants, expected, out


def _residual_variants(device, dtype) -> dict:
    generator = torch.Generator(device=device).manual_seed(0)
    layers = 24
    shapes = {"o_proj": (896, 896), "down_proj": (896, 4864)}
    variants, outputs = {}, {}
    for name, (rows, cols) in shapes.items():
        weights = [torch.randn(rows, cols, device=device, generator=generator).to(dtype) / cols**0.5 for _ in range(24)]
        inputs = torch.randn(1, cols, device=device, generator=generator).to(dtype)
        residual = torch.randn(1, rows, device=device, generator=generator).to(dtype)
        results = {kind: torch.empty(layers, 1, rows, device=device, dtype=dtype) for kind in ("mm_add", "addmm")}

        def mm_add(weights=weights, inputs=inputs, residual=residual, out=results["mm_add"]):
            for layer, weight in enumerate(weights):
                out[layer].copy_(residual + F.linear(inputs, weight))

        def addmm(weights=weights, inputs=inputs, residual=residual, out=results["addmm"]):
            for layer, weight in enumerate(weights):
                torch.addmm(residual, inputs, weight.t(), out=out[layer])

        variants[f"{name}_mm_add"], variants[f"{name}_addmm"] = mm_add, addmm
        outputs[name] = results
    return variants, outputs, layers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--replays", type=int, default=200)
    parser.add_argument("--out")
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    report = {"torch": torch.__version__, "device": torch.cuda.get_device_name(device), "ranking": {}, "residual": {}}

    variants, expected, out = _ranking_variants(device)
    for name, work in variants.items():
        us = _graph_time(work, args.repeat, args.replays)
        work()
        report["ranking"][name] = {"us": round(us, 2), "same_head": bool(torch.equal(out, expected))}

    variants, outputs, layers = _residual_variants(device, dtype)
    for name, work in variants.items():
        us = _graph_time(work, 1, args.replays)
        report["residual"][name] = {"us_per_layer": round(us / layers, 2)}
    for name, results in outputs.items():
        difference = (results["mm_add"] != results["addmm"]).float().mean().item()
        report["residual"][f"{name}_share_not_bit_equal"] = round(difference, 4)

    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text)


if __name__ == "__main__":
    main()
