"""Batches of recordings to convert: every audio file of a folder (or of an upload) re-spoken in one voice, one
WAV each, in a folder of outputs/ that a re-run resumes.

The sources are sorted by name; what is not an audio file (``sound.limits.AUDIO_SUFFIXES``) is skipped with a
note. Each source is checked before its job is queued (``sound.source_check``) and a bad one (unreadable,
silent, no speech, too long) is reported with its name and reason while the others go on; so is one the
model refuses (the worker's speech detector). The folder's ``batch.json`` records, per result, a hash of the
source's bytes and of everything that decides its audio (voice, speed, model, post-processing): a re-run
skips the sources already made with the same settings. ``results.json`` lists every source's outcome.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from cosyvoice_mac.conversion_request import VOICE_CONVERSION
from cosyvoice_mac.engine.jobs import JobFailed
from cosyvoice_mac.engine.messages import Failed, Fault
from cosyvoice_mac.longform import LongformError
from cosyvoice_mac.longform.batch import MAX_ITEMS, BatchFolder
from cosyvoice_mac.longform.files import ResultFiles
from cosyvoice_mac.longform.lines import Spoken
from cosyvoice_mac.longform.progress import LongformResult, OnProgress, ShouldStop, Tracker, never
from cosyvoice_mac.request import PostSettings
from cosyvoice_mac.sound.limits import AUDIO_SUFFIXES
from cosyvoice_mac.sound.post import post_process
from cosyvoice_mac.sound.source_check import inspect_source

RESULTS = "results.json"
# A source's conversion that failed for its own sake: reported, and the batch goes on. Any other failure (the
# model process restarted or cannot start, a Stop) ends the batch, as it ends a batch of lines.
PER_SOURCE_FAULTS = (Fault.INPUT, Fault.ENGINE, Fault.TIMEOUT)
MADE, SKIPPED, FAILED, NOT_AUDIO = "made", "skipped", "failed", "not_audio"


@dataclass(frozen=True)
class SourceItem:
    """One recording of a batch: its place in the sorted sources (from 1), its file and its result's WAV name."""

    number: int
    path: Path
    file: str

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class SourceLine:
    """One recording to convert: the file, the saved voice (None: the job's default) and the speed."""

    source: Path
    voice: str | None = None
    speed: float = 1.0


Convert = Callable[[SourceLine], Spoken]
Prepare = Callable[
    [Iterable[tuple[str | None, str | None]]], None
]  # ``Speak.prepare``: (voice, style) pairs ready first
Ahead = Callable[[list[SourceLine]], None]  # the sources to come, told to a cluster before the first


def plan_sources(paths: list[Path]) -> tuple[list[SourceItem], list[str]]:
    """(the audio files among ``paths`` sorted by name, each with its result's unique WAV name; the names
    skipped because they are not audio files). LongformError when nothing is left to convert."""
    ordered = sorted(paths, key=lambda path: (path.name.casefold(), path.name))
    audio = [path for path in ordered if path.is_file() and path.suffix.lower() in AUDIO_SUFFIXES]
    skipped = [path.name for path in ordered if path not in audio]
    if not audio:
        raise LongformError(
            f"there is no audio file to convert (looked for {', '.join(sorted(AUDIO_SUFFIXES))})"
            + (f"; skipped {', '.join(skipped[:5])}" if skipped else "")
        )
    if len(audio) > MAX_ITEMS:
        raise LongformError(f"there are {len(audio)} recordings; at most {MAX_ITEMS} are converted in one go")
    stems = [path.stem for path in audio]
    items, taken = [], set()
    for number, path in enumerate(audio, start=1):
        file = f"{path.stem}.wav" if stems.count(path.stem) == 1 else f"{path.stem}-{path.suffix.lstrip('.')}.wav"
        while file.casefold() in taken:  # "a.wav" and "A.WAV" in one folder: never one over the other
            file = f"{Path(file).stem}-{number}.wav"
        taken.add(file.casefold())
        items.append(SourceItem(number, path, file))
    return items, skipped


def sources_in_folder(folder: Path) -> list[Path]:
    """The entries of ``folder`` (not its sub-folders' contents); LongformError when it is no folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise LongformError(f"{folder} is not a folder of recordings")
    return list(folder.iterdir())


def source_key(item: SourceItem, settings: dict) -> str:
    """A hash of the source's bytes and of the shared choices that decide its audio."""
    digest = hashlib.sha256(item.path.read_bytes()).hexdigest()
    payload = json.dumps({"source": digest, **settings}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def run_convert_batch(
    items: list[SourceItem],
    skipped: list[str],
    folder: Path,
    convert: Convert,
    *,
    voice: str | None = None,
    speed: float = 1.0,
    settings: dict | None = None,
    post: PostSettings = PostSettings(),
    on_progress: OnProgress | None = None,
    should_stop: ShouldStop = never,
    prepare: Prepare | None = None,
    ahead: Ahead | None = None,
) -> LongformResult:
    """One converted WAV per source in ``folder``; ``report`` lists every source's outcome (``status`` made,
    skipped (already made), failed (with its ``reason``) or not_audio), also written to ``results.json``.
    ``prepare`` makes the voice ready before the first source still to convert (one that the model cannot use
    stops the batch there, before any file). ``ahead`` (a cluster's ``ClusterSpeak.convert_ahead``) is told the
    sources still to convert, in order, before the first (its workers start on them at once), and none at the end
    (what was sent and not asked for is dropped)."""
    store = BatchFolder(folder)
    shared = {**(settings or {}), "kind": "convert", "voice": voice, "speed": speed, "post": post.__dict__}
    keys = {item.number: source_key(item, shared) for item in items}
    if prepare is not None and any(not store.is_done(item, keys[item.number]) for item in items):
        prepare([(voice, None)])  # (voice, style): a conversion speaks the voice's own recording
    tracker, report, stopped = Tracker(len(items), "files", on_progress), [], False
    files = ResultFiles(replace=True)  # the folder is the batch's: a source whose settings changed is remade
    if ahead is not None:
        ahead([SourceLine(item.path, voice, speed) for item in items if not store.is_done(item, keys[item.number])])
    try:
        for index, item in enumerate(items):
            if should_stop():
                stopped = True
                break
            try:
                outcome = _convert_one(item, store, keys[item.number], convert, voice, speed, post, files)
            except Exception:
                if should_stop():  # Stop cancelled the source in flight: the batch ends, keeping what it made
                    stopped = True
                    break
                raise
            report.append(outcome)
            tracker.report(index + 1)
    finally:
        if ahead is not None:
            ahead([])
    report += [{"source": name, "file": None, "status": NOT_AUDIO, "reason": "not an audio file"} for name in skipped]
    folder.mkdir(parents=True, exist_ok=True)
    files.json(folder / RESULTS, {"results": report, "partial": stopped})
    archive = store.zip(items, extra=(RESULTS,))
    done = sum(entry["status"] in (MADE, SKIPPED, FAILED) for entry in report)
    return LongformResult("convert_batch", None, (folder, archive), done, len(items), stopped, report, files.not_saved)


def _convert_one(item, store, key, convert, voice, speed, post, files) -> dict:
    """Convert one source: its report entry. A failure that is not the source's own is raised."""
    entry = {"source": item.name, "file": item.file}
    if store.is_done(item, key):
        return {**entry, "status": SKIPPED}
    check = inspect_source(item.path)
    if not check.ok:
        return {**entry, "file": None, "status": FAILED, "reason": check.sentence}
    try:
        spoken = convert(SourceLine(item.path, voice, speed))
    except JobFailed as error:
        if isinstance(error.event, Failed) and error.event.fault in PER_SOURCE_FAULTS:
            return {**entry, "file": None, "status": FAILED, "reason": error.event.message}
        raise
    if spoken.facts.get("not_saved"):
        files.note_unsaved(f"a recording was converted but not saved in outputs: {spoken.facts['not_saved']}")
    wave, applied = post_process(spoken.audio, spoken.sample_rate, post)
    facts = {"kind": "convert_batch", "mode": VOICE_CONVERSION, "source": item.name, "voice": voice}
    files.wav(store.folder / item.file, wave, spoken.sample_rate, {**facts, "speed": speed, **spoken.facts})
    store.record(item, key)
    return {**entry, "status": MADE, "seconds": round(len(wave) / spoken.sample_rate, 3), "notes": applied.notes}
