"""The page's Convert section (voice conversion): upload or record a recording, pick the target voice (a saved
voice, or a recording of it), convert, play and download; a progress bar for long recordings, piece by piece.

The job is an ordinary engine job (``ConversionRequest``, ``interface: page``) in the one queue with Generate's,
so its WAV and sidecar land in outputs/. Stop (per browser session) cancels it; a cancelled job saves nothing.
The uploads are copied for the job's lifetime, as Generate's prompt is, so the page's temporary-file janitor
never takes a waiting job's recording away.
"""

from __future__ import annotations

import html
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import gradio as gr

from cosyvoice_mac.conversion_request import ConversionRequest
from cosyvoice_mac.engine import Job
from cosyvoice_mac.engine.jobs import EngineError
from cosyvoice_mac.engine.messages import Done, Progress, Queued
from cosyvoice_mac.errors import CosyVoiceError
from cosyvoice_mac.request import Voice
from cosyvoice_mac.settings import slider
from cosyvoice_mac.sound.problems import SOURCE_PROBLEMS
from cosyvoice_mac.sound.source_check import inspect_source
from cosyvoice_mac.webui.post_controls import build_post_controls, post_settings
from cosyvoice_mac.webui.render import PROMPT_PROBLEM_KEYS, preview_line, render_prompt_check
from cosyvoice_mac.webui.state import ActiveJobs
from cosyvoice_mac.webui.strings import text as say

POLL_S = 0.5


def progress_html(lang: str, done: int, total: int) -> str:
    """A <progress> bar with 'N of M pieces converted' (ids are the browser tests' handles)."""
    words = say(lang, "vc_progress", done=done, total=total or "?")
    return (
        f'<div id="cv-vc-progress-box"><progress id="cv-vc-progress" value="{done}" max="{max(total, 1)}">'
        f'</progress> <span id="cv-vc-progress-text">{html.escape(words)}</span></div>'
    )


def source_message(lang: str, path: str | None) -> str:
    """The line under the recording to convert: its length, or what is wrong with it (in ``lang``)."""
    if not path:
        return ""
    check = inspect_source(path)
    if check.ok:
        return say(lang, "vc_source_ok", seconds=check.seconds, speech=check.speech_seconds)
    if check.problem in SOURCE_PROBLEMS:
        return say(lang, f"vc_problem_{check.problem}", **check.details)
    return say(lang, PROMPT_PROBLEM_KEYS[check.problem], **check.details)


class ConvertCallbacks:
    """Owns each browser session's running conversion (for Stop); the engine belongs to the model host."""

    def __init__(self, host, jobs: ActiveJobs | None = None):
        self.host = host
        self.jobs = jobs  # the page's record of each tab's own jobs (the queue line marks them as the tab's)
        self._running: dict[str, str] = {}  # session hash -> job id
        self._lock = threading.Lock()

    def voice_choices(self, lang: str) -> gr.Dropdown:
        engine = self.host.engine
        try:
            names = [entry["name"] for entry in engine.voices.list()] if engine is not None else []
        except EngineError:
            names = []
        return gr.update(choices=[(say(lang, "voices_none"), "")] + [(name, name) for name in names])

    def convert(self, lang, source, voice_name, prompt, speed, trim, level, target, request: gr.Request):
        """Queue the conversion and follow it: (status, progress bar, result) after each piece."""
        engine = self.host.engine
        if engine is None:
            yield say(lang, "vc_no_engine"), "", None
            return
        problem = self._problem(lang, source, voice_name, prompt)
        if problem:
            yield problem, "", None
            return
        held = Path(tempfile.mkdtemp(prefix="cv-convert-", dir=os.environ.get("GRADIO_TEMP_DIR") or None))
        try:
            source = _held(source, held / "source")
            voice = Voice.recording(_held(prompt, held / "prompt")) if prompt else Voice.saved_voice(voice_name)
            conversion = ConversionRequest.build(
                source, voice, speed=float(speed), post=post_settings(trim, level, target)
            )
            job = Job(conversion, interface="page")
            yield from self._follow(lang, engine, job, request.session_hash if request else "")
        except CosyVoiceError as error:
            yield say(lang, "vc_failed", message=error), "", None
        finally:
            shutil.rmtree(held, ignore_errors=True)

    def stop(self, request: gr.Request) -> None:
        with self._lock:
            job_id = self._running.get(request.session_hash if request else "")
        if job_id and self.host.engine is not None:
            self.host.engine.cancel(job_id)

    def _problem(self, lang, source, voice_name, prompt) -> str | None:
        if not source:
            return say(lang, "vc_need_source")
        check = inspect_source(source)
        if not check.ok:
            return source_message(lang, source)
        if bool(voice_name) == bool(prompt):
            return say(lang, "vc_both_voices" if voice_name else "vc_need_voice")
        if prompt:
            from cosyvoice_mac.engine.voice_library import VoiceError, judge_voice_audio

            try:
                prompt_check = judge_voice_audio(prompt)  # the voice library's rule, as for a voice saved
            except VoiceError as error:  # the speech detector is not installed
                return say(lang, "voice_error", message=error)
            if not prompt_check.ok:
                return render_prompt_check(lang, prompt_check)
        return None

    def _follow(self, lang, engine, job: Job, session: str):
        started = time.perf_counter()
        with engine.subscribe() as feed:
            engine.submit(job)
            with self._lock:
                self._running[session] = job.job_id
            if self.jobs is not None and session:
                self.jobs.own(session, job.job_id)
            try:
                done, total = 0, 0
                yield say(lang, "vc_queued", position=max(1, engine.position(job.job_id) or 1)), "", None
                for event in feed.of(job.job_id):
                    if isinstance(event, Queued):
                        yield say(lang, "vc_queued", position=event.position), "", None
                    elif isinstance(event, Progress) and event.is_final_chunk:
                        done, total = event.segment_index + 1, event.segment_count
                        yield say(lang, "vc_progress", done=done, total=total), progress_html(lang, done, total), None
                    elif isinstance(event, Done):
                        result = event.result
                        words = say(lang, "vc_done", seconds=result.duration_s, took=time.perf_counter() - started)
                        if any("Preview voice" in note for note in result.notes):
                            words += "  \n" + preview_line(lang)
                        yield words, progress_html(lang, total, total), result.output_path
                        return
                    elif event.terminal:
                        stopped = event.kind == "cancelled"
                        words = say(lang, "vc_stopped") if stopped else say(lang, "vc_failed", message=event.message)
                        yield words, "", None
                        return
            finally:
                with self._lock:
                    self._running.pop(session, None)


def _held(path: str | None, folder: Path) -> str | None:
    """A copy of the upload ``path`` in ``folder`` (kept while the job lasts), under the upload's own name: the
    sidecar (and so the history) names the recording as the user knows it."""
    if not path:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    name = Path(path).name if Path(path).suffix else f"{Path(path).name}.wav"
    copy = folder / name
    shutil.copyfile(path, copy)
    return str(copy)


def build_convert_section(make, convert: ConvertCallbacks, language) -> dict:
    """The Convert workspace's controls and wiring (inside its tab); ``make`` is the page's LabelBook.make.
    Start, Stop and the status sit in the workspace's action row. Returns what the history's "use these settings
    again" fills: ``voice`` and ``speed``."""
    make(gr.Markdown, {"value": "vc_heading"}, elem_id="cv-convert", elem_classes="cv-message")
    make(gr.Markdown, {"value": "vc_info"}, elem_classes="cv-message")
    with gr.Row():
        source = make(
            gr.Audio,
            {"label": "vc_source_label"},
            sources=["upload", "microphone"],
            type="filepath",
            elem_id="cv-vc-source",
        )
        with gr.Column():
            voice = make(gr.Dropdown, {"label": "vc_voice_label"}, choices=[], value=None, elem_id="cv-vc-voice")
            prompt = make(
                gr.Audio,
                {"label": "vc_prompt_label"},
                sources=["upload", "microphone"],
                type="filepath",
                elem_id="cv-vc-prompt",
            )
    source_msg = gr.Markdown(elem_id="cv-vc-source-msg", elem_classes="cv-message")
    speed = make(
        gr.Slider,
        {"label": "vc_speed_label"},
        **slider("speed"),
        elem_id="cv-vc-speed",
    )
    trim, level, target = build_post_controls(make, "cv-vc")
    result = make(
        gr.Audio, {"label": "vc_result_label"}, interactive=False, buttons=["download"], elem_id="cv-vc-result"
    )
    with gr.Row(elem_id="cv-vc-action-row", elem_classes="cv-action-row", equal_height=False):
        with gr.Row(scale=0, elem_classes="cv-action-buttons"):
            start = make(
                gr.Button, {"value": "vc_start"}, variant="primary", elem_id="cv-vc-start", elem_classes="cv-action"
            )
            stop = make(
                gr.Button,
                {"value": "vc_stop"},
                variant="secondary",
                elem_id="cv-vc-stop",
                elem_classes="cv-stop-action",
            )
        with gr.Column(scale=3, min_width=240):
            status = gr.Markdown(elem_id="cv-vc-status", elem_classes="cv-message")
            progress = gr.HTML("", elem_id="cv-vc-progress-html")
    quiet = dict(queue=False, show_progress="hidden")
    source.upload(source_message, [language, source], source_msg, **quiet)
    source.stop_recording(source_message, [language, source], source_msg, **quiet)
    source.clear(lambda: "", None, source_msg, **quiet)
    voice.focus(convert.voice_choices, language, voice, **quiet)
    start.click(
        convert.convert,
        [language, source, voice, prompt, speed, trim, level, target],
        [status, progress, result],
        concurrency_limit=None,
        concurrency_id="convert",
        show_progress="hidden",
    )
    stop.click(convert.stop, None, None, **quiet)
    return {"voice": voice, "speed": speed}
