"""Does the typed transcript say what the recording says? The speech recogniser's words against the typed
ones, compared as letters and digits only (case, punctuation and spacing do not count), so a transcript of
another recording is caught before zero-shot mode reads it with the wrong voice.
"""

from __future__ import annotations

import difflib
import unicodedata

MATCHING = 0.6  # below this share of matching characters the transcript is said not to match


def spoken_letters(text: str) -> str:
    """``text`` folded to its letters and digits (NFKC, case-folded): what a recogniser can be compared on."""
    folded = unicodedata.normalize("NFKC", text or "").casefold()
    return "".join(char for char in folded if unicodedata.category(char)[0] in "LN")


def transcript_agreement(typed: str, heard: str) -> float:
    """0 (nothing alike) to 1 (the same words): difflib's ratio of the two texts' letters."""
    typed, heard = spoken_letters(typed), spoken_letters(heard)
    if not typed or not heard:
        return 0.0
    return difflib.SequenceMatcher(None, typed, heard, autojunk=False).ratio()


def transcript_matches(typed: str, heard: str) -> bool:
    return transcript_agreement(typed, heard) >= MATCHING
