"""The page's long-form section: dialogue scripts, subtitle dubbing, batches and the glossary.

Each Start runs one long job on a thread of the page process; its lines go to the engine one by one as
ordinary jobs (the same queue as Generate), and the callback yields a progress bar after every line.
Stop (per browser session) ends the job between lines and cancels the line in flight; what was finished
stays. Results land in ``outputs/longform/``.
"""

from __future__ import annotations

import html
import queue
import threading
import time
from pathlib import Path

import gradio as gr

from cosyvoice_mac.errors import CosyVoiceError
from cosyvoice_mac.frontend.glossary import GlossaryEntry, GlossaryError, GlossaryStore, entries_from_csv
from cosyvoice_mac.longform.runner import Progress, run_batch, run_dialogue, run_dub
from cosyvoice_mac.longform.speakers import EngineSpeak
from cosyvoice_mac.webui.post_controls import build_post_controls, post_settings
from cosyvoice_mac.webui.strings import text as say

GLOSSARY_HEADERS = ["key", "replacement", "language"]
POLL_S = 0.25


def progress_html(lang: str, progress: Progress | None, what: str) -> str:
    """A <progress> bar with 'N of M lines done, about S s left' (ids are the browser tests' handles)."""
    done, total = (progress.done, progress.total) if progress else (0, 0)
    words = say(lang, "lf_progress", done=done, total=total or "?", what=say(lang, what))
    if progress is not None and progress.left_s is not None and done < total:
        words += say(lang, "lf_left", seconds=f"{progress.left_s:.0f}")
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
        self._lock = threading.Lock()

    # -- the three jobs ----------------------------------------------------------------------------
    def dialogue(self, lang, script, cast_rows, pause, per_line, trim, level, target, request: gr.Request):
        if not (script or "").strip():
            yield self._message(lang, "lf_need_input", what=say(lang, "lf_script_label").split(":")[0])
            return
        cast = {str(row[0]).strip(): str(row[1]).strip() for row in _rows(cast_rows) if len(row) >= 2 and row[0]}
        engine = self.host.engine
        known = [entry["name"] for entry in engine.voices.list()] if engine is not None else []

        def job(speak, on_progress, should_stop):
            return run_dialogue(
                script,
                cast,
                known,
                speak,
                self._stem("dialogue"),
                pause_s=float(pause),
                per_line_files=bool(per_line),
                post=post_settings(trim, level, target),
                on_progress=on_progress,
                should_stop=should_stop,
            )

        yield from self._run(lang, job, "lines", request)

    def dub(self, lang, srt_file, voice, speed_limit, trim, level, target, request: gr.Request):
        if not srt_file:
            yield self._message(lang, "lf_need_input", what=".srt")
            return
        data = Path(srt_file).read_bytes()

        def job(speak, on_progress, should_stop):
            return run_dub(
                data,
                voice or None,
                speak,
                self._stem("dub"),
                speed_limit=float(speed_limit),
                post=post_settings(trim, level, target),
                on_progress=on_progress,
                should_stop=should_stop,
            )

        yield from self._run(lang, job, "cues", request, default_voice=voice or None)

    def batch(self, lang, lines_file, voice, name, trim, level, target, request: gr.Request):
        if not lines_file:
            yield self._message(lang, "lf_need_input", what=".txt / .csv")
            return
        path = Path(lines_file)
        data, kind = path.read_bytes(), path.suffix.lower().lstrip(".")
        folder_name = "".join(c for c in (name or "").strip() if c.isalnum() or c in "-_ ").strip() or path.stem
        folder = self._outputs() / "batches" / folder_name

        def job(speak, on_progress, should_stop):
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
                post=post_settings(trim, level, target),
                on_progress=on_progress,
                should_stop=should_stop,
            )

        yield from self._run(lang, job, "lines", request, default_voice=voice or None)

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
        return self.glossary_rows(), say(lang, "lf_glossary_saved", count=len(saved))

    def import_glossary(self, lang, csv_file):
        if not csv_file:
            return gr.skip(), ""
        try:
            saved = self.glossary.replace(entries_from_csv(Path(csv_file).read_bytes()))
        except GlossaryError as error:
            return gr.skip(), html.escape(str(error))
        return self.glossary_rows(), say(lang, "lf_glossary_saved", count=len(saved))

    # -- the running of one job --------------------------------------------------------------------
    def _run(self, lang, job, what, request, default_voice=None):
        engine = self.host.engine
        if engine is None:
            yield self._message(lang, "lf_no_engine")
            return
        try:
            glossary = self.glossary.entries()
        except GlossaryError:
            glossary = ()
        stop, speak = threading.Event(), EngineSpeak(engine, glossary, default_voice, interface="page")
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
        yield self._finished(lang, outcome, last, what)

    def _finished(self, lang, outcome, last, what):
        if "error" in outcome:
            return (
                progress_html(lang, last, what),
                html.escape(say(lang, "lf_failed", message=outcome["error"])),
                None,
                None,
            )
        result = outcome["result"]
        key = "lf_stopped" if result.stopped else "lf_done"
        message = say(lang, key, done=result.done, total=result.total, what=say(lang, what))
        if result.kind == "dub" and result.report:
            cues = ", ".join(f"{m['cue']} (+{m['overrun']:.2f} s)" for m in result.report[:10])
            message += " " + say(lang, "lf_misfits", count=len(result.report), cues=cues)
        if result.kind == "batch":
            message += " " + say(lang, "lf_batch_done", **result.report[0])
        files = [str(path) for path in result.files if Path(path).is_file()]
        audio = str(result.audio_path) if result.audio_path else None
        final = Progress(result.done, result.total, 0.0, what)
        return progress_html(lang, final, what), html.escape(message), audio, files or None

    def _message(self, lang, key, **values):
        return "", html.escape(say(lang, key, **values)), None, None

    def _outputs(self) -> Path:
        return Path(self.host.config.outputs_dir) / "longform"

    def _stem(self, kind: str) -> Path:
        return self._outputs() / f"{time.strftime('%Y%m%d-%H%M%S')}-{kind}-{threading.get_ident() % 10000:04d}"


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


def build_longform_section(make, callbacks, longform: LongformCallbacks, language) -> None:
    """The section's controls and wiring (inside the page's Blocks); ``make`` is the page's LabelBook.make."""
    with make(gr.Accordion, {"label": "longform_heading"}, open=False, elem_id="cv-longform"):
        trim, level, target = build_post_controls(make, "cv-lf")
        with gr.Tabs():
            with make(gr.Tab, {"label": "lf_tab_dialogue"}, elem_id="cv-lf-tab-dialogue"):
                script = make(
                    gr.Textbox,
                    {"label": "lf_script_label", "placeholder": "lf_script_placeholder"},
                    lines=6,
                    elem_id="cv-lf-script",
                )
                cast = make(
                    gr.Dataframe,
                    {"label": "lf_cast_label"},
                    headers=["speaker", "voice"],
                    value=[["", ""]],
                    column_count=(2, "fixed"),
                    interactive=True,
                    elem_id="cv-lf-cast",
                )
                with gr.Row():
                    pause = make(
                        gr.Slider,
                        {"label": "lf_pause_label"},
                        minimum=0,
                        maximum=3,
                        step=0.05,
                        value=0.4,
                        elem_id="cv-lf-pause",
                    )
                    per_line = make(gr.Checkbox, {"label": "lf_per_line_label"}, value=False, elem_id="cv-lf-per-line")
                dialogue_start = make(
                    gr.Button, {"value": "lf_start"}, variant="primary", elem_id="cv-lf-dialogue-start"
                )
            with make(gr.Tab, {"label": "lf_tab_subtitles"}, elem_id="cv-lf-tab-subtitles"):
                srt_file = make(
                    gr.File, {"label": "lf_srt_label"}, file_types=[".srt"], type="filepath", elem_id="cv-lf-srt"
                )
                with gr.Row():
                    dub_voice = make(
                        gr.Dropdown,
                        {"label": "lf_voice_label", "choices": callbacks.voice_choices},
                        value="",
                        elem_id="cv-lf-dub-voice",
                    )
                    speed_limit = make(
                        gr.Slider,
                        {"label": "lf_speed_limit_label"},
                        minimum=1.0,
                        maximum=2.0,
                        step=0.05,
                        value=1.5,
                        elem_id="cv-lf-speed-limit",
                    )
                dub_start = make(gr.Button, {"value": "lf_start"}, variant="primary", elem_id="cv-lf-dub-start")
            with make(gr.Tab, {"label": "lf_tab_batch"}, elem_id="cv-lf-tab-batch"):
                lines_file = make(
                    gr.File,
                    {"label": "lf_batch_label"},
                    file_types=[".txt", ".csv"],
                    type="filepath",
                    elem_id="cv-lf-lines",
                )
                with gr.Row():
                    batch_voice = make(
                        gr.Dropdown,
                        {"label": "lf_voice_label", "choices": callbacks.voice_choices},
                        value="",
                        elem_id="cv-lf-batch-voice",
                    )
                    batch_name = make(gr.Textbox, {"label": "lf_batch_name_label"}, elem_id="cv-lf-batch-name")
                batch_start = make(gr.Button, {"value": "lf_start"}, variant="primary", elem_id="cv-lf-batch-start")
            with make(gr.Tab, {"label": "lf_tab_glossary"}, elem_id="cv-lf-tab-glossary"):
                table = make(
                    gr.Dataframe,
                    {"label": "lf_glossary_table_label"},
                    headers=GLOSSARY_HEADERS,
                    value=longform.glossary_rows,
                    column_count=(3, "fixed"),
                    interactive=True,
                    elem_id="cv-lf-glossary",
                )
                with gr.Row():
                    save = make(gr.Button, {"value": "lf_glossary_save"}, elem_id="cv-lf-glossary-save")
                    upload = make(
                        gr.File,
                        {"label": "lf_glossary_import_label"},
                        file_types=[".csv"],
                        type="filepath",
                        elem_id="cv-lf-glossary-import",
                    )
                glossary_msg = gr.Markdown(elem_id="cv-lf-glossary-msg", elem_classes="cv-message")
        stop = make(gr.Button, {"value": "lf_stop"}, variant="secondary", elem_id="cv-lf-stop")
        progress = gr.HTML("", elem_id="cv-lf-progress-html")
        message = gr.Markdown(elem_id="cv-lf-msg", elem_classes="cv-message")
        audio = make(
            gr.Audio, {"label": "lf_audio_label"}, interactive=False, buttons=["download"], elem_id="cv-lf-audio"
        )
        files = make(
            gr.File, {"label": "lf_files_label"}, file_count="multiple", interactive=False, elem_id="cv-lf-files"
        )

    outputs = [progress, message, audio, files]
    busy = dict(concurrency_id="longform", concurrency_limit=2, show_progress="hidden")
    dialogue_start.click(
        longform.dialogue, [language, script, cast, pause, per_line, trim, level, target], outputs, **busy
    )
    dub_start.click(longform.dub, [language, srt_file, dub_voice, speed_limit, trim, level, target], outputs, **busy)
    batch_start.click(
        longform.batch, [language, lines_file, batch_voice, batch_name, trim, level, target], outputs, **busy
    )
    stop.click(longform.stop, None, None, queue=False, show_progress="hidden")
    for menu in (dub_voice, batch_voice):  # voices saved since the page loaded appear when the menu opens
        menu.focus(
            lambda lang: gr.update(choices=callbacks.voice_choices(lang)),
            language,
            menu,
            queue=False,
            show_progress="hidden",
        )
    save.click(longform.save_glossary, [language, table], [table, glossary_msg], queue=False)
    upload.upload(longform.import_glossary, [language, upload], [table, glossary_msg], queue=False)
