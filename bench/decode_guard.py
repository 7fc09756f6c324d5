"""A guard on the speech LM's decoding step: this tree against another tree (or a kept JSON of this machine).

    python bench/decode_guard.py --against /work/old-tree                     # CPU, CosyVoice3, fp16-stored
    python bench/decode_guard.py --against bench/results/issue47_cpu_decode/after.json
    python bench/decode_guard.py --against OLD --also MAIN --device cuda --dtype bfloat16

A change made for one device must not slow another unnoticed. Each tree gets one long-lived worker process
(its own ``cosyvoice_mac`` first on the path; the measuring code is this file) that builds the full-size LM with
random weights (seeded, so every tree decodes the same ids when its arithmetic is the same) at the precision the
product uses there: on the CPU ``float16``/``bfloat16`` mean 16-bit-stored weights computed in float32. Rounds
interleave the workers (the order alternates) so a busy machine disturbs every tree alike; each round times
``--tokens`` forced tokens (the sampler included, the prefill not). The verdict compares medians of ms per token
and the median of the per-round ratios; it fails (exit status 1) when this tree is slower than the reference by more
than ``--margin``. Against a JSON the reference is that file's figure for this tree and configuration, and the
machine must be the same (chip, flags, cores, torch). The floor is the weight bytes a token reads over the memory
bandwidth measured here. JSON on stdout, a line per round on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from decode_step import _full_size_lm  # noqa: E402  (bench/ is this script's folder; stdlib at import)

HERE = Path(__file__).resolve().parents[1]
ENDOFPROMPT_ID = 151646  # Qwen2's <|endofprompt|> (every tree's models.llm.ENDOFPROMPT_ID)


# the worker: one tree, one model, rounds on request ---------------------------------------------
def _pipeline_lm(args: argparse.Namespace, device):
    """The speech LM of the whole random-weight model as the pipeline bench loads it (flow and vocoder beside it);
    ``--after-requests``: first a voice prepared and a streamed sentence's first chunk made, as a worker has done
    before it decodes (the threads they leave behind stay, and the rounds decode on this, the main thread)."""
    from cosyvoice_mac.pipeline.cosyvoice import CosyVoice

    model = CosyVoice.random_full_size(args.version, device=device, llm_dtype=args.dtype, precision="float32")
    if args.after_requests:
        _requests_before(model)
    return model.networks.llm


def _requests_before(model) -> None:
    """A voice prepared from a synthetic prompt and one streamed sentence's first chunk, by the tree's own bench
    code (``cosyvoice_mac.bench.measure``; before wave 4, the module ``cosyvoice_mac.bench``)."""
    import torch

    try:
        from cosyvoice_mac.bench import measure
    except ImportError:
        import cosyvoice_mac.bench as measure

    speaker = model.prepare_prompt(measure.synthetic_prompt(), sample_rate=24000)  # its default rate
    text_ids = torch.tensor([model.tokenizer.encode(measure.TEXT)])[:, :32]
    measure.time_to_first_audio(model, text_ids, speaker, 40)


def worker(args: argparse.Namespace) -> None:
    """Build the LM from ``args.tree``, then answer each ``round`` line on stdin with one JSON line."""
    sys.path.insert(0, args.tree)
    import torch

    import cosyvoice_mac

    if args.threads:
        torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    lm = _full_size_lm(args.version, device, dtype) if args.build == "lm" else _pipeline_lm(args, device)
    generator = torch.Generator().manual_seed(1)
    text = torch.randint(0, 1000, (1, 32), generator=generator)
    speech = torch.randint(0, lm.config.speech_token_size, (1, 80), generator=generator)
    if args.version == "cosyvoice3":
        text[0, -1] = ENDOFPROMPT_ID  # CosyVoice3's prompt text ends so
    with torch.inference_mode():
        embeds = lm.build_prompt_embeddings(text, text[:, :0], speech)
    stop_ids = sorted(lm.stop_ids)
    hello = {"tree": args.tree, "package": str(Path(cosyvoice_mac.__file__).parent), "threads": torch.get_num_threads()}
    print(json.dumps(hello), flush=True)
    for line in sys.stdin:
        if line.strip() == "ops":
            print(json.dumps(_ops_per_token(lm, embeds, stop_ids, 8)), flush=True)
            continue
        if line.strip() != "round":
            break
        with torch.inference_mode():
            prefill_started = time.perf_counter()
            decoder = lm.start_decoding(embeds, args.tokens + 1)  # the prompt's prefill
            sampler, ids = lm.make_sampler(seed=0), []
            _synchronize(device)
            prefill = time.perf_counter() - prefill_started
            started, started_cpu = time.perf_counter(), time.process_time()
            for _ in range(args.tokens):
                ids.append(sampler(decoder.logp, ids, stop_ids))
                decoder.feed(ids[-1])
            _synchronize(device)
            wall, cpu = time.perf_counter() - started, time.process_time() - started_cpu
        answer = {"ms": 1e3 * wall / args.tokens, "cpu_ms": 1e3 * cpu / args.tokens, "prefill_ms": 1e3 * prefill}
        print(json.dumps({**answer, "ids": ids}), flush=True)


def _ops_per_token(lm, embeds, stop_ids: list, steps: int) -> dict:
    """ATen operations a decoding step dispatches, by name (sampler included), averaged over ``steps``."""
    import collections

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    counts: collections.Counter = collections.Counter()

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            counts[str(func.overloadpacket.__name__)] += 1
            return func(*args, **(kwargs or {}))

    with torch.inference_mode():
        decoder = lm.start_decoding(embeds, steps + 2)
        sampler, ids = lm.make_sampler(seed=0), []
        ids.append(sampler(decoder.logp, ids, stop_ids))
        with Count():
            for _ in range(steps):
                decoder.feed(ids[-1])
                ids.append(sampler(decoder.logp, ids, stop_ids))
    return {"total": sum(counts.values()) / steps, "by_op": {k: v / steps for k, v in counts.most_common()}}


def _synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


# the parent: workers, interleaved rounds, the verdict -----------------------------------------------
class Worker:
    """One tree's worker process (see :func:`worker`)."""

    def __init__(self, tree: str, args: argparse.Namespace):
        self.tree = tree
        command = [sys.executable, __file__, "--worker", "--tree", tree, "--tokens", str(args.tokens)]
        command += ["--device", args.device, "--dtype", args.dtype, "--version", args.version, "--build", args.build]
        command += ["--threads", str(args.threads)] if args.threads else []
        command += ["--after-requests"] if args.after_requests else []
        env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
        env.pop("PYTHONPATH", None)  # the tree decides which cosyvoice_mac is imported
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.hello = self._answer()

    def _answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker for {self.tree} ended (exit status {self.process.wait()})")
        return json.loads(line)

    def round(self, what: str = "round") -> dict:
        self.process.stdin.write(f"{what}\n")
        self.process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def floor(args: argparse.Namespace) -> dict:
    """This machine's floor for the step: weight bytes a token reads / the memory bandwidth measured now."""
    import torch

    from cosyvoice_mac.bench.floors import llm_bytes_per_token, memory_bandwidth

    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    lm = _full_size_lm(args.version, device, dtype)
    weights = llm_bytes_per_token(lm, 0)
    bandwidth = memory_bandwidth(device)
    del lm
    return {
        "weight_bytes_per_token": weights,
        "bandwidth_gb_s": bandwidth / 1e9,
        "floor_ms_per_token": 1e3 * weights / bandwidth,
        "floor_tokens_per_s": bandwidth / weights,
    }


def configuration(args: argparse.Namespace) -> dict:
    """What a kept figure is only comparable under: the machine and the measured work."""
    import torch

    from cosyvoice_mac.bench.machine import describe_machine

    machine = describe_machine()
    return {
        "machine": {"chip": machine.chip, "cpu_flags": machine.cpu_flags, "cores": machine.cores},
        "torch": torch.__version__,
        "device": args.device,
        "dtype": args.dtype,
        "version": args.version,
        "tokens": args.tokens,
        "threads": args.threads or torch.get_num_threads(),
        "build": args.build,
        "after_requests": args.after_requests,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", help="a checkout of this repository, or a kept JSON of this bench")
    parser.add_argument("--also", action="append", default=[], help="another tree to time beside them (reported)")
    parser.add_argument("--tree", default=str(HERE), help="the tree under test (default: this checkout)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float16", help="CPU: float16 = fp16-stored weights, fp32 arithmetic")
    parser.add_argument("--version", default="cosyvoice3", choices=("cosyvoice3", "cosyvoice2"))
    parser.add_argument("--tokens", type=int, default=40, help="forced tokens a round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--margin", type=float, help="allowed slowdown (default 0.1: 10 %%)")
    parser.add_argument(
        "--clock", default="wall", choices=("wall", "cpu"), help="what decides: wall time, or CPU time (shared machine)"
    )
    parser.add_argument("--no-floor", action="store_true", help="skip measuring the floor")
    parser.add_argument(
        "--build", default="lm", choices=("lm", "pipeline"), help="the LM alone, or as the whole model loads it"
    )
    parser.add_argument(
        "--after-requests",
        action="store_true",
        help="with --build pipeline: decode after a voice was prepared and a sentence streamed (their threads stay)",
    )
    parser.add_argument("--ops", action="store_true", help="also count each tree's ATen operations a token")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:  # before anything imports this checkout's cosyvoice_mac
        worker(args)
        return 0
    if not args.against:
        parser.error("--against (a tree or a kept JSON) is required")
    for tree in [args.against, args.tree, *args.also]:
        if not (Path(tree).is_file() or (Path(tree) / "cosyvoice_mac").is_dir()):
            parser.error(f"{tree} is neither a checkout of this repository nor a kept JSON of this bench")
    sys.path.insert(0, str(HERE))
    from cosyvoice_mac.bench import guard

    margin = guard.DEFAULT_MARGIN if args.margin is None else args.margin
    config = configuration(args)
    kept = None
    trees = [str(Path(args.tree).resolve())]
    if Path(args.against).is_file():
        kept = json.loads(Path(args.against).read_text(encoding="utf-8"))
        try:
            guard.check_comparable(kept["configuration"], config)
        except guard.GuardError as error:
            print(f"decode_guard: {error}", file=sys.stderr)
            return 2
    else:
        trees.append(str(Path(args.against).resolve()))
    trees += [str(Path(tree).resolve()) for tree in args.also]
    workers = [Worker(tree, args) for tree in trees]
    rounds: dict[str, list[dict]] = {tree: [] for tree in trees}
    try:
        operations = {each.tree: each.round("ops") for each in workers} if args.ops else None
        for number in range(args.rounds + 1):  # round 0 warms every worker up and is not counted
            order = workers if number % 2 else workers[::-1]
            for each in order:
                answer = each.round()
                if number:
                    rounds[each.tree].append(answer)
                print(f"round {number} {each.tree}: {answer['ms']:.1f} ms/token", file=sys.stderr, flush=True)
    finally:
        for each in workers:
            each.close()
    roles = [guard.THIS] + ([] if kept else [guard.AGAINST]) + [f"also {tree}" for tree in args.also]
    report = {"configuration": config, "against": args.against}
    report["trees"] = {role: {"tree": tree, **guard.summarise(rounds[tree])} for role, tree in zip(roles, trees)}
    if operations:
        for entry in report["trees"].values():
            entry["ops_per_token"] = operations[entry["tree"]]
    this = report["trees"][guard.THIS]
    if kept:
        report["verdict"] = guard.verdict(this, kept["trees"][guard.THIS], margin, clock=args.clock)
    else:
        report["verdict"] = guard.verdict(
            this, report["trees"][guard.AGAINST], margin, rounds[trees[0]], rounds[trees[1]], args.clock
        )
    if not args.no_floor:
        report["floor"] = floor(args)
    print(json.dumps(report, indent=1))
    return 0 if report["verdict"]["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
