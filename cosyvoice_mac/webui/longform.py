"""The page's long-form callbacks: dialogue scripts, subtitle dubbing, batches (of lines, or of recordings to
convert into a saved voice) and the glossary
(``longform_layout.py`` builds the section's controls and wires them to these).

Each Start runs one long job on a thread of the page process; its lines go to the engine one by one as
ordinary jobs (the same queue as Generate), and the callback yields a progress bar after every line.
Stop (per browser session) ends the job between lines and cancels the line in flight; what was finished
stays. Results land in ``outputs/longform/``.
"""

from __future__ import annotations

import html
import queue
import threading
from pathlib import Path

import gradio as gr

from cosyvoice_mac.errors import CosyVoiceError, RequestError
from cosyvoice_mac.frontend.glossary import (
    GlossaryDamaged,
    GlossaryEntry,
    GlossaryError,
    GlossaryStore,
    entries_from_csv,
)
from cosyvoice_mac.longform import LongformError
from cosyvoice_mac.longform.convert_batch import (
    FAILED,
    MADE,
    NOT_AUDIO,
    SKIPPED,
    plan_sources,
    run_convert_batch,
)
from cosyvoice_mac.longform.files import result_stem
from cosyvoice_mac.longform.progress import Progress
from cosyvoice_mac.longform.retakes import Retake
from cosyvoice_mac.longform.runner import run_batch, run_dialogue, run_dub
from cosyvoice_mac.longform.speakers import EngineSpeak
from cosyvoice_mac.longform.subtitles import MISFIT_S
from cosyvoice_mac.settings import batch_name
from cosyvoice_mac.webui.post_controls import post_settings
from cosyvoice_mac.webui.sampling_controls import sampling_settings
from cosyvoice_mac.webui.strings import plural
from cosyvoice_mac.webui.strings import text as say

POLL_S = 0.25


def progress_html(lang: str, progress: Progress | None, what: str, finished: bool = False) -> str:
    """A <progress> bar with 'N of M lines done, about S s left' (ids are the browser tests' handles); a
    ``finished`` run (done, or stopped) has no time left to tell."""
    done, total = (progress.done, progress.total) if progress else (0, 0)
    words = say(lang, "lf_progress", done=done, total=total or "?", what=say(lang, what))
    left = progress.left_s if progress is not None else None
    if not finished and left is not None and left >= 0.5 and done < total:
        words += say(lang, "lf_left", seconds=f"{left:.0f}")
    return (
        f'<div id="cv-lf-progress-box"><progress id="cv-lf-progress" value="{done}" max="{max(total, 1)}">'
        f'</progress> <span id="cv-lf-progress-text">{html.escape(words)}</span></div>'
    )


class LongformCallbacks:
    """Owns each browser session's running long job (for Stop) and the glossary store; the engine and the
    voice library belong to the model host and the page's callbacks."""

    def __init__(self, host, glossary: GlossaryStore):
        self.host, self.glossary = host, glossary
        self._running: dict[str, tuple[threading.Event, EngineSpeak]] = {}
        self._flagged: dict[str, tuple] = {}  # session -> (job, what, default voice, result) of its last flagged job
        self._lock = threading.Lock()

    # -- the three jobs ----------------------------------------------------------------------------
    # Each job's ``controls`` are the post-processing panel's values (trim, normalise, target), then the sampling
    # controls' (on, then the four settings: every line is drawn with them). ``request`` comes first: Gradio
    # hands it over by position, and a variable number of controls can only follow it.
    def dialogue(self, request: gr.Request, lang, script, cast_rows, pause, per_line, *controls):
        if not (script or "").strip():
            yield self._message(lang, "lf_need_script")
            return
        cast = {str(row[0]).strip(): str(row[1]).strip() for row in _rows(cast_rows) if len(row) >= 2 and row[0]}
        engine = self.host.engine
        known = [entry["name"] for entry in engine.voices.list()] if engine is not None else []

        def job(speak, on_progress, should_stop, retake=None):
            return run_dialogue(
                script,
                cast,
                known,
                speak,
                self._stem("dialogue"),
                pause_s=float(pause),
                per_line_files=bool(per_line),
                post=post_settings(*controls[:3]),
                sampling=sampling_settings(*controls[3:]),
                on_progress=on_progress,
                should_stop=should_stop,
                retake=retake,
            )

        yield from self._run(lang, job, "lines", request)

    def dub(self, request: gr.Request, lang, srt_file, voice, speed_limit, *controls):
        if not srt_file:
            yield self._message(lang, "lf_need_srt")
            return
        data = Path(srt_file).read_bytes()

        def job(speak, on_progress, should_stop, retake=None):
            return run_dub(
                data,
                voice or None,
                speak,
                self._stem("dub"),
                speed_limit=float(speed_limit),
                post=post_settings(*controls[:3]),
                sampling=sampling_settings(*controls[3:]),
                on_progress=on_progress,
                should_stop=should_stop,
                retake=retake,
            )

        yield from self._run(lang, job, "cues", request, default_voice=voice or None)

    def batch(self, request: gr.Request, lang, lines_file, voice, name, *controls):
        if not lines_file:
            yield self._message(lang, "lf_need_lines")
            return
        path = Path(lines_file)
        data, kind = path.read_bytes(), path.suffix.lower().lstrip(".")
        try:
            folder = self._outputs() / "batches" / (batch_name(name) or path.stem)
        except RequestError as error:
            yield "", html.escape(say(lang, "lf_failed", message=error)), None, None
            return

        def job(speak, on_progress, should_stop, retake=None):
            settings = {
                "model": self.host.current.name if self.host.current else None,
                "glossary": [entry.key for entry in speak.glossary],
            }
            return run_batch(
                data,
                kind,
                folder,
                speak,
                voice=voice or None,
                settings=settings,
                post=post_settings(*controls[:3]),
                sampling=sampling_settings(*controls[3:]),
                on_progress=on_progress,
                should_stop=should_stop,
                retake_flagged=retake is not None,
            )

        yield from self._run(lang, job, "lines", request, default_voice=voice or None)

    def retake_flagged(self, lang, request: gr.Request):
        """Retake these: this session's last job whose take check left lines flagged, run again with only those
        lines made anew (with new seeds; the others reused, every earlier take kept in outputs/)."""
        with self._lock:
            last = self._flagged.get(_session(request))
        if last is None:
            yield self._message(lang, "lf_nothing_to_retake")
            return
        job, what, default_voice, result = last
        try:  # a batch finds its flagged lines in its folder; a dialogue or dub in its result's record
            retake = True if result.kind == "batch" else Retake.flagged_of(result.audio_path)
        except LongformError as error:
            yield "", html.escape(say(lang, "lf_failed", message=error)), None, None
            return

        def again(speak, on_progress, should_stop):
            return job(speak, on_progress, should_stop, retake=retake)

        yield from self._run(lang, again, what, request, default_voice, retry=job)

    def retake_offered(self, request: gr.Request):
        """The "Retake the flagged lines" button: shown while this session's last long job left lines flagged."""
        with self._lock:
            return gr.update(visible=_session(request) in self._flagged)

    def convert_batch(self, lang, sources, voice, name, speed, trim, level, target, request: gr.Request):
        """Every uploaded recording re-spoken in ``voice``, one WAV each in a batch folder (``name``: resumed by
        a re-run; empty: a new folder of its own); a bad recording is reported and the others go on."""
        paths = [Path(source) for source in (sources or []) if source]
        if not paths:
            yield self._message(lang, "lf_need_sources")
            return
        current = self.host.current
        if not voice and not (current is not None and current.is_preview):
            yield self._message(lang, "lf_need_convert_voice")
            return
        try:
            items, skipped = plan_sources(paths)
        except LongformError as error:
            yield "", html.escape(say(lang, "lf_failed", message=error)), None, None
            return
        try:
            folder = self._outputs() / "batches" / (batch_name(name) or self._stem("convert").name)
        except RequestError as error:
            yield "", html.escape(say(lang, "lf_failed", message=error)), None, None
            return

        def job(speak, on_progress, should_stop):
            return run_convert_batch(
                items,
                skipped,
                folder,
                speak.convert,
                voice=voice or None,
                speed=float(speed),
                settings={"model": current.name if current else None},
                post=post_settings(trim, level, target),
                on_progress=on_progress,
                should_stop=should_stop,
                prepare=speak.prepare,
            )

        yield from self._run(lang, job, "files", request, default_voice=voice or None)

    def stop(self, request: gr.Request) -> None:
        with self._lock:
            running = self._running.get(_session(request))
        if running is not None:
            running[0].set()
            running[1].stop()

    # -- glossary ----------------------------------------------------------------------------------
    def glossary_rows(self) -> list[list[str]]:
        try:
            return [[e.key, e.replacement, e.language] for e in self.glossary.entries()] or [["", "", "all"]]
        except GlossaryError:
            return [["", "", "all"]]

    def save_glossary(self, lang, rows):
        entries = [
            GlossaryEntry(str(r[0] or ""), str(r[1] or ""), str(r[2] or "all"))
            for r in _rows(rows)
            if any(str(cell or "").strip() for cell in r)
        ]
        try:
            saved = self.glossary.replace(entries)
        except GlossaryError as error:
            return gr.skip(), html.escape(str(error))
        return self.glossary_rows(), plural(lang, "lf_glossary_saved", len(saved))

    def glossary_state(self, lang):
        """(the damaged-file note, the start-empty button): both shown only while the stored file is unreadable;
        the note alone while some entries are left out."""
        try:
            self.glossary.entries()
        except GlossaryDamaged as error:
            note = say(lang, "lf_glossary_damaged", path=error.path, why=html.escape(error.reason))
            return note, gr.update(visible=True, value=say(lang, "lf_glossary_reset"))
        except GlossaryError as error:
            return html.escape(str(error)), gr.update(visible=False)
        return html.escape(self.glossary.problem() or ""), gr.update(visible=False)

    def start_empty_glossary(self, lang):
        """Set the damaged file aside (kept) and start an empty glossary; (table, message, note, button)."""
        try:
            kept = self.glossary.start_empty()
        except (GlossaryError, OSError) as error:
            return gr.skip(), html.escape(str(error)), *self.glossary_state(lang)
        message = say(lang, "lf_glossary_reset_done", kept=kept.name) if kept else ""
        return self.glossary_rows(), message, *self.glossary_state(lang)

    def import_glossary(self, lang, csv_file):
        if not csv_file:
            return gr.skip(), ""
        try:
            saved = self.glossary.replace(entries_from_csv(Path(csv_file).read_bytes()))
        except GlossaryError as error:
            return gr.skip(), html.escape(str(error))
        return self.glossary_rows(), plural(lang, "lf_glossary_saved", len(saved))

    # -- the running of one job --------------------------------------------------------------------
    def _run(self, lang, job, what, request, default_voice=None, retry=None):
        """Run ``job`` (``retry``: the job a retake runs again, when this is one), yielding the section's outputs."""
        engine = self.host.engine
        if engine is None:
            yield self._message(lang, "lf_no_engine")
            return
        glossary, note = self.glossary.usable_entries()
        notes = (say(lang, "lf_glossary_skipped"),) if note else ()
        stop = threading.Event()
        speak = EngineSpeak(engine, glossary, default_voice, interface="page", notes=notes)
        with self._lock:
            self._running[_session(request)] = (stop, speak)
        updates: queue.Queue = queue.Queue()
        outcome: dict = {}

        def work():
            try:
                outcome["result"] = job(speak, updates.put, stop.is_set)
            except CosyVoiceError as error:  # ours (a bad line, a full queue, a refused request): user-safe
                outcome["error"] = str(error)
            except Exception as error:  # noqa: BLE001 - the page must keep working; the message says what broke
                outcome["error"] = f"{type(error).__name__}: {error}"

        thread = threading.Thread(target=work, name="cosyvoice-longform", daemon=True)
        thread.start()
        last = None
        yield progress_html(lang, None, what), "", None, None
        try:
            while thread.is_alive() or not updates.empty():
                try:
                    last = updates.get(timeout=POLL_S)
                    yield progress_html(lang, last, what), "", gr.skip(), gr.skip()
                except queue.Empty:
                    continue
        finally:
            if thread.is_alive():  # the page went away: end the job between lines
                stop.set()
                speak.stop()
            with self._lock:
                self._running.pop(_session(request), None)
        thread.join()
        result = outcome.get("result")
        with self._lock:  # what "Retake the flagged lines" runs again
            if result is not None and result.flagged and result.kind in ("dialogue", "dub", "batch"):
                self._flagged[_session(request)] = (retry or job, what, default_voice, result)
            else:
                self._flagged.pop(_session(request), None)
        progress, message, audio, files = self._finished(lang, outcome, last, what)
        yield progress, " ".join((message, *map(html.escape, speak.notes))), audio, files

    def _finished(self, lang, outcome, last, what):
        if "error" in outcome:
            return (
                progress_html(lang, last, what, finished=True),
                html.escape(say(lang, "lf_failed", message=outcome["error"])),
                None,
                None,
            )
        result = outcome["result"]
        key = "lf_stopped" if result.stopped else "lf_done"
        message = say(lang, key, done=result.done, total=result.total, what=say(lang, what))
        if result.kind == "dub" and result.report:
            cues = ", ".join(_misfit_words(lang, misfit) for misfit in result.report[:10])
            message += " " + plural(lang, "lf_misfits", len(result.report), cues=cues)
        if result.kind == "batch":
            message += " " + say(lang, "lf_batch_done", **result.report[0])
        if result.retaken:
            message += " " + say(lang, "lf_retaken", numbers=", ".join(map(str, result.retaken)))
        if result.flagged:
            message += " " + say(lang, "lf_flagged", lines="; ".join(result.flagged))
        files = [str(path) for path in result.files if Path(path).is_file()]
        if result.kind == "convert_batch":
            message += " " + conversion_summary(lang, result.report)
            folder = Path(result.files[0])
            files += [str(folder / entry["file"]) for entry in result.report if entry["status"] in (MADE, SKIPPED)]
        audio = str(result.audio_path) if result.audio_path else None
        final = Progress(result.done, result.total, 0.0, what)
        return progress_html(lang, final, what, finished=True), html.escape(message), audio, files or None

    def _message(self, lang, key, **values):
        return "", html.escape(say(lang, key, **values)), None, None

    def _outputs(self) -> Path:
        return Path(self.host.config.outputs_dir) / "longform"

    def _stem(self, kind: str) -> Path:
        return result_stem(self._outputs(), kind)


def conversion_summary(lang: str, report: list[dict]) -> str:
    """A batch of conversions in words: how many were made, skipped, failed; each failure by name and reason;
    the files skipped as not audio."""
    count = {status: sum(entry["status"] == status for entry in report) for status in (MADE, SKIPPED, FAILED)}
    words = [say(lang, "lf_convert_done", made=count[MADE], skipped=count[SKIPPED], failed=count[FAILED])]
    failures = [
        say(lang, "lf_convert_one_failed", name=entry["source"], reason=entry["reason"])
        for entry in report
        if entry["status"] == FAILED
    ]
    if failures:
        words.append(say(lang, "lf_convert_not_converted", files="; ".join(failures)))
    not_audio = [entry["source"] for entry in report if entry["status"] == NOT_AUDIO]
    if not_audio:
        words.append(say(lang, "lf_convert_not_audio", names=", ".join(not_audio)))
    return " ".join(words)


def _misfit_words(lang: str, misfit: dict) -> str:
    """One cue that did not fit: by how much it ran past its end, else how late it started."""
    if misfit["overrun"] >= MISFIT_S:
        return say(lang, "lf_misfit_over", cue=misfit["cue"], seconds=misfit["overrun"])
    return say(lang, "lf_misfit_late", cue=misfit["cue"], seconds=misfit["late"])


def _rows(table) -> list[list]:
    """Rows of a Dataframe value (a pandas frame, a dict with 'data', or a list of lists)."""
    if table is None:
        return []
    if hasattr(table, "values") and hasattr(table, "columns"):
        return table.values.tolist()
    if isinstance(table, dict):
        return list(table.get("data") or [])
    return [list(row) for row in table]


def _session(request) -> str:
    return getattr(request, "session_hash", None) or "anonymous"
