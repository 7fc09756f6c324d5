"""Where a long job's lines are spoken: through the engine's queue (page, API) or a model in this process (CLI).

Both resolve a saved voice by name through the voice library. The pronunciation glossary is applied where the
text is spoken: by the model worker for every engine job, by ``PipelineSpeak`` itself in the CLI.
"""

from __future__ import annotations

import numpy as np

from cosyvoice_mac.longform import LongformError
from cosyvoice_mac.longform.glossary import GlossaryEntry, apply_glossary
from cosyvoice_mac.longform.runner import LineRequest, Spoken


class EngineSpeak:
    """Sends each line as an ordinary job to ``engine`` (same queue, cancel and outputs/ as any request)
    and waits for it; ``stop`` cancels the line in flight. The worker applies the glossary to every job (each
    line's sidecar lists the entries that matched); ``glossary`` here only keys a batch's resume."""

    def __init__(
        self,
        engine,
        glossary: tuple[GlossaryEntry, ...] = (),
        default_voice: str | None = None,
        interface: str = "page",
        timeout_s: float | None = 900.0,
    ):
        self.engine, self.glossary, self.default_voice = engine, glossary, default_voice
        self.interface, self.timeout_s, self.current_job = interface, timeout_s, None

    def __call__(self, line: LineRequest) -> Spoken:
        from cosyvoice_mac.engine.jobs import Job
        from cosyvoice_mac.request import Request, Voice

        name = line.voice or self.default_voice
        voice = self.engine.voice(name) if name else Voice.builtin()
        request = Request.build(line.text, voice, instruct=line.instruct, seed=line.seed, speed=line.speed)
        self.current_job = self.engine.submit(Job(request, interface=self.interface))
        try:
            result = self.engine.result(self.current_job, timeout=self.timeout_s)
        finally:
            self.current_job = None
        return Spoken(
            np.asarray(result.samples(), dtype=np.float32),
            result.sample_rate,
            {
                "seed": result.seed,
                "model": result.model,
                "line_output": result.output_path,
                "interface": self.interface,
            },
        )

    def stop(self) -> None:
        if self.current_job is not None:
            self.engine.cancel(self.current_job)


class PipelineSpeak:
    """Speaks lines with a loaded model (CosyVoice or the preview voice) in this process; saved voices come
    from ``library`` (their recording and transcript)."""

    def __init__(self, model, library, glossary: tuple[GlossaryEntry, ...] = (), default_voice: str | None = None):
        self.model, self.library, self.glossary, self.default_voice = model, library, glossary, default_voice

    def __call__(self, line: LineRequest) -> Spoken:
        name = line.voice or self.default_voice
        if name is None:
            raise LongformError("no voice: name a saved voice (--voice) or give one per line")
        entry = self.library.get(name)
        if not entry.get("audio_path"):
            raise LongformError(f"the saved voice {name!r} has no recording stored; save it again from its audio")
        glossed = apply_glossary(line.text, self.glossary)
        pieces, seed = [], None
        for result in self.model.synthesize(
            glossed.text,
            prompt_audio=entry["audio_path"],
            prompt_text=entry.get("transcript"),
            instruct=line.instruct,
            seed=line.seed,
            speed=line.speed,
        ):
            pieces.append(result.audio)
            seed = result.seed
        audio = np.concatenate(pieces).astype(np.float32) if pieces else np.zeros(0, np.float32)
        return Spoken(
            audio,
            self.model.sample_rate,
            {
                "seed": seed,
                "model": getattr(self.model, "model_id", "model"),
                "glossary": glossed.describe(),
                "interface": "cli",
            },
        )
