"""Pronunciation glossary: words fixed once instead of in every request.

An entry maps a word or phrase to replacement text or CosyVoice3 markup (``[h][ào]``,
``[M][AY0][N][UW1][T]``) for one language ("en", "zh") or for both ("all"). Entries are applied to the raw
text before normalisation, longest key first, each text position at most once:

* a key that starts or ends with a letter or digit of an alphabetic script matches only as a whole word
  there (``read`` does not change ``bread``), and matching ignores case;
* a key in Chinese matches anywhere (Chinese has no spaces between words) and exactly.

Torch-free: the page, the API and the CLI edit the glossary; the worker applies it to every request
(``RequestGlossary``), which is why it lives below the engine.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from cosyvoice_mac.errors import InputError, RequestError
from cosyvoice_mac.frontend.inline import tag_spans
from cosyvoice_mac.frontend.markup import find_unknown_markup
from cosyvoice_mac.frontend.text import detect_language
from cosyvoice_mac.paths import atomic_write, user_cache_dir
from cosyvoice_mac.stored import Field, read_json, typed_list

LANGUAGES = ("all", "en", "zh")
CSV_COLUMNS = ("key", "replacement", "language")
MAX_ENTRIES = 2000
MAX_FIELD = 200
_LETTER = r"[^\W_\u4e00-\u9fff]"  # a word character that is not Han: Latin words end where Han begins


# One stored entry as read back (the checks of ``check_entry`` come after).
ENTRY_SHAPE = {
    "key": Field(("text",), required=True),
    "replacement": Field(("text",), required=True),
    "language": Field(("text",), default="all"),
}


class GlossaryError(InputError):
    """An entry or a CSV file that cannot be used; the message names the row."""


@dataclass(frozen=True)
class GlossaryEntry:
    """One fix: ``key`` (as the user types it in texts) -> ``replacement`` for ``language``."""

    key: str
    replacement: str
    language: str = "all"


@dataclass(frozen=True)
class GlossaryResult:
    """The text after the glossary, and each entry that changed it with how often it matched."""

    text: str
    applied: tuple[tuple[GlossaryEntry, int], ...]

    def describe(self) -> list[dict]:
        """For sidecars: ``[{"key", "replacement", "language", "count"}, ...]``."""
        return [{**asdict(entry), "count": count} for entry, count in self.applied]


def check_entry(entry: GlossaryEntry, row: int) -> GlossaryEntry:
    """The entry with blanks stripped, or GlossaryError naming ``row`` (1-based) and what is wrong."""
    key, replacement = entry.key.strip(), entry.replacement.strip()
    language = (entry.language or "all").strip().lower()
    if not key:
        raise GlossaryError(f"row {row}: the word or phrase is empty; type the text the entry should replace")
    if not replacement:
        raise GlossaryError(f"row {row} ({key!r}): the replacement is empty; type what to say instead")
    if len(key) > MAX_FIELD or len(replacement) > MAX_FIELD:
        raise GlossaryError(f"row {row} ({key[:24]!r}): keep each field under {MAX_FIELD} characters")
    if language not in LANGUAGES:
        raise GlossaryError(f"row {row} ({key!r}): language {language!r} is not one of {', '.join(LANGUAGES)}")
    if any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in key + replacement):
        raise GlossaryError(f"row {row} ({key!r}): control characters are not allowed")
    unknown = find_unknown_markup(replacement, "cosyvoice3")
    if unknown:
        units = ", ".join(unit for _, unit in unknown[:6])
        raise GlossaryError(f"row {row} ({key!r}): the replacement has markup CosyVoice3 does not know: {units}")
    return GlossaryEntry(key, replacement, language)


def check_entries(entries) -> tuple[GlossaryEntry, ...]:
    """Every entry checked (rows numbered from 1); a key may appear once per language."""
    checked, seen = [], {}
    if len(entries) > MAX_ENTRIES:
        raise GlossaryError(f"the glossary holds at most {MAX_ENTRIES} entries ({len(entries)} given)")
    for row, entry in enumerate(entries, start=1):
        entry = check_entry(entry, row)
        identity = (_fold(entry.key), entry.language)
        if identity in seen:
            raise GlossaryError(f"row {row} ({entry.key!r}): the same word is already in row {seen[identity]}")
        seen[identity] = row
        checked.append(entry)
    return tuple(checked)


def apply_glossary(text: str, entries, language: str | None = None) -> GlossaryResult:
    """``text`` with every matching entry for ``language`` (default: detected from the text) replaced."""
    language = language or detect_language(text)
    usable = sorted(
        (e for e in entries if e.language in ("all", language)), key=lambda e: (-len(e.key), e.language == "all")
    )
    if not usable or not text:
        return GlossaryResult(text, ())
    by_key = {}
    for entry in usable:
        by_key.setdefault(_fold(entry.key), entry)  # a language-specific entry beats "all" at equal length
    pattern = re.compile("|".join(_pattern(e.key) for e in usable), re.IGNORECASE)
    counts: dict[GlossaryEntry, int] = {}

    tags = tag_spans(text)

    def replace(match: re.Match) -> str:
        if any(start <= match.start() < end for start, end in tags):  # an inline tag is markup, not a word
            return match.group()
        entry = by_key[_fold(match.group())]
        counts[entry] = counts.get(entry, 0) + 1
        return entry.replacement

    changed = pattern.sub(replace, text)
    order = {entry: index for index, entry in enumerate(entries)}
    return GlossaryResult(changed, tuple(sorted(counts.items(), key=lambda item: order.get(item[0], 0))))


def entries_from_csv(data: str | bytes) -> tuple[GlossaryEntry, ...]:
    """Parse ``key,replacement[,language]`` rows (a header row with those names is optional)."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise GlossaryError(f"the glossary file is not UTF-8 text (byte {error.start})") from None
    rows = [row for row in csv.reader(io.StringIO(data)) if any(cell.strip() for cell in row)]
    if rows and [cell.strip().lower() for cell in rows[0][:2]] == list(CSV_COLUMNS[:2]):
        rows = rows[1:]
    entries = []
    for row, cells in enumerate(rows, start=1):
        if len(cells) not in (2, 3):
            raise GlossaryError(f"row {row}: expected 2 or 3 columns (key, replacement, language), got {len(cells)}")
        entries.append(GlossaryEntry(cells[0], cells[1], cells[2] if len(cells) == 3 else "all"))
    return check_entries(entries)


def entries_to_csv(entries) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for entry in entries:
        writer.writerow((entry.key, entry.replacement, entry.language))
    return out.getvalue()


class GlossaryDamaged(GlossaryError):
    """The glossary file exists but cannot be read as a glossary: ``path`` is it, ``reason`` what is wrong."""

    def __init__(self, path: Path, reason: str):
        super().__init__(
            f"the glossary file {path} cannot be read ({reason}); start an empty glossary (the damaged file is "
            f"kept beside it as {path.name}{UNREADABLE_SUFFIX}<time>) or import a CSV to replace it"
        )
        self.path, self.reason = path, reason


UNREADABLE_SUFFIX = ".unreadable-"


class GlossaryStore:
    """Owns the persistent glossary (``glossary.json`` in the user cache folder): read, replace, export, and
    a damaged file set aside (``glossary.json.unreadable-<time>``, never deleted) when it is replaced."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def entries(self) -> tuple[GlossaryEntry, ...]:
        """The stored entries that can be used (see :meth:`read`); GlossaryDamaged when the file is there but
        is no glossary at all."""
        return self.read()[0]

    def read(self) -> tuple[tuple[GlossaryEntry, ...], list[str]]:
        """(the usable entries, a note per entry left out). An entry of the wrong shape, one the checks refuse
        (a blank, unknown markup) or a repeat of an earlier key is left out, never the whole glossary: it stays
        in the file until the glossary is replaced, which sets the file aside first. GlossaryDamaged when the
        file is not JSON or holds no list of entries."""
        try:
            data = read_json(self.path)
        except FileNotFoundError:
            return (), []
        except (OSError, ValueError) as error:
            raise GlossaryDamaged(self.path, str(error) or type(error).__name__) from None
        if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
            raise GlossaryDamaged(self.path, "it holds no list of entries")
        rows, notes = typed_list(data["entries"], ENTRY_SHAPE, f"the glossary {self.path}")
        kept, seen = [], set()
        for row in rows:
            try:
                entry = check_entry(GlossaryEntry(row["key"], row["replacement"], row["language"]), len(kept) + 1)
            except GlossaryError as error:
                notes.append(f"the glossary {self.path}: {error}; left out")
                continue
            identity = (_fold(entry.key), entry.language)
            if identity in seen or len(kept) >= MAX_ENTRIES:
                notes.append(f"the glossary {self.path}: {entry.key!r} is a repeat or past {MAX_ENTRIES}; left out")
                continue
            seen.add(identity)
            kept.append(entry)
        return tuple(kept), notes

    def problem(self) -> str | None:
        """What the user must know about the stored glossary (it cannot be read, entries left out, and what to
        do), or None."""
        try:
            entries, notes = self.read()
        except GlossaryError as error:
            return str(error)
        if not notes:
            return None
        return (
            f"{len(notes)} entr{'y' if len(notes) == 1 else 'ies'} of the glossary {self.path} could not be used "
            f"and {'is' if len(notes) == 1 else 'are'} left out ({notes[0]}); the other {len(entries)} apply. "
            "Saving the glossary keeps the file as it was beside it"
        )

    def damaged(self) -> bool:
        """Whether the file is there but is no glossary at all (every job is then spoken without it)."""
        try:
            self.read()
        except GlossaryDamaged:
            return True
        return False

    def usable_entries(self) -> tuple[tuple[GlossaryEntry, ...], str | None]:
        """(the entries, None), or for a damaged file (no entries, a note saying long-form work goes on
        without it): a bad glossary must not stop work that does not need it."""
        try:
            return self.entries(), None
        except GlossaryError as error:
            return (), f"the pronunciation glossary was not applied: {error}"

    def replace(self, entries) -> tuple[GlossaryEntry, ...]:
        """Check and store ``entries`` (the whole glossary), atomically; nothing is stored on an error. A damaged
        file is set aside first (kept, never overwritten): it may hold entries worth recovering by hand."""
        checked = check_entries(list(entries))
        payload = json.dumps({"entries": [asdict(e) for e in checked]}, ensure_ascii=False, indent=1)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.problem() is not None:
                self._set_aside()
            atomic_write(self.path, payload.encode("utf-8"))
        return checked

    def start_empty(self) -> Path | None:
        """Replace a damaged glossary with an empty one; the path the damaged file is kept at (None: it was
        a glossary, nothing changed)."""
        with self._lock:
            if not self.damaged():
                return None
            kept = self._set_aside()
            atomic_write(self.path, json.dumps({"entries": []}).encode("utf-8"))
        return kept

    def kept_copies(self) -> list[Path]:
        """Damaged glossaries set aside so far, oldest first."""
        return sorted(self.path.parent.glob(f"{self.path.name}{UNREADABLE_SUFFIX}*"))

    def _set_aside(self) -> Path | None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for attempt in range(100):
            target = self.path.with_name(
                f"{self.path.name}{UNREADABLE_SUFFIX}{stamp}{f'-{attempt}' if attempt else ''}"
            )
            try:
                os.link(self.path, target)  # fails if the name is taken: nothing is overwritten
            except FileExistsError:
                continue
            except FileNotFoundError:
                return None
            self.path.unlink()
            return target
        raise GlossaryError(f"the damaged glossary {self.path} could not be set aside; move it away by hand")


def _fold(key: str) -> str:
    return key.casefold()


def _pattern(key: str) -> str:
    """A regex for ``key``: whole-word edges where the key starts/ends with a word character that is not Han."""
    start = rf"(?<!{_LETTER})" if _wordish(key[0]) else ""
    end = rf"(?!{_LETTER})" if _wordish(key[-1]) else ""
    return start + re.escape(key) + end


def _wordish(char: str) -> bool:
    return (char.isalnum() or char == "_") and not ("\u4e00" <= char <= "\u9fff")


GLOSSARY_FILE = "glossary.json"


def glossary_store(cache_dir: str | Path | None = None) -> GlossaryStore:
    """The user's one glossary: ``glossary.json`` in the cache folder (``--cache-dir``, else the user's)."""
    return GlossaryStore(Path(cache_dir or user_cache_dir()) / GLOSSARY_FILE)


class RequestGlossary:
    """Owns, in the model worker, the reading of the user's glossary for each request: every job's text
    (page, API, long form) is spoken with it applied, and its sidecar lists the entries that matched."""

    def __init__(self, store: GlossaryStore):
        self.store = store

    def apply(self, request):
        """(the request to speak, the entries that matched as sidecar facts, a note or None). The rewrite may
        be longer than the text limit (``Request.spoken_as``: the limit is about what the user typed). A
        glossary that cannot be read, or a rewrite no request may hold (entries that leave only punctuation),
        is skipped with a note: the request as typed is fine and is spoken."""
        try:
            entries = self.store.entries()
        except GlossaryError as error:
            return request, [], f"the pronunciation glossary was not applied: {error}"
        result = apply_glossary(request.text, entries)
        if not result.applied:
            return request, [], None
        try:
            return request.spoken_as(result.text), result.describe(), None
        except RequestError as error:
            return request, [], f"the pronunciation glossary was not applied: {error}"
