"""``bash run.sh doctor``: what this machine is, what runs on it and how fast, in one table and one file.

    bash run.sh doctor                 # every engine and device that works here, in about five minutes
    bash run.sh doctor --tokens 50     # a shorter synthesis (25 speech tokens are one second)
    bash run.sh doctor --minutes 30    # time enough for a slow engine's whole request
    python -m cosyvoice_mac.bench.doctor --json doctor.json --engines torch/cpu,mlx/default

Three parts, each recorded in ``doctor.json`` (a file to attach to a bug report):

1. The machine (:mod:`cosyvoice_mac.bench.machine`): OS, chip and CPU features, memory, the Python
   interpreter's architecture (an x86_64 Python under Rosetta is named), package versions, and the
   onnxruntime execution providers (CoreML on a Mac, CUDA with onnxruntime-gpu) with a timed graph.
2. Each engine and device that works (MLX, MPS, CUDA, CPU): a short synthesis with full-size random
   weights in a process of its own (the benchmark's request, one run after a warm-up): tokens/s, RTF,
   first audio, peak memory (MLX's peak and, on macOS, the process's peak ``phys_footprint``). The prompt is
   encoded by random-weight graphs of the released speech tokenizer's and CAM++'s structure
   (:mod:`cosyvoice_mac.bench.faithful_frontends`: their real cost; built the first time, ~1 GB in the user
   cache), or with ``--frontends stand-in`` by stand-ins of microseconds.
   The whole run keeps to ``--minutes`` (five): each engine gets a share of what is left, and a slow one
   (MLX's CPU backend on Linux) a shorter request (:mod:`cosyvoice_mac.bench.budget`), said in the table;
   one that cannot finish even its warm-up in its share is named as too slow here, not as failed.
3. Parity on the tiny golden vectors when the parity folder is present (``COSYVOICE_PARITY_DIR`` or
   ``../shared/parity``): PyTorch stage by stage on each device (``bench/parity_device.py``), MLX
   through its parity tests.

Exit status 0 when every engine that works also synthesised finite audio and every parity check that
ran passed; 1 otherwise (the table says which).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from cosyvoice_mac.bench.machine import Probe, describe_machine, probe_engines, probe_onnx_providers
from cosyvoice_mac.paths import atomic_write
from cosyvoice_mac.settings import add_argument, env_value, setting

REPO = Path(__file__).resolve().parents[2]
DEFAULT_TOKENS = 100  # four seconds of speech: long enough for a steady tokens/s, short enough for CI
DEFAULT_MINUTES = 5.0  # the whole doctor, on any machine
PARITY_S = 60.0  # each engine's parity check at least, kept back from its synthesis share (MLX's tests: ~30 s)
MIN_SHARE_S = 30.0  # an engine's synthesis never gets less (only a --minutes too short for the engines needs it)
CHILD_START_S = 10.0  # of a share: the child's imports before its own clock starts
# Max abs error allowed per stage family in the doctor's summary: the parity suite's atol plus its rtol
# times the largest value of that stage (mels reach ~10; logits and waves are checked absolutely).
STAGE_LIMITS = {"llm": 1e-4, "flow": 2e-3, "first_chunk": 2e-3, "hift": 1e-3}
FAITHFUL, STAND_IN = "faithful", "stand-in"  # the bench's --frontends (measure's names; this module stays torch-free)


def parity_folder() -> Path | None:
    configured = env_value("parity_dir")
    folder = Path(configured) if configured else REPO.parent / "shared" / "parity"
    return folder if (folder / "manifest.json").is_file() else None


def synthesis(probe: Probe, version: str, tokens: int, share_s: float, frontends: str = FAITHFUL) -> dict:
    """The benchmark's request on ``probe``'s engine and device, in a child process that keeps to ``share_s``
    seconds (a shorter request where the engine is slow): the figures that matter."""
    device = "auto" if probe.engine == "mlx" else probe.device
    command = [sys.executable, "-m", "cosyvoice_mac.bench", "--in-process", "--quiet", "--version", version]
    command += ["--devices", device, "--engine", probe.engine, "--dtypes", "auto", "--runs", "1"]
    command += ["--tokens", str(tokens), "--no-floors", "--no-decode-profile"]
    command += ["--budget-s", f"{max(share_s - CHILD_START_S, 1.0):.0f}", "--frontends", frontends]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=share_s, check=False)
    except subprocess.TimeoutExpired:
        return {
            "ok": None,
            "too_slow": f"its load and one-second warm-up need more than the {share_s:.0f} s it had of the "
            "doctor's time (--minutes gives it more)",
        }
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"ok": False, "error": f"exit status {done.returncode}: {last[:300]}"}
    report = json.loads(done.stdout)["benchmarks"][0]
    median = report["median"]
    peak = report.get("peak_device_mb") or report.get("peak_rss_mb")
    return {
        "ok": bool(median["wave_finite"] and median["mel_finite"]),
        "seconds": round(time.perf_counter() - started, 1),
        "engine_used": report.get("engine"),
        "llm_dtype": report.get("llm_dtype"),
        "flow_dtype": report.get("flow_dtype"),
        "tokens": report["tokens"],
        "tokens_asked": report.get("tokens_asked", tokens),
        "shortened": report.get("shortened"),
        "tokens_per_s": round(median["llm_tokens_per_s"], 2),
        "rtf": round(median["rtf"], 3),
        "end_to_end_s": round(median["end_to_end_s"], 3),
        "first_audio_s": _rounded(median.get("first_audio_s")),
        "first_audio_new_voice_s": _rounded(median.get("first_audio_new_voice_s")),
        "new_voice_with_frontends_s": _rounded(median.get("new_voice_with_frontends_s")),
        "frontend_s": _rounded(median.get("frontend_s")),
        "load_s": round(report["load_s"], 2),
        "peak_memory_mb": round(peak, 1) if peak else None,
        "peak_rss_mb": round(report["peak_rss_mb"], 1),
        "peak_footprint_mb": report.get("peak_footprint_mb"),
        "audio_s": round(median["audio_s"], 2),
    }


def _new_voice(result: dict) -> float | None:
    """A new voice's first audio as a user waits for it: its prompt encoded, then its first chunk (reports written
    before the frontends were timed with it: the first chunk alone)."""
    whole = result.get("new_voice_with_frontends_s")
    return whole if whole is not None else result.get("first_audio_new_voice_s")


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _run_json(command: list[str], env: dict, timeout_s: float) -> tuple[int | None, str, str]:
    """(exit status, stdout, stderr) of a parity child; status None: it had no result within ``timeout_s``."""
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False, env=env, cwd=REPO
        )
    except subprocess.TimeoutExpired:
        return None, "", ""
    return done.returncode, done.stdout, done.stderr


def _parity_too_slow(timeout_s: float) -> dict:
    """A parity check that did not end in its time: said, not failed (a slow machine is not a wrong one)."""
    return {"ok": None, "too_slow": f"no result within its {timeout_s:.0f} s (--minutes gives it more)"}


def torch_parity(device: str, folder: Path, timeout_s: float = PARITY_S) -> dict:
    """Every stage's max abs error on ``device`` against the golden vectors, and whether all are within tolerance."""
    script = REPO / "bench" / "parity_device.py"
    if not script.is_file():
        return {"ok": None, "skipped": "needs the source checkout (bench/parity_device.py)"}
    env = {**os.environ, setting("parity_dir").env: str(folder)}
    status, stdout, stderr = _run_json([sys.executable, str(script), "--device", device], env, timeout_s)
    if status is None:
        return _parity_too_slow(timeout_s)
    if status != 0:
        return {"ok": False, "error": (stderr.strip().splitlines() or ["(no output)"])[-1][:300]}
    report, failures = json.loads(stdout), []
    for version, results in report["versions"].items():
        for stage, value in results.items():
            limit = next((limit for family, limit in STAGE_LIMITS.items() if stage.startswith(family)), None)
            if stage == "e2e_pipeline" and value != "within tolerance":
                failures.append(f"{version} {stage}: {value}")
            elif isinstance(value, float) and limit is not None and value > limit:
                failures.append(f"{version} {stage}: {value:.2e} > {limit:.0e}")
    return {"ok": not failures, "failures": failures, "stages": report["versions"]}


def mlx_parity(folder: Path, timeout_s: float = PARITY_S) -> dict:
    """The MLX parity tests on this machine's MLX device: passed and failed counts."""
    tests = REPO / "tests" / "test_parity_mlx.py"
    if not tests.is_file():
        return {"ok": None, "skipped": "needs the source checkout (tests/test_parity_mlx.py)"}
    env = {**os.environ, setting("parity_dir").env: str(folder)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)]
    status, stdout, stderr = _run_json(command, env, timeout_s)
    if status is None:
        return _parity_too_slow(timeout_s)
    summary = (stdout.strip().splitlines() or [stderr.strip()])[-1]
    return {"ok": status == 0, "summary": summary}


def table(document: dict) -> str:
    machine = document["machine"]
    lines = [
        f"machine: {machine['os']} {machine['os_version']}, {machine['chip']}, {machine['cores']} cores, "
        f"{machine['memory_gib']} GiB; Python {machine['python']} ({machine['python_architecture']}"
        + (", UNDER ROSETTA: install an arm64 Python" if machine["under_rosetta"] else "")
        + ")",
        f"cpu features: {', '.join(machine['cpu_flags']) or '-'}",
        "onnxruntime: "
        + ", ".join(
            f"{p['provider']} {'%.2f ms' % p['ms_per_run'] if p.get('loads') else 'does not load'}"
            for p in document["onnx_providers"]
        ),
        "",
        f"{'engine':<14}{'works':<7}{'tok/s':>8}{'RTF':>8}{'first audio':>13}{'new voice':>11}{'peak MB':>10}  parity",
    ]
    for row in document["engines"]:
        result = row.get("synthesis") or {}
        parity = row.get("parity") or {}
        unchecked = parity.get("skipped") or ("too slow here" if "too_slow" in parity else "-")
        verdict = {True: "ok", False: "FAILED", None: unchecked}[parity.get("ok")]
        if not row["works"]:
            lines.append(f"{row['name']:<14}{'no':<7}  {row['detail'][:70]}")
            continue
        if "synthesis" not in row:  # --no-synthesis: the probe and the parity only
            lines.append(f"{row['name']:<14}{'yes':<7}{'-':>8}{'-':>8}{'-':>13}{'-':>11}{'-':>10}  {verdict}")
            continue
        if result.get("ok") is None and "too_slow" in result:
            lines.append(f"{row['name']:<14}{'yes':<7}  too slow here: {result['too_slow']}")
            lines.append(f"{'':<14}parity: {verdict}")  # checked all the same: the figures are what was slow
            continue
        if not result.get("ok"):
            lines.append(f"{row['name']:<14}{'yes':<7}  synthesis FAILED: {result.get('error', 'not finite')[:60]}")
            continue

        def cell(value, width, spec):
            return f"{'-' if value is None else format(value, spec):>{width}}"

        lines.append(
            f"{row['name']:<14}{'yes':<7}{cell(result['tokens_per_s'], 8, '.1f')}{cell(result['rtf'], 8, '.3f')}"
            f"{cell(result['first_audio_s'], 13, '.2f')}{cell(_new_voice(result), 11, '.2f')}"
            f"{cell(result['peak_memory_mb'], 10, '.0f')}  {verdict}"
        )
        if result.get("shortened"):  # a slow engine: what its figures are of
            lines.append(f"{'':<14}shorter run, in the doctor's time: {result['shortened']}")
    return "\n".join(lines)


def synthesis_share(part_s: float, with_parity: bool) -> float:
    """An engine's seconds for its synthesis: its part of the run, less what its parity check is kept."""
    return max(MIN_SHARE_S, part_s - (PARITY_S if with_parity else 0.0))


def prepare_frontends(version: str, frontends: str) -> dict:
    """The prompt frontends the syntheses encode with; the faithful graphs are built here the first time (minutes
    on a 2-core CPU, once per machine), before any engine's share of the doctor's time starts."""
    if frontends != FAITHFUL:
        return {"kind": frontends}
    from cosyvoice_mac.bench.faithful_frontends import faithful_frontends_folder  # torch: only when it is needed

    started = time.perf_counter()
    folder, record = faithful_frontends_folder(version)
    return {"kind": FAITHFUL, "folder": str(folder), "ready_s": round(time.perf_counter() - started, 1), **record}


def run_doctor(args: argparse.Namespace) -> dict:
    chosen = set(args.engines.split(",")) if args.engines else None
    document = {
        "doctor_version": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": describe_machine().as_dict(),
        "onnx_providers": probe_onnx_providers(),
        "version": args.version,
        "engines": [],
    }
    folder = None if args.no_parity else parity_folder()
    document["parity_folder"] = str(folder) if folder else None
    document["minutes"] = args.minutes
    probes = [probe for probe in probe_engines() if chosen is None or probe.name in chosen]
    engines_left = sum(probe.works for probe in probes)
    if engines_left and not args.no_synthesis:
        document["frontends"] = prepare_frontends(args.version, args.frontends)
    deadline = time.monotonic() + 60 * args.minutes  # a first run's frontend build is not part of the minutes
    for probe in probes:
        row = {"name": probe.name, "engine": probe.engine, "device": probe.device, "works": probe.works}
        row["detail"] = probe.detail
        part_s = (deadline - time.monotonic()) / max(engines_left, 1)  # an even part of what is left
        part_ends = time.monotonic() + part_s
        if probe.works and not args.no_synthesis:
            share = synthesis_share(part_s, folder is not None)
            print(f"doctor: synthesising on {probe.name} (at most {share:.0f} s) ...", file=sys.stderr, flush=True)
            row["synthesis"] = synthesis(probe, args.version, args.tokens, share, args.frontends)
        if probe.works and folder is not None:
            print(f"doctor: parity on {probe.name} ...", file=sys.stderr, flush=True)
            timeout = max(PARITY_S, part_ends - time.monotonic())  # its reserve, and what the synthesis left
            row["parity"] = (
                mlx_parity(folder, timeout) if probe.engine == "mlx" else torch_parity(probe.device, folder, timeout)
            )
        engines_left -= probe.works
        document["engines"].append(row)
    return document


def healthy(document: dict) -> bool:
    """No engine that works failed to synthesise finite audio and no parity check failed; what was too slow for
    its share of the doctor's time is said in the table, not counted as a failure."""
    for row in document["engines"]:
        if row["works"] and "synthesis" in row and row["synthesis"].get("ok") is False:
            return False
        if row.get("parity", {}).get("ok") is False:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bash run.sh doctor", description=__doc__.split("\n")[0])
    add_argument(parser, "version")
    parser.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help="speech tokens to synthesise (25 = 1 s)")
    parser.add_argument(
        "--minutes",
        type=float,
        default=DEFAULT_MINUTES,
        help=f"the whole run's time (default: {DEFAULT_MINUTES:g}); a slow engine gets a shorter request",
    )
    parser.add_argument("--engines", help="comma list of engine/device names to try (default: all), e.g. torch/cpu")
    parser.add_argument("--json", default="doctor.json", help="where to write the report (default: doctor.json)")
    parser.add_argument("--no-synthesis", action="store_true", help="only the machine and the engine probes")
    parser.add_argument("--no-parity", action="store_true", help="skip the golden-vector parity checks")
    parser.add_argument(
        "--frontends",
        choices=(FAITHFUL, STAND_IN),
        default=FAITHFUL,
        help="the prompt frontends of the random-weight syntheses: graphs of the released speech tokenizer's and "
        "CAM++'s structure, so a new voice's figure pays their cost (built once per machine, not counted in "
        "--minutes), or stand-ins of microseconds (default: faithful)",
    )
    args = parser.parse_args(argv)
    if args.tokens < 25:
        parser.error("--tokens must be at least 25 (one second of speech)")
    document = run_doctor(args)
    document["healthy"] = healthy(document)
    atomic_write(args.json, json.dumps(document, indent=1).encode("utf-8"))  # a full disk keeps the last report
    print(table(document))
    print(f"\nWrote {args.json}: attach it to a bug report.", file=sys.stderr)
    return 0 if document["healthy"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
