"""The page's voice styles and voices files, a section below the voice column's Manage section: give the
picked voice the recording above as one more style (happy, whisper, car-noisy: one lowercase word, the inline
tags' rule), export the picked voice or every voice as a voices file to download, import one
(``engine.voice_transfer``: checked whole, all or none).

Element ids (``elem_id``) are the browser tests' handles; keep them stable.
"""

from __future__ import annotations

import re
from pathlib import Path

import gradio as gr
from gradio.utils import get_upload_folder

from cosyvoice_mac.engine import EngineError
from cosyvoice_mac.engine.voice_transfer import SUFFIX, VoiceFileRefused, export_voices, import_voices
from cosyvoice_mac.paths import atomic_write
from cosyvoice_mac.sound.prompt_check import checked_prompt
from cosyvoice_mac.webui.render import PROMPT_PROBLEM_KEYS
from cosyvoice_mac.webui.strings import text as say
from cosyvoice_mac.webui.voice_cards import SAVE_VOICE_TIMEOUT_S, render_card


class VoiceFileCallbacks:
    """The style and voices-file controls' callbacks, mixed into ``callbacks.Callbacks`` (which provides
    ``host`` and ``_voices``, ``voice_choices`` from ``voice_cards.VoiceCallbacks``)."""

    def style_choices(self, lang: str, name: str | None):
        """The style menu for the picked voice: its own recording (the value "") first, then its other styles;
        hidden when no saved voice is picked."""
        try:
            recordings = self._voices().recordings(name) if name else []
        except EngineError:  # no engine, or the voice went away meanwhile
            recordings = []
        if not recordings:
            return gr.update(choices=[], value=None, visible=False)
        own, *others = recordings
        choices = [(say(lang, "voice_speak_style_own", style=own["style"]), "")]
        choices += [(recording["style"], recording["style"]) for recording in others]
        return gr.update(choices=choices, value="", visible=len(choices) > 1)

    def style_picked(self, name: str | None, style: str | None):
        """The transcript field follows the recording picked to speak with (its own for "")."""
        try:
            return self._voices().styled(name, style or None).get("transcript") or "" if name else gr.skip()
        except EngineError:
            return gr.skip()

    def add_style(self, lang: str, name: str, style: str, audio: str | None, transcript: str | None):
        """The recording in the prompt player kept as the picked voice's ``style`` (the worker prepares its
        features). Returns (voice message, card)."""
        if not name:
            return say(lang, "voice_pick_first"), gr.skip()
        if not audio:
            return say(lang, "voice_style_needs_audio"), gr.skip()
        check = checked_prompt(audio)
        if not check.ok:
            return say(lang, PROMPT_PROBLEM_KEYS[check.problem], **check.details), gr.skip()
        try:
            self._voices()  # EngineError when no model (so no engine) runs
            entry = self.host.engine.add_voice_style(name, style, audio, transcript, timeout=SAVE_VOICE_TIMEOUT_S)
        except (EngineError, TimeoutError, OSError) as error:
            return say(lang, "voice_error", message=error), gr.skip()
        card = render_card(lang, self._voices().get(entry["name"]))
        return say(lang, "voice_style_added", name=entry["name"], style=(style or "").strip()), card

    def export_voice(self, lang: str, name: str | None):
        """The picked voice (None or empty: every voice) as a voices file in the page's temporary folder, for
        the download box. Returns (voice message, file)."""
        try:
            data = export_voices(self._voices(), [name] if name else None)
        except EngineError as error:
            return say(lang, "voice_error", message=error), None
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") if name else "voices"
        folder = Path(get_upload_folder()) / "voice-files"  # the janitor (--temp-max-age) clears it
        target = folder / f"{stem or 'voice'}{SUFFIX}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write(target, data)
        except OSError as error:
            return say(lang, "voice_error", message=error), None
        what = f"“{name}”" if name else say(lang, "voice_exported_all")
        return say(lang, "voice_exported", what=what), str(target)

    def export_all_voices(self, lang: str):
        return self.export_voice(lang, None)

    def import_voice_file(self, lang: str, path: str | None):
        """The voices of an uploaded voices file added, all or none. Returns (voice message, voices menu, the
        upload box emptied, the card of the first voice imported, which the menu now shows)."""
        if not path:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip()
        try:
            saved = import_voices(self._voices(), Path(path))
        except VoiceFileRefused as error:
            return say(lang, "voice_import_refused", message=error), gr.skip(), None, gr.skip()
        except EngineError as error:
            return say(lang, "voice_error", message=error), gr.skip(), None, gr.skip()
        names = ", ".join(
            say(lang, "voice_imported_renamed", name=entry["name"], was=entry["name_in_file"])
            if entry["name"] != entry["name_in_file"]
            else f"“{entry['name']}”"
            for entry in saved
        )
        menu = gr.update(choices=self.voice_choices(lang), value=saved[0]["name"])
        card = render_card(lang, self._voices().get(saved[0]["name"]))
        return say(lang, "voice_imported", names=names), menu, None, card


def build_voice_file_controls(make) -> dict:
    """The menu of the picked voice's styles to speak with (shown when it has more than its own), then the
    style and voices-file controls, in a closed section of their own."""
    controls: dict = {}
    controls["speak_style"] = make(
        gr.Dropdown, {"label": "voice_speak_style"}, choices=[], visible=False, elem_id="cv-speak-style"
    )
    with make(gr.Accordion, {"label": "voice_files_heading"}, open=False, elem_id="cv-voice-files"):
        _build_controls(make, controls)
    return controls


def _build_controls(make, controls: dict) -> None:
    with gr.Row():
        controls["style_name"] = make(
            gr.Textbox,
            {"label": "voice_style_label", "placeholder": "voice_style_placeholder"},
            scale=3,
            elem_id="cv-style-name",
        )
        controls["add_style"] = make(
            gr.Button, {"value": "voice_add_style"}, size="sm", scale=1, elem_id="cv-add-style"
        )
    with gr.Row():
        controls["export_voice"] = make(gr.Button, {"value": "voice_export"}, size="sm", elem_id="cv-export-voice")
        controls["export_all"] = make(gr.Button, {"value": "voice_export_all"}, size="sm", elem_id="cv-export-all")
    controls["exported"] = make(gr.File, {"label": "voice_export_file"}, interactive=False, elem_id="cv-voice-file")
    controls["import_file"] = make(
        gr.File, {"label": "voice_import_label"}, file_types=[".zip"], type="filepath", elem_id="cv-import-voices"
    )


def wire_voice_file_controls(controls: dict, callbacks: VoiceFileCallbacks, language) -> None:
    """``controls``: these and the voice section's (the menu, card, message, prompt player, transcript)."""
    voices, voice_msg, card = controls["voices"], controls["voice_msg"], controls["card"]
    voice_slot = dict(concurrency_id="voice", concurrency_limit=2)
    controls["add_style"].click(
        callbacks.add_style,
        [language, voices, controls["style_name"], controls["prompt_audio"], controls["transcript"]],
        [voice_msg, card],
        **voice_slot,
    )
    style_menu = controls["speak_style"]
    voices.change(callbacks.style_choices, [language, voices], style_menu, show_progress="hidden", queue=False)
    card.change(callbacks.style_choices, [language, voices], style_menu, show_progress="hidden", queue=False)
    style_menu.input(callbacks.style_picked, [voices, style_menu], controls["transcript"], queue=False)
    controls["export_voice"].click(callbacks.export_voice, [language, voices], [voice_msg, controls["exported"]])
    controls["export_all"].click(callbacks.export_all_voices, [language], [voice_msg, controls["exported"]])
    controls["import_file"].upload(
        callbacks.import_voice_file,
        [language, controls["import_file"]],
        [voice_msg, voices, controls["import_file"], card],
        **voice_slot,
    )
