"""The page's history: every result in outputs/ (generations and voice conversions), read from the sidecars
the worker writes beside each WAV (so it outlives a reload and a restart), newest first with each line's takes
grouped under it (``history_lines``), searched by text, voice or converted recording and paged; play, download,
what the picked file's content credentials say (``provenance``: still valid, or changed since it was made), "use
these settings again" (a conversion's opens the Convert section), and a Clear that only hides (the files stay in
outputs/).

``HistoryBook`` owns the reading (a sidecar is parsed once per change of its file); the layout's section is
``build_history_section``. Element ids (``elem_id``) are the browser tests' handles; keep them stable.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import NamedTuple

import gradio as gr

from cosyvoice_mac.conversion_request import VOICE_CONVERSION
from cosyvoice_mac.engine.sidecar import Sidecar, read_sidecar
from cosyvoice_mac.preview import PREVIEW
from cosyvoice_mac.preview.labels import DOWNLOAD_COMMAND
from cosyvoice_mac.provenance import Credentials
from cosyvoice_mac.webui.history_lines import Take, take_pages
from cosyvoice_mac.webui.state import HistoryEntry, is_inside
from cosyvoice_mac.webui.strings import plural
from cosyvoice_mac.webui.strings import text as say
from cosyvoice_mac.webui.takes_view import CHECK_MARKS, put_take_in, takes_shown

PER_PAGE = 10
TEXT_IN_HISTORY = 60
HISTORY_COLUMNS = (
    "col_time",
    "col_text",
    "col_mode",
    "col_voice",
    "col_seed",
    "col_speed",
    "col_duration",
    "col_model",
    "col_check",
    "col_file",
)
HISTORY_DATATYPES = ["str", "str", "str", "str", "number", "str", "str", "str", "str", "str"]
HISTORY_COLUMN_WIDTHS = ["12%", "28%", "9%", "10%", "8%", "5%", "6%", "8%", "3%", "11%"]
CLEARED_SETTING = "history_cleared_at"


def entry_from_sidecar(sidecar: Sidecar | None, folder: Path, created: float) -> HistoryEntry | None:
    """The history entry a sidecar describes (``created``: when the sidecar was written), or None when it is
    not one of ours or its WAV is gone. A sidecar without a known mode (an older one) is listed as zero-shot."""
    if sidecar is None:
        return None
    path = folder / sidecar.file
    if not path.is_file():
        return None
    preview = sidecar.version == PREVIEW
    converted = sidecar.is_conversion
    return HistoryEntry(
        path=str(path),
        text=sidecar.text,
        mode=sidecar.mode or "zero_shot",
        voice=sidecar.voice,
        seed=sidecar.seed,
        speed=sidecar.speed,
        duration_s=sidecar.duration_s,
        created=created,
        model=None if preview else sidecar.model,
        preview=preview,
        instruct=sidecar.instruct,
        transcript=sidecar.prompt_text,
        source=(sidecar.source or "") if converted else None,
        source_duration_s=sidecar.source_duration_s if converted else None,
        check=(sidecar.recorded.get("check") or {}).get("status"),
    )


class HistoryBook:
    """Owns the reading of outputs/ (its top folder: long-form work keeps its own sub-folders) as history."""

    def __init__(self, outputs_dir: str | Path, settings):
        self.folder = Path(outputs_dir)
        self.settings = settings
        self._parsed: dict[str, tuple[int, HistoryEntry | None]] = {}  # sidecar name -> (mtime_ns, entry)
        self._lock = threading.Lock()

    def entries(self, query: str = "") -> list[HistoryEntry]:
        """Every result not hidden by Clear, newest first; ``query`` keeps those whose text, voice or converted
        recording's name holds it."""
        cleared = float(self.settings.load().get(CLEARED_SETTING) or 0.0)
        found = [entry for entry in self._read() if entry.created > cleared]
        words = (query or "").strip().casefold()
        if words:
            found = [
                entry
                for entry in found
                if any(words in (field or "").casefold() for field in (entry.text, entry.voice, entry.source))
            ]
        return sorted(found, key=lambda entry: (entry.created, entry.file_name), reverse=True)

    def find(self, file_name: str | None) -> HistoryEntry | None:
        """The entry whose WAV is ``file_name`` (a name from the list, never a path), still inside outputs/."""
        if not isinstance(file_name, str):
            return None
        entry = next((entry for entry in self._read() if entry.file_name == file_name), None)
        if entry is None or not is_inside(entry.path, self.folder) or not Path(entry.path).is_file():
            return None
        return entry

    def clear(self) -> None:
        """Hide everything made until now (the files stay in outputs/)."""
        self.settings.update(**{CLEARED_SETTING: time.time()})

    def _read(self) -> list[HistoryEntry]:
        try:
            sidecars = list(self.folder.glob("*.json"))
        except OSError:
            return []
        entries = []
        with self._lock:
            seen = set()
            for sidecar in sidecars:
                seen.add(sidecar.name)
                try:
                    stamp = sidecar.stat().st_mtime_ns
                except OSError:
                    continue
                known = self._parsed.get(sidecar.name)
                if known is None or known[0] != stamp:
                    known = (stamp, self._parse(sidecar, stamp / 1e9))
                    self._parsed[sidecar.name] = known
                if known[1] is not None:
                    entries.append(known[1])
            for gone in set(self._parsed) - seen:
                del self._parsed[gone]
        return entries

    def _parse(self, sidecar: Path, created: float) -> HistoryEntry | None:
        return entry_from_sidecar(read_sidecar(sidecar), self.folder, created)


class HistoryView(NamedTuple):
    """One page of the history as the section shows it."""

    table: dict
    badge: str
    page_words: str
    page: int
    picks: list[tuple[str, str]]


def history_view(lang: str, entries: list[HistoryEntry], page: int = 0) -> HistoryView:
    """Page ``page`` (from 0, clamped) of ``entries``, takes grouped under their line (``history_lines``): the
    table, the one-line model badge, "page 1 of 3"."""
    pages = take_pages(entries, PER_PAGE)
    page = min(max(int(page or 0), 0), len(pages) - 1)
    shown = pages[page]
    headers = [say(lang, key) for key in HISTORY_COLUMNS]
    rows = [_row(lang, take) for take in shown]
    badge = ""
    if any(take.entry.preview for take in shown):
        badge = say(lang, "history_preview_badge", label=say(lang, "preview_label"), command=DOWNLOAD_COMMAND)
    if not entries:
        words = say(lang, "history_none")
    else:
        words = plural(lang, "history_page", len(entries), page=page + 1, pages=len(pages))
    picks = [(f"{_when(take.entry)}  {take.entry.file_name}", take.entry.file_name) for take in shown]
    return HistoryView({"headers": headers, "data": rows}, badge, words, page, picks)


def _when(entry: HistoryEntry) -> str:
    return time.strftime("%m-%d %H:%M:%S", time.localtime(entry.created))


def _what(lang: str, take: Take) -> str:
    """The row's text cell: the line's words on the first row of a line (with the take's number when it has
    several), "↳ take 2 of 3" on the rows under it."""
    entry = take.entry
    if take.count > 1 and not take.heads:
        return say(lang, "history_take", number=take.number, count=take.count)
    text = entry.text if len(entry.text) <= TEXT_IN_HISTORY else entry.text[: TEXT_IN_HISTORY - 1] + "…"
    if entry.mode == VOICE_CONVERSION:  # no text was read: what was re-spoken, and how long it was
        seconds = entry.source_duration_s if entry.source_duration_s is not None else entry.duration_s
        text = say(lang, "history_converted", source=entry.source or "?", seconds=seconds)
    if take.count > 1:
        return say(lang, "history_take_first", text=text, number=take.number, count=take.count)
    return text


def _row(lang: str, take: Take) -> list:
    entry = take.entry
    return [
        _when(entry),
        _what(lang, take),
        say(lang, f"mode_short_{entry.mode}"),
        entry.voice or say(lang, "history_prompt_voice"),
        entry.seed,
        f"{entry.speed:g}",
        f"{entry.duration_s:.1f}",
        "🔶 " + say(lang, "history_preview_short") if entry.preview else entry.model or "",  # a plain-text cell
        CHECK_MARKS.get(entry.check or "", ""),
        entry.file_name,
    ]


def credentials_line(lang: str, found: Credentials) -> str:
    """One line on a result's content credentials: they hold (what made it, who signed), the file was changed
    since it was made, their signature fails, or it carries none."""
    from cosyvoice_mac.provenance.verify import BAD_SIGNATURE, CHANGED, VALID

    if found.verdict == VALID:
        made = [str(found.generation[key]) for key in ("model", "model_version", "engine") if found.generation.get(key)]
        trust = say(lang, "history_credentials_ours" if found.trusted else "history_credentials_unknown")
        return say(
            lang, "history_credentials_valid", made=", ".join(made) or "?", signer=found.signer or "?", trust=trust
        )
    if found.verdict == CHANGED:
        return say(lang, "history_credentials_changed")
    if found.verdict == BAD_SIGNATURE:
        return say(lang, "history_credentials_bad")
    return say(lang, "history_credentials_none")


class HistoryCallbacks:
    """The history section's callbacks, mixed into ``callbacks.Callbacks`` (which provides ``history_book``
    and ``_voices``)."""

    history_book: HistoryBook

    def history_show(self, lang: str, query: str, page: int = 0):
        """(table, badge, page words, page, pick menu) for page ``page`` of the results matching ``query``."""
        view = history_view(lang, self.history_book.entries(query), page)
        return view.table, view.badge, view.page_words, view.page, gr.update(choices=view.picks, value=None)

    def history_turn(self, lang: str, query: str, page: int, step: int):
        return self.history_show(lang, query, int(page or 0) + step)

    def history_picked(self, file_name: str | None, session=None):
        """The chosen earlier result's WAV, if it is one of outputs/ (a name the list gave, never a path)."""
        entry = self.history_book.find(file_name)
        return entry.path if entry is not None else None

    def history_credentials(self, lang: str, file_name: str | None) -> str:
        """What the picked result's content credentials say (empty when nothing of outputs/ is picked)."""
        from cosyvoice_mac.provenance import read_credentials

        entry = self.history_book.find(file_name)
        return credentials_line(lang, read_credentials(entry.path)) if entry is not None else ""

    def history_takes(self, lang: str, file_name: str | None):
        """The picked result's ``TakesPanel`` values (check, captions, their files, the takes to pick)."""
        entry = self.history_book.find(file_name)
        return takes_shown(lang, entry.path if entry is not None else None)

    def history_use_take(self, lang: str, file_name: str | None, choice: str | None):
        """Another take put in the picked result: (its player, its ``TakesPanel`` values)."""
        entry = self.history_book.find(file_name)
        played, panel = put_take_in(lang, entry.path if entry is not None else None, choice)
        return (played or gr.skip(), *panel)

    def history_row_clicked(self, lang: str, event: gr.SelectData):
        """A row of the table clicked: (the pick, its WAV for the player, the line naming it). The row's last
        cell is its file name, looked up among outputs/ like any pick (never a path)."""
        row = list(getattr(event, "row_value", None) or [])
        entry = self.history_book.find(str(row[-1])) if row else None
        if entry is None:
            return gr.skip(), gr.skip(), say(lang, "history_pick_first")
        return entry.file_name, entry.path, say(lang, "history_picked_row", name=entry.file_name)

    def history_reuse(self, lang: str, file_name: str | None):
        """The picked result's settings back in the form: (text, mode, instruct, seed, speed, voice, transcript,
        "Keep this seed" (ticked: the result's seed is the point of reusing it), the workspace shown (Speak), the
        Convert voice, its speed, message). A recording uploaded for it is not kept, so only a saved voice comes
        back; a conversion opens the Convert workspace instead (its recording is not kept)."""
        entry = self.history_book.find(file_name)
        skip = gr.skip()
        if entry is None:
            return (skip,) * 11 + (say(lang, "history_pick_first"),)
        if entry.mode == VOICE_CONVERSION:
            return (skip,) * 8 + self._reuse_conversion(lang, entry)
        voice, words = skip, say(lang, "history_reused")
        if entry.voice:
            try:
                self._voices().get(entry.voice)
                voice = entry.voice
            except Exception:  # noqa: BLE001 - EngineError/VoiceError: deleted since, or no model running
                words = say(lang, "history_reused_voice_gone", name=entry.voice)
        else:
            words = say(lang, "history_reused_upload")
        transcript = entry.transcript if entry.transcript is not None else skip
        instruct = entry.instruct or ""
        kept = (entry.seed, entry.speed, voice, transcript, True)
        return entry.text, entry.mode, instruct, *kept, gr.update(selected="speak"), skip, skip, words

    def _reuse_conversion(self, lang: str, entry: HistoryEntry) -> tuple:
        """(the Convert workspace shown, its voice menu, its speed, message) for an earlier conversion."""
        source = entry.source or "?"
        try:
            names = [known["name"] for known in self._voices().list()]
        except Exception:  # noqa: BLE001 - EngineError/VoiceError: no model running, an unreadable library
            names = []
        menu = [(say(lang, "voices_none"), "")] + [(name, name) for name in names]
        if entry.voice and entry.voice in names:
            voice, words = entry.voice, say(lang, "history_reused_conversion", voice=entry.voice, source=source)
        elif entry.voice:
            voice, words = "", say(lang, "history_reused_conversion_gone", voice=entry.voice, source=source)
        else:
            voice, words = "", say(lang, "history_reused_conversion_upload", source=source)
        return gr.update(selected="convert"), gr.update(choices=menu, value=voice), entry.speed, words

    def history_cleared(self, lang: str, query: str):
        self.history_book.clear()
        return (*self.history_show(lang, query, 0), gr.update(visible=False), say(lang, "history_was_cleared"))
