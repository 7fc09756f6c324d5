"""What each control does. Plain methods on one object, so tests can call them without a browser.

Every value that arrives from the page is treated as untrusted: model and voice names must be ones we
listed, history files must be this session's own outputs, and no text the user types is read as a path.
Messages are rendered in the page's language; problems with input come back as text for the Markdown
next to the field, never as an exception.
"""
from __future__ import annotations

import queue
import random
import threading
import time
from pathlib import Path
from typing import Iterator

import gradio as gr

from cosyvoice_mac.engine import EngineError, Job, QueueFull, VoiceError, VoiceLibrary
from cosyvoice_mac.engine import jobs as job_events
from cosyvoice_mac.engine.jobs import MAX_TEXT_CHARS
from cosyvoice_mac.webui.prompt_check import inspect_prompt
from cosyvoice_mac.webui.render import (
    PROMPT_PROBLEM_KEYS, history_choices, history_rows, render_prompt_check, render_status, status_line,
)
from cosyvoice_mac.webui.state import ActiveJobs, HistoryEntry, ModelHost, Session, Settings, is_inside
from cosyvoice_mac.webui.strings import text as say

MODES = ("zero_shot", "cross_lingual", "instruct")
MAX_SEED = 2**31 - 1
POLL_S = 0.5
LOADING_STATES = ("starting", "restarting")


class Callbacks:
    """Owns nothing but references: the model host, the voice library, each session's running job."""

    def __init__(self, host: ModelHost, settings: Settings):
        self.host = host
        self.settings = settings
        self.voices = VoiceLibrary(host.config.cache_dir)
        self.active = ActiveJobs()

    # -- voice -----------------------------------------------------------------------------------
    def prompt_message(self, lang: str, audio: str | None) -> str:
        """The line under the prompt: its length, or what is wrong with it."""
        if not audio:
            return ""
        return render_prompt_check(lang, inspect_prompt(audio))

    def prompt_uploaded(self, lang: str, audio: str | None):
        """A new upload or recording replaces any saved voice that was picked; a file that is not audio
        at all is taken out again (the message stays), so the upload area is back for the next try."""
        if not audio:
            return "", "", gr.skip()
        check = inspect_prompt(audio)
        unusable = check.problem in ("not_audio", "no_decoder")
        return render_prompt_check(lang, check), "", None if unusable else gr.skip()

    def voice_choices(self, lang: str) -> list[tuple[str, str]]:
        try:
            names = [entry["name"] for entry in self.voices.list()]
        except VoiceError:
            names = []
        return [(say(lang, "voices_none"), "")] + [(name, name) for name in names]

    def voice_picked(self, lang: str, name: str, transcript: str):
        """Picking a saved voice clears the upload and fills the transcript the voice was saved with."""
        if not name:
            return gr.skip(), "", gr.skip()
        try:
            entry = self.voices.get(name)
        except VoiceError as error:
            return gr.skip(), say(lang, "voice_error", message=error), gr.skip()
        return None, say(lang, "voice_in_use", name=name), entry.get("transcript") or transcript

    def save_voice(self, lang: str, name: str, audio: str | None, session: Session):
        """Name the prompt of this session's last finished job (it must be the prompt now loaded)."""
        name = (name or "").strip()
        if not name:
            return say(lang, "voice_name_needed"), gr.skip()
        engine = self.host.engine
        if engine is None or not audio or not session.prompt_job_id or session.prompt_path != audio:
            return say(lang, "voice_save_needs_job"), gr.skip()
        try:
            engine.save_voice(name, session.prompt_job_id)
        except EngineError as error:
            return say(lang, "voice_error", message=error), gr.skip()
        return say(lang, "voice_saved", name=name), gr.update(choices=self.voice_choices(lang))

    def delete_voice(self, lang: str, name: str):
        if not name:
            return say(lang, "voice_pick_to_delete"), gr.skip()
        try:
            self.voices.delete(name)
        except VoiceError as error:
            return say(lang, "voice_error", message=error), gr.skip()
        return say(lang, "voice_deleted", name=name), gr.update(choices=self.voice_choices(lang), value="")

    # -- text ------------------------------------------------------------------------------------
    @staticmethod
    def counter(lang: str, text: str | None) -> str:
        count = len(text or "")
        key = "counter_over" if count > MAX_TEXT_CHARS else "counter"
        return say(lang, key, count=count, limit=MAX_TEXT_CHARS)

    @staticmethod
    def mode_changed(mode: str):
        """Show the transcript for zero-shot, the instruction fields for instruct, neither for cross-lingual."""
        return (gr.update(visible=mode == "zero_shot"), gr.update(visible=mode == "instruct"),
                gr.update(visible=mode == "instruct"), "")

    @staticmethod
    def roll_seed() -> int:
        return random.randint(0, MAX_SEED)

    # -- generate --------------------------------------------------------------------------------
    def generate(self, lang, audio, voice, transcript, text, mode, instruct, seed, speed, session: Session,
                 request: gr.Request) -> Iterator[tuple]:
        """Check the input, queue the job, then report position, each sentence, and the result.

        Yields (prompt_msg, counter, mode_msg, status, result, history, history_pick, session).
        """
        session = session if isinstance(session, Session) else Session()
        out = _Outputs(lang, session)
        job, problem = self._build_job(lang, audio, voice, transcript, text, mode, instruct, seed, speed)
        if problem is not None:
            yield out.problem(*problem)
            return
        engine = self.host.engine
        if engine is None:
            yield out.status("status_no_model")
            return
        subscriber = engine.subscribe()
        session_id = getattr(request, "session_hash", None) or job.job_id
        try:
            try:
                engine.submit(job)
            except QueueFull:
                yield out.status("status_busy", waiting=self.host.config.max_queue)
                return
            except EngineError as error:
                yield out.status("status_model_error", message=str(error).rstrip("."))
                return
            self.active.set(session_id, job.job_id)
            yield out.status(*self._waiting_status(engine, job.job_id))
            terminal = yield from self._follow(engine, job.job_id, subscriber, out)
        finally:
            engine.unsubscribe(subscriber)
            self.active.clear(session_id, job.job_id)
        yield self._finish(out, terminal, job, audio, voice)

    def stop(self, request: gr.Request) -> None:
        job_id = self.active.get(getattr(request, "session_hash", None) or "")
        engine = self.host.engine
        if job_id and engine is not None:
            try:
                engine.cancel(job_id)
            except EngineError:  # already finished and forgotten
                pass

    def _build_job(self, lang, audio, voice, transcript, text, mode, instruct, seed, speed):
        """(Job, None) or (None, (where, strings key, values)) for the first problem found."""
        mode = mode if mode in MODES else "zero_shot"
        voice = voice or None
        if voice is not None:
            try:
                self.voices.get(voice)
            except VoiceError as error:
                return None, ("prompt", "voice_error", {"message": str(error)})
            audio = None
        elif not audio:
            return None, ("prompt", "prompt_needed", {})
        else:
            check = inspect_prompt(audio)
            if not check.ok:
                return None, ("prompt", PROMPT_PROBLEM_KEYS[check.problem], check.details)
        if not (text or "").strip():
            return None, ("text", "text_empty", {})
        if len(text) > MAX_TEXT_CHARS:
            return None, ("text", "counter_over", {"count": len(text), "limit": MAX_TEXT_CHARS})
        transcript = (transcript or "").strip()
        instruct = (instruct or "").strip()
        if mode == "zero_shot" and not transcript:
            return None, ("prompt", "transcript_needed", {})
        if mode == "instruct" and not instruct:
            return None, ("mode", "instruct_needed", {})
        if seed is not None and not _valid_seed(seed):
            return None, ("status", "seed_invalid", {"limit": MAX_SEED})
        job = Job(text=text, prompt_audio=audio, voice=voice,
                  prompt_text=transcript if mode == "zero_shot" else None,
                  instruct=instruct if mode == "instruct" else None,
                  seed=int(seed) if seed is not None else random.randint(0, MAX_SEED),
                  speed=float(speed) if speed is not None else 1.0)
        try:
            job.validate()
        except EngineError as error:
            return None, ("status", "status_invalid", {"message": str(error)})
        return job, None

    @staticmethod
    def _waiting_status(engine, job_id: str) -> tuple:
        if engine.status()["state"] in LOADING_STATES:
            return ("status_waiting_model",)
        position = engine.position(job_id)
        if position:
            return "status_queued", {"position": position}
        return ("status_started",)

    def _follow(self, engine, job_id: str, subscriber: queue.Queue, out: "_Outputs"):
        """Yield status updates until the job's terminal event; return that event."""
        while True:
            try:
                event = subscriber.get(timeout=POLL_S)
            except queue.Empty:
                try:
                    engine.result(job_id, timeout=0)
                except TimeoutError:
                    if engine.status()["state"] in LOADING_STATES and engine.position(job_id):
                        yield out.status("status_waiting_model")
                    continue
                except EngineError:
                    pass
                event = None  # ended without our hearing it (cannot normally happen): read it directly
            if event is None:
                return _terminal_event(engine, job_id)
            if event.job_id != job_id:
                continue
            if event.terminal:
                return event
            if event.kind in (job_events.EVENT_QUEUED, job_events.EVENT_POSITION):
                yield out.status(*self._waiting_status(engine, job_id))
            elif event.kind == job_events.EVENT_STARTED:
                yield out.status("status_started")
            elif event.kind == job_events.EVENT_PROGRESS:
                data = event.data
                yield out.status("status_progress", index=data.get("segment_index", 0) + 1,
                                 count=data.get("segment_count", 1), text=data.get("text", ""))
            elif event.kind == job_events.EVENT_RETRY:
                yield out.status("status_retry")

    def _finish(self, out: "_Outputs", event, job: Job, audio: str | None, voice: str | None) -> tuple:
        if event.kind == job_events.CANCELLED:
            return out.status("status_cancelled")
        if event.kind != job_events.DONE or event.result is None:
            return out.status("status_failed", message=event.message or event.kind)
        result = event.result
        session = out.session
        if audio:
            session.prompt_job_id, session.prompt_path = job.job_id, audio
        seconds = result.timings.get("total", 0.0)
        if result.output_path and is_inside(result.output_path, self.host.config.outputs_dir):
            session.add(HistoryEntry(path=result.output_path, text=job.text, mode=result.mode, voice=voice,
                                     seed=result.seed, speed=result.speed, duration_s=result.duration_s))
            status = ("status_done", {"duration": result.duration_s, "seconds": seconds, "seed": result.seed,
                                      "file": Path(result.output_path).name})
            playable = result.output_path
        else:
            status = ("status_done_unsaved", {"duration": result.duration_s, "seed": result.seed,
                                              "error": result.output_error or "?"})
            playable = (result.sample_rate, result.audio)
        status[1]["notes"] = "; ".join(getattr(result, "notes", None) or [])
        return out.done(status, playable, history_rows(out.lang, session), history_choices(session))

    # -- history ---------------------------------------------------------------------------------
    def history_picked(self, file_name: str | None, session: Session):
        """The chosen earlier output, if it is this session's and still in outputs/."""
        entry = session.find(file_name) if isinstance(session, Session) else None
        if entry is None or not is_inside(entry.path, self.host.config.outputs_dir) or not Path(entry.path).is_file():
            return None
        return entry.path

    # -- model -----------------------------------------------------------------------------------
    def status_panel(self, lang: str) -> str:
        return render_status(lang, self.host.status())

    def restart(self, lang: str) -> Iterator[tuple[str, str]]:
        """Restart the worker and report progress until it is ready (or failed)."""
        yield from self._while_loading(lang, self.host.restart, "restart_progress", {})

    def switch_model(self, lang: str, name: str) -> Iterator[tuple[str, str]]:
        """Load another model folder (only one the menu listed)."""
        choice = self.host.choice(name)
        if choice is None or (self.host.current is not None and choice.name == self.host.current.name):
            yield gr.skip(), self.status_panel(lang)
            return

        def switch() -> bool:
            self.host.start(choice.name)
            return self.host.engine.start(wait=True)

        yield from self._while_loading(lang, switch, "switch_progress", {"name": choice.name})

    def _while_loading(self, lang, work, progress_key: str, values: dict):
        started, outcome = time.monotonic(), {}

        def run():
            try:
                outcome["ok"] = work()
            except Exception as error:  # shown to the user; the page must keep working
                outcome["ok"], outcome["error"] = False, f"{type(error).__name__}: {error}"

        worker = threading.Thread(target=run, name="cosyvoice-ui-restart", daemon=True)
        worker.start()
        while worker.is_alive():
            yield say(lang, progress_key, seconds=time.monotonic() - started, **values), self.status_panel(lang)
            worker.join(POLL_S)
        status = self.host.status()
        if outcome.get("ok"):
            message = say(lang, "restart_done", seconds=time.monotonic() - started)
        else:
            reason = outcome.get("error") or status.get("last_error") or say(lang, "not_known")
            message = say(lang, "restart_failed", message=reason)
        yield message, render_status(lang, status)

    # -- page ------------------------------------------------------------------------------------
    def acknowledge_notice(self):
        self.settings.update(notice_acknowledged=True)
        return gr.update(visible=False)

    def on_load(self, lang: str):
        """Fresh values when a tab opens: saved voices, the status, whether the notice still shows, a seed,
        the model folders now in models/."""
        current = self.host.current.name if self.host.current else None
        models = gr.update(choices=[(choice.name, choice.name) for choice in self.host.models()], value=current)
        return (gr.update(choices=self.voice_choices(lang)), self.status_panel(lang),
                gr.update(visible=not self.settings.notice_acknowledged), self.roll_seed(), models)


class _Outputs:
    """Builds the generate event's output tuple; unchanged outputs are skipped."""

    def __init__(self, lang: str, session: Session):
        self.lang, self.session = lang, session

    def _tuple(self, prompt=None, counter=None, mode=None, status=None, result=None, history=None, picks=None):
        skip = gr.skip()
        values = (prompt, counter, mode, status, result, history, picks)
        return tuple(skip if value is None else value for value in values) + (self.session,)

    def status(self, key: str, values: dict | None = None, **more) -> tuple:
        self.session.last_status = (key, {**(values or {}), **more})
        return self._tuple(status=status_line(self.lang, *self.session.last_status))

    def problem(self, where: str, key: str, values: dict) -> tuple:
        message = say(self.lang, key, **values)
        if where == "status":
            return self.status(key, values)
        self.session.last_status = None
        slot = {"prompt": "prompt", "text": "counter", "mode": "mode"}[where]
        return self._tuple(status="", **{slot: message})

    def done(self, status: tuple[str, dict], playable, rows, picks) -> tuple:
        self.session.last_status = status
        return self._tuple(status=status_line(self.lang, *status), result=playable, history=rows,
                           picks=gr.update(choices=picks))


def _valid_seed(seed) -> bool:
    try:
        return float(seed).is_integer() and 0 <= int(seed) <= MAX_SEED
    except (TypeError, ValueError, OverflowError):
        return False


def _terminal_event(engine, job_id: str):
    try:
        result = engine.result(job_id, timeout=0)
    except job_events.JobFailed as error:
        return error.event
    return job_events.JobEvent(job_events.DONE, job_id, result=result)
