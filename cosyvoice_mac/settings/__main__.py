"""``python -m cosyvoice_mac.settings --markdown``: print docs/configuration.md from the table."""

from __future__ import annotations

import argparse

from cosyvoice_mac.settings.markdown import markdown

parser = argparse.ArgumentParser(prog="python -m cosyvoice_mac.settings", description=__doc__)
parser.add_argument("--markdown", action="store_true", help="print the configuration page (Markdown)")
args = parser.parse_args()
if args.markdown:
    print(markdown(), end="")
else:
    parser.print_help()
