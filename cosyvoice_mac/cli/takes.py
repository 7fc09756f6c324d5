"""What a command says about the take check and writes of its word timing, the same for a job run here and one
sent to the app: a warning line when a sentence stays flagged (the command still succeeds: the best take is
saved), and ``--captions`` written beside ``--out``."""

from __future__ import annotations

import sys
from pathlib import Path

from cosyvoice_mac.pipeline.takes import FLAGGED, Word
from cosyvoice_mac.pipeline.takes.captions import SUFFIXES, caption_text


def say_check(status: str | None, notes: list[str]) -> None:
    """One line on stderr: the check's outcome when it retook or flagged something (nothing when it passed)."""
    if status == FLAGGED:
        print(f"warning: the take check flagged this take (the best one is kept): {'; '.join(notes)}", file=sys.stderr)
    elif status is not None and notes:
        print(f"check: {status}: {'; '.join(notes)}", file=sys.stderr)


def write_captions_beside(out: Path, words: list[dict] | None, kind: str | None) -> Path | None:
    """``--captions``: the words' times as ``kind`` beside ``out`` (``<out stem>.srt``, ``.vtt``, ``.words.json``);
    None, with a note, when the job was not timed."""
    if kind is None:
        return None
    if words is None:
        print("note: no captions: the take check (which times the words) was off for this job", file=sys.stderr)
        return None
    path = Path(out).with_suffix(SUFFIXES[kind])
    timed = [Word(str(word["word"]), float(word["start"]), float(word["end"])) for word in words]
    path.write_text(caption_text(timed, kind), encoding="utf-8")
    print(f"captions: {path}", file=sys.stderr)
    return path
