"""Batches: many lines from a file, one WAV each, in a folder of outputs/ that a re-run resumes.

Input is a .txt (one text per non-blank line) or a .csv with a header naming its columns: ``text`` (required),
``voice``, ``style`` (that voice's recording of this style), ``instruct``, ``file`` (a file name without
folders). The folder's ``batch.json`` records, per file, a hash of everything that decides its audio (text,
voice, style, instruction, seed, speed, model, glossary, post-processing); a re-run skips the lines whose file
is there with the same hash and makes the rest.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from cosyvoice_mac.longform import LongformError, check_inline_markup
from cosyvoice_mac.paths import atomic_file, atomic_write
from cosyvoice_mac.stored import Field, read_json, typed_map

MAX_ITEMS = 1000
CSV_COLUMNS = ("text", "voice", "style", "instruct", "file")
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,79}")
MANIFEST = "batch.json"


class BatchError(LongformError):
    """A batch file that cannot be used; the message names the line."""


@dataclass(frozen=True)
class BatchItem:
    """One line of a batch: its line number in the file, the text, optional voice/instruction, its WAV name."""

    number: int
    text: str
    file: str
    voice: str | None = None
    instruct: str | None = None
    style: str | None = None  # the voice's recording of this style (None: its own)


def parse_batch(data: str | bytes, kind: str) -> list[BatchItem]:
    """Items of a ``kind`` ("txt" or "csv") batch file; BatchError naming the line for bad rows."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise BatchError(f"the batch file is not UTF-8 text (byte {error.start})") from None
    if kind == "txt":
        items = [
            BatchItem(number, line.strip(), f"{index:04d}.wav")
            for index, (number, line) in enumerate(
                ((n, line) for n, line in enumerate(data.splitlines(), start=1) if line.strip()), start=1
            )
        ]
    elif kind == "csv":
        items = _parse_csv(data)
    else:
        raise BatchError(f"a batch is a .txt or .csv file, not .{kind}")
    if not items:
        raise BatchError("the batch file has no lines to speak")
    if len(items) > MAX_ITEMS:
        raise BatchError(f"the batch has {len(items)} lines; at most {MAX_ITEMS} are made in one go")
    seen = {}
    for item in items:
        check_inline_markup(item.text, f"line {item.number}", BatchError)
        if item.file in seen:
            raise BatchError(
                f"line {item.number}: the file name {item.file!r} is already used on line {seen[item.file]}"
            )
        seen[item.file] = item.number
    return items


def unclosed_quote_line(data: str) -> int | None:
    """The line (1-based) where a quoted CSV field opens and never closes, or None. A quote opens a field only
    at its start and ``""`` inside one is a quote character, as the ``csv`` module reads it; that module
    would take the rest of the file as the one field instead of saying so."""
    line, quoted_since, at_field_start, index = 1, None, True, 0
    while index < len(data):
        char = data[index]
        if quoted_since is not None:
            if char == '"':
                if data.startswith('""', index):
                    index += 1
                else:
                    quoted_since = None
        elif char == '"' and at_field_start:
            quoted_since = line
        at_field_start = quoted_since is None and char in ",\r\n"
        if char == "\n" or (char == "\r" and not data.startswith("\r\n", index)):
            line += 1
        index += 1
    return quoted_since


def _parse_csv(data: str) -> list[BatchItem]:
    opened = unclosed_quote_line(data)
    if opened is not None:
        raise BatchError(
            f'line {opened}: a quote (") opens a text that is never closed, so the rest of the file would be '
            'read as that one text; close it with a second " (a quote inside a quoted text is written "")'
        )
    reader = csv.reader(io.StringIO(data))
    numbered, first_line = [], 1
    for row in reader:  # a quoted text may span lines: each row is named by the line it starts on
        if any(cell.strip() for cell in row):
            numbered.append((first_line, row))
        first_line = reader.line_num + 1
    if not numbered:
        return []
    header_line, header = numbered[0]
    columns = [cell.strip().lower() for cell in header]
    if "text" not in columns:
        raise BatchError(
            f"line {header_line}: the first row must name the columns ({', '.join(CSV_COLUMNS)}); 'text' is required"
        )
    unknown = [c for c in columns if c not in CSV_COLUMNS]
    if unknown:
        raise BatchError(f"line {header_line}: unknown column(s) {', '.join(unknown)}; use {', '.join(CSV_COLUMNS)}")
    items = []
    for index, (number, row) in enumerate(numbered[1:], start=1):
        if len(row) > len(columns):
            raise BatchError(f"line {number}: {len(row)} values for {len(columns)} columns (quote text with commas)")
        cells = {name: (row[i].strip() if i < len(row) else "") for i, name in enumerate(columns)}
        if not cells["text"]:
            raise BatchError(f"line {number}: the text is empty")
        file = cells.get("file") or f"{index:04d}"
        if not file.lower().endswith(".wav"):
            file += ".wav"
        if not _SAFE_NAME.fullmatch(file) or ".." in file:
            raise BatchError(
                f"line {number}: the file name {file!r} may use letters, digits, spaces, '.', '_' "
                "and '-' only (no folders)"
            )
        items.append(
            BatchItem(
                number,
                cells["text"],
                file,
                cells.get("voice") or None,
                cells.get("instruct") or None,
                cells.get("style") or None,
            )
        )
    return items


def settings_key(item: BatchItem, settings: dict) -> str:
    """A hash of everything that decides ``item``'s audio (``settings``: JSON-able shared choices)."""
    payload = json.dumps(
        {"text": item.text, "voice": item.voice, "instruct": item.instruct, **settings}
        | ({"style": item.style} if item.style else {}),  # a line made before styles keeps its key
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


class BatchFolder:
    """Owns one batch's folder: which files are done with which settings, and the zip of the results."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.manifest_path = self.folder / MANIFEST

    def done(self) -> dict[str, str]:
        """file name -> settings key of every finished file still present."""
        try:
            data = read_json(self.manifest_path)
        except (OSError, ValueError):  # none yet, or damaged: every file is made again, nothing is lost
            return {}
        files = data.get("files") if isinstance(data, dict) else data
        recorded, _ = typed_map(files, Field(("text",)), f"the batch manifest {self.manifest_path}")
        return {
            name: key
            for name, key in recorded.items()
            if Path(name).name == name and name not in (".", "..") and (self.folder / name).is_file()
        }

    def is_done(self, item: BatchItem, key: str) -> bool:
        return self.done().get(item.file) == key

    def record(self, item: BatchItem, key: str) -> None:
        """Mark ``item`` finished (after its WAV is written), atomically."""
        recorded = self.done()
        recorded[item.file] = key
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write(self.manifest_path, json.dumps({"files": recorded}, indent=1).encode("utf-8"))

    def zip(self, items: list[BatchItem], extra: tuple[str, ...] = ()) -> Path:
        """A zip of the finished WAVs of ``items`` (and their sidecars, and the folder's files named in
        ``extra``) beside the folder."""
        target = self.folder.with_suffix(".zip")
        wanted = [self.folder / name for name in extra]
        for item in items:
            wanted += [self.folder / item.file, (self.folder / item.file).with_suffix(".json")]
        # a temporary file of its own (two runs of one batch never write into the same one), on disk before
        # it takes the zip's name
        with atomic_file(target) as file, zipfile.ZipFile(file, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in wanted:
                if path.is_file():
                    archive.write(path, arcname=f"{self.folder.name}/{path.name}")
        return target
