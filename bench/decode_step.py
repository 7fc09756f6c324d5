"""The speech LM's decoding step, before and after, measured in one invocation.

    python bench/decode_step.py --baseline /tmp/base                       # CPU: tiny-width full depth
    python bench/decode_step.py --baseline /tmp/base --case full --dtypes float32,float16
    python bench/decode_step.py --baseline _baseline --device cuda --case full --dtypes float32,bfloat16

Each (tree, case, dtype, mode) runs in its own process (``--baseline DIR`` is an older checkout of
this repository, e.g. ``git archive COMMIT | tar -x -C DIR``); rounds interleave the trees so a
busy machine disturbs both alike. Cases: ``tiny`` is the released depth (24 layers, 14/2 heads) at
hidden size 56, whose time per token is almost all framework overhead (what dominates on MPS);
``full`` is the released size with random weights. Per run: ATen operations per token by scope and
by op (``cosyvoice_mac.bench.opcount``), wall and CPU ms per token (sampler included), and on CUDA the
profiler's kernels, GPU-busy and wall ms per token. On CPU ``float16`` means fp16-stored weights
computed in fp32 (the CPU default). JSON on stdout, a table on stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def _use_tree(tree: Path) -> None:
    """Import ``cosyvoice_mac`` from ``tree`` but the measuring modules from this checkout (by file: an older
    tree's ``cosyvoice_mac.bench`` is a module, not this package)."""
    sys.path.insert(0, str(tree))
    import cosyvoice_mac  # noqa: F401  (from ``tree``)

    for name in ("opcount", "decode"):
        spec = importlib.util.spec_from_file_location(
            f"cosyvoice_mac.bench.{name}", HERE / "cosyvoice_mac" / "bench" / f"{name}.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)


def _full_size_lm(version: str, device, dtype):
    import torch

    from cosyvoice_mac.models.llm import SpeechLM, SpeechLMConfig
    from cosyvoice_mac.pipeline.fullsize import official_config
    from cosyvoice_mac.pipeline.loading import qwen_config_for
    from cosyvoice_mac.pipeline.precision import store_weights_in_half

    config = SpeechLMConfig.from_yaml(official_config(version)["llm"], qwen_config_for(None))
    with torch.device("meta"):
        lm = SpeechLM(config)
    lm.to_empty(device=device)
    generator = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, tensor in lm.named_parameters():
            if tensor.dim() == 1:
                tensor.fill_(1.0) if "norm" in name else tensor.zero_()
            else:
                tensor.normal_(0.0, 0.02, generator=generator)
    lm = lm.eval().requires_grad_(False)
    if device.type == "cpu" and dtype in (torch.float16, torch.bfloat16):
        store_weights_in_half(lm, dtype)  # the CPU default: 16-bit storage, fp32 arithmetic
    else:
        lm.to(dtype)
    return lm


def child(args: argparse.Namespace) -> dict:
    _use_tree(Path(args.tree))
    import torch

    from cosyvoice_mac.bench.decode import cuda_kernels_per_token, dispatch_ops_per_token, seconds_per_token
    from cosyvoice_mac.bench.opcount import prompt_embeddings, random_tiny_speech_lm

    if args.threads:
        torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    if args.case == "tiny":
        lm = random_tiny_speech_lm(args.version).to(device=device, dtype=dtype)
    else:
        lm = _full_size_lm(args.version, device, dtype)
    runner = getattr(lm, "decoding", None)
    if runner is not None:
        runner.options.cuda_graphs = args.mode == "graphs"
    embeds = prompt_embeddings(lm)
    result = {
        "tree": args.tree,
        "case": args.case,
        "device": args.device,
        "dtype": args.dtype,
        "mode": args.mode,
        "runner_mode": getattr(runner, "mode", "eager (no runner)"),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    result["time"] = seconds_per_token(lm, embeds, steps=args.tokens, repeats=args.repeats)
    ops = dispatch_ops_per_token(lm, embeds)
    result["ops"] = {
        "total": ops["total"],
        "per_layer_work_by_op": ops.get("per_layer_work_by_op"),
        "scopes": {k: v for k, v in ops.items() if k not in ("total", "per_layer_work_by_op")},
    }
    if device.type == "cuda":
        result["cuda"] = cuda_kernels_per_token(lm, embeds, steps=min(args.tokens, 60))
        result["graph_error"] = getattr(runner, "graph_error", None)
    return result


def run_child(args: argparse.Namespace, tree: str, dtype: str, mode: str) -> dict:
    command = [
        sys.executable,
        __file__,
        "--child",
        "--tree",
        tree,
        "--case",
        args.case,
        "--device",
        args.device,
        "--dtype",
        dtype,
        "--mode",
        mode,
        "--tokens",
        str(args.tokens),
        "--repeats",
        str(args.repeats),
        "--version",
        args.version,
    ] + (["--threads", str(args.threads)] if args.threads else [])
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    env.pop("PYTHONPATH", None) if args.isolate else None
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False, env=env)
    if done.returncode:
        return {"tree": tree, "dtype": dtype, "mode": mode, "error": f"exit status {done.returncode}"}
    return json.loads(done.stdout)


def table(results: list[dict]) -> str:
    lines = [
        f"{'tree':10} {'dtype':9} {'mode':7} {'ops/tok':>7} {'views':>6} {'ms/tok':>7} {'cpu ms':>7} {'best':>6} "
        f"{'kern/tok':>8} {'busy ms':>7} {'prof ms':>7}"
    ]
    for r in results:
        name = "baseline" if r["tree"] != str(HERE) else "this"
        if "error" in r:
            lines.append(f"{name:10} {r['dtype']:9} {r['mode']:7} failed: {r['error']}")
            continue
        cuda = r.get("cuda") or {}
        lines.append(
            f"{name:10} {r['dtype']:9} {r['mode']:7} {r['ops']['total']['work']:7.1f} {r['ops']['total']['view']:6.1f} "
            f"{r['time']['wall_ms']:7.3f} {r['time']['cpu_ms']:7.3f} {r['time']['cpu_ms_best']:6.3f} "
            f"{cuda.get('kernels_per_token', 0):8.1f} "
            f"{cuda.get('gpu_busy_ms_per_token', 0):7.3f} {cuda.get('wall_ms_per_token', 0):7.3f}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", help="an older checkout to measure first (before/after)")
    parser.add_argument("--case", default="tiny", choices=("tiny", "full"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--modes", default="auto", help="comma list of eager, graphs (auto: both on CUDA)")
    parser.add_argument("--version", default="cosyvoice3", choices=("cosyvoice3", "cosyvoice2"))
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1, help="interleaved repetitions of every configuration")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--isolate", action="store_true", help="drop PYTHONPATH for the children")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", default=str(HERE), help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="eager", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return 0
    modes = ("eager,graphs" if args.device == "cuda" else "eager") if args.modes == "auto" else args.modes
    trees = ([str(Path(args.baseline).resolve())] if args.baseline else []) + [str(HERE)]
    results = []
    for _ in range(args.rounds):
        for dtype in args.dtypes.split(","):
            for mode in modes.split(","):
                for tree in trees:
                    if mode == "graphs" and tree != str(HERE):
                        continue  # the baseline has no graphs
                    results.append(run_child(args, tree, dtype, mode))
                    print(table(results[-1:]).splitlines()[1], file=sys.stderr, flush=True)
    print(table(results), file=sys.stderr)
    print(json.dumps({"results": results}, indent=1))
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
