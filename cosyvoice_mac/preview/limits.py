"""What the preview voice leaves out of a request, said the same way before a job (the page's action row) and
after it (the result's notes): it follows no instruction and speaks no markup. Torch-free, like ``labels``.

The markup named is the first run the user typed (``[M][AY0][N][UW1][T]``, ``[breath]``, ``<strong>``), so a
note never names ``[breath]`` for ARPAbet.
"""

from __future__ import annotations

import re

from cosyvoice_mac.frontend.special_tokens import ALL_SPECIAL_TOKENS

# A run of special tokens (longest first, so "<|endofprompt|>" wins over a shorter overlap); one run is one example.
_TOKEN = "|".join(re.escape(token) for token in sorted(ALL_SPECIAL_TOKENS, key=len, reverse=True))
MARKUP = re.compile(f"(?:{_TOKEN})")
MARKUP_RUN = re.compile(f"(?:{_TOKEN})+")
EXAMPLE_CHARS = 40  # a longer run is cut with "…"


def markup_example(text: str | None) -> str | None:
    """The first run of markup in ``text`` as typed (cut to EXAMPLE_CHARS), or None when it has none."""
    found = MARKUP_RUN.search(text or "")
    if found is None:
        return None
    run = found.group(0)
    return run if len(run) <= EXAMPLE_CHARS else run[: EXAMPLE_CHARS - 1] + "…"


def instruction_note() -> str:
    return "the preview voice cannot follow instructions; the instruction was ignored"


def markup_note(example: str) -> str:
    return f"the preview voice does not understand markup such as {example}; it was left out"
