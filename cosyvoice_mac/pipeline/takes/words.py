"""Word timing: the recogniser's word times put on the words of the INPUT text, so a caption says what was
asked (also where the recogniser misheard it), and the words of several takes laid on one timeline.

The two sides are aligned unit by unit (``text_match.units``: words, or characters for Chinese/Japanese) with
the edit distance's backtrace; an input unit the recogniser did not hear takes the gap between its heard
neighbours, shared by length. A take without recogniser words gets times spread over its sound by length
(``estimated_words``). Torch-free."""

from __future__ import annotations

from difflib import SequenceMatcher

import numpy as np

from cosyvoice_mac.pipeline.takes.check import Word
from cosyvoice_mac.pipeline.takes.signal_checks import frame_rms, loud_level
from cosyvoice_mac.pipeline.takes.text_match import CHARACTER_LANGUAGES, language_of, normalise
from cosyvoice_mac.pipeline.takes.thresholds import FRAME_S, QUIET_FRAME_DB, WORD_EDGE_DB

EDGE_CRUMB_FRAMES = 3  # a run of sound this short at a word window's edge belongs to the neighbouring word


def display_words(text: str, language: str | None) -> list[tuple[str, list[str]]]:
    """The text's words as shown (punctuation kept) with their units; punctuation alone joins the word before.
    Chinese/Japanese: one shown word per character."""
    shown: list[tuple[str, list[str]]] = []
    pieces = list(text) if language in CHARACTER_LANGUAGES else text.split()
    for piece in pieces:
        found = normalise(piece)
        found_units = [c for c in found if not c.isspace()] if language in CHARACTER_LANGUAGES else found.split()
        if found_units:
            shown.append((piece.strip(), found_units))
        elif shown and piece.strip():
            shown[-1] = (shown[-1][0] + piece.strip(), shown[-1][1])
    return shown


def _heard_units(words: list[Word], language: str | None) -> list[tuple[str, float, float]]:
    """The recogniser's words as units, a word of several units sharing its time by length."""
    found = []
    for word in words:
        text = normalise(word.word)
        parts = [c for c in text if not c.isspace()] if language in CHARACTER_LANGUAGES else text.split()
        total = sum(len(part) for part in parts) or 1
        start = word.start
        for part in parts:
            end = start + (word.end - word.start) * len(part) / total
            found.append((part, start, end))
            start = end
    return found


def _substitution_cost(written: str, heard: str) -> float:
    """0 for the same unit; a near miss ("quick"/"quack") costs less than an unrelated word, so a misheard word
    pairs with the word it was heard as rather than with its neighbour."""
    return 0.0 if written == heard else 1.0 - 0.5 * SequenceMatcher(None, written, heard).ratio()


def _alignment(reference: list[str], hypothesis: list[str]) -> list[int | None]:
    """For each reference unit, the hypothesis unit it was matched or substituted with (None: not heard)."""
    rows, cols = len(reference) + 1, len(hypothesis) + 1
    cost = np.zeros((rows, cols), dtype=np.float32)
    cost[:, 0], cost[0, :] = np.arange(rows), np.arange(cols)
    swap = [[_substitution_cost(written, heard) for heard in hypothesis] for written in reference]
    for i in range(1, rows):
        for j in range(1, cols):
            cost[i, j] = min(cost[i - 1, j] + 1, cost[i, j - 1] + 1, cost[i - 1, j - 1] + swap[i - 1][j - 1])
    paired: list[int | None] = [None] * len(reference)
    i, j = len(reference), len(hypothesis)
    while i > 0 and j > 0:
        if np.isclose(cost[i, j], cost[i - 1, j - 1] + swap[i - 1][j - 1]):
            paired[i - 1] = j - 1
            i, j = i - 1, j - 1
        elif np.isclose(cost[i, j], cost[i - 1, j] + 1):
            i -= 1
        else:
            j -= 1
    return paired


def tightened(heard: list[Word], audio: np.ndarray, sample_rate: int) -> list[Word]:
    """The recogniser's words with their edges moved onto the sound: Whisper's word windows tile the audio, so a
    pause is given to the word beside it; each word keeps only the sounding frames inside its window."""
    rms = frame_rms(audio, sample_rate)
    if not rms.size:
        return list(heard)
    voiced = rms > loud_level(rms) * 10 ** (-WORD_EDGE_DB / 20)
    found = []
    for word in heard:
        first, last = int(word.start / FRAME_S), int(np.ceil(word.end / FRAME_S))
        runs = _runs(voiced[first:last])
        if len(runs) > 1 and runs[0][0] == 0 and runs[0][1] <= EDGE_CRUMB_FRAMES:
            runs = runs[1:]  # the previous word's last frames, over the window's edge
        if len(runs) > 1 and runs[-1][1] >= last - first and runs[-1][1] - runs[-1][0] <= EDGE_CRUMB_FRAMES:
            runs = runs[:-1]  # the next word's first frames
        if runs:
            word = Word(word.word, round((first + runs[0][0]) * FRAME_S, 3), round((first + runs[-1][1]) * FRAME_S, 3))
        found.append(word)
    return found


def _runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """(start, stop) of each run of True in ``flags``."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], flags.astype(np.int8), [0]))))
    return [(int(start), int(stop)) for start, stop in zip(edges[::2], edges[1::2])]


def align_words(
    text: str, heard: list[Word], duration_s: float, audio: np.ndarray | None = None, sample_rate: int = 0
) -> list[Word]:
    """The words of ``text`` (as written) with times taken from the recogniser's ``heard`` words, their edges
    moved onto the sound of ``audio`` when it is given."""
    if audio is not None and sample_rate:
        heard = tightened(heard, audio, sample_rate)
    language = language_of(text)
    shown = display_words(text, language)
    reference = [unit for _, found in shown for unit in found]
    if not reference:
        return []
    heard_units = _heard_units(heard, language)
    paired = _alignment(reference, [unit for unit, _, _ in heard_units])
    times: list[tuple[float, float] | None] = [
        (heard_units[j][1], heard_units[j][2]) if j is not None else None for j in paired
    ]
    _fill_unheard(times, [len(unit) for unit in reference], duration_s)
    words, index = [], 0
    for written, found in shown:
        start, end = times[index][0], times[index + len(found) - 1][1]
        words.append(Word(written, round(start, 3), round(max(start, end), 3)))
        index += len(found)
    return words


def _fill_unheard(times: list, lengths: list[int], duration_s: float) -> None:
    """Give each run of unheard units the gap between its heard neighbours (the take's ends at the edges)."""
    index = 0
    while index < len(times):
        if times[index] is not None:
            index += 1
            continue
        stop = index
        while stop < len(times) and times[stop] is None:
            stop += 1
        start = times[index - 1][1] if index > 0 else 0.0
        end = times[stop][0] if stop < len(times) else duration_s
        end = max(start, end)
        total = sum(lengths[index:stop]) or 1
        cursor = start
        for k in range(index, stop):
            step = (end - start) * lengths[k] / total
            times[k] = (cursor, cursor + step)
            cursor += step
        index = stop


def estimated_words(text: str, audio: np.ndarray, sample_rate: int) -> list[Word]:
    """Times for the words of ``text`` without a recogniser: its sounding span shared out by the words' length."""
    rms = frame_rms(audio, sample_rate)
    voiced = np.flatnonzero(rms > loud_level(rms) * 10 ** (-QUIET_FRAME_DB / 20)) if rms.size else np.array([])
    start = float(voiced[0] * FRAME_S) if voiced.size else 0.0
    end = float((voiced[-1] + 1) * FRAME_S) if voiced.size else len(audio) / sample_rate
    times: list = [None] * len(_units_of(text))
    if not times:
        return []
    _fill_unheard(times, [len(unit) for unit in _units_of(text)], end - start)
    shifted = [(a + start, b + start) for a, b in times]
    words, index = [], 0
    for written, found in display_words(text, language_of(text)):
        words.append(Word(written, round(shifted[index][0], 3), round(shifted[index + len(found) - 1][1], 3)))
        index += len(found)
    return words


def _units_of(text: str) -> list[str]:
    return [unit for _, found in display_words(text, language_of(text)) for unit in found]


def on_timeline(pieces: list[tuple[float, list[Word]]]) -> list[Word]:
    """Several takes' words on one timeline: each (start of the take in seconds, its words)."""
    return [word.shifted(offset) for offset, words in pieces for word in words]
