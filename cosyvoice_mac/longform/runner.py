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

from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Iterable

from cosyvoice_mac.longform import batch as batches
from cosyvoice_mac.longform import check_inline_markup, dialogue, subtitles
from cosyvoice_mac.longform.files import ResultFiles
from cosyvoice_mac.longform.lines import LineRequest, Speak, Spoken
from cosyvoice_mac.longform.progress import LongformResult, OnProgress, ShouldStop, Tracker, never
from cosyvoice_mac.longform.retakes import LineTakes, Retake
from cosyvoice_mac.longform.timed_words import caption_companions, line_words, on_timeline
from cosyvoice_mac.pipeline.takes import FLAGGED, Word
from cosyvoice_mac.request import PostSettings, Sampling
from cosyvoice_mac.sound.post import post_process, trim_bounds


def check_line_markup(speak: Speak, lines: Iterable[tuple[str, str | None, str]], error) -> None:
    """Every line's inline markup against the styles its voice has recordings of (``speak.styles``), before any
    line is spoken: ``lines`` are (where, voice, text); ``error`` the job's LongformError type. The script's or
    file's own check let any well-formed style name pass, not knowing the voices yet."""
    styles: dict[str | None, tuple[str, ...]] = {}
    for where, voice, text in lines:
        if voice not in styles:
            styles[voice] = speak.styles(voice)
        check_inline_markup(text, where, error, styles[voice])


def _flag(spoken: Spoken, where: str, flagged: list[str]) -> None:
    """Note ``where`` (e.g. "line 3") in ``flagged`` when the take check left its best take flagged."""
    if spoken.facts.get("check") == FLAGGED:
        flagged.append(f"{where}: {'; '.join(spoken.facts.get('check_notes') or ['flagged'])}")


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
    files.note_line(spoken.facts)
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
    sampling: Sampling = Sampling(),
    on_progress: OnProgress | None = None,
    should_stop: ShouldStop = never,
    files: ResultFiles | None = None,
    retake: Retake | None = None,
) -> LongformResult:
    """Speak ``script`` with ``cast`` (every line drawn with ``sampling``); write ``<out_stem>.wav``,
    ``<out_stem>.timing.json``, ``.lines.json`` (+ per-line WAVs) through ``files`` (default: never over an
    existing file, no fallback). ``retake``: an earlier run's lines, each reused but those it names, which are made
    again."""
    files = files or ResultFiles()
    lines = dialogue.parse_script(script)
    voices = dialogue.check_cast(lines, cast, known_voices)
    dialogue.check_pause(pause_s)  # before any work
    spoken_as = ((f"line {line.number} ({line.speaker})", voices[line.speaker], line.text) for line in lines)
    check_line_markup(speak, spoken_as, dialogue.ScriptError)
    speak = LineTakes(speak, retake)
    speak.prepare((voices[line.speaker], line.style) for line in lines)
    tracker, waves, written, rate, stopped = Tracker(len(lines), "lines", on_progress), [], [], None, False
    words: list[list[Word]] = []
    flagged: list[str] = []
    requests = [
        LineRequest(
            line.text,
            voices[line.speaker],
            line.instruct,
            seed=None if seed is None else seed + index,
            number=line.number,
            sampling=sampling,
            style=line.style,
        )
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
            _flag(spoken, f"line {line.number}", flagged)
            wave, applied = post_process(spoken.audio, spoken.sample_rate, post)
            rate = spoken.sample_rate
            waves.append(wave)
            words.append(line_words(spoken.words, applied.trimmed_start_ms / 1000, len(wave) / rate))
            if per_line_files:
                name = f"{out_stem.name}-{line.number:03d}-{line.speaker}.wav"
                facts = {"text": line.text, "voice": voices[line.speaker]}
                written += files.wav(out_stem.parent / name, wave, rate, facts)
            tracker.report(index + 1)
    if not waves:
        return LongformResult(
            "dialogue", None, tuple(written), 0, len(lines), stopped, not_saved=files.not_saved, flagged=flagged
        )
    audio, timings = dialogue.join_lines(waves, lines[: len(waves)], voices, rate, pause_s)
    report = [t.as_dict() for t in timings]
    timeline = on_timeline([(timing.start, line) for timing, line in zip(timings, words)])
    facts = {
        "kind": "dialogue",
        "lines": len(waves),
        "of_lines": len(lines),
        "partial": stopped,
        "pause_s": pause_s,
        "cast": voices,
        "post": post.__dict__,
        "sampling": sampling.as_dict(),
    }
    timing = {out_stem.with_suffix(".timing.json"): {"lines": report, "partial": stopped}}
    companions = {**timing, **speak.companion(out_stem), **caption_companions(out_stem, timeline)}
    written = files.wav(out_stem.with_suffix(".wav"), audio, rate, facts, companions) + written
    stamps = [word.as_dict() for word in timeline] if timeline else None
    return LongformResult(
        "dialogue",
        written[0],
        tuple(written),
        len(waves),
        len(lines),
        stopped,
        report,
        files.not_saved,
        stamps,
        flagged,
        speak.retaken,
    )


def run_dub(
    srt_data: str | bytes,
    voice: str | None,
    speak: Speak,
    out_stem: Path,
    *,
    style: str | None = None,
    speed_limit: float = 1.5,
    seed: int | None = None,
    post: PostSettings = PostSettings(),
    sampling: Sampling = Sampling(),
    on_progress: OnProgress | None = None,
    should_stop: ShouldStop = never,
    files: ResultFiles | None = None,
    retake: Retake | None = None,
) -> LongformResult:
    """Dub every cue in ``voice``'s recording of ``style`` (None: its own) into ``<out_stem>.wav`` on the subtitle
    timeline; ``<out_stem>.report.json`` lists misfits, ``.lines.json`` the cues' takes. Written through ``files``
    (default: never over an existing file, no fallback). ``retake``: an earlier run's cues, each reused but those it
    names, which are made again."""
    files = files or ResultFiles()
    cues = subtitles.parse_srt(srt_data)
    limit = subtitles.check_speed_limit(speed_limit)
    check_line_markup(speak, ((f"cue {cue.number}", voice, cue.text) for cue in cues), subtitles.SubtitleError)
    speak = LineTakes(speak, retake)
    speak.prepare([(voice, style)])
    tracker, waves, speeds, rate, stopped = Tracker(len(cues), "cues", on_progress), [], [], None, False
    words: list[list[Word]] = []
    flagged: list[str] = []
    requests = [
        LineRequest(
            cue.text,
            voice,
            seed=None if seed is None else seed + index,
            number=cue.number,
            sampling=sampling,
            style=style,
        )
        for index, cue in enumerate(cues)
    ]
    with _lines_ahead(speak, requests):
        for index, cue in enumerate(cues):
            if should_stop():
                stopped = True
                break
            spoken = _spoken(speak, requests[index], should_stop, files)
            if spoken is None:
                stopped = True
                break
            rate, speed = spoken.sample_rate, 1.0
            cut, end = trim_bounds(spoken.audio, rate, keep_s=0.0)  # the cue's speech starts at the cue's start
            wave = spoken.audio[cut:end]
            faster = subtitles.fit_speed(len(wave) / rate, cue.slot, 1.0, limit)
            if faster is not None:
                spoken = _spoken(speak, replace(requests[index], speed=faster), should_stop, files)
                if spoken is None:
                    stopped = True
                    break
                cut, end = trim_bounds(spoken.audio, rate, keep_s=0.0)
                wave, speed = spoken.audio[cut:end], faster
            _flag(spoken, f"cue {cue.number}", flagged)
            wave, _ = post_process(wave, rate, PostSettings(trim=False, loudness_lufs=post.loudness_lufs))
            waves.append(wave)
            words.append(line_words(spoken.words, cut / rate, len(wave) / rate))
            speeds.append(speed)
            tracker.report(index + 1)
    if not waves:
        return LongformResult("dub", None, (), 0, len(cues), stopped, not_saved=files.not_saved, flagged=flagged)
    placed = subtitles.place(cues[: len(waves)], [len(w) / rate for w in waves], speeds)
    audio = subtitles.render_timeline(placed, waves, rate)
    report = subtitles.misfit_report(placed)
    facts = {
        "kind": "dub",
        "cues": len(waves),
        "of_cues": len(cues),
        "partial": stopped,
        "voice": voice,
        "style": style,
        "speed_limit": limit,
        "sampling": sampling.as_dict(),
        "misfits": len(report),
    }
    timeline = {"cues": [p.as_dict() for p in placed], "misfits": report, "partial": stopped}
    spoken_words = on_timeline([(cue.start, line) for cue, line in zip(placed, words)])
    companions = {out_stem.with_suffix(".report.json"): timeline, **caption_companions(out_stem, spoken_words)}
    companions.update(speak.companion(out_stem))
    written = files.wav(out_stem.with_suffix(".wav"), audio, rate, facts, companions)
    stamps = [word.as_dict() for word in spoken_words] if spoken_words else None
    return LongformResult(
        "dub",
        written[0],
        tuple(written),
        len(waves),
        len(cues),
        stopped,
        report,
        files.not_saved,
        stamps,
        flagged,
        speak.retaken,
    )


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
    sampling: Sampling = Sampling(),
    on_progress: OnProgress | None = None,
    should_stop: ShouldStop = never,
    retake_flagged: bool = False,
) -> LongformResult:
    """One WAV per line in ``folder``; lines already made with the same settings are skipped; a zip at the end.
    ``retake_flagged``: the lines whose WAV the take check left flagged are made again with a new seed."""
    items = batches.parse_batch(data, kind)
    store = batches.BatchFolder(folder)
    shared = {**(settings or {}), "default_voice": voice, "seed": seed, "post": post.__dict__}
    shared |= {"sampling": sampling.as_dict()} if sampling.given() else {}  # a batch made before keeps its key
    retake = Retake.flagged_in_batch(folder, items) if retake_flagged else Retake((), frozenset())
    speak = LineTakes(speak, retake)

    def is_done(item) -> bool:
        return item.number not in retake.numbers and store.is_done(item, batches.settings_key(item, shared))

    to_make = [item for item in items if not is_done(item)]
    spoken_as = ((f"line {item.number}", item.voice or voice, item.text) for item in to_make)
    check_line_markup(speak, spoken_as, batches.BatchError)
    speak.prepare((item.voice or voice, item.style) for item in to_make)
    tracker, made, skipped, stopped = Tracker(len(items), "lines", on_progress), 0, 0, False  # (its clock: the lines')
    flagged: list[str] = []
    files = ResultFiles(replace=True)  # a re-run remakes a line whose settings changed: the folder is the batch's

    def line_of(item, index: int) -> LineRequest:
        return LineRequest(
            item.text,
            item.voice or voice,
            item.instruct,
            seed=None if seed is None else seed + index,
            sampling=sampling,
            style=item.style,
            number=item.number,
        )

    with _lines_ahead(speak, [line_of(item, index) for index, item in enumerate(items) if not is_done(item)]):
        for index, item in enumerate(items):
            key = batches.settings_key(item, shared)
            if is_done(item):
                skipped += 1
                tracker.report(index + 1)
                continue
            if should_stop():
                stopped = True
                break
            spoken = _spoken(speak, line_of(item, index), should_stop, files)
            if spoken is None:
                stopped = True
                break
            _flag(spoken, f"line {item.number}", flagged)
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
                    "style": item.style,
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
        "batch",
        None,
        (folder, archive),
        made + skipped,
        len(items),
        stopped,
        report,
        files.not_saved,
        flagged=flagged,
        retaken=speak.retaken,
    )
