"""The transcript check as a blocker of the Speak action row: when the recogniser hears other words than the
transcript typed for the recording, zero-shot Generate is refused until the user chooses "Use what I hear" (the
recogniser's words replace the transcript) or "Keep mine" (the typed words stay, unchecked for this recording).

The verdict is this tab's (a ``gr.State``): a dict naming the recording it judged (an upload's path or
``voice:<name>``), the transcript typed then, what was heard, and whether the user kept theirs. It applies only
while the recording and the transcript are those it judged, so a new upload, another voice or an edit makes it
silent without an event of its own.
"""

from __future__ import annotations

import gradio as gr

from cosyvoice_mac.engine import EngineError
from cosyvoice_mac.sound.prompt_check import checked_prompt
from cosyvoice_mac.webui.strings import text as say
from cosyvoice_mac.webui.transcript_check import transcript_matches
from cosyvoice_mac.webui.voice_cards import UNTRANSCRIBABLE

NO_VERDICT: dict = {}


def recording_key(audio: str | None, voice: str | None) -> str:
    """What the transcript belongs to: the uploaded recording, else the saved voice (by name)."""
    return audio or (f"voice:{voice}" if voice else "")


def verdict_applies(verdict, audio, voice, transcript) -> bool:
    """The verdict judged this recording and this transcript (a new upload, voice or edit makes it stale)."""
    return (
        isinstance(verdict, dict)
        and bool(verdict)
        and verdict.get("recording") == recording_key(audio, voice)
        and verdict.get("typed") == (transcript or "").strip()
    )


def transcript_blocker(lang: str, verdict, audio, voice, transcript, mode) -> str | None:
    """The action row's line for the transcript, or None: checking (says so, blocks nothing), or a mismatch
    that zero-shot would read with the voice (blocks Generate until the user chooses)."""
    if mode != "zero_shot" or not verdict_applies(verdict, audio, voice, transcript):
        return None
    if verdict.get("checking"):
        return say(lang, "transcript_checking")
    if blocks_generate(verdict, audio, voice, transcript, mode):
        return say(lang, "transcript_blocker", heard=verdict["heard"])
    return None


def blocks_generate(verdict, audio, voice, transcript, mode) -> bool:
    """A concluded mismatch the user has not answered (a check still running blocks nothing)."""
    if mode != "zero_shot" or not verdict_applies(verdict, audio, voice, transcript):
        return False
    return verdict.get("heard") is not None and not verdict.get("matches") and not verdict.get("kept")


class TranscriptCheckCallbacks:
    """The check's callbacks, mixed into ``callbacks.Callbacks`` (which provides ``host`` and ``_voices``)."""

    host = None

    def _recording_to_check(self, audio: str | None, voice: str | None, transcript: str | None) -> str | None:
        """The recording a typed transcript can be checked against, or None when there is nothing to compare."""
        path = audio
        if not path and voice:
            try:
                path = self._voices().get(voice).get("audio_path")
            except EngineError:
                path = None
        if not (transcript or "").strip() or not path or checked_prompt(path).problem in UNTRANSCRIBABLE:
            return None
        return path

    def transcript_checking(self, lang: str, audio: str | None, voice: str | None, transcript: str | None):
        """(message, verdict) while :meth:`check_transcript` listens (both left alone when it will not)."""
        if not self._recording_to_check(audio, voice, transcript):
            return gr.skip(), gr.skip()
        verdict = {"recording": recording_key(audio, voice), "typed": transcript.strip(), "checking": True}
        return say(lang, "transcript_checking"), verdict

    def check_transcript(self, lang: str, audio: str | None, voice: str | None, transcript: str | None):
        """Compare the typed transcript with what the recogniser hears in the recording: (message, verdict, the
        row of the two choices shown or not). A warning and the choices when they differ, a tick when they
        agree, nothing when the recogniser gave no answer; left alone when there is nothing to compare. Runs in
        the request's thread (off Gradio's queue: see the page's wiring)."""
        path = self._recording_to_check(audio, voice, transcript)
        if path is None:
            return gr.skip(), gr.skip(), gr.skip()
        try:
            heard = (self.host.transcriber.transcribe(path) or "").strip()
        except Exception:  # no recogniser answer: nothing to warn about (Transcribe reports its own problems)
            heard = ""
        if not heard:
            return "", NO_VERDICT, gr.update(visible=False)
        matches = transcript_matches(transcript.strip(), heard)
        verdict = {"recording": recording_key(audio, voice), "typed": transcript.strip(), "heard": heard}
        verdict["matches"] = matches
        if matches:
            return say(lang, "transcript_agrees"), verdict, gr.update(visible=False)
        return say(lang, "transcript_mismatch", heard=heard), verdict, gr.update(visible=True)

    @staticmethod
    def transcript_use_heard(lang: str, verdict):
        """ "Use what I hear": the recogniser's words become the transcript. (transcript, message, verdict, row)"""
        if not (isinstance(verdict, dict) and verdict.get("heard")):
            return gr.skip(), gr.skip(), gr.skip(), gr.update(visible=False)
        agreed = {**verdict, "typed": verdict["heard"], "matches": True}
        return verdict["heard"], say(lang, "transcript_agrees"), agreed, gr.update(visible=False)

    @staticmethod
    def transcript_keep_mine(lang: str, verdict):
        """ "Keep mine": the typed words stay and block nothing for this recording. (message, verdict, row)"""
        if not isinstance(verdict, dict) or not verdict:
            return gr.skip(), gr.skip(), gr.update(visible=False)
        return say(lang, "transcript_kept"), {**verdict, "kept": True}, gr.update(visible=False)
