"""Memory over a soak of alternating Gradio-API and ``/v1`` jobs with the preview voice, from outside.

    python bench/soak_memory.py [--jobs 150] [--every 10] [--warm-up 10] [--json FILE]

Starts the app as the reliability suite does (``tests/reliability/server.py``: the preview voice, its own
outputs, cache and temporary folders), runs ``--warm-up`` jobs, then ``--jobs`` jobs alternating between
``gradio_client``'s ``/synthesize`` and ``POST /v1/audio/speech``, and samples the resident memory of the page's
process and of the model worker every ``--every`` jobs. Prints JSON: the samples and, per process, the slope
of a least-squares line through ALL the samples, in MB per 100 jobs (a step or a steady climb both show; two
samples would not tell them apart). ``tests/reliability/test_load.py`` runs a shorter soak with the same code.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package and tests

from tests.reliability.soak import run_soak  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=150)
    parser.add_argument("--every", type=int, default=10, help="jobs between memory samples")
    parser.add_argument("--warm-up", type=int, default=10, help="jobs before the first sample")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cosyvoice-soak-") as root:
        figures = run_soak(Path(root), args.jobs, args.every, args.warm_up, log=sys.stderr)
    text = json.dumps(figures, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
