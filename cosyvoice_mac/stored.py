"""Reading what the app wrote earlier: sidecars, the page's settings (``webui.json``), the voice list, the
glossary, batch manifests, the probe's timings. A file edited by hand, written by another version or damaged
reads as far as it can: a bad record is skipped and a wrong-typed field reads as its default, each with a note
(logged once, and returned to a caller that shows notes), so one bad record never takes a section down.

A ``Shape`` declares a record: field name -> :class:`Field` (the JSON kinds it may hold, its default, whether
a record without it is skipped, and any further rule). Keys a shape does not declare are kept as written, so
a reader that writes the record back loses nothing it does not understand.

Only a file that is missing or not JSON at all is the caller's to decide (start empty, set it aside):
:func:`read_json` raises for those. Torch-free and below every layer: the glossary (frontend), the engine,
long form and the page all read through it.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
MAX_NOTES_LOGGED = 1000  # each distinct note is logged once; a file read on every page load says it once
_logged: set[str] = set()


class Unreadable(ValueError):
    """A file that exists but holds no JSON (or no UTF-8 text): the message says which and why."""


def read_json(path: str | Path) -> Any:
    """The JSON value in the file ``path``. FileNotFoundError when it is absent, OSError when it cannot be
    read, Unreadable when it is not JSON."""
    path = Path(path)
    raw = path.read_bytes()
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:  # JSONDecodeError is a ValueError
        raise Unreadable(f"{path} is not JSON ({error})") from None


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


KINDS: dict[str, Callable[[Any], bool]] = {
    "text": lambda value: isinstance(value, str),
    "number": _is_number,
    "whole": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "flag": lambda value: isinstance(value, bool),
    "object": lambda value: isinstance(value, dict),
    "list": lambda value: isinstance(value, list),
    "null": lambda value: value is None,
}


@dataclass(frozen=True)
class Field:
    """One field of a record: ``kinds`` (names in KINDS) it may hold; ``default`` what a missing or wrong one
    reads as; ``required``: a record without a good one is skipped instead; ``rule``: a further check on a
    value of the right kind (a bare file name, a content hash), with ``rule_says`` naming it in notes."""

    kinds: tuple[str, ...]
    default: Any = None
    required: bool = False
    rule: Callable[[Any], bool] | None = None
    rule_says: str = ""

    def fits(self, value) -> bool:
        return any(KINDS[kind](value) for kind in self.kinds) and (
            self.rule is None or value is None or self.rule(value)
        )

    def wanted(self) -> str:
        kinds = " or ".join("null" if kind == "null" else f"a {kind}" for kind in self.kinds)
        return f"{kinds} ({self.rule_says})" if self.rule_says else kinds


Shape = Mapping[str, Field]


def typed(data: Any, shape: Shape, where: str) -> tuple[dict | None, list[str]]:
    """(``data`` as a record of ``shape``, notes): every declared field that is missing or wrong reads as its
    default (a note for a wrong one), undeclared keys kept; (None, notes) when ``data`` is not a JSON object
    or a required field is missing or wrong. ``where`` names the record in the notes."""
    if not isinstance(data, dict):
        return None, _said([f"{where}: {_shown(data)} is not a record (a JSON object); skipped"])
    record, notes = dict(data), []
    for name, field in shape.items():
        if name not in data:
            if field.required:
                return None, _said([*notes, f"{where}: it has no {name!r}; skipped"])
            record[name] = field.default
        elif not field.fits(data[name]):
            said = f"{where}: {name!r} holds {_shown(data[name])}, not {field.wanted()}"
            if field.required:
                return None, _said([*notes, f"{said}; skipped"])
            notes.append(f"{said}; read as {field.default!r}")
            record[name] = field.default
    return record, _said(notes)


def typed_records(data: Any, shape: Shape, where: str) -> tuple[dict[str, dict], list[str]]:
    """(the good records of a JSON object of records, by key; notes on each one skipped or repaired). ``data``
    that is not an object at all reads as no records, with a note."""
    if not isinstance(data, dict):
        return {}, _said([f"{where}: {_shown(data)} is not a list of records (a JSON object); none read"])
    kept, notes = {}, []
    for key, value in data.items():
        record, said = typed(value, shape, f"{where}, {key!r}")
        notes += said
        if record is not None:
            kept[key] = record
    return kept, notes


def typed_list(data: Any, shape: Shape, where: str) -> tuple[list[dict], list[str]]:
    """(the good records of a JSON array of records, in order; notes), as :func:`typed_records`."""
    if not isinstance(data, list):
        return [], _said([f"{where}: {_shown(data)} is not a list of records (a JSON array); none read"])
    kept, notes = [], []
    for index, value in enumerate(data, start=1):
        record, said = typed(value, shape, f"{where}, record {index}")
        notes += said
        if record is not None:
            kept.append(record)
    return kept, notes


def typed_map(data: Any, field: Field, where: str) -> tuple[dict[str, Any], list[str]]:
    """(the entries of a JSON object whose value fits ``field``, by key; a note per entry left out). ``data``
    that is not an object reads as none, with a note."""
    if not isinstance(data, dict):
        return {}, _said([f"{where}: {_shown(data)} is not a JSON object; none read"])
    kept = {key: value for key, value in data.items() if field.fits(value)}
    notes = [
        f"{where}, {key!r}: {_shown(value)} is not {field.wanted()}; left out"
        for key, value in data.items()
        if key not in kept
    ]
    return kept, _said(notes)


# Lenient readings of single values, for records whose fields were always read that way (a sidecar's seed
# written as digits by an older version): the value when it can be read as one, else the default.
def as_whole(value, default: int = 0) -> int:
    """An int from an int, a float or digits (as ``int()``); ``default`` else."""
    try:
        return int(value or default)
    except (TypeError, ValueError, OverflowError):
        return default


def as_number(value, default: float) -> float:
    """A finite float from a number or digits; ``default`` else."""
    try:
        number = float(value or default)
    except (TypeError, ValueError, OverflowError):
        return default
    return number if math.isfinite(number) else default


def as_text(value) -> str | None:
    return value if isinstance(value, str) else None


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _said(notes: list[str]) -> list[str]:
    for note in notes:
        if note not in _logged and len(_logged) < MAX_NOTES_LOGGED:
            _logged.add(note)
            log.warning("%s", note)
    return notes
