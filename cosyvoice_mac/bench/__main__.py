"""``python -m cosyvoice_mac.bench``: the benchmark's command line (:mod:`cosyvoice_mac.bench.cli`)."""

from cosyvoice_mac.bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
