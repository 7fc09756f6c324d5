"""What a process pays before it does anything useful, each in a fresh interpreter (medians of --runs), as JSON:

- a CLI refusal of a bad request (``synth --text ""``): wall and CPU seconds until it exits;
- the preview voice's load with its seeded graph kept in the cache, and with the graph rewritten (``onnx``
  imported and the graph rebuilt, as every start did before the graph was kept);
- the preview voice's load and first sentence with its base voice's statistics kept in the cache, and with them
  measured (the reference spoken and analysed, as every start did before they were kept);
- Gradio's import after the package's (the app, the CLI's app and every test process that imports Gradio pay it;
  the package skips Gradio's per-import type-stub rewrite: cosyvoice_mac/gradio_stubs.py).

``python -m bench.startup_costs [--runs 3] [--prompt WAV]`` (a prompt is made with espeak-ng when not given).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PREVIEW_LOAD = """
import json, sys, time
from cosyvoice_mac.preview import piper_tts
started = time.perf_counter()
piper_tts.PiperSpeaker()
print(json.dumps({"load_s": time.perf_counter() - started, "onnx_imported": "onnx" in sys.modules}))
"""
PREVIEW_FIRST_SENTENCE = """
import json, time
from cosyvoice_mac.engine.runtime import warmup_prompt
from cosyvoice_mac.preview.backend import PreviewVoice
started = time.perf_counter()
voice = PreviewVoice.from_pretrained()
speaker = voice.prepare_prompt(warmup_prompt(24000), sample_rate=24000)  # the worker's warm-up prompt
assert [result.audio for result in voice.synthesize("Hi.", speaker=speaker, seed=1)]
print(json.dumps({"load_s": time.perf_counter() - started}))
"""


def _child(command: list[str], env: dict) -> tuple[float, float, str]:
    """(wall s, CPU s of the child, its stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO_ROOT, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--prompt", help="a prompt WAV for the CLI case (default: made with espeak-ng)")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="startup-costs-"))
    prompt = args.prompt or str(scratch / "prompt.wav")
    if not args.prompt:
        subprocess.run(["espeak-ng", "-w", prompt, "This is a prompt for the timing."], check=True)
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "COSYVOICE_CACHE_DIR": str(scratch / "cache")}
    refusal = [sys.executable, "-m", "cosyvoice_mac", "synth", "--random-weights", "cosyvoice3"]
    refusal += ["--prompt-wav", prompt, "--device", "cpu", "--out", str(scratch / "o.wav"), "--text", "", "--seed", "1"]
    rows = {name: [] for name in ("cli_refusal", "preview_load_kept", "preview_load_rewritten", "gradio_import")}
    rows |= {"preview_first_sentence_stats_kept": [], "preview_first_sentence_stats_measured": []}
    _child([sys.executable, "-c", PREVIEW_FIRST_SENTENCE], env)  # keeps the graph (and statistics) for the runs below
    for _ in range(args.runs):
        wall, cpu, _ = _child(refusal, env)
        rows["cli_refusal"].append({"wall_s": wall, "cpu_s": cpu})
        wall, cpu, _ = _child([sys.executable, "-c", "import cosyvoice_mac, gradio"], env)
        rows["gradio_import"].append({"wall_s": wall, "cpu_s": cpu})
        for mode in ("kept", "rewritten"):
            # an empty cache folder: the graph is rewritten (onnx imported), as every start did before it was kept
            cache = {"COSYVOICE_CACHE_DIR": tempfile.mkdtemp(dir=scratch)} if mode == "rewritten" else {}
            wall, cpu, out = _child([sys.executable, "-c", PREVIEW_LOAD], {**env, **cache})
            rows[f"preview_load_{mode}"].append({"wall_s": wall, "cpu_s": cpu, **json.loads(out)})
        for mode in ("kept", "measured"):
            if mode == "measured":  # the statistics only: the graph stays kept
                for kept in (scratch / "cache" / "preview").glob("base-voice-*.npy"):
                    kept.unlink()
            wall, cpu, out = _child([sys.executable, "-c", PREVIEW_FIRST_SENTENCE], env)
            rows[f"preview_first_sentence_stats_{mode}"].append({"wall_s": wall, "cpu_s": cpu, **json.loads(out)})
    summary = {
        name: {key: round(statistics.median(run[key] for run in runs), 3) for key in ("wall_s", "cpu_s")}
        | ({"load_s": round(statistics.median(run["load_s"] for run in runs), 3)} if "load_s" in runs[0] else {})
        for name, runs in rows.items()
    }
    with open("/proc/loadavg") if Path("/proc/loadavg").exists() else open(os.devnull) as load:
        load_average = load.read().split()[:3]
    print(json.dumps({"runs": args.runs, "load_average": load_average, "medians": summary, "all": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
