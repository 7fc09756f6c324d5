"""The history's takes grouped under their line (issue 50 item 4). A line is what was asked for: the same text
spoken in the same voice and mode with the same instruction, or the same recording converted into the same voice;
each result made of it (Generate pressed again speaks it again with a new seed) is one of its takes, with its own
WAV and sidecar in outputs/, so each take's row still plays, downloads and reuses its own settings.

Lines come in the order of their newest take, and each line's takes newest first, numbered in the order they were
made (take 1 is the first). A page never splits a line unless the line alone is longer than a page; the first row
of a line on each page names it. Torch- and gradio-free: plain data for the history's table.
"""

from __future__ import annotations

from typing import NamedTuple

from cosyvoice_mac.conversion_request import VOICE_CONVERSION
from cosyvoice_mac.webui.state import HistoryEntry


class Take(NamedTuple):
    """One row of the history: a result, its number among its line's ``count`` takes, and whether the row names
    the line (``heads``: the first row of the line on its page)."""

    entry: HistoryEntry
    number: int
    count: int
    heads: bool


def line_of(entry: HistoryEntry) -> tuple:
    """What makes two results takes of one line (the seed, speed and model may differ)."""
    if entry.mode == VOICE_CONVERSION:
        return entry.mode, entry.source or "", entry.voice or ""
    return entry.mode, entry.text, entry.voice or "", entry.instruct or ""


def lines(entries: list[HistoryEntry]) -> list[list[HistoryEntry]]:
    """``entries`` (newest first) as lines: each line's takes newest first, the line with the newest take first."""
    grouped: dict[tuple, list[HistoryEntry]] = {}
    for entry in entries:
        grouped.setdefault(line_of(entry), []).append(entry)
    return list(grouped.values())  # a line's place is where its newest take came


def take_pages(entries: list[HistoryEntry], rows_per_page: int) -> list[list[Take]]:
    """The history's pages of rows (at least one, maybe empty): whole lines, as many as fit in ``rows_per_page``;
    a line longer than a page fills pages of its own."""
    pages: list[list[Take]] = [[]]
    for takes in lines(entries):
        count = len(takes)
        for first in range(0, count, rows_per_page):
            chunk = takes[first : first + rows_per_page]
            if pages[-1] and len(pages[-1]) + len(chunk) > rows_per_page:
                pages.append([])
            pages[-1].extend(
                Take(entry, count - (first + index), count, heads=index == 0) for index, entry in enumerate(chunk)
            )
    return pages
