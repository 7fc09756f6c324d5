"""Peak memory of the app's model worker in the mode an 8 GB Mac gets, measured on this machine's CPU.

    python bench/low_memory_rss.py [--version cosyvoice3] [--folder DIR] [--prompt-s 8] [--engine mlx]

A full-size model folder with random weights in the official layout (llm.pt, flow.pt, hift.pt as the
released files store them; campplus.onnx and speech_tokenizer_v3.onnx stand-ins of the released files'
sizes that read all of their weights on every call: ``tests/fakes/random_folders.py``) is written once,
by a process of its own, under ``<user cache>/bench/`` and reused. Then the page's own ModelHost starts
the worker for it, as the app does; the one difference is that the worker's RAM reads as 8 GiB, so the
low-memory mode is the automatic choice (``cosyvoice_mac.bench.memory``). The worker loads and warms up
(which encodes a voice), then synthesises two requests, each with a voice it has not seen (so the ONNX
speech tokenizer and CAM++ run each time). Prints JSON: per phase, the worker's peak RSS from the
kernel (``VmHWM``: every resident page, memory-mapped checkpoint pages included) and the largest sampled
sum over the worker and its children, with its anonymous/file split.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package, not an installed one

from cosyvoice_mac.bench.memory import PeakSampler  # noqa: E402
from cosyvoice_mac.paths import user_cache_dir  # noqa: E402

FACTORY = "cosyvoice_mac.bench.memory:from_pretrained_with_8_gib"
COMPLETE = ".complete.json"  # written last: a folder without it is rebuilt
TARGET_MIB = 3 * 1024
TEXTS = ("This is the first sentence in the low memory mode.", "And here is a second request, with a new voice.")
TRANSCRIPT = "A short prompt for the memory measurement."


def write_folder(version: str, folder: Path) -> None:
    """Write the full-size random-weight folder (run in a process of its own: it holds every network)."""
    from tests.fakes.random_folders import write_random_weight_folder

    started = time.perf_counter()
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    write_random_weight_folder(version, partial)
    sizes = {path.name: path.stat().st_size for path in sorted(partial.iterdir()) if path.is_file()}
    (partial / COMPLETE).write_text(json.dumps({"bytes": sizes, "write_s": time.perf_counter() - started}))
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)


def ensure_folder(version: str, folder: Path) -> dict:
    if not (folder / COMPLETE).is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, __file__, "--version", version, "--folder", str(folder), "--write-folder"]
        subprocess.run(command, check=True)
    return json.loads((folder / COMPLETE).read_text())


def mlx_peak(engine) -> dict:
    """The worker's MLX peak so far (``mx.get_peak_memory()``, arrays only) when it runs on MLX, else nothing."""
    memory = engine.status().get("mlx_memory")
    return {"mlx_peak_mib": memory["peak_bytes"] / 2**20} if memory else {}


def measure(folder: Path, prompt_s: float, timeout_s: float, timeline: Path | None = None) -> dict:
    from cosyvoice_mac.engine import Engine
    from cosyvoice_mac.engine.host import HostConfig, ModelHost
    from cosyvoice_mac.engine.runtime import warmup_prompt
    from cosyvoice_mac.request import Request, Voice

    def engine_factory(config, **options):
        return Engine(replace(config, pipeline_factory=FACTORY), **options)

    report: dict = {"phases": {}}
    with tempfile.TemporaryDirectory(prefix="low-memory-rss-") as scratch:
        host = ModelHost(
            HostConfig(
                models_dir=folder.parent,
                outputs_dir=Path(scratch) / "outputs",
                cache_dir=Path(scratch) / "cache",
                preferred_model=folder.name,
                preview=False,
            ),
            engine_factory=engine_factory,
        )
        started = time.perf_counter()
        host.start()
        engine = host.engine
        while engine.status()["worker_pid"] is None:
            time.sleep(0.01)
        sampler = PeakSampler(engine.status()["worker_pid"], timeline_every_s=0.25 if timeline else None)
        try:
            if not engine.start(wait=True, timeout=timeout_s):
                raise RuntimeError(f"the worker did not come up: {engine.status()}")
            report["phases"]["load_and_warm_up"] = {
                **sampler.peak(),
                **mlx_peak(engine),
                "seconds": time.perf_counter() - started,
            }
            marks = {"load_and_warm_up": len(sampler.timeline)}
            status = engine.status()
            facts = ("device", "dtype", "precision", "low_memory", "engine", "engine_reason")
            report["worker"] = {key: status.get(key) for key in facts}
            for number, text in enumerate(TEXTS, start=1):
                samples = warmup_prompt(24000, prompt_s) * (1.0 - 0.1 * number)  # a voice the worker has not seen
                voice = Voice.from_samples(samples, 24000, transcript=TRANSCRIPT)
                started = time.perf_counter()
                result = engine.result(engine.submit(Request.build(text, voice, seed=number)), timeout=timeout_s)
                report["phases"][f"request_{number}_new_voice"] = {
                    **sampler.peak(),
                    **mlx_peak(engine),
                    "seconds": time.perf_counter() - started,
                    "audio_s": result.duration_s,
                }
                marks[f"request_{number}_new_voice"] = len(sampler.timeline)
            report["feature_extractions"] = engine.status().get("feature_extractions")
        finally:
            sampler.stop()
            host.close()
    if timeline:  # (seconds, anon MiB, file MiB) of the worker every 0.25 s, and where each phase ended
        timeline.write_text(json.dumps({"ends": marks, "samples": sampler.timeline}))
    peaks = [phase["worker_vm_hwm_mib"] for phase in report["phases"].values()]
    tree = [phase["sampled_tree_peak"].get("tree_mib", 0.0) for phase in report["phases"].values()]
    report.update(peak_rss_mib=max(peaks), sampled_tree_peak_mib=max(tree), target_mib=TARGET_MIB)
    mlx = [phase["mlx_peak_mib"] for phase in report["phases"].values() if "mlx_peak_mib" in phase]
    if mlx:  # on MLX, Metal's buffers are not the process's RSS on a Mac: the arrays' own peak counts too
        report["mlx_peak_mib"] = max(mlx)
    report["under_target"] = max(max(peaks), max(tree)) < TARGET_MIB
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--version", default="cosyvoice3", choices=("cosyvoice3", "cosyvoice2"))
    parser.add_argument("--folder", type=Path, help="the random-weight folder (default: under the user cache)")
    parser.add_argument("--prompt-s", type=float, default=8.0, help="seconds of each new voice's prompt")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for loading, and for each request")
    parser.add_argument("--engine", default=None, help="auto, mlx or torch (default: $COSYVOICE_ENGINE, else auto)")
    parser.add_argument("--timeline", type=Path, help="also write the worker's RSS every 0.25 s to this file")
    parser.add_argument("--write-folder", action="store_true", help=argparse.SUPPRESS)  # the writer process
    args = parser.parse_args()
    folder = args.folder or user_cache_dir() / "bench" / f"random-weights-{args.version}"
    if args.write_folder:
        write_folder(args.version, folder)
        return
    folder_facts = ensure_folder(args.version, folder)
    if args.engine:
        os.environ["COSYVOICE_ENGINE"] = args.engine  # the worker inherits it
    import cosyvoice_mac

    report = {"version": args.version, "folder": str(folder), "folder_bytes": folder_facts["bytes"]}
    report["package"] = str(Path(cosyvoice_mac.__file__).parent)  # the checkout the worker runs
    report.update(measure(folder, args.prompt_s, args.timeout, args.timeline))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
