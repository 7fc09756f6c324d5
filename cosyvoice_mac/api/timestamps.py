"""The answer of ``/v1/audio/speech/with-timestamps``: the audio as base64 with its timing, in the shape of
ElevenLabs' "with timestamps" route (``alignment``: every character of the text and when it is spoken), plus the
``words`` (word, start, end: the timing the captions are written from) and the take check's outcome."""

from __future__ import annotations

import base64


def character_alignment(words: list[dict]) -> dict:
    """ElevenLabs' ``alignment``: the words' characters, each word's time shared by its characters, and a space
    between words spanning the pause between them."""
    characters: list[str] = []
    starts: list[float] = []
    ends: list[float] = []
    for index, word in enumerate(words):
        if index:
            characters.append(" ")
            starts.append(ends[-1])
            ends.append(max(ends[-1], word["start"]))
        text, start, end = str(word["word"]), float(word["start"]), float(word["end"])
        step = (end - start) / max(1, len(text))
        for position, character in enumerate(text):
            characters.append(character)
            starts.append(round(start + position * step, 3))
            ends.append(round(start + (position + 1) * step, 3))
    return {
        "characters": characters,
        "character_start_times_seconds": starts,
        "character_end_times_seconds": ends,
    }


def timestamped_answer(result, encoded: bytes, response_format: str) -> dict:
    """The JSON body: ``audio_base64`` (``encoded`` in ``response_format``), ``alignment``, ``words`` and ``check``."""
    words = result.words or []
    return {
        "audio_base64": base64.b64encode(encoded).decode("ascii"),
        "response_format": response_format,
        "alignment": character_alignment(words),
        "words": words,
        "check": result.check_status,
        "job_id": result.job_id,
    }
