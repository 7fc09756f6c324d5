"""Dialogue scripts: lines tagged with a speaker, spoken by saved voices in order, joined with pauses.

A script line is ``[S1] text`` or ``Anna: text`` (a name of up to 32 characters before a colon); an optional
instruction for that line follows the tag in braces: ``Anna: {speak softly} Good night.``. A style in
parentheses ends the tag, ``Anna (whisper): ...`` or ``[S1 (whisper)] ...``: that line speaks the voice's
recording of that style (its other lines, its own recording). Blank lines are
skipped. Every problem (an untagged line, a tag with no text, a speaker that maps to no voice) is found
before any audio is made, and each message names the line number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from cosyvoice_mac.longform import LongformError, check_inline_markup
from cosyvoice_mac.settings import bounds

MAX_LINES = 500
MAX_PAUSE_S = bounds("pause")[1]
_BRACKET_TAG = re.compile(r"\s*\[(S\d{1,3})(?:\s*\(([^()]*)\))?\]\s*(.*)", re.DOTALL)
_NAME_TAG = re.compile(r"\s*([^\s:\[\]{}][^:\[\]{}]{0,31}?)\s*[:：]\s*(.*)", re.DOTALL)
_STYLED_NAME = re.compile(r"(.+?)\s*\(([^()]*)\)")  # a name tag's closing "(style)"
_INSTRUCTION = re.compile(r"\{([^{}]*)\}\s*(.*)", re.DOTALL)


class ScriptError(LongformError):
    """A script that cannot be spoken; the message names the line."""


@dataclass(frozen=True)
class DialogueLine:
    """One line to speak: its 1-based number in the script, the speaker tag, the text, the instruction."""

    number: int
    speaker: str
    text: str
    instruct: str | None = None
    style: str | None = None  # the voice's recording of this style (None: its own)


@dataclass(frozen=True)
class LineTiming:
    """Where one spoken line sits in the joined audio (seconds)."""

    number: int
    speaker: str
    voice: str
    text: str
    start: float
    end: float

    def as_dict(self) -> dict:
        return {
            "line": self.number,
            "speaker": self.speaker,
            "voice": self.voice,
            "text": self.text,
            "start": round(self.start, 3),
            "end": round(self.end, 3),
        }


def parse_script(script: str) -> list[DialogueLine]:
    """The script's lines in order; ScriptError for an untagged line or a tag with nothing to say."""
    lines = []
    for number, raw in enumerate(script.splitlines(), start=1):
        if not raw.strip():
            continue
        bracket = _BRACKET_TAG.fullmatch(raw)
        match = bracket or _NAME_TAG.fullmatch(raw)
        if match is None:
            raise ScriptError(
                f"line {number} has no speaker tag: start it with [S1] or a name and a colon "
                f'("Anna: ..."); it reads {raw.strip()[:40]!r}'
            )
        speaker, style, rest = bracket.groups() if bracket else (match.group(1), None, match.group(2))
        styled = None if bracket else _STYLED_NAME.fullmatch(speaker.strip())
        speaker, style = (styled.group(1), styled.group(2)) if styled else (speaker, style)
        speaker, rest = speaker.strip(), rest.strip()
        if style is not None and not style.strip():
            raise ScriptError(f"line {number} ({speaker}) has empty parentheses where a style belongs")
        instruct = None
        braced = _INSTRUCTION.fullmatch(rest)
        if braced:
            instruct, rest = braced.group(1).strip() or None, braced.group(2).strip()
        if not rest:
            raise ScriptError(f"line {number} ({speaker}) has a speaker tag but nothing to say")
        check_inline_markup(rest, f"line {number} ({speaker})", ScriptError)
        lines.append(DialogueLine(number, speaker, rest, instruct, style and style.strip()))
    if not lines:
        raise ScriptError('the script is empty: write one line per turn, each starting with [S1] or "Name:"')
    if len(lines) > MAX_LINES:
        raise ScriptError(f"the script has {len(lines)} lines; at most {MAX_LINES} are spoken in one go")
    return lines


def speakers_in(lines: list[DialogueLine]) -> list[str]:
    """Each speaker tag once, in order of first appearance."""
    return list(dict.fromkeys(line.speaker for line in lines))


def check_cast(lines: list[DialogueLine], cast: dict[str, str], known_voices) -> dict[str, str]:
    """``cast`` (speaker tag -> saved voice name) checked against the script and the voice library.

    A speaker whose tag is itself a saved voice's name needs no entry. Raises ScriptError naming the first
    line of every speaker without a voice, or a cast voice that does not exist.
    """
    known = set(known_voices)
    resolved = {}
    for speaker in speakers_in(lines):
        voice = (cast.get(speaker) or "").strip() or (speaker if speaker in known else "")
        first = next(line.number for line in lines if line.speaker == speaker)
        if not voice:
            raise ScriptError(
                f"line {first}: speaker {speaker!r} has no voice; map it to a saved voice "
                f"(saved: {', '.join(sorted(known)) or 'none yet'})"
            )
        if voice not in known:
            raise ScriptError(f"line {first}: speaker {speaker!r} is mapped to {voice!r}, which is not a saved voice")
        resolved[speaker] = voice
    return resolved


def check_pause(pause_s: float) -> float:
    """``pause_s`` itself when it is a pause between lines the settings table allows; else ScriptError naming
    ``pause_s`` (checked where a job enters, before any line is spoken)."""
    if not isinstance(pause_s, (int, float)) or isinstance(pause_s, bool) or not 0 <= pause_s <= MAX_PAUSE_S:
        raise ScriptError(f"the pause between lines must be 0-{MAX_PAUSE_S:g} s (got {pause_s!r})", field="pause_s")
    return pause_s


def join_lines(
    waves: list[np.ndarray], lines: list[DialogueLine], cast: dict[str, str], sample_rate: int, pause_s: float
) -> tuple[np.ndarray, list[LineTiming]]:
    """One waveform: the lines' audio in order with ``pause_s`` of silence between them, and each line's span.

    waves: one (T_i,) float32 array per line; returns ((sum T_i + pauses,), timings).
    """
    check_pause(pause_s)
    gap = np.zeros(int(round(pause_s * sample_rate)), dtype=np.float32)
    pieces, timings, cursor = [], [], 0
    for index, (wave, line) in enumerate(zip(waves, lines)):
        if index:
            pieces.append(gap)
            cursor += gap.size
        pieces.append(np.asarray(wave, dtype=np.float32))
        timings.append(
            LineTiming(
                line.number,
                line.speaker,
                cast[line.speaker],
                line.text,
                cursor / sample_rate,
                (cursor + len(wave)) / sample_rate,
            )
        )
        cursor += len(wave)
    return (np.concatenate(pieces) if pieces else np.zeros(0, np.float32)), timings
