"""A long job's words on its one timeline: each line's words (the engine times them against the line's own audio,
``JobResult.words``) moved by what was cut from the line's start and by where the line sits in the joined audio,
and written beside the job's WAV as one set of captions (``.srt``, ``.vtt``, ``.words.json``)."""

from __future__ import annotations

from pathlib import Path

from cosyvoice_mac.pipeline.takes import Word
from cosyvoice_mac.pipeline.takes.captions import SUFFIXES, caption_text


def line_words(words: list[dict] | None, cut_s: float, length_s: float) -> list[Word]:
    """A line's words after ``cut_s`` seconds were trimmed from its start, kept to the ``length_s`` left."""
    moved = [Word(str(word["word"]), float(word["start"]), float(word["end"])).shifted(-cut_s) for word in words or ()]
    return [Word(word.word, max(0.0, word.start), min(length_s, word.end)) for word in moved if word.end > 0]


def on_timeline(lines: list[tuple[float, list[Word]]]) -> list[Word]:
    """Every line's words, each line starting at its offset (seconds) in the joined audio."""
    return [word.shifted(start) for start, words in lines for word in words]


def caption_companions(out_stem: Path, words: list[Word]) -> dict[Path, bytes]:
    """The caption files of ``words`` to write beside ``<out_stem>.wav``; none when no line was timed."""
    if not words:
        return {}
    return {out_stem.with_suffix(SUFFIXES[kind]): caption_text(words, kind).encode("utf-8") for kind in SUFFIXES}
