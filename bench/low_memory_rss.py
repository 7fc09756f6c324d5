"""Peak memory of the app's model worker in the mode an 8 GB Mac gets, measured on this machine's CPU.

    python bench/low_memory_rss.py [--version cosyvoice3] [--folder DIR] [--prompt-s 8] [--engine mlx]
        [--requests 2] [--ram-gib 8] [--convert-first] [--stand-in-for TEXT] [--json FILE]

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
import platform
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
TOKENS_PER_SECOND = 25  # both versions' speech tokens are 40 ms of audio each
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
    """The worker's MLX peak so far (``mx.get_peak_memory()``, arrays only) and its arrays now, when it runs on
    MLX, else nothing."""
    memory = engine.status().get("mlx_memory")
    if not memory:
        return {}
    return {"mlx_peak_mib": memory["peak_bytes"] / 2**20, "mlx_active_mib": memory["active_bytes"] / 2**20}


def factory_for(ram_gib: float) -> str:
    """The worker's pipeline factory: the app's own on a simulated machine of ``ram_gib`` GiB (0: this one's)."""
    if not ram_gib:
        from cosyvoice_mac.engine.worker import DEFAULT_PIPELINE

        return DEFAULT_PIPELINE
    if ram_gib != 8:
        raise SystemExit("--ram-gib is 8 (an 8 GB Mac) or 0 (this machine's own RAM)")
    return FACTORY


def convert_first(folder: Path, ram_gib: float) -> dict:
    """A first MLX start in a process of its own (it converts the checkpoints into the weight cache): its peaks."""
    command = [sys.executable, __file__, "--folder", str(folder), "--ram-gib", str(ram_gib), "--convert-only"]
    started = time.perf_counter()
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return {**json.loads(output.strip().splitlines()[-1]), "seconds": time.perf_counter() - started}


def convert_only(folder: Path, ram_gib: float) -> None:
    """(In the process ``convert_first`` starts.) Load the folder on MLX as the worker would; print the peaks."""
    import mlx.core as mx

    from cosyvoice_mac.bench import memory
    from cosyvoice_mac.pipeline import CosyVoice

    load = memory.from_pretrained_with_8_gib if ram_gib else CosyVoice.from_pretrained
    model = load(folder, engine="mlx", device="auto")
    report = {
        "engine": model.engine.engine,
        "vm_hwm_mib": memory.proc_status_kib(os.getpid()).get("VmHWM", 0) / 1024,
        "mlx_peak_mib": mx.get_peak_memory() / 2**20,
        "mlx_active_mib": mx.get_active_memory() / 2**20,
    }
    print(json.dumps(report))


def mlx_weights_by_stage(folder: Path) -> dict:
    """MiB of the arrays MLX holds per stage, from the converted files in its weight cache (their headers):
    the LLM's file in the precision it runs (less its text table where the low-memory mode keeps that on the
    host, given apart), the flow's and HiFT's."""
    from cosyvoice_mac.mlx.convert import default_cache_dir, source_digest
    from cosyvoice_mac.mlx.llm_weights import TEXT_TABLE, safetensors_header

    cache = default_cache_dir()
    if cache is None:
        return {}
    stages = {}
    for stage, name in (("llm", "llm.pt"), ("flow", "flow.pt"), ("hift", "hift.pt")):
        digest = source_digest(folder / name, cache)
        for path in sorted(cache.glob(f"{digest}-*.safetensors")):
            header, _ = safetensors_header(path)
            header.pop("__metadata__", None)  # the file's own facts (precision, group size), not a tensor
            sizes = {key: entry["data_offsets"][1] - entry["data_offsets"][0] for key, entry in header.items()}
            dtypes: dict[str, float] = {}
            for key, entry in header.items():
                dtypes[entry["dtype"]] = dtypes.get(entry["dtype"], 0.0) + sizes[key] / 2**20
            stages[path.name] = {
                "stage": stage,
                "mib": sum(sizes.values()) / 2**20,
                "text_table_mib": sizes.get(TEXT_TABLE, 0) / 2**20,
                "mib_by_dtype": dtypes,
            }
    return stages


def machine() -> dict:
    """The machine the figures come from (and how busy it was when the run started)."""
    import psutil

    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    model = names[0] if names else platform.processor()
    return {
        "system": f"{platform.system()} {platform.release()} {platform.machine()}",
        "cpu": model,
        "logical_cpus": os.cpu_count(),
        "ram_gib": psutil.virtual_memory().total / 2**30,
        "load_average_at_start": os.getloadavg(),
        "python": platform.python_version(),
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
    }


def packages() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("mlx", "mlx-cpu", "mlx-metal", "torch", "onnxruntime", "numpy"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass
    return found


def measure(
    folder: Path,
    prompt_s: float,
    timeout_s: float,
    timeline: Path | None = None,
    requests: int = len(TEXTS),
    factory: str = FACTORY,
    short_text: str | None = None,
    together: bool = False,
) -> dict:
    from cosyvoice_mac.engine import Engine
    from cosyvoice_mac.engine.host import HostConfig, ModelHost
    from cosyvoice_mac.mlx import requested_engine
    from cosyvoice_mac.request import Request

    def engine_factory(config, **options):
        warmup = {"warmup_text": short_text} if short_text else {}  # the run is about one short request
        return Engine(replace(config, pipeline_factory=factory, **warmup), **options)

    report: dict = {"phases": {}}
    with tempfile.TemporaryDirectory(prefix="low-memory-rss-") as scratch:
        host = ModelHost(
            HostConfig(
                models_dir=folder.parent,
                outputs_dir=Path(scratch) / "outputs",
                cache_dir=Path(scratch) / "cache",
                preferred_model=folder.name,
                preview=False,
                engine=requested_engine(),  # $COSYVOICE_ENGINE (--engine), as the app's start reads it: else "auto"
                start_timeout_s=timeout_s,  # the app's 900 s limits are for a Mac, not MLX's CPU backend here
                job_timeout_s=timeout_s,
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
            facts = ("device", "dtype", "precision", "low_memory", "engine", "engine_reason", "mlx_llm", "mlx_memory")
            report["worker"] = {key: status.get(key) for key in facts}
            texts = (short_text,) * requests if short_text else TEXTS[:requests]
            if together:
                report["phases"]["requests_together"] = together_phase(engine, sampler, texts, prompt_s, timeout_s)
                marks["requests_together"] = len(sampler.timeline)
                texts = ()
            for number, text in enumerate(texts, start=1):
                started = time.perf_counter()
                request = Request.build(text, new_voice(number, prompt_s), seed=number)
                result = engine.result(engine.submit(request), timeout=timeout_s)
                report["phases"][f"request_{number}_new_voice"] = {
                    **sampler.peak(),
                    **mlx_peak(engine),
                    "seconds": time.perf_counter() - started,
                    "text": text,
                    "audio_s": result.duration_s,
                    "speech_tokens": speech_tokens(result),
                    "stage_seconds": result.timings,
                    "device": result.device,
                }
                marks[f"request_{number}_new_voice"] = len(sampler.timeline)
            status = engine.status()
            report["feature_extractions"] = status.get("feature_extractions")
            report["engine_after_requests"] = {key: status.get(key) for key in ("engine", "engine_reason")}
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


def new_voice(number: int, prompt_s: float):
    """Request ``number``'s voice: the warm-up's prompt at another level, so the worker has not seen it."""
    from cosyvoice_mac.engine.runtime import warmup_prompt
    from cosyvoice_mac.request import Voice

    return Voice.from_samples(warmup_prompt(24000, prompt_s) * (1.0 - 0.1 * number), 24000, transcript=TRANSCRIPT)


def together_phase(engine, sampler, texts, prompt_s: float, timeout_s: float) -> dict:
    """Every request submitted at once, each with a voice the worker has not seen, so the engine's queue may
    speak them as one batch (``batch_lines``; the low-memory mode's own B): the peak while they are made."""
    from cosyvoice_mac.request import Request

    started = time.perf_counter()
    jobs = [
        engine.submit(Request.build(text, new_voice(number, prompt_s), seed=number))
        for number, text in enumerate(texts, start=1)
    ]
    results = [engine.result(job, timeout=timeout_s) for job in jobs]
    return {
        **sampler.peak(),
        **mlx_peak(engine),
        "seconds": time.perf_counter() - started,
        "requests": len(results),
        "batch_sizes": [getattr(result, "batch_size", None) for result in results],
        "audio_s": [result.duration_s for result in results],
        "speech_tokens": [speech_tokens(result) for result in results],
    }


def speech_tokens(result) -> int:
    """The speech tokens a request made: its audio before trimming, 40 ms per token."""
    trimmed_ms = sum((result.post or {}).get(key) or 0 for key in ("trimmed_start_ms", "trimmed_end_ms"))
    return round((result.duration_s + trimmed_ms / 1000) * TOKENS_PER_SECOND)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--version", default="cosyvoice3", choices=("cosyvoice3", "cosyvoice2"))
    parser.add_argument("--folder", type=Path, help="the random-weight folder (default: under the user cache)")
    parser.add_argument("--prompt-s", type=float, default=8.0, help="seconds of each new voice's prompt")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for loading, and for each request")
    parser.add_argument("--engine", default=None, help="auto, mlx or torch (default: $COSYVOICE_ENGINE, else auto)")
    parser.add_argument("--timeline", type=Path, help="also write the worker's RSS every 0.25 s to this file")
    parser.add_argument("--requests", type=int, default=len(TEXTS), choices=range(1, len(TEXTS) + 1))
    parser.add_argument("--text", help="the warm-up's and every request's text (default: the two sentences above)")
    parser.add_argument("--ram-gib", type=float, default=8, help="8: an 8 GB Mac (the default); 0: this machine's")
    parser.add_argument("--convert-first", action="store_true", help="MLX: fill the weight cache in a process first")
    parser.add_argument("--stand-in-for", default="", help="what this run stands in for (kept in the JSON)")
    parser.add_argument("--json", type=Path, help="also write the JSON to this file")
    parser.add_argument("--together", action="store_true", help="submit the requests at once (the engine batches)")
    parser.add_argument("--write-folder", action="store_true", help=argparse.SUPPRESS)  # the writer process
    parser.add_argument("--convert-only", action="store_true", help=argparse.SUPPRESS)  # --convert-first's process
    args = parser.parse_args()
    folder = args.folder or user_cache_dir() / "bench" / f"random-weights-{args.version}"
    if args.write_folder:
        write_folder(args.version, folder)
        return
    if args.convert_only:
        convert_only(folder, args.ram_gib)
        return
    folder_facts = ensure_folder(args.version, folder)
    if args.engine:
        os.environ["COSYVOICE_ENGINE"] = args.engine  # the worker inherits it
    import cosyvoice_mac

    report = {"stand_in_for": args.stand_in_for, "command": " ".join([Path(sys.executable).name, *sys.argv])}
    report.update(started_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), machine=machine())
    report.update(packages=packages(), settings={"ram_gib_simulated": args.ram_gib or None, "requests": args.requests})
    report["settings"].update(text=args.text or "the sentences of TEXTS", prompt_s=args.prompt_s)
    report["settings"].update({key: value for key, value in os.environ.items() if key.startswith("COSYVOICE_")})
    report.update({"version": args.version, "folder": str(folder), "folder_bytes": folder_facts["bytes"]})
    report["package"] = str(Path(cosyvoice_mac.__file__).parent)  # the checkout the worker runs
    if args.convert_first:
        report["first_start_conversion"] = convert_first(folder, args.ram_gib)
    started = time.perf_counter()
    factory = factory_for(args.ram_gib)
    report.update(
        measure(folder, args.prompt_s, args.timeout, args.timeline, args.requests, factory, args.text, args.together)
    )
    report["measured_s"] = time.perf_counter() - started
    report["load_average_at_end"] = os.getloadavg()
    if report["worker"].get("engine") == "mlx":
        report["mlx_weights_by_stage"] = mlx_weights_by_stage(folder)
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
