"""What Generate does: check the input, queue the job, report its place and progress (streaming its audio
to the page's player when asked), then show the saved result and add it to the session's history.

Problems with the input come back as text for the Markdown next to the field, never as an exception.
"""
from __future__ import annotations

import queue
import random
import time
from pathlib import Path
from typing import Iterator

import gradio as gr

from cosyvoice_mac.engine import EngineError, Job, QueueFull, VoiceError, VoiceLibrary
from cosyvoice_mac.engine import jobs as job_events
from cosyvoice_mac.engine.jobs import MAX_TEXT_CHARS
from cosyvoice_mac.preview.labels import PREVIEW_LABEL
from cosyvoice_mac.webui.prompt_check import inspect_prompt
from cosyvoice_mac.webui.render import PROMPT_PROBLEM_KEYS, history_choices, history_rows, status_line
from cosyvoice_mac.webui.state import ActiveJobs, HistoryEntry, ModelHost, Session, is_inside
from cosyvoice_mac.webui.streaming import StreamBuffer
from cosyvoice_mac.webui.strings import text as say

MODES = ("zero_shot", "cross_lingual", "instruct")
MAX_SEED = 2**31 - 1
POLL_S = 0.5
LOADING_STATES = ("starting", "restarting")


class Generation:
    """Owns each browser session's running job (so its Stop button can cancel it)."""

    def __init__(self, host: ModelHost, voices: VoiceLibrary):
        self.host = host
        self.voices = voices
        self.active = ActiveJobs()

    def run(self, lang, audio, voice, transcript, text, mode, instruct, seed, speed, stream, session: Session,
            request) -> Iterator[tuple]:
        """Yields (prompt_msg, counter, mode_msg, status, result, history, history_pick, session, player)."""
        session = session if isinstance(session, Session) else Session()
        out = _Outputs(lang, session, StreamBuffer() if stream else None)
        job, problem = self.build_job(lang, audio, voice, transcript, text, mode, instruct, seed, speed, stream)
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
        yield out.last(self._finish(out, terminal, job, voice))

    def stop(self, request) -> None:
        job_id = self.active.get(getattr(request, "session_hash", None) or "")
        engine = self.host.engine
        if job_id and engine is not None:
            try:
                engine.cancel(job_id)
            except EngineError:  # already finished and forgotten
                pass

    def build_job(self, lang, audio, voice, transcript, text, mode, instruct, seed, speed, stream=False):
        """(Job, None) or (None, (where, strings key, values)) for the first problem found.

        Streaming plays at speed 1.0 (the model cannot change the speed of audio it has already sent), so
        the speed is ignored then; the page says so next to the toggle.
        """
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
                  speed=1.0 if stream or speed is None else float(speed), stream=bool(stream), interface="page")
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
        """Yield status (and streamed audio) updates until the job's terminal event; return that event."""
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
                yield out.progress(event.data)
            elif event.kind == job_events.EVENT_RETRY:
                if out.player is not None:
                    out.player.restart()  # the job starts again from its first sentence
                    out.first_audio_s = None
                yield out.status("status_retry")

    def _finish(self, out: "_Outputs", event, job: Job, voice: str | None) -> tuple:
        if event.kind == job_events.CANCELLED:
            return out.status("status_cancelled")
        if event.kind != job_events.DONE or event.result is None:
            return out.status("status_failed", message=event.message or event.kind)
        result = event.result
        session = out.session
        notes = list(getattr(result, "notes", None) or [])
        preview = any(PREVIEW_LABEL in note for note in notes)
        notes = [note for note in notes if PREVIEW_LABEL not in note]  # the page shows its own label
        current = self.host.current
        seconds = result.timings.get("total", 0.0)
        if result.output_path and is_inside(result.output_path, self.host.config.outputs_dir):
            session.add(HistoryEntry(path=result.output_path, text=job.text, mode=result.mode, voice=voice,
                                     seed=result.seed, speed=result.speed, duration_s=result.duration_s,
                                     model=None if preview or current is None else current.name, preview=preview))
            status = ("status_done", {"duration": result.duration_s, "seconds": seconds, "seed": result.seed,
                                      "file": Path(result.output_path).name})
            playable = result.output_path
        else:
            status = ("status_done_unsaved", {"duration": result.duration_s, "seed": result.seed,
                                              "error": result.output_error or "?"})
            playable = (result.sample_rate, result.audio)
        status[1].update(notes="; ".join(notes), preview=preview)
        if out.first_audio_s is not None:
            status[1].update(streamed=True, first=out.first_audio_s, elapsed=time.monotonic() - out.started)
        return out.done(status, playable, history_rows(out.lang, session), history_choices(session))


class _Outputs:
    """Builds the generate event's output tuple; unchanged outputs are skipped. A streaming run always
    sends the player's whole value: Gradio then transmits only what was appended since the last update."""

    def __init__(self, lang: str, session: Session, player: StreamBuffer | None):
        self.lang, self.session, self.player = lang, session, player
        self.started = time.monotonic()
        self.first_audio_s: float | None = None

    def _tuple(self, prompt=None, counter=None, mode=None, status=None, result=None, history=None, picks=None):
        skip = gr.skip()
        values = (prompt, counter, mode, status, result, history, picks)
        player = self.player.value if self.player is not None else skip
        return tuple(skip if value is None else value for value in values) + (self.session, player)

    def status(self, key: str, values: dict | None = None, **more) -> tuple:
        self.session.last_status = (key, {**(values or {}), **more})
        return self._tuple(status=status_line(self.lang, *self.session.last_status))

    def progress(self, data: dict) -> tuple:
        """One sentence done, or (streaming) one more chunk to play."""
        index, count = data.get("segment_index", 0) + 1, data.get("segment_count", 1)
        if self.player is None or data.get("audio") is None:
            return self.status("status_progress", index=index, count=count, text=data.get("text", ""))
        self.player.add(data["audio"], int(data.get("sample_rate") or 24000))
        if self.first_audio_s is None:
            self.first_audio_s = time.monotonic() - self.started
        return self.status("status_streaming", index=index, count=count, audio=self.player.seconds,
                           first=self.first_audio_s)

    def problem(self, where: str, key: str, values: dict) -> tuple:
        message = say(self.lang, key, **values)
        if where == "status":
            return self.status(key, values)
        self.session.last_status = None
        slot = {"prompt": "prompt", "text": "counter", "mode": "mode"}[where]
        return self._tuple(status="", **{slot: message})

    def last(self, values: tuple) -> tuple:
        """The run's final update: the player's value shrinks to the bare stream id (it plays on)."""
        return values if self.player is None else values[:-1] + (self.player.stream_id,)

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
