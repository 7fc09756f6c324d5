"""Do CUDA graphs pay for the flow and the vocoder? Eager against graph-replayed, measured in one process.

    python bench/flow_graphs.py --device cuda --version cosyvoice3

Full-size random weights. Per flow dtype (float32, bfloat16): the first streamed chunk after a
cached prefix (what the pipeline captures, ``models/cuda/flow_prefix_graphs.py``) and the whole non-streaming
flow of the bench's request (3 s prompt + 250 tokens; captured here for this measurement only,
with the mask reduced to "every frame valid", which it is). The vocoder (float32) cannot be
captured (its sine source makes f0 on the host), so its eager wall time is set against the GPU's
busy time: the gap is all a graph could win. Each figure: wall median of ``--runs``, kernels and
GPU-busy from one profiled call. JSON on stdout.
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
from cosyvoice_mac.bench.decode import cuda_profile  # noqa: E402
from cosyvoice_mac.device import synchronize  # noqa: E402
from cosyvoice_mac.models.flow.dit import AttentionMasks, DiT  # noqa: E402
from cosyvoice_mac.pipeline.streaming import FIRST_HOP_TOKENS, PromptPlan  # noqa: E402

TOKENS = 250


def wall_ms(device: torch.device, function, runs: int) -> float:
    function()  # warm-up
    times = []
    for _ in range(runs):
        synchronize(device)
        started = time.perf_counter()
        function()
        synchronize(device)
        times.append(1e3 * (time.perf_counter() - started))
    return statistics.median(times)


def measured(device: torch.device, function, runs: int) -> dict:
    profile = cuda_profile(device, function)
    return {
        "wall_ms": wall_ms(device, function, runs),
        "kernels": profile["kernels"],
        "gpu_busy_ms": profile["gpu_busy_ms"],
    }


def captured(device: torch.device, function):
    """``function`` captured as a CUDA graph (after one eager warm-up): a callable that replays it."""
    function()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        function()
    return graph.replay


@torch.inference_mode()
def flow_figures(model, speaker, device: torch.device, runs: int) -> dict:
    flow = model.networks.flow
    vocab = flow.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    lookahead = flow.config.pre_lookahead_len
    # the first streamed chunk of a voice used before: the pipeline's own graph, replayed from the prefix
    plan = PromptPlan.for_request(model.streaming_parts(), speaker)
    prompt = plan.prompt(speaker, device)
    first = torch.randint(0, vocab, (1, FIRST_HOP_TOKENS + lookahead), generator=generator).to(device)
    prefix = flow.build_prefix(*prompt, tokens=plan.prefix_tokens)

    def chunk():
        return flow.inference(first, *prompt, streaming=True, finalize=False, prefix=prefix)

    report = {"first_chunk_new_frames": 2 * (prompt[0].shape[1] - plan.prefix_tokens + FIRST_HOP_TOKENS)}
    os.environ["COSYVOICE_CUDA_GRAPHS"] = "0"
    report["first_chunk_eager"] = measured(device, chunk, runs)
    os.environ["COSYVOICE_CUDA_GRAPHS"] = "1"
    started = time.perf_counter()
    chunk()  # captured in place
    report["first_chunk_capture_ms"] = 1e3 * (time.perf_counter() - started)
    report["first_chunk_graph"] = measured(device, chunk, runs)
    report["first_chunk_graph"]["captures"] = 0 if prefix.graphs is None else prefix.graphs.captures
    # the whole non-streaming flow (the RTF's share): eager, and its sampler as one graph
    tokens = torch.randint(0, vocab, (1, TOKENS), generator=generator).to(device)
    full = [speaker.speech_tokens.to(device), speaker.mel.to(device), speaker.embedding.to(device)]
    report["nonstreaming_frames"] = 2 * (full[0].shape[1] + TOKENS)
    report["nonstreaming_eager"] = measured(device, lambda: flow.inference(tokens, *full), runs)
    ids = torch.cat([full[0], tokens], dim=1)
    speaker_vector, mu = flow._conditioning(full[2], ids, finalize=True, streaming=False)
    frames = mu.shape[1]
    cond = torch.zeros(1, frames, 80, device=device, dtype=mu.dtype)
    cond[:, : full[1].shape[1]] = full[1].to(mu.dtype)
    mask = torch.ones(1, 1, frames, device=device, dtype=mu.dtype)
    mu, cond = mu.transpose(1, 2).contiguous(), cond.transpose(1, 2).contiguous()
    noise = flow.decoder.start_noise(mu).clone()
    original = DiT.attention_masks
    DiT.attention_masks = lambda self, mask, streaming, prefix_frames=0: AttentionMasks(None, None)
    try:
        replay = captured(device, lambda: flow.decoder.solve(noise, mu, mask, speaker_vector, cond, False, None))
        report["nonstreaming_sampler_graph"] = measured(device, replay, runs)
    finally:
        DiT.attention_masks = original
    return report


@torch.inference_mode()
def vocoder_figures(model, device: torch.device, runs: int) -> dict:
    hift = model.networks.hift
    generator = torch.Generator().manual_seed(1)
    whole = (torch.randn(1, 80, 2 * TOKENS, generator=generator) - 5).to(device)
    first = whole[:, :, : 2 * FIRST_HOP_TOKENS + 8]
    streaming = {"finalize": False} if model.spec.stitcher == "causal" else {}
    return {
        "whole_eager": measured(device, lambda: hift.inference(whole), runs),
        "first_chunk_eager": measured(device, lambda: hift.inference(first, **streaming), runs),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--version", default="cosyvoice3")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False  # as the pipeline runs float32
    model = measure.load_model(args.version, device, "float32", False, None)
    speaker = model.prepare_prompt(measure.synthetic_prompt(), sample_rate=24000)
    report = {"device": torch.cuda.get_device_name(device), "version": args.version, "flow": {}}
    for dtype in (torch.float32, torch.bfloat16):
        model.networks.flow.to(dtype)
        report["flow"][str(dtype).removeprefix("torch.")] = flow_figures(model, speaker, device, args.runs)
    model.networks.flow.float()
    report["vocoder"] = vocoder_figures(model, device, args.runs)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
