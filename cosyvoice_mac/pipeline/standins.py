"""Stand-in text tokenizer for full-size models with RANDOM weights (benchmarks only).

A random-weight model has no tokenizer files; its speech is noise whatever the ids, so any
deterministic text -> ids map with the real special tokens does the job. Never used for a real model.
"""

from __future__ import annotations

import re

from cosyvoice_mac.frontend.special_tokens import ALL_SPECIAL_TOKENS, ENDOFPROMPT_ID

_FIRST_SPECIAL_ID = ENDOFPROMPT_ID - 3  # <|endoftext|> is 151643, as in Qwen2
_BYTE_OFFSET = 1000  # keep byte ids away from the few ids BPE merges use most


class ByteStandInTokenizer:
    """UTF-8 bytes -> ids, special tokens -> their Qwen2/CosyVoice ids. A stand-in, clearly named."""

    is_stand_in = True

    def __init__(self):
        self._special = {token: _FIRST_SPECIAL_ID + index for index, token in enumerate(ALL_SPECIAL_TOKENS)}
        pattern = "|".join(re.escape(token) for token in sorted(self._special, key=len, reverse=True))
        self._splitter = re.compile(f"({pattern})")

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in self._splitter.split(text):
            if piece in self._special:
                ids.append(self._special[piece])
            elif piece:
                ids.extend(_BYTE_OFFSET + byte for byte in piece.encode("utf-8"))
        return ids
