"""Captions from timed words: SubRip (.srt), WebVTT (.vtt) and the word list (.words.json: word, start, end;
``.json`` is the WAV's sidecar), written beside the WAV they time. Words are grouped into cues the way subtitles
are read: a cue ends at a sentence's end, at a pause, or before it grows past a line's length. Torch-free."""

from __future__ import annotations

import json
from pathlib import Path

from cosyvoice_mac.paths import atomic_write
from cosyvoice_mac.pipeline.takes.check import Word

FORMATS = ("srt", "vtt", "json")
SUFFIXES = {"srt": ".srt", "vtt": ".vtt", "json": ".words.json"}  # beside <stem>.wav and its sidecar <stem>.json
MAX_CUE_CHARACTERS = 42  # one subtitle line (the BBC's and Netflix's guideline)
MAX_CUE_S = 7.0  # longer than this is no longer read as one caption
CUE_PAUSE_S = 0.8  # a pause this long between words starts a new cue
SENTENCE_ENDS = tuple(".!?。！？…")


def cue_groups(words: list[Word]) -> list[list[Word]]:
    """The words of each caption cue, in order."""
    groups: list[list[Word]] = []
    group: list[Word] = []
    for word in words:
        if group:
            text_length = sum(len(w.word) + 1 for w in group) + len(word.word)
            if (
                text_length > MAX_CUE_CHARACTERS
                or word.start - group[-1].end > CUE_PAUSE_S
                or word.end - group[0].start > MAX_CUE_S
            ):
                groups.append(group)
                group = []
        group.append(word)
        if word.word.endswith(SENTENCE_ENDS):
            groups.append(group)
            group = []
    if group:
        groups.append(group)
    return groups


def cues(words: list[Word]) -> list[tuple[float, float, str]]:
    """(start, end, text) of each caption cue, in order."""
    found = []
    for group in cue_groups(words):
        joiner = "" if all(len(word.word) == 1 and not word.word.isascii() for word in group) else " "
        found.append((group[0].start, max(group[-1].end, group[0].start), joiner.join(w.word for w in group)))
    return found


def _clock(seconds: float, separator: str) -> str:
    millis = max(0, round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return f"{hours:02d}:{minutes:02d}:{rest // 1000:02d}{separator}{rest % 1000:03d}"


def srt_text(words: list[Word]) -> str:
    blocks = [
        f"{index}\n{_clock(start, ',')} --> {_clock(end, ',')}\n{text}\n"
        for index, (start, end, text) in enumerate(cues(words), 1)
    ]
    return "\n".join(blocks)


def vtt_text(words: list[Word]) -> str:
    blocks = [f"{_clock(start, '.')} --> {_clock(end, '.')}\n{text}\n" for start, end, text in cues(words)]
    return "WEBVTT\n\n" + "\n".join(blocks)


def json_text(words: list[Word]) -> str:
    return json.dumps([word.as_dict() for word in words], ensure_ascii=False, indent=1) + "\n"


def caption_text(words: list[Word], kind: str) -> str:
    """The captions of ``words`` in ``kind`` ("srt", "vtt" or "json")."""
    writers = {"srt": srt_text, "vtt": vtt_text, "json": json_text}
    if kind not in writers:
        raise ValueError(f"captions come as {', '.join(FORMATS)}, not {kind!r}")
    return writers[kind](words)


def write_captions(wav_path: str | Path, words: list[Word]) -> dict[str, str]:
    """Write ``<wav stem>.srt``, ``.vtt`` and ``.words.json`` beside ``wav_path``; {format: path}."""
    wav_path = Path(wav_path)
    written = {}
    for kind in FORMATS:
        path = wav_path.with_suffix(SUFFIXES[kind])
        atomic_write(path, caption_text(words, kind).encode("utf-8"))
        written[kind] = str(path)
    return written
