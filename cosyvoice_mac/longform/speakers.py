"""Where a long job's lines are spoken (and a batch's recordings converted): the engine's queue, for the page,
the API and the CLI alike.

A saved voice is resolved by name through the engine's voice library; the model worker applies the
pronunciation glossary to every line, as to any job.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from cosyvoice_mac.engine.jobs import EngineError
from cosyvoice_mac.engine.voice_rules import VoiceError, VoiceStyleUnknown
from cosyvoice_mac.frontend.glossary import GlossaryEntry
from cosyvoice_mac.longform.convert_batch import SourceLine
from cosyvoice_mac.longform.runner import LineRequest, Spoken
from cosyvoice_mac.pipeline.takes.retake import CHECK_NOTE_STARTS


class VoiceUnusable(EngineError):
    """A saved voice the job needs has no features for the loaded model and none can be made from its audio."""


class EngineSpeak:
    """Sends each line as an ordinary job to ``engine`` (same queue, cancel and outputs/ as any request)
    and waits for it; ``stop`` cancels the line in flight. The worker applies the glossary to every job (each
    line's sidecar lists the entries that matched); ``glossary`` here only keys a batch's resume. ``notes``
    are what the whole job should say it goes without (a damaged glossary)."""

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

    def __call__(self, line: LineRequest) -> Spoken:
        from cosyvoice_mac.engine.jobs import Job
        from cosyvoice_mac.request import Request, Voice

        name = line.voice or self.default_voice
        voice = self.engine.voice(name, line.style) if name else replace(Voice.builtin(), style=line.style)
        request = Request.build(
            line.text,
            voice,
            instruct=line.instruct,
            seed=line.seed,
            speed=line.speed,
            sampling=line.sampling,
            check=self.check,
        )
        result = self._run(Job(request, interface=self.interface))
        samples = np.asarray(result.samples(), dtype=np.float32)
        return Spoken(samples, result.sample_rate, self._facts(result), result.words)

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
        }

    def stop(self) -> None:
        if self.current_job is not None:
            self.engine.cancel(self.current_job)
