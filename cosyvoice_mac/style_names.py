"""The one rule for a style's name, shared by a saved voice's recordings (the library, a voices file, every
door's style field) and the inline ``(style)`` tag (``frontend/inline.py`` builds its grammar from
:data:`STYLE_PATTERN`), so every recording a voice holds can be asked for inline and no tag can name what no
recording could be called.

A style is one lowercase word: a tag must stand out from prose in round brackets ("(see above)", "(1)",
"(Note)"), and a library tells styles apart whatever the case they were typed in, so a name is kept lowercased.
Torch-free, below the request contract.
"""

from __future__ import annotations

import re

STYLE_PATTERN = "[a-z][a-z_-]{1,23}"
STYLE_NAME = re.compile(STYLE_PATTERN)
STYLE_RULE = "a style is one word of 2 to 24 letters a-z, '-' or '_' (happy, whisper, car-noisy)"


def style_name(text: str) -> str:
    """``text`` as a style's name: stripped and lowercased; ValueError saying the rule for anything else."""
    if not isinstance(text, str):
        raise ValueError(f"{STYLE_RULE}, not {type(text).__name__}")
    name = text.strip().lower()
    if not STYLE_NAME.fullmatch(name):
        raise ValueError(f"{STYLE_RULE}; {text.strip()[:40]!r} is not")
    return name
