"""The engine's voice library methods: a saved voice for a request, naming one from a finished job or
straight from a recording.

Mixed into :class:`cosyvoice_mac.engine.client.Engine`, which provides ``voices`` (a VoiceLibrary),
``result``, ``queue`` and ``run_task``. Nothing here imports torch: the worker extracts the features.
"""

from __future__ import annotations

from pathlib import Path

from cosyvoice_mac.engine import jobs
from cosyvoice_mac.engine.jobs import EngineError
from cosyvoice_mac.engine.voice_rules import VoiceExists, check_style, check_transcript, check_voice_audio
from cosyvoice_mac.request import Voice


class VoiceSaving:
    """The engine's voice-saving methods (state lives on the engine)."""

    def voice(self, name: str, style: str | None = None) -> Voice:
        """The saved voice ``name`` as a request's Voice, speaking its recording of ``style`` (None: its own)
        with that recording's transcript (so a request built from it speaks zero-shot when it has one).
        VoiceError if there is none by that name; VoiceStyleUnknown (naming its styles) if it has no such style."""
        style = (style or "").strip() or None
        entry = self.voices.styled(name, style)
        return Voice.saved_voice(entry["name"], entry.get("transcript"), style and entry["style"])

    def save_voice_from_audio(
        self,
        name: str,
        audio_path: str | Path,
        transcript: str | None = None,
        overwrite: bool = False,
        timeout: float | None = None,
    ) -> dict:
        """Name a prompt recording: the worker extracts (or finds cached) its features for the loaded model,
        the library keeps the name, the transcript and a copy of the audio. No generation is needed first.

        Raises VoiceError (bad name; VoiceExists: taken; VoiceTranscriptRefused: a transcript no job could take;
        VoiceAudioRefused: ``voice_library.judge_voice_audio``'s problem, before the worker is asked),
        TaskFailed (audio the model cannot use, with the reason), TimeoutError past ``timeout`` s, or
        EngineError (no such file, engine not running).
        """
        name = self.voices.check_name(name)
        transcript = check_transcript(transcript)
        if not overwrite and any(entry["name"] == name for entry in self.voices.list()):
            raise VoiceExists(f"a voice named {name!r} already exists; pick another name or replace it")
        audio_path = Path(audio_path)
        if not audio_path.is_file():
            raise EngineError(f"the prompt audio file {audio_path} does not exist; upload it again")
        check_voice_audio(audio_path)
        features = self.run_task(
            jobs.TASK_EXTRACT_PROMPT, {"audio": str(audio_path), "transcript": transcript}, timeout
        )
        return self.voices.save(
            name,
            audio_hash=features["audio_hash"],
            model_id=features["model_id"],
            transcript=transcript,
            audio=audio_path,
            overwrite=overwrite,
        )

    def add_voice_style(
        self,
        name: str,
        style: str,
        audio_path: str | Path,
        transcript: str | None = None,
        overwrite: bool = False,
        timeout: float | None = None,
    ) -> dict:
        """Give the saved voice ``name`` a recording of ``style`` (happy, whisper, car-noisy: one lowercase word,
        the inline tags' rule): the worker extracts (or finds cached) its features, the library keeps it beside the
        voice's own. Raises as :meth:`save_voice_from_audio` (VoiceExists: the voice has that style already)."""
        self.voices.get(name)
        style, transcript = check_style(style), check_transcript(transcript)
        audio_path = Path(audio_path)
        if not audio_path.is_file():
            raise EngineError(f"the prompt audio file {audio_path} does not exist; upload it again")
        check_voice_audio(audio_path)
        features = self.run_task(
            jobs.TASK_EXTRACT_PROMPT, {"audio": str(audio_path), "transcript": transcript}, timeout
        )
        return self.voices.add_style(
            name,
            style,
            audio_hash=features["audio_hash"],
            model_id=features["model_id"],
            transcript=transcript,
            audio=audio_path,
            overwrite=overwrite,
        )

    def replace_voice(
        self, name: str, audio_path: str | Path, transcript: str | None = None, timeout: float | None = None
    ) -> dict:
        """Give the saved voice ``name`` a new recording (and transcript), keeping its name: VoiceError when there
        is no voice by that name; otherwise as :meth:`save_voice_from_audio` with overwrite."""
        self.voices.get(name)
        return self.save_voice_from_audio(name, audio_path, transcript, overwrite=True, timeout=timeout)

    def prepare_voice(self, audio_path: str | Path, streaming: bool = True, timeout: float | None = None) -> dict:
        """Have the worker extract (or find cached) a recording's features now and, for ``streaming``,
        also compute the voice's flow prefix, so the first request with it starts as fast as later ones.

        Returns the task's result (``audio_hash``, ``streaming_ready``, ...). Raises as :meth:`save_voice_from_audio`.
        """
        audio_path = Path(audio_path)
        if not audio_path.is_file():
            raise EngineError(f"the prompt audio file {audio_path} does not exist; upload it again")
        return self.run_task(
            jobs.TASK_EXTRACT_PROMPT, {"audio": str(audio_path), "prepare_streaming": streaming}, timeout
        )

    def prepare_voices(self, names, timeout: float | None = None) -> dict[str, dict]:
        """Have the worker make sure every saved voice in ``names`` (names, or (name, style) pairs: that
        recording) has features for the loaded model, in one task: the cached ones cost a lookup, the rest are
        extracted together (each ONNX frontend loaded once).

        Returns name (``name (style)`` for a pair with a style) -> ``{"audio_hash", "cache": "memory" | "disk"
        | "extracted"}`` or ``{"error": why}`` for a voice this model cannot use. Raises VoiceError for a name
        the library does not know (VoiceStyleUnknown: a style it has no recording of) before the worker is
        asked, TaskFailed, TimeoutError past ``timeout`` s, or EngineError (engine not running).
        """
        entries = {}
        for name, style in (item if isinstance(item, tuple) else (item, None) for item in dict.fromkeys(names)):
            entries[f"{name} ({style})" if style else name] = self.voices.styled(name, style)
        if not entries:
            return {}
        return self.run_task(jobs.TASK_PREPARE_VOICES, {"voices": entries}, timeout)["voices"]

    def save_voice(self, name: str, job_id: str, overwrite: bool = False) -> dict:
        """Name the prompt voice a finished job used (its cached features and a copy of its audio)."""
        result = self.result(job_id, timeout=0)
        if not result.prompt_hash:
            raise EngineError("that job used no prompt voice, so there is nothing to save")
        request = self.queue.get(job_id).job.request
        voice = request.voice
        return self.voices.save(
            name,
            audio_hash=result.prompt_hash,
            model_id=result.model,
            transcript=request.transcript,
            audio=voice.audio,
            audio_samples=voice.samples,
            sample_rate=voice.sample_rate,
            overwrite=overwrite,
        )
