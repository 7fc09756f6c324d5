"""The transcript check as a blocker of the Speak action row: when the recogniser hears other words than the
transcript typed for the recording, zero-shot Generate is refused until the user chooses "Use what I hear" (the
recogniser's words replace the transcript) or "Keep mine" (the typed words stay, unchecked for this recording).

The verdict is this tab's (a ``gr.State``): a dict naming the recording it judged (an upload's path or
``voice:<name>``), the transcript typed then, what was heard, and whether the user kept theirs. It applies only
while the recording and the transcript are those it judged, so a new upload, another voice or an edit makes it
silent without an event of its own.
"""

from __future__ import annotations

import threading

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


def _shown(lang: str, verdict: dict) -> tuple:
    """(message, verdict, the choices' row) for a concluded verdict."""
    if verdict.get("heard") is None:
        return "", NO_VERDICT, gr.update(visible=False)
    if verdict["matches"]:
        return say(lang, "transcript_agrees"), verdict, gr.update(visible=False)
    return say(lang, "transcript_mismatch", heard=verdict["heard"]), verdict, gr.update(visible=True)


class TranscriptChecks:
    """Owns, by browser session, the verdicts the recogniser's threads found until the tab's tick takes them,
    and each tab's latest verdict (the user's choice included), which Generate reads: the page's /generate event
    keeps its inputs, so the API's callers are not asked for one more value."""

    def __init__(self):
        self._done: dict[str, dict] = {}
        self._latest: dict[str, dict] = {}
        self._lock = threading.Lock()

    def put(self, session: str, verdict: dict) -> None:
        with self._lock:
            self._done[session] = verdict
            self._latest[session] = verdict

    def settle(self, session: str, verdict: dict) -> None:
        """The user chose (use what was heard, or keep theirs): the tab's latest verdict."""
        with self._lock:
            self._latest[session] = verdict

    def latest(self, session: str) -> dict:
        with self._lock:
            return self._latest.get(session, NO_VERDICT)

    def forget(self, session: str) -> None:
        with self._lock:
            self._done.pop(session, None)
            self._latest.pop(session, None)

    def take(self, session: str) -> dict | None:
        with self._lock:
            return self._done.pop(session, None)


class TranscriptCheckCallbacks:
    """The check's callbacks, mixed into ``callbacks.Callbacks`` (which provides ``host``, ``_voices`` and
    ``transcript_checks``)."""

    host = None
    transcript_checks: TranscriptChecks

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

    def check_transcript(self, lang: str, audio, voice, transcript, request: gr.Request = None):
        """The field was left: (message, verdict) saying the check runs, at once, while the recogniser listens on
        a thread of its own (a recording takes it seconds, and an answer that waited for it held the page's
        other answers back); the page's tick brings its verdict (:meth:`transcript_result`). Both are left
        alone when there is nothing to compare."""
        path = self._recording_to_check(audio, voice, transcript)
        if path is None:
            return gr.skip(), gr.skip()
        checking = {"recording": recording_key(audio, voice), "typed": transcript.strip(), "checking": True}
        session = getattr(request, "session_hash", None) or ""
        threading.Thread(
            target=lambda: self.transcript_checks.put(session, self.judge_transcript(path, checking)),
            name="transcript-check",
            daemon=True,
        ).start()
        return say(lang, "transcript_checking"), checking

    def judge_transcript(self, path: str, checking: dict) -> dict:
        """The verdict on ``checking``'s transcript against the recording at ``path``: what the recogniser heard
        (None when it gave no answer: nothing to warn about) and whether it matches."""
        try:
            heard = (self.host.transcriber.transcribe(path) or "").strip() or None
        except Exception:  # no recogniser answer: nothing to warn about (Transcribe reports its own problems)
            heard = None
        verdict = {"recording": checking["recording"], "typed": checking["typed"], "heard": heard}
        verdict["matches"] = heard is None or transcript_matches(checking["typed"], heard)
        return verdict

    def transcript_result(self, lang: str, verdict, request: gr.Request = None):
        """For the page's tick: (message, verdict, the row of the two choices) once the check this tab waits for
        has an answer; all left alone before, or when the tab has since moved on (another recording or text)."""
        session = getattr(request, "session_hash", None) or ""
        done = self.transcript_checks.take(session)
        waiting = isinstance(verdict, dict) and verdict.get("checking")
        same = (
            waiting
            and done is not None
            and (done["recording"], done["typed"]) == (verdict["recording"], verdict["typed"])
        )
        if not same:
            return gr.skip(), gr.skip(), gr.skip()
        return _shown(lang, done)

    def transcript_use_heard(self, lang: str, verdict, request: gr.Request = None):
        """ "Use what I hear": the recogniser's words become the transcript. (transcript, message, verdict, row)"""
        if not (isinstance(verdict, dict) and verdict.get("heard")):
            return gr.skip(), gr.skip(), gr.skip(), gr.update(visible=False)
        agreed = {**verdict, "typed": verdict["heard"], "matches": True}
        self.transcript_checks.settle(getattr(request, "session_hash", None) or "", agreed)
        return verdict["heard"], say(lang, "transcript_agrees"), agreed, gr.update(visible=False)

    def transcript_keep_mine(self, lang: str, verdict, request: gr.Request = None):
        """ "Keep mine": the typed words stay and block nothing for this recording. (message, verdict, row)"""
        if not isinstance(verdict, dict) or not verdict:
            return gr.skip(), gr.skip(), gr.update(visible=False)
        kept = {**verdict, "kept": True}
        self.transcript_checks.settle(getattr(request, "session_hash", None) or "", kept)
        return say(lang, "transcript_kept"), kept, gr.update(visible=False)
