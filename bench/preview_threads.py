"""The preview voice's CPU cost and time for the same sentences by onnxruntime thread setting, as JSON: ``default``
(a pool of every core whose idle threads spin, what a worker without ``--torch-threads`` gets), ``no_spinning`` (the
same pool, idle threads sleep), ``one_thread`` (what a worker started with ``--torch-threads 1`` gets, no pool).
Each mode in a fresh interpreter, interleaved, medians of --rounds.

``python -m bench.preview_threads [--sentences 8] [--rounds 2]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MODES = ("default", "no_spinning", "one_thread")
CHILD = """
import json, sys, time
import onnxruntime
from cosyvoice_mac.preview import piper_tts
mode, sentences = sys.argv[1], int(sys.argv[2])
if mode == "no_spinning":
    class Options(onnxruntime.SessionOptions):
        def __init__(self):
            super().__init__()
            self.add_session_config_entry("session.intra_op.allow_spinning", "0")
    onnxruntime.SessionOptions = Options
speaker = piper_tts.PiperSpeaker(threads=1 if mode == "one_thread" else None)
speaker.speak("Warm up.")
cpu, wall = time.process_time(), time.perf_counter()
for n in range(sentences):
    speaker.speak(f"This is test sentence number {n}, spoken by the preview voice.", seed=n)
print(json.dumps({"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            done = subprocess.run(
                [sys.executable, "-c", CHILD, mode, str(args.sentences)],
                cwd=REPO_ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    medians = {
        mode: {key: round(statistics.median(run[key] for run in results), 3) for key in ("cpu_s", "wall_s")}
        for mode, results in runs.items()
    }
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None
    print(
        json.dumps(
            {
                "sentences": args.sentences,
                "cores": os.cpu_count(),
                "load_average": load,
                "medians": medians,
                "all": runs,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
