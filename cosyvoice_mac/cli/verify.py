"""``cosyvoice-mac verify FILE...``: what each file's content credentials say, and whether their signature and
hash still hold (``provenance.verify``). Light: it loads c2pa, never the model.

Exit status: 0 when every file's credentials hold; 1 when a file was changed after signing or its signature
fails (whatever the other files say); else 2 when a file carries no credentials or cannot be read.
"""

from __future__ import annotations

import json
from pathlib import Path

from cosyvoice_mac.cli.common import EXIT_FAILED, EXIT_REFUSED

EXIT_CHANGED = EXIT_FAILED
EXIT_NO_CREDENTIALS = EXIT_REFUSED


def add_verify(commands) -> None:
    verify = commands.add_parser(
        "verify",
        help="show a file's content credentials and whether they still hold",
        description="Show what a WAV, FLAC or MP3 file's content credentials (C2PA) say: that it is "
        "AI-generated, which model, version and engine made it, when, and the voice's hash; and whether their "
        "signature and the file's hash still hold (a file changed after it was made says so). Exit codes: 0 "
        f"every file holds; {EXIT_CHANGED} a file was changed or its signature fails; {EXIT_NO_CREDENTIALS} a "
        "file carries no content credentials or cannot be read.",
    )
    verify.add_argument("files", nargs="+", type=Path, metavar="FILE", help="a file the app made")
    verify.add_argument("--json", action="store_true", help="print each file's findings as one JSON line")
    verify.set_defaults(handler=_verify)


def _verify(args) -> int:
    from cosyvoice_mac.provenance.verify import NONE, UNREADABLE, VALID, read_credentials

    verdicts = set()
    for path in args.files:
        found = read_credentials(path)
        verdicts.add(found.verdict)
        if args.json:
            print(json.dumps({"path": str(path), **found.as_dict()}, ensure_ascii=False))
        else:
            print("\n".join(found.lines()))
    if any(verdict not in (VALID, NONE, UNREADABLE) for verdict in verdicts):
        return EXIT_CHANGED  # changed, or a signature that fails: the worst news first
    return EXIT_NO_CREDENTIALS if verdicts & {NONE, UNREADABLE} else 0
