"""The page's status lines as derived state: each is computed from the engine's state, the voice library as it is
now and this tab's selection and job, whenever one of those changes (a tick of the page's timer covers what
changes elsewhere: another door's voice, a model restart, a job that ended). None is text appended by an event
and left behind, so a rename, a delete, a new upload, a restart or a finished job never leaves a line that is
no longer true.
"""

from __future__ import annotations

import json

import gradio as gr

from cosyvoice_mac.engine import EngineError
from cosyvoice_mac.engine.messages import EngineState
from cosyvoice_mac.preview.limits import markup_example
from cosyvoice_mac.webui.action_bar import blocking_reasons, render_reasons
from cosyvoice_mac.webui.strings import text as say
from cosyvoice_mac.webui.transcript_verdict import blocks_generate, transcript_blocker
from cosyvoice_mac.webui.voice_cards import render_card, render_voice_list


def library_signature(entries: list[dict]) -> str:
    """What the page shows of the library (names, transcripts, recordings), as one comparable string."""
    return json.dumps(entries, sort_keys=True, default=str)


class StatusCallbacks:
    """The derived lines' callbacks, mixed into ``callbacks.Callbacks`` (which provides ``host``, ``generation``,
    ``_voices`` and ``prompt_message``)."""

    host = None

    def engine_state(self) -> str:
        engine = self.host.engine
        return engine.status()["state"] if engine is not None else EngineState.STOPPED

    def blockers(
        self, lang, audio, voice, transcript, text, mode, instruct, verdict=None, request: gr.Request = None
    ) -> str:
        """The line beside Generate: this tab's running job, the model's state, every reason a press would be
        refused now (first the transcript check's, when it found other words than those typed), what the preview
        voice will leave out; "Ready" only when a press would start at once."""
        reasons = blocking_reasons(self.host, lang, audio, voice, transcript, text, mode, instruct)
        checked = transcript_blocker(lang, verdict, audio, voice, transcript, mode)
        blocking = blocks_generate(verdict, audio, voice, transcript, mode)  # else a check still running: a note
        reasons = ([checked] if checked and blocking else []) + reasons
        notes = ([checked] if checked and not blocking else []) + self.preview_notes(lang, text, mode)
        session = getattr(request, "session_hash", None)
        running = bool(session) and self.generation.active.get(session) is not None
        state = self.engine_state() if self.host.choices() else EngineState.READY  # "no model" says it already
        return render_reasons(lang, reasons, running=running, state=state, notes=notes)

    def preview_notes(self, lang: str, text: str | None, mode: str | None) -> list[str]:
        """What the preview voice (when it is the model) will leave out of this input, said before the job."""
        current = self.host.current
        if current is None or not current.is_preview:
            return []
        notes = [say(lang, "preview_ignores_instruction")] if mode == "instruct" else []
        example = markup_example(text)
        if example is not None:
            notes.append(say(lang, "preview_ignores_markup", example=example))
        return notes

    def prompt_status(self, lang: str, audio: str | None, voice: str | None) -> str:
        """The line under the prompt: the saved voice in use while it exists under that name, else the check of
        the uploaded or recorded prompt (nothing for a voice that is gone: the menu no longer offers it)."""
        if voice:
            try:
                self._voices().get(voice)
            except EngineError:
                return ""
            return say(lang, "voice_in_use", name=voice)
        return self.prompt_message(lang, audio)

    def voice_words(self, lang: str, voice: str | None):
        """The picked voice's card and the voice list, in ``lang`` (a language switch re-renders them)."""
        try:
            entries = self._voices().list()
            card = render_card(lang, self._voices().get(voice)) if voice else ""
        except EngineError:
            return "", render_voice_list(lang, [])
        return card, render_voice_list(lang, entries)

    def library_seen(self) -> str:
        """The library's signature now ("" when it cannot be read)."""
        try:
            return library_signature(self._voices().list())
        except EngineError:
            return ""

    def library_changed(self, lang: str, seen: str, voice: str | None):
        """When the library differs from what this tab shows (a voice saved, renamed, given a transcript or
        deleted through any door: this page, another tab, ``/v1``, the CLI), the voice menu, the list and the
        card again; a picked voice that is gone is unpicked. Returns (menu, list, card, signature)."""
        try:
            entries = self._voices().list()
        except EngineError:
            entries = []
        signature = library_signature(entries)
        if signature == seen:
            return gr.skip(), gr.skip(), gr.skip(), seen
        names = [entry["name"] for entry in entries]
        choices = [(say(lang, "voices_none"), "")] + [(name, name) for name in names]
        list_shown = render_voice_list(lang, entries)
        if not voice:  # nothing was picked when the tick left: the menu's value and the card are another event's
            return gr.update(choices=choices), list_shown, gr.skip(), signature
        picked = voice if voice in names else ""
        card = render_card(lang, self._voices().get(picked)) if picked else ""
        return gr.update(choices=choices, value=picked), list_shown, card, signature

    def tick(self, lang, seen, audio, voice, transcript, text, mode, instruct, verdict, request: gr.Request = None):
        """Everything the page's timer keeps true, in one answer: (status panel, queue line, voice menu, voice
        list, card, library signature, the line beside Generate, and the transcript check's message, verdict and
        choices once the recogniser has answered)."""
        menu, voice_list, card, seen = self.library_changed(lang, seen, voice)
        checked = self.transcript_result(lang, verdict, request)
        if isinstance(checked[1], dict):  # the answer came: the line beside Generate follows it now
            verdict = checked[1]
        return (
            self.status_panel(lang),
            self.queue_words(lang, request),
            menu,
            voice_list,
            card,
            seen,
            self.blockers(lang, audio, voice, transcript, text, mode, instruct, verdict, request),
            *checked,
        )
