"""Long work as a sequence of ordinary requests: dialogue, subtitle dubbing and batches.

Each job here checks all of its input before the first request (so a bad line costs no time), has the
``Speak`` make every voice it will use ready (a voice the model cannot use stops the job before any line),
then asks it for one line at a time (the page, the API and the CLI pass ``speakers.EngineSpeak``, which
goes through an engine's queue), reports progress after every line, stops between lines when asked, and
writes only whole files: what was finished before a Stop is kept and labelled as partial.

Files are written through ``files.ResultFiles`` (named by ``files.result_stem`` in outputs/: never over
another job's); a line the engine made but could not save in outputs/ is kept in the result and said in its
``not_saved``.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Protocol

import numpy as np

from cosyvoice_mac.longform import batch as batches
from cosyvoice_mac.longform import dialogue, subtitles
from cosyvoice_mac.longform.files import ResultFiles
from cosyvoice_mac.request import PostSettings
from cosyvoice_mac.sound.post import post_process, trim_silence


@dataclass(frozen=True)
class LineRequest:
    """One line to speak: text in a saved voice (None: the job's default voice), instruction, speed, seed."""

    text: str
    voice: str | None = None
    instruct: str | None = None
    speed: float = 1.0
    seed: int | None = None


@dataclass(frozen=True)
class Spoken:
    """A spoken line: (T,) float32 audio at ``sample_rate`` and the facts of the request (for sidecars)."""

    audio: np.ndarray
    sample_rate: int
    facts: dict = field(default_factory=dict)


class Speak(Protocol):
    def __call__(self, line: LineRequest) -> Spoken: ...

    def prepare(self, voices: Iterable[str | None]) -> None:
        """Make the job's voices (None: the default) ready before its first line, or raise saying which one
        cannot be used; called once, after the input is checked and before any line is spoken."""


@dataclass(frozen=True)
class Progress:
    """After each line: how many are done of how many, seconds so far and an estimate of what is left."""

    done: int
    total: int
    elapsed_s: float
    label: str

    @property
    def left_s(self) -> float | None:
        return self.elapsed_s / self.done * (self.total - self.done) if self.done else None

    def describe(self) -> str:
        left = f", about {self.left_s:.0f} s left" if self.left_s is not None and self.done < self.total else ""
        return f"{self.done}/{self.total} {self.label}{left}"


@dataclass(frozen=True)
class LongformResult:
    """What a job left in outputs/: the main WAV (or folder), its companion files, and whether it was stopped."""

    kind: str
    audio_path: Path | None
    files: tuple[Path, ...]
    done: int
    total: int
    stopped: bool
    report: list[dict] = field(default_factory=list)
    not_saved: str | None = None  # why some of it is not where it belongs in outputs/ (None: all saved)


OnProgress = Callable[[Progress], None]
ShouldStop = Callable[[], bool]


def never() -> bool:
    return False


class Tracker:
    """Reports a job's progress (done of ``total``, in ``label``s) to ``on_progress`` after each item."""

    def __init__(self, total: int, label: str, on_progress: OnProgress | None):
        self.total, self.label, self.on_progress, self.started = total, label, on_progress, time.monotonic()

    def report(self, done: int) -> None:
        if self.on_progress is not None:
            self.on_progress(Progress(done, self.total, time.monotonic() - self.started, self.label))


@contextmanager
def _lines_ahead(speak: Speak, lines: list[LineRequest]):
    """Tell ``speak`` the lines the job will ask for (``EngineSpeak.ahead``: it sends a batch of them to the
    engine at once); at the end, whatever was sent ahead and not asked for is cancelled."""
    ahead = getattr(speak, "ahead", None)
    if ahead is None:
        yield
        return
    ahead(lines)
    try:
        yield
    finally:
        ahead(())


def _spoken(speak: Speak, line: LineRequest, should_stop: ShouldStop, files: ResultFiles) -> Spoken | None:
    """``speak(line)``, or None when it failed because Stop cancelled it (the job then ends, keeping its lines).
    A line made but not saved in outputs/ (``facts["not_saved"]``) is noted in ``files``."""
    try:
        spoken = speak(line)
    except Exception:
        if should_stop():
            return None
        raise
    if spoken.facts.get("not_saved"):
        files.note_unsaved(f"a line was made but not saved in outputs: {spoken.facts['not_saved']}")
    return spoken


def run_dialogue(
    script: str,
    cast: dict[str, str],
    known_voices,
    speak: Speak,
    out_stem: Path,
    *,
    pause_s: float = 0.4,
    seed: int | None = None,
    per_line_files: bool = False,
    post: PostSettings = PostSettings(),
    on_progress: OnProgress | None = None,
    should_stop: ShouldStop = never,
    files: ResultFiles | None = None,
) -> LongformResult:
    """Speak ``script`` with ``cast``; write ``<out_stem>.wav``, ``<out_stem>.timing.json`` (+ per-line WAVs)
    through ``files`` (default: never over an existing file, no fallback)."""
    files = files or ResultFiles()
    lines = dialogue.parse_script(script)
    voices = dialogue.check_cast(lines, cast, known_voices)
    dialogue.check_pause(pause_s)  # before any work
    speak.prepare(voices[line.speaker] for line in lines)
    tracker, waves, written, rate, stopped = Tracker(len(lines), "lines", on_progress), [], [], None, False
    requests = [
        LineRequest(line.text, voices[line.speaker], line.instruct, seed=None if seed is None else seed + index)
        for index, line in enumerate(lines)
    ]
    with _lines_ahead(speak, requests):
        for index, (line, request) in enumerate(zip(lines, requests)):
            if should_stop():
                stopped = True
                break
            spoken = _spoken(speak, request, should_stop, files)
            if spoken is None:
                stopped = True
                break
            wave, _ = post_process(spoken.audio, spoken.sample_rate, post)
            rate = spoken.sample_rate
            waves.append(wave)
            if per_line_files:
                name = f"{out_stem.name}-{line.number:03d}-{line.speaker}.wav"
                facts = {"text": line.text, "voice": voices[line.speaker]}
                written += files.wav(out_stem.parent / name, wave, rate, facts)
            tracker.report(index + 1)
    if not waves:
        return LongformResult("dialogue", None, tuple(written), 0, len(lines), stopped, not_saved=files.not_saved)
    audio, timings = dialogue.join_lines(waves, lines[: len(waves)], voices, rate, pause_s)
    report = [t.as_dict() for t in timings]
    facts = {
        "kind": "dialogue",
        "lines": len(waves),
        "of_lines": len(lines),
        "partial": stopped,
        "pause_s": pause_s,
        "cast": voices,
        "post": post.__dict__,
    }
    timing = {out_stem.with_suffix(".timing.json"): {"lines": report, "partial": stopped}}
    written = files.wav(out_stem.with_suffix(".wav"), audio, rate, facts, timing) + written
    return LongformResult(
        "dialogue", written[0], tuple(written), len(waves), len(lines), stopped, report, files.not_saved
    )


def run_dub(
    srt_data: str | bytes,
    voice: str | None,
    speak: Speak,
    out_stem: Path,
    *,
    speed_limit: float = 1.5,
    seed: int | None = None,
    post: PostSettings = PostSettings(),
    on_progress: OnProgress | None = None,
    should_stop: ShouldStop = never,
    files: ResultFiles | None = None,
) -> LongformResult:
    """Dub every cue into ``<out_stem>.wav`` on the subtitle timeline; ``<out_stem>.report.json`` lists misfits.
    Written through ``files`` (default: never over an existing file, no fallback)."""
    files = files or ResultFiles()
    cues = subtitles.parse_srt(srt_data)
    limit = subtitles.check_speed_limit(speed_limit)
    speak.prepare([voice])
    tracker, waves, speeds, rate, stopped = Tracker(len(cues), "cues", on_progress), [], [], None, False
    requests = [
        LineRequest(cue.text, voice, seed=None if seed is None else seed + index) for index, cue in enumerate(cues)
    ]
    with _lines_ahead(speak, requests):
        for index, cue in enumerate(cues):
            if should_stop():
                stopped = True
                break
            line_seed = None if seed is None else seed + index
            spoken = _spoken(speak, requests[index], should_stop, files)
            if spoken is None:
                stopped = True
                break
            rate, speed = spoken.sample_rate, 1.0
            wave = trim_silence(spoken.audio, rate, keep_s=0.0)  # the cue's speech starts at the cue's start
            faster = subtitles.fit_speed(len(wave) / rate, cue.slot, 1.0, limit)
            if faster is not None:
                spoken = _spoken(speak, LineRequest(cue.text, voice, speed=faster, seed=line_seed), should_stop, files)
                if spoken is None:
                    stopped = True
                    break
                wave, speed = trim_silence(spoken.audio, rate, keep_s=0.0), faster
            wave, _ = post_process(wave, rate, PostSettings(trim=False, loudness_lufs=post.loudness_lufs))
            waves.append(wave)
            speeds.append(speed)
            tracker.report(index + 1)
    if not waves:
        return LongformResult("dub", None, (), 0, len(cues), stopped, not_saved=files.not_saved)
    placed = subtitles.place(cues[: len(waves)], [len(w) / rate for w in waves], speeds)
    audio = subtitles.render_timeline(placed, waves, rate)
    report = subtitles.misfit_report(placed)
    facts = {
        "kind": "dub",
        "cues": len(waves),
        "of_cues": len(cues),
        "partial": stopped,
        "voice": voice,
        "speed_limit": limit,
        "misfits": len(report),
    }
    timeline = {"cues": [p.as_dict() for p in placed], "misfits": report, "partial": stopped}
    written = files.wav(
        out_stem.with_suffix(".wav"), audio, rate, facts, {out_stem.with_suffix(".report.json"): timeline}
    )
    return LongformResult("dub", written[0], tuple(written), len(waves), len(cues), stopped, report, files.not_saved)


def run_batch(
    data: str | bytes,
    kind: str,
    folder: Path,
    speak: Speak,
    *,
    voice: str | None = None,
    settings: dict | None = None,
    seed: int | None = None,
    post: PostSettings = PostSettings(),
    on_progress: OnProgress | None = None,
    should_stop: ShouldStop = never,
) -> LongformResult:
    """One WAV per line in ``folder``; lines already made with the same settings are skipped; a zip at the end."""
    items = batches.parse_batch(data, kind)
    store = batches.BatchFolder(folder)
    shared = {**(settings or {}), "default_voice": voice, "seed": seed, "post": post.__dict__}
    speak.prepare(item.voice or voice for item in items if not store.is_done(item, batches.settings_key(item, shared)))
    tracker, made, skipped, stopped = Tracker(len(items), "lines", on_progress), 0, 0, False  # (its clock: the lines')
    files = ResultFiles(replace=True)  # a re-run remakes a line whose settings changed: the folder is the batch's

    def _line_of(item, index: int) -> LineRequest:
        return LineRequest(item.text, item.voice or voice, item.instruct, seed=None if seed is None else seed + index)

    to_make = [
        _line_of(item, index)
        for index, item in enumerate(items)
        if not store.is_done(item, batches.settings_key(item, shared))
    ]
    with _lines_ahead(speak, to_make):
        for index, item in enumerate(items):
            key = batches.settings_key(item, shared)
            if store.is_done(item, key):
                skipped += 1
                tracker.report(index + 1)
                continue
            if should_stop():
                stopped = True
                break
            spoken = _spoken(speak, _line_of(item, index), should_stop, files)
            if spoken is None:
                stopped = True
                break
            wave, applied = post_process(spoken.audio, spoken.sample_rate, post)
            files.wav(
                folder / item.file,
                wave,
                spoken.sample_rate,
                {
                    "kind": "batch",
                    "line": item.number,
                    "text": item.text,
                    "voice": item.voice or voice,
                    "instruct": item.instruct,
                    "post_notes": applied.notes,
                    **spoken.facts,
                },
            )
            store.record(item, key)
            made += 1
            tracker.report(index + 1)
    archive = store.zip(items)
    report = [{"made": made, "skipped": skipped}]
    return LongformResult(
        "batch", None, (folder, archive), made + skipped, len(items), stopped, report, files.not_saved
    )
