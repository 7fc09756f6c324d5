"""What Generate does: check the input, queue the job, report its place and progress (streaming its audio
to the page's player when asked), then show the saved result and add it to the session's history.

Problems with the input come back as text for the Markdown next to the field, never as an exception.
"""

from __future__ import annotations

import queue
import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterator, NamedTuple

import gradio as gr

from cosyvoice_mac.engine import EngineError, Job, QueueFull
from cosyvoice_mac.engine import jobs as job_events
from cosyvoice_mac.engine.host import ModelHost
from cosyvoice_mac.engine.jobqueue import Listener
from cosyvoice_mac.engine.messages import Done, EngineState, Progress, Queued, Retrying, Started
from cosyvoice_mac.engine.outputs import unsaved_copy
from cosyvoice_mac.heap import return_freed_heap
from cosyvoice_mac.paths import temporary_folder
from cosyvoice_mac.preview.labels import PREVIEW_LABEL
from cosyvoice_mac.webui.history import HistoryBook, history_view
from cosyvoice_mac.webui.page_request import POST_OFF, PageRequest
from cosyvoice_mac.webui.render import status_line
from cosyvoice_mac.webui.state import ActiveJobs, Session, is_inside
from cosyvoice_mac.webui.streaming import StreamBuffer
from cosyvoice_mac.webui.strings import text as say

POLL_S = 0.5
CLOSED_TAB_GRACE_S = 5.0  # a closed tab's jobs are cancelled after this (a reload or a flaky connection)
QUEUE_TEXT_CHARS = 40


class GenerateOutputs(NamedTuple):
    """One update of the Generate event, by name; the page wires its outputs in this order (``layout.py``
    reads ``_fields``), so nothing matches them by position. None in a field means "leave it"."""

    prompt_msg: object
    counter: object
    mode_msg: object
    status: object
    result: object
    history: object
    history_pick: object
    session: object
    player: object
    blockers: object  # the line beside Generate: "your job is running" once it is queued (derived_status)
    seed: object  # the seed field: the new seed a Generate rolled (``Callbacks.generate``)


class Generation(PageRequest):
    """Owns each browser session's running job (so its Stop button can cancel it); a finished one shows in
    the history (``history``: outputs/ read back)."""

    def __init__(self, host: ModelHost, history: HistoryBook):
        self.host = host
        self.history = history
        self.active = ActiveJobs()
        self._stopped: set[str] = set()  # jobs whose owner pressed Stop: only those end as "Stopped."

    def run(
        self,
        lang,
        audio,
        voice,
        transcript,
        text,
        mode,
        instruct,
        seed,
        speed,
        stream,
        session,
        page,
        post=POST_OFF,
        sampling=(),
        style=None,
        check=None,
    ) -> Iterator[tuple]:
        """Yields GenerateOutputs. ``page`` is Gradio's request; ``post`` the post-processing controls' values
        (trim, normalise, target); ``sampling`` the sampling controls' (on, then the four values; none: off);
        ``style`` the saved voice's recording to speak with (None or "": its own); ``check`` the take check's box
        (None: as the setting says)."""
        session = session if isinstance(session, Session) else Session()
        out = _Outputs(lang, session, StreamBuffer() if stream else None)
        request, problem = self.build_request(
            lang, audio, voice, transcript, text, mode, instruct, seed, speed, stream, post, sampling, style, check
        )
        if problem is not None:
            yield out.problem(*problem)
            return
        engine = self.host.engine
        if engine is None:
            yield out.status("status_no_model")
            return
        subscriber = engine.subscribe()
        job = Job(request, interface="page")
        session_id = getattr(page, "session_hash", None) or job.job_id
        job, held = _hold_prompt(job)
        try:
            try:
                engine.submit(job)
            except QueueFull as full:
                if full.retry_after_s is None:
                    yield out.status("status_busy_unknown", waiting=self.host.config.max_queue, position=full.position)
                else:
                    yield out.status(
                        "status_busy",
                        waiting=self.host.config.max_queue,
                        position=full.position,
                        seconds=max(1, round(full.retry_after_s)),
                    )
                return
            except EngineError as error:
                yield out.status("status_model_error", message=str(error).rstrip("."))
                return
            self.active.set(session_id, job.job_id)
            waiting = out.status(*self._waiting_status(engine, job.job_id))
            yield waiting._replace(blockers=say(lang, "action_running"))
            terminal = yield from self._follow(engine, job.job_id, subscriber, out)
        finally:
            engine.unsubscribe(subscriber)
            self.active.clear(session_id, job.job_id)
            if held is not None:
                held.unlink(missing_ok=True)
            return_freed_heap()  # the heap pages the handler threads' prompt checks freed
        owner_stopped = job.job_id in self._stopped
        self._stopped.discard(job.job_id)
        yield out.last(self._finish(out, terminal, job, voice, owner_stopped))

    def stop(self, request) -> None:
        job_id = self.active.get(getattr(request, "session_hash", None) or "")
        engine = self.host.engine
        if job_id and engine is not None:
            self._stopped.add(job_id)
            try:
                engine.cancel(job_id)
            except EngineError:  # already finished and forgotten
                pass

    def session_closed(self, request, grace_s: float = CLOSED_TAB_GRACE_S) -> threading.Timer | None:
        """The tab of ``request``'s session closed (or reloaded): after ``grace_s`` cancel every job it left
        waiting or running. Returns the timer (tests wait on it)."""
        session_id = getattr(request, "session_hash", None)
        if not session_id or not self.active.owned(session_id):
            return None

        def cancel_left_jobs() -> None:
            engine = self.host.engine
            for job_id in self.active.forget(session_id):
                if engine is None or engine.position(job_id) is None:  # finished already
                    continue
                try:
                    engine.cancel(job_id)
                except EngineError:  # finished meanwhile
                    pass

        timer = threading.Timer(grace_s, cancel_left_jobs)
        timer.daemon = True
        timer.start()
        return timer

    def queue_words(self, lang: str, request) -> str:
        """The queue as every tab sees it: the running job and the waiting ones, the tab's own marked (its Stop
        stops them); the others' are shown without their text."""
        engine = self.host.engine
        if engine is None:
            return ""
        mine = set(self.active.owned(getattr(request, "session_hash", None) or ""))
        line = engine.line()
        if not line:
            return say(lang, "queue_empty")
        lines = []
        for entry in line:
            where = say(lang, "queue_running") if entry.place == 0 else say(lang, "queue_place", place=entry.place)
            if entry.job_id in mine:
                text = entry.text
                short = text if len(text) <= QUEUE_TEXT_CHARS else text[: QUEUE_TEXT_CHARS - 1] + "…"
                lines.append(say(lang, "queue_yours", where=where, text=short))
            else:
                lines.append(say(lang, "queue_other", where=where, interface=entry.interface or "?"))
        return "  \n".join(lines)

    @staticmethod
    def _waiting_status(engine, job_id: str) -> tuple:
        if engine.status()["state"] in EngineState.LOADING:
            return ("status_waiting_model",)
        position = engine.position(job_id)
        if position:
            return "status_queued", {"position": position}
        return ("status_started",)

    def _follow(self, engine, job_id: str, subscriber: Listener, out: "_Outputs"):
        """Yield status (and streamed audio) updates until the job's terminal event; return that event."""
        while True:
            try:
                event = subscriber.get(timeout=POLL_S)
            except queue.Empty:
                try:
                    engine.result(job_id, timeout=0)
                except TimeoutError:
                    status = engine.status()
                    if status["state"] == EngineState.UNRESPONSIVE:
                        yield out.status("status_not_answering", seconds=status.get("silent_s") or 0.0)
                    elif status["state"] in EngineState.LOADING and engine.position(job_id):
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
            if isinstance(event, Queued):
                yield out.status(*self._waiting_status(engine, job_id))
            elif isinstance(event, Started):
                yield out.status("status_started")
            elif isinstance(event, Progress):
                yield out.progress(event)
            elif isinstance(event, Retrying):
                if out.player is not None:
                    out.player.restart()  # the job starts again from its first sentence
                    out.first_audio_s = None
                yield out.status("status_retry")

    def _finish(self, out: "_Outputs", event, job: Job, voice: str | None, owner_stopped: bool = False) -> tuple:
        if event.kind == job_events.CANCELLED:  # by this session's Stop, or by the engine, which says why
            if owner_stopped:
                return out.status("status_cancelled")
            return out.status("status_interrupted", message=event.message or event.kind)
        if event.kind != job_events.DONE or event.result is None:
            return out.status("status_failed", message=event.message or event.kind)
        result = event.result
        notes = list(getattr(result, "notes", None) or [])
        preview = any(PREVIEW_LABEL in note for note in notes)
        notes = [note for note in notes if PREVIEW_LABEL not in note]  # the page shows its own label
        seconds = result.timings.get("total", 0.0)
        saved = result.output_path and is_inside(result.output_path, self.host.config.outputs_dir)
        out.session.last_output = result.output_path if saved else None  # its check and captions are shown
        if saved:
            status = (
                "status_done",
                {
                    "duration": result.duration_s,
                    "seconds": seconds,
                    "seed": result.seed,
                    "file": Path(result.output_path).name,
                },
            )
            playable = result.output_path
        else:
            status = (
                "status_done_unsaved",
                {"duration": result.duration_s, "seed": result.seed, "error": result.output_error or "?"},
            )
            try:  # a copy with its content credentials, where the page's temporary folder has room
                playable = str(unsaved_copy(result, temporary_folder("unsaved")))
            except OSError:
                playable = (result.sample_rate, result.audio)
        status[1].update(notes="; ".join(notes), preview=preview)
        if out.first_audio_s is not None:
            status[1].update(streamed=True, first=out.first_audio_s, elapsed=time.monotonic() - out.started)
        view = history_view(out.lang, self.history.entries())
        return out.done(status, playable, view.table, view.picks)


class _Outputs:
    """Builds the generate event's output tuple; unchanged outputs are skipped. A streaming run always
    sends the player's whole value: Gradio then transmits only what was appended since the last update."""

    def __init__(self, lang: str, session: Session, player: StreamBuffer | None):
        self.lang, self.session, self.player = lang, session, player
        self.started = time.monotonic()
        self.first_audio_s: float | None = None

    def _tuple(
        self, prompt=None, counter=None, mode=None, status=None, result=None, history=None, picks=None
    ) -> GenerateOutputs:
        skip = gr.skip()
        values = (prompt, counter, mode, status, result, history, picks)
        player = self.player.value if self.player is not None else skip
        return GenerateOutputs(
            *(skip if value is None else value for value in values), self.session, player, skip, skip
        )

    def status(self, key: str, values: dict | None = None, **more) -> tuple:
        self.session.last_status = (key, {**(values or {}), **more})
        return self._tuple(status=status_line(self.lang, *self.session.last_status))

    def progress(self, event: Progress) -> tuple:
        """One sentence done, or (streaming) one more chunk to play."""
        index, count = event.segment_index + 1, event.segment_count
        if self.player is None or event.audio is None:
            return self.status("status_progress", index=index, count=count, text=event.text)
        self.player.add(event.audio, event.sample_rate)
        if self.first_audio_s is None:
            self.first_audio_s = time.monotonic() - self.started
        return self.status(
            "status_streaming", index=index, count=count, audio=self.player.seconds, first=self.first_audio_s
        )

    def problem(self, where: str, key: str, values: dict) -> tuple:
        message = say(self.lang, key, **values)
        if where == "status":
            return self.status(key, values)
        self.session.last_status = None
        slot = {"prompt": "prompt", "text": "counter", "mode": "mode"}[where]
        return self._tuple(status="", **{slot: message})

    def last(self, values: GenerateOutputs) -> GenerateOutputs:
        """The run's final update: the player's value shrinks to the bare stream id (it plays on)."""
        return values if self.player is None else values._replace(player=self.player.stream_id)

    def done(self, status: tuple[str, dict], playable, rows, picks) -> tuple:
        self.session.last_status = status
        return self._tuple(
            status=status_line(self.lang, *status), result=playable, history=rows, picks=gr.update(choices=picks)
        )


def _hold_prompt(job: Job) -> tuple[Job, Path | None]:
    """Give the job its own copy of the uploaded prompt for as long as it waits and runs: Gradio's temporary
    folder deletes uploads after a while (--temp-max-age), which must not take a queued job's voice away."""
    voice = job.request.voice
    if voice.kind != "audio":
        return job, None
    folder = temporary_folder("job-prompts")
    held = folder / f"{job.job_id}{Path(voice.audio).suffix.lower()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(voice.audio, held)
    except OSError:  # no room for a copy: the upload itself serves, as before
        return job, None
    return replace(job, request=replace(job.request, voice=replace(voice, audio=str(held)))), held


def _terminal_event(engine, job_id: str):
    try:
        result = engine.result(job_id, timeout=0)
    except job_events.JobFailed as error:
        return error.event
    return Done(job_id, result)
