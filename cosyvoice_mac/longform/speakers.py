"""Where a long job's lines are spoken (and a batch's recordings converted): the engine's queue, for the page,
the API and the CLI alike.

A saved voice is resolved by name through the engine's voice library; the model worker applies the
pronunciation glossary to every line, as to any job.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Sequence

import numpy as np

from cosyvoice_mac.engine.jobs import EngineError, QueueFull
from cosyvoice_mac.engine.voice_rules import VoiceError, VoiceStyleUnknown
from cosyvoice_mac.frontend.glossary import GlossaryEntry
from cosyvoice_mac.longform.convert_batch import SourceLine
from cosyvoice_mac.longform.lines import LineRequest, Spoken
from cosyvoice_mac.pipeline.takes.retake import CHECK_NOTE_STARTS


class VoiceUnusable(EngineError):
    """A saved voice the job needs has no features for the loaded model and none can be made from its audio."""


class EngineSpeak:
    """Sends each line as an ordinary job to ``engine`` (same queue, cancel and outputs/ as any request)
    and waits for it; ``stop`` cancels the lines in flight. The worker applies the glossary to every job (each
    line's sidecar lists the entries that matched); ``glossary`` here only keys a batch's resume. ``notes``
    are what the whole job should say it goes without (a damaged glossary).

    Told the lines to come (:meth:`ahead`), it keeps up to the engine's batch size of them in the queue at
    once, so the engine speaks them as one batch (issue 47); each is still its own job."""

    def __init__(
        self,
        engine,
        glossary: tuple[GlossaryEntry, ...] = (),
        default_voice: str | None = None,
        interface: str = "page",
        timeout_s: float | None = 900.0,
        notes: tuple[str, ...] = (),
        check: bool | None = None,
    ):
        self.engine, self.glossary, self.default_voice, self.notes = engine, glossary, default_voice, notes
        self.check = check  # the take check for every line: None follows the global switch
        self.interface, self.timeout_s, self.current_job = interface, timeout_s, None
        self._upcoming: deque[LineRequest] = deque()  # lines the job will ask for, not yet sent
        self._sent: deque[tuple[LineRequest, str]] = deque()  # lines sent ahead of their turn, and their jobs
        self._group = 1

    def ahead(self, lines: Sequence[LineRequest]) -> None:
        """The lines the job will ask for next, in order; none: the job is over, and the lines sent ahead of
        their turn are cancelled (a job stopped by an error or by Stop leaves nothing running)."""
        for _, job_id in self._sent:
            self.engine.cancel(job_id)
        self._sent.clear()
        self._upcoming = deque(lines)
        status = self.engine.status() if lines else {}
        # a batch's lines, but never more than half the waiting places: the rest stay for other requests
        room = max(1, int(status.get("max_queue") or 2) // 2)
        self._group = min(max(1, int(status.get("batch_lines") or 1)), room) if lines else 1

    def __call__(self, line: LineRequest) -> Spoken:
        if self._sent and self._sent[0][0] == line:
            self.current_job = self._sent.popleft()[1]
        else:
            if self._upcoming and self._upcoming[0] == line:
                self._upcoming.popleft()
            self.current_job = self.engine.submit(self._job(line))
        self._send_ahead()  # before waiting: the next lines join this one's batch
        result = self._wait()
        samples = np.asarray(result.samples(), dtype=np.float32)
        return Spoken(samples, result.sample_rate, self._facts(result), result.words)

    def _job(self, line: LineRequest):
        from cosyvoice_mac.engine.jobs import Job
        from cosyvoice_mac.request import Voice

        name = line.voice or self.default_voice
        voice = self.engine.voice(name, line.style) if name else replace(Voice.builtin(), style=line.style)
        return Job(line.request(voice, self.check), interface=self.interface)

    def _send_ahead(self) -> None:
        """Queue the next lines until the line in flight and those sent ahead fill one batch (or the queue has
        no place left for this door: the rest go later)."""
        while self._upcoming and len(self._sent) + 1 < self._group:
            line = self._upcoming[0]
            try:
                job_id = self.engine.submit(self._job(line))
            except QueueFull:
                return
            self._upcoming.popleft()
            self._sent.append((line, job_id))

    def prepare(self, voices) -> None:
        """Have the engine make every saved voice of ``voices`` ((voice, style) pairs; None: the default voice,
        its own recording) ready for the loaded model in one task, so no line waits for its voice's features,
        and a voice the model cannot use or a style it has no recording of stops the job before its first line:
        VoiceUnusable names each such voice and why."""
        wanted = list(dict.fromkeys((voice or self.default_voice, style or None) for voice, style in voices))
        unstyled = [style for name, style in wanted if style and not name]
        if unstyled:
            raise VoiceUnusable(f"the style {unstyled[0]!r} needs a saved voice: pick one for the job or the line")
        try:
            outcomes = self.engine.prepare_voices([pair for pair in wanted if pair[0]], timeout=self.timeout_s)
        except VoiceStyleUnknown as error:  # said before the worker is asked, naming the styles the voice has
            raise VoiceUnusable(str(error)) from error
        refused = [f"{name!r}: {outcome['error']}" for name, outcome in outcomes.items() if "error" in outcome]
        if refused:
            raise VoiceUnusable("the loaded model cannot use the saved voice " + "; ".join(refused))

    def styles(self, voice: str | None) -> tuple[str, ...]:
        """The styles the saved voice ``voice`` (None: the default voice) has recordings of; none for the
        backend's own voice, or for a name the library does not hold (``prepare`` says so, naming it)."""
        name = voice or self.default_voice
        if not name:
            return ()
        try:
            return self.engine.voices.style_names(name)
        except VoiceError:
            return ()

    def convert(self, line: SourceLine) -> Spoken:
        """Re-speak ``line.source`` in its saved voice (None: the default; neither: the backend's own voice, the
        preview's) as one conversion job; JobFailed when the engine refuses or fails it."""
        from cosyvoice_mac.conversion_request import ConversionRequest
        from cosyvoice_mac.engine.jobs import Job
        from cosyvoice_mac.request import Voice

        name = line.voice or self.default_voice
        voice = self.engine.voice(name) if name else Voice.builtin()
        request = ConversionRequest.build(str(line.source), voice, speed=line.speed)
        result = self._run(Job(request, interface=self.interface))
        facts = self._facts(result)
        facts.update(source_hash=result.source_hash, source_duration_s=result.source_duration_s)
        return Spoken(np.asarray(result.samples(), dtype=np.float32), result.sample_rate, facts)

    def _run(self, job):
        self.current_job = self.engine.submit(job)
        return self._wait()

    def _wait(self):
        try:
            return self.engine.result(self.current_job, timeout=self.timeout_s)
        finally:
            self.current_job = None

    def _facts(self, result) -> dict:
        return {
            "seed": result.seed,
            "model": result.model,
            "line_output": result.output_path,
            "not_saved": result.output_error,  # made, but outputs/ refused it (the audio is here all the same)
            "interface": self.interface,
            "check": result.check_status,  # passed, retaken, flagged; None: not checked
            "check_notes": [note for note in result.notes if note.startswith(CHECK_NOTE_STARTS)],
            "batch_size": result.batch_size,  # lines spoken together with this one (issue 47)
        }

    def stop(self) -> None:
        for job_id in [self.current_job, *(job_id for _, job_id in self._sent)]:
            if job_id is not None:
                self.engine.cancel(job_id)
