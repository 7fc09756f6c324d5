"""Lines per minute of a long batch on a local Ray cluster (issue 48): the app's own engine (one worker process,
the CLI's ``--local``), then ``--cluster local:1`` and ``local:2``, on the preview voice (no weights needed).

    python bench/cluster_lines.py --lines 40 --json bench/results/issue48_cluster/preview_40.json

Each configuration runs the same batch (its own folder, the same seed) through ``longform.runner.run_batch``,
as the CLI does; the workers are loaded before the clock starts. The overhead the cluster adds to a line is
local:1's wall time per line less the time its worker spent on the line (the ``total`` of each line's sidecar
``timings``): the round trip, the copy of the samples and the driver's saving. Every line is checked equal to
the engine's. JSON on stdout (and ``--json``), with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosyvoice_mac import __version__  # noqa: E402
from cosyvoice_mac.preview import PIPELINE_FACTORY, PREVIEW  # noqa: E402

SENTENCES = (
    "The ship left the harbour before dawn.",
    "Nobody on the pier saw it go.",
    "By noon the wind had turned to the west.",
    "The captain wrote a short line in the log.",
    "Then the rain began, and it did not stop.",
)


def _lines(count: int) -> bytes:
    return "\n".join(SENTENCES[index % len(SENTENCES)] for index in range(count)).encode() + b"\n"


def _batch(speak, data: bytes, folder: Path) -> float:
    from cosyvoice_mac.longform.runner import run_batch

    started = time.perf_counter()
    result = run_batch(data, "txt", folder, speak, settings={"model": PREVIEW}, seed=1)
    assert result.report[0]["made"] == result.total, result.report
    return time.perf_counter() - started


def _on_engine(data: bytes, root: Path) -> dict:
    from cosyvoice_mac.engine import Engine, WorkerConfig
    from cosyvoice_mac.longform.speakers import EngineSpeak

    config = WorkerConfig(model_dir=None, pipeline_factory=PIPELINE_FACTORY, outputs_dir=str(root / "outputs-engine"))
    with Engine(config, max_queue=4, job_timeout_s=None) as engine:
        assert engine.start(wait=True), engine.status()
        seconds = _batch(EngineSpeak(engine, interface="cli", timeout_s=None), data, root / "engine")
    return {"config": "engine (one worker process)", "seconds": seconds}


def _on_cluster(data: bytes, root: Path, workers: int) -> dict:
    from cosyvoice_mac.cluster.pool import WorkerPool
    from cosyvoice_mac.cluster.speak import ClusterSpeak
    from cosyvoice_mac.cluster.wire import ModelAsk

    pool = WorkerPool.open(f"local:{workers}", ModelAsk(PREVIEW, __version__))  # started here, shut down by close
    try:
        outputs = root / f"outputs-local{workers}"
        seconds = _batch(ClusterSpeak(pool, outputs, interface="cli"), data, root / f"local{workers}")
    finally:
        pool.close()
    worked = [json.loads(path.read_text())["timings"]["total"] for path in outputs.glob("*.json")]
    return {"config": f"cluster local:{workers}", "seconds": seconds, "worker_seconds": sum(worked)}


def _same_lines(root: Path, folder: str) -> bool:
    names = sorted(path.name for path in (root / "engine").glob("*.wav"))
    return names == sorted(path.name for path in (root / folder).glob("*.wav")) and all(
        np.array_equal(soundfile.read(root / "engine" / name)[0], soundfile.read(root / folder / name)[0])
        for name in names
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=40)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    data = _lines(args.lines)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        os.environ["COSYVOICE_CACHE_DIR"] = str(root / "cache")  # before the cluster starts: its workers see it
        runs = [_on_engine(data, root), _on_cluster(data, root, 1), _on_cluster(data, root, 2)]
        for run in runs:
            run["lines_per_minute"] = round(60 * args.lines / run["seconds"], 2)
            if run["config"].startswith("cluster"):
                run["same_lines_as_engine"] = _same_lines(root, run["config"].split()[-1].replace(":", ""))
    one, two = runs[1], runs[2]
    report = {
        "lines": args.lines,
        "runs": runs,
        "local2_over_local1": round(one["seconds"] / two["seconds"], 3),
        "local2_over_engine": round(runs[0]["seconds"] / two["seconds"], 3),
        "cluster_overhead_ms_per_line": round(1000 * (one["seconds"] - one["worker_seconds"]) / args.lines, 1),
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "cpus": os.cpu_count(),
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
