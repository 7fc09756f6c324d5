"""Inline control markup: what a text asks for besides its words, read before anything else touches it.

The grammar (docs/page.md "Inline control" says it for users)::

    [pause 500ms]  [pause 1.5s]   silence of that length here; the text is split here
    [speed 1.2]                   speak faster (0.5 to 2, times the request's speed) until the next [speed]
                                  tag or the end of the sentence
    (happy) (whisper) ...         speak in that style until the next style tag or the end of the sentence
    \\[  \\(                        a literal "[" or "(": what follows is never a tag

A tag is one of three shapes, so it never collides with CosyVoice3's own markup (``[breath]``, ``[h][ào]``,
``[AY0]``, ``<strong>``): a bracket holding a word, a space and an argument (``[pause 500ms]``: the model's
units never hold a space), a bracket holding only ``pause`` or ``speed`` (never model units), or a style's name
(``style_names.py``: one lowercase word, the rule a voice's recordings are named by too) alone in round brackets
(``(happy)``: the model has no round-bracket units). A bracketed word then a number that is not ours
(``[pase 500ms]``), any ``(word)`` that is neither the model's style nor one the voice has a recording of, and
a tag with a bad argument are refused with their position and a suggestion, never spoken. Everything else (``[1]``,
``[citation needed]``, ``(see above)``, the model's own units) is left as it is for the model's markup check.

:func:`parse_inline` gives plain data: a list of :class:`Spoken` runs (text, speed, style) and
:class:`Pause` s. Torch-free; the limits are ``cosyvoice_mac.request``'s.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.request import MAX_INLINE_PAUSE_S, SPEED_RANGE
from cosyvoice_mac.style_names import STYLE_PATTERN
from cosyvoice_mac.versions import STYLE_NAMES

CONTROL_TAGS = ("pause", "speed")
_TOKEN = re.compile(
    r"(?P<escape>\\[\[(])"
    r"|(?P<control>\[[ \t]*(?P<word>[A-Za-z]+)(?:[ \t]+(?P<arg>[^\[\]\n]*?))?[ \t]*\])"
    rf"|(?P<style>\((?P<name>{STYLE_PATTERN})\))"
    r"|(?P<end>[.!?…]+[\"'”’)」』]*(?=\s|$)|[。！？]+[”’」』）]*|\n)"
)
_PAUSE = re.compile(r"(?P<number>\d+(?:\.\d+)?|\.\d+)[ \t]*(?P<unit>ms|s)", re.IGNORECASE)
_SPEED = re.compile(r"\d+(?:\.\d+)?|\.\d+")
# An escaped bracket reaches the model as a round one: plain punctuation it never reads as a unit of its own
# markup (``\[breath]`` is the word "breath", not a breath), as the markup check's own advice says.
_LITERAL = {"\\[": "(", "\\(": "("}


@dataclass(frozen=True)
class Spoken:
    """A run of text spoken at one ``speed`` (a factor of the request's speed) in one ``style`` (None: the
    request's own); ``start`` is the run's first character in the typed text (0-based)."""

    text: str
    speed: float = 1.0
    style: str | None = None
    start: int = 0


@dataclass(frozen=True)
class Pause:
    """``seconds`` of silence; ``start`` where its tag was typed (0-based)."""

    seconds: float
    start: int = 0


def parse_inline(text: str, voice_styles: Iterable[str] | None = ()) -> list[Spoken | Pause]:
    """``text`` as runs and pauses in order; RequestError ("text", "markup_invalid") naming the first bad tag,
    its position (1-based, as typed) and what to write instead. A style tag may name one of the model's styles
    (``versions.STYLE_NAMES``) or one of ``voice_styles``, the styles the request's voice has recordings of;
    None where the voice is not known yet (a long job's script before its cast is read, the CLI before the app
    answers): then any well-formed style name passes, for the door that knows the voice to check. Runs that
    hold only spaces are dropped; a text without markup is one run."""
    styles = None if voice_styles is None else tuple(dict.fromkeys((*STYLE_NAMES, *voice_styles)))
    parts: list[Spoken | Pause] = []
    run: list[str] = []
    run_start, speed, style = 0, 1.0, None

    def close_run(at: int) -> None:
        nonlocal run_start
        words = "".join(run)
        if words.strip():
            parts.append(Spoken(words, speed, style, run_start))
        run.clear()
        run_start = at

    position = 0
    for match in _TOKEN.finditer(text):
        run.append(text[position : match.start()])
        position = match.end()
        kind = match.lastgroup
        if kind == "escape":
            run.append(_LITERAL[match.group()])
        elif kind == "end":
            run.append(match.group())
            if speed != 1.0 or style is not None:  # a sentence's end ends its speed and style
                close_run(match.end())
                speed, style = 1.0, None
        elif kind == "style":
            name = match.group("name")
            if styles is not None and name not in styles:
                raise _refused(text, match, f"{match.group()} is not a style", _style_advice(name, styles))
            close_run(match.end())
            style = name
        elif (word := match.group("word").lower()) in CONTROL_TAGS:
            value = _argument(text, match, word, match.group("arg"))
            close_run(match.end())
            if word == "pause":
                parts.append(Pause(value, match.start()))
            else:
                speed = value
        elif _is_ours(match):
            close = difflib.get_close_matches(word, CONTROL_TAGS, n=1, cutoff=0.5)
            hint = f"did you mean [{close[0]} {match.group('arg')}]? " if close else ""
            raise _refused(text, match, f"{match.group()} is not a tag", hint + _KNOWN)
        else:  # not ours: prose or the model's own markup, checked by frontend.markup
            run.append(match.group())
    run.append(text[position:])
    close_run(len(text))
    return parts


def tag_spans(text: str) -> list[tuple[int, int]]:
    """Where this markup's tags and escapes sit in ``text`` ((start, end) character offsets), as
    :func:`parse_inline` reads them; the glossary leaves them alone (an entry for "happy" never rewrites a
    ``(happy)`` tag)."""
    return [
        match.span()
        for match in _TOKEN.finditer(text)
        if match.lastgroup in ("escape", "style") or (match.lastgroup == "control" and _is_ours(match))
    ]


def _is_ours(match: re.Match) -> bool:
    """A bracket that is this markup's tag: ``pause`` or ``speed``, or any word followed by a number (a typo
    of one, refused); a bracket of other words is prose or the model's own markup."""
    arg = match.group("arg")
    return match.group("word").lower() in CONTROL_TAGS or (arg is not None and arg[:1] in "0123456789.+-")


_KNOWN = "The tags are [pause 500ms] (or [pause 1.5s]), [speed 1.2] and a style such as (happy)."


def _argument(text: str, match: re.Match, word: str, arg: str | None) -> float:
    """The pause's seconds or the speed factor the tag asks for; RequestError saying what is wrong otherwise."""
    arg = (arg or "").strip()
    if word == "pause":
        found = _PAUSE.fullmatch(arg)
        if found is None:
            example = f"[pause {arg}ms]" if _SPEED.fullmatch(arg) else "[pause 500ms] or [pause 1.5s]"
            raise _refused(text, match, f"{match.group()} needs a length with its unit", f"write {example}.")
        seconds = float(found.group("number")) / (1000.0 if found.group("unit").lower() == "ms" else 1.0)
        if not 0 < seconds <= MAX_INLINE_PAUSE_S:
            raise _refused(
                text,
                match,
                f"{match.group()} is out of range",
                f"a pause is longer than 0 and at most {MAX_INLINE_PAUSE_S:g} s; for a longer silence use "
                "several tags or a dialogue's pause between lines.",
            )
        return seconds
    low, high = SPEED_RANGE
    if _SPEED.fullmatch(arg) is None:
        raise _refused(
            text, match, f"{match.group()} needs a number", f"write a factor from {low:g} to {high:g}: [speed 1.2]."
        )
    factor = float(arg)
    if not low <= factor <= high:
        raise _refused(
            text, match, f"{match.group()} is out of range", f"a speed is from {low:g} to {high:g}, e.g. [speed 1.2]."
        )
    return factor


def _style_advice(name: str, styles: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name, styles, n=1, cutoff=0.6)
    hint = f"did you mean ({close[0]})? " if close else ""
    return (
        f"{hint}The styles are {', '.join(f'({style})' for style in styles)}; "
        f"to keep round brackets as text, write \\({name}), or remove it."
    )


def _refused(text: str, match: re.Match, what: str, advice: str) -> RequestError:
    offset = match.start()
    line = text.count("\n", 0, offset) + 1
    where = f"character {offset + 1}" + (f" (line {line})" if line > 1 else "")
    bracket = match.group().startswith("[")
    return RequestError(
        "text",
        "markup_invalid",
        f"{what} (at {where}): {advice}" + (" To keep square brackets as text, write \\[." if bracket else ""),
        position=offset + 1,
        tag=match.group(),
    )
