"""The page's saved voices: pick one (its recording fills the prompt player, the mode follows what it can do),
see its card (transcript, length, date, modes), rename it, give it a transcript, replace it (a Save under a
taken name asks first), delete it (asked, then undoable: ``voice_delete``); and what each of those controls triggers.

The voice library belongs to the engine (``host.engine.voices``); this module only reads and changes it.
Element ids (``elem_id``) are the browser tests' handles; keep them stable.
"""

from __future__ import annotations

import time
from pathlib import Path

import gradio as gr
from gradio.utils import get_upload_folder

from cosyvoice_mac.engine import EngineError, VoiceExists, VoiceLibrary
from cosyvoice_mac.engine.voice_rules import DEFAULT_STYLE
from cosyvoice_mac.paths import atomic_write
from cosyvoice_mac.sound.prompt_check import checked_prompt
from cosyvoice_mac.webui.prompt_trim import build_prompt_trim
from cosyvoice_mac.webui.render import PROMPT_PROBLEM_KEYS, render_prompt_check
from cosyvoice_mac.webui.strings import escape
from cosyvoice_mac.webui.strings import text as say
from cosyvoice_mac.webui.voice_delete import build_delete_controls, wire_delete_controls

SAVE_VOICE_TIMEOUT_S = 900.0  # covers a model that is still loading when Save is pressed
UNTRANSCRIBABLE = (
    "missing",
    "unreadable",
    "empty",
    "no_samples",
    "not_audio",
    "invalid_samples",
    "no_decoder",
    "silent",
)


def playable_copy(recording: str | None) -> str | None:
    """A copy of a saved voice's ``recording`` in the page's temporary folder, for the prompt player (None when
    there is none): the voices folder itself is never served, since its list holds every voice's name,
    transcript and hash. Named as the recording (its content hash), so picking a voice again reuses it."""
    if not recording or not Path(recording).is_file():
        return None
    folder = Path(get_upload_folder()) / "voice-recordings"  # the janitor (--temp-max-age) clears it
    copy = folder / Path(recording).name
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(copy, Path(recording).read_bytes())  # a prompt is 20 MB at most
    except OSError:  # no room for a copy: the voice still speaks, its player stays empty
        return None
    return str(copy)


def voice_modes(entry: dict) -> tuple[str, ...]:
    """The modes a saved voice can speak in: zero-shot only with the transcript of its recording."""
    return ("zero_shot", "cross_lingual", "instruct") if entry.get("transcript") else ("cross_lingual", "instruct")


def render_card(lang: str, entry: dict | None) -> str:
    """One voice's card: name, length, date, modes, then its transcript (or that it has none)."""
    if not entry:
        return ""
    facts = [f"**{escape(entry['name'])}**"]
    audio = entry.get("audio_path")
    if audio and Path(audio).is_file():
        facts.append(say(lang, "voice_card_seconds", seconds=checked_prompt(audio).seconds))
    if entry.get("created"):
        facts.append(time.strftime("%Y-%m-%d %H:%M", time.localtime(entry["created"])))
    facts.append(", ".join(say(lang, f"mode_short_{mode}") for mode in voice_modes(entry)))
    if entry.get("styles"):  # a voice of one recording shows no style list
        styles = [entry.get("style") or DEFAULT_STYLE, *sorted(entry["styles"])]
        facts.append(say(lang, "voice_card_styles", styles=", ".join(styles)))
    transcript = entry.get("transcript")
    second = (
        say(lang, "voice_card_transcript", transcript=transcript)
        if transcript
        else say(lang, "voice_card_no_transcript")
    )
    return " · ".join(facts) + "  \n" + second


def render_voice_list(lang: str, entries: list[dict]) -> str:
    """Every saved voice as a table: name, date, modes, transcript."""
    if not entries:
        return say(lang, "voice_list_empty")
    rows = [
        "| "
        + " | ".join(say(lang, key) for key in ("col_voice", "col_time", "col_mode", "voice_col_transcript"))
        + " |",
        "|---|---|---|---|",
    ]
    for entry in entries:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry["created"])) if entry.get("created") else ""
        modes = ", ".join(say(lang, f"mode_short_{mode}") for mode in voice_modes(entry))
        transcript = escape(entry.get("transcript") or "—").replace("\n", " ")
        rows.append(f"| {escape(entry['name'])} | {created} | {modes} | {transcript} |")
    return "\n".join(rows)


class VoiceCallbacks:
    """The saved-voice controls' callbacks, mixed into ``callbacks.Callbacks`` (which provides ``host``)."""

    host = None

    @property
    def voices(self) -> VoiceLibrary:
        """The engine's voice library (see ``_voices``)."""
        return self._voices()

    def _voices(self) -> VoiceLibrary:
        """The engine's voice library; EngineError when no model (so no engine) is running."""
        engine = self.host.engine
        if engine is None:
            raise EngineError("no model is running, so saved voices cannot be used; see the note at the top")
        return engine.voices

    def prompt_uploaded(self, lang: str, audio: str | None):
        """A new upload or recording replaces any saved voice that was picked; a file that is not audio
        at all is taken out again (the message stays), so the upload area is back for the next try."""
        if not audio:
            return "", "", gr.skip()
        check = checked_prompt(audio)
        unusable = check.problem in UNTRANSCRIBABLE[:-1]  # all but "silent": those files hold no sound at all
        return render_prompt_check(lang, check), "", None if unusable else gr.skip()

    def voice_choices(self, lang: str) -> list[tuple[str, str]]:
        try:
            names = [entry["name"] for entry in self._voices().list()]
        except EngineError:  # VoiceError included: an unreadable list shows as none
            names = []
        return [(say(lang, "voices_none"), "")] + [(name, name) for name in names]

    def voice_list(self, lang: str) -> str:
        try:
            return render_voice_list(lang, self._voices().list())
        except EngineError as error:
            return say(lang, "voice_error", message=error)

    def voice_picked(self, lang: str, name: str, transcript: str):
        """Picking a saved voice puts its recording in the prompt player, fills the transcript it was saved
        with and sets a mode it can speak in. Returns (prompt audio, prompt message, transcript, mode, card)."""
        if not name:
            return gr.skip(), "", gr.skip(), gr.skip(), ""
        try:
            entry = self._voices().get(name)
        except EngineError as error:
            return gr.skip(), say(lang, "voice_error", message=error), gr.skip(), gr.skip(), ""
        audio = playable_copy(entry.get("audio_path"))
        mode = "zero_shot" if entry.get("transcript") else "cross_lingual"
        words = entry.get("transcript") or transcript
        return audio, say(lang, "voice_in_use", name=name), words, mode, render_card(lang, entry)

    def save_voice(self, lang: str, name: str, audio: str | None, transcript: str | None, overwrite: bool = False):
        """Keep the uploaded or recorded prompt as a named voice: the worker prepares its features now, so
        no generation is needed first. A taken name asks before replacing (``overwrite`` True: the answer).
        Yields (voice message, voices menu, the replace question's visibility)."""
        name = (name or "").strip()
        if not name:
            yield say(lang, "voice_name_needed"), gr.skip(), gr.skip()
            return
        if not audio:
            yield say(lang, "voice_save_needs_audio"), gr.skip(), gr.skip()
            return
        check = checked_prompt(audio)
        if not check.ok:
            yield say(lang, PROMPT_PROBLEM_KEYS[check.problem], **check.details), gr.skip(), gr.skip()
            return
        engine = self.host.engine
        if engine is None:
            yield say(lang, "voice_save_no_model"), gr.skip(), gr.skip()
            return
        yield say(lang, "voice_saving"), gr.skip(), gr.update(visible=False)
        try:
            engine.save_voice_from_audio(name, audio, transcript, overwrite=overwrite, timeout=SAVE_VOICE_TIMEOUT_S)
        except VoiceExists:
            yield say(lang, "voice_exists_replace", name=name), gr.skip(), gr.update(visible=True)
            return
        except (EngineError, TimeoutError, OSError) as error:  # OSError: the voices folder refused the copy
            yield say(lang, "voice_error", message=error), gr.skip(), gr.skip()
            return
        key = "voice_replaced" if overwrite else "voice_saved"
        words = say(lang, key, name=name)
        if not (transcript or "").strip():
            words += "  \n" + say(lang, "voice_saved_no_transcript")
        yield words, gr.update(choices=self.voice_choices(lang), value=name), gr.update(visible=False)

    def replace_voice(self, lang: str, name: str, audio: str | None, transcript: str | None):
        """The answer Yes to "replace it?": the same save, overwriting the voice of that name."""
        yield from self.save_voice(lang, name, audio, transcript, overwrite=True)

    def rename_voice(self, lang: str, name: str, new_name: str):
        """Returns (voice message, voices menu, card)."""
        if not name:
            return say(lang, "voice_pick_to_rename"), gr.skip(), gr.skip()
        try:
            entry = self._voices().rename(name, new_name or "")
            entry = self._voices().get(entry["name"])
        except VoiceExists:
            return say(lang, "voice_name_taken", name=(new_name or "").strip()), gr.skip(), gr.skip()
        except EngineError as error:
            return say(lang, "voice_error", message=error), gr.skip(), gr.skip()
        menu = gr.update(choices=self.voice_choices(lang), value=entry["name"])
        return say(lang, "voice_renamed", old=name, name=entry["name"]), menu, render_card(lang, entry)

    def save_voice_transcript(self, lang: str, name: str, transcript: str):
        """Keep the transcript field as the picked voice's transcript. Returns (voice message, card, mode)."""
        if not name:
            return say(lang, "voice_pick_first"), gr.skip(), gr.skip()
        try:
            entry = self._voices().set_transcript(name, transcript)
            entry = self._voices().get(name)
        except EngineError as error:
            return say(lang, "voice_error", message=error), gr.skip(), gr.skip()
        key = "voice_transcript_saved" if entry.get("transcript") else "voice_transcript_removed"
        mode = "zero_shot" if entry.get("transcript") else "cross_lingual"
        return say(lang, key, name=name), render_card(lang, entry), mode

    def voice_menu_cleared(self, name: str):
        """The card empties with the menu (an upload replaced the voice, or it was deleted)."""
        return "" if not name else gr.skip()


def build_voice_section(make, callbacks: VoiceCallbacks, features: dict[str, bool]) -> dict:
    """The voice column's controls, in page order; a dict by name for the layout to wire."""
    controls: dict = {}
    make(gr.Markdown, {"value": "section_voice"})
    controls["voices"] = make(
        gr.Dropdown,
        {"choices": callbacks.voice_choices, "label": "voices_label", "info": "voices_info"},
        value="",
        # A name is checked against the library by every callback (a voice gone is said so), not by Gradio
        # against the menu's last choices: a tick sent with a voice that a delete has just taken off the menu
        # was refused with Gradio's own error (and a traceback in the log).
        allow_custom_value=True,
        elem_id="cv-voices",
    )
    controls["card"] = gr.Markdown(elem_id="cv-voice-card", elem_classes="cv-message")
    controls["prompt_audio"] = make(
        gr.Audio,
        {"label": "prompt_audio_label"},
        sources=["upload", "microphone"],
        type="filepath",
        buttons=["download"],
        elem_id="cv-prompt-audio",
    )
    controls["prompt_msg"] = gr.Markdown(elem_id="cv-prompt-msg", elem_classes="cv-message")
    controls.update(build_prompt_trim(make))  # a recording over the limit: its clearest part, on its waveform
    with gr.Row(equal_height=False, elem_id="cv-transcript-row") as transcript_row:
        controls["transcript"] = make(
            gr.Textbox,
            {"label": "transcript_label", "placeholder": "transcript_placeholder"},
            lines=2,
            scale=5,
            elem_id="cv-transcript",
        )
        controls["transcribe"] = None
        if features.get("asr"):
            controls["transcribe"] = make(
                gr.Button, {"value": "transcribe"}, size="sm", scale=1, min_width=110, elem_id="cv-transcribe"
            )
    controls["transcript_row"] = transcript_row
    controls["transcript_msg"] = gr.Markdown(elem_id="cv-transcript-msg", elem_classes="cv-message")
    with gr.Row(visible=False, elem_id="cv-transcript-choices") as choices:  # the check found other words
        controls["use_heard"] = make(
            gr.Button,
            {"value": "transcript_use_heard"},
            size="sm",
            variant="primary",
            elem_id="cv-transcript-use-heard",
        )
        controls["keep_mine"] = make(
            gr.Button, {"value": "transcript_keep_mine"}, size="sm", elem_id="cv-transcript-keep-mine"
        )
    controls["transcript_choices"] = choices
    with gr.Row():
        controls["voice_name"] = make(
            gr.Textbox,
            {"label": "voice_name_label", "placeholder": "voice_name_placeholder"},
            scale=3,
            elem_id="cv-voice-name",
        )
        with gr.Column(scale=1, min_width=120):
            controls["save_voice"] = make(gr.Button, {"value": "save_voice"}, size="sm", elem_id="cv-save-voice")
            controls["delete_voice"] = make(gr.Button, {"value": "delete_voice"}, size="sm", elem_id="cv-delete-voice")
    with gr.Row(visible=False, elem_id="cv-replace-row") as replace_row:
        controls["replace_confirm"] = make(
            gr.Button, {"value": "voice_replace_yes"}, size="sm", variant="stop", elem_id="cv-replace-confirm"
        )
        controls["replace_cancel"] = make(
            gr.Button, {"value": "voice_replace_no"}, size="sm", elem_id="cv-replace-cancel"
        )
    controls["replace_row"] = replace_row
    controls.update(build_delete_controls(make))
    controls["voice_msg"] = gr.Markdown(elem_id="cv-voice-msg", elem_classes="cv-message")
    return controls


def build_voice_library(make, controls: dict) -> dict:
    """The Voices workspace (inside its tab): rename the voice picked in Speak, save the transcript typed there as
    its own, and every saved voice; added to the voice section's ``controls``."""
    make(gr.Markdown, {"value": "voices_workspace_info"}, elem_classes="cv-message")
    with gr.Row():
        controls["rename_to"] = make(gr.Textbox, {"label": "voice_rename_label"}, scale=3, elem_id="cv-rename-to")
        controls["rename"] = make(gr.Button, {"value": "voice_rename"}, size="sm", scale=1, elem_id="cv-rename-voice")
    controls["save_transcript"] = make(
        gr.Button, {"value": "voice_save_transcript"}, size="sm", elem_id="cv-voice-save-transcript"
    )
    controls["library_msg"] = gr.Markdown(elem_id="cv-library-msg", elem_classes="cv-message")
    controls["voice_list"] = gr.Markdown(elem_id="cv-voice-list")
    return controls


def wire_voice_section(controls: dict, callbacks: VoiceCallbacks, language, mode) -> None:
    """Each voice control's callback (the generation's own use of them is wired by the layout)."""
    quiet = dict(queue=False, show_progress="hidden")
    voices, card, prompt_audio = controls["voices"], controls["card"], controls["prompt_audio"]
    transcript, voice_msg = controls["transcript"], controls["voice_msg"]
    voices.input(
        callbacks.voice_picked,
        [language, voices, transcript],
        [prompt_audio, controls["prompt_msg"], transcript, mode, card],
        **quiet,
    )
    voices.change(callbacks.voice_menu_cleared, voices, card, **quiet)
    voices.change(callbacks.voice_list, language, controls["voice_list"], **quiet)
    menu_and_row = [voice_msg, voices, controls["replace_row"]]
    save_inputs = [language, controls["voice_name"], prompt_audio, transcript]
    voice_slot = dict(concurrency_id="voice", concurrency_limit=2)
    controls["save_voice"].click(callbacks.save_voice, save_inputs, menu_and_row, **voice_slot)
    controls["replace_confirm"].click(callbacks.replace_voice, save_inputs, menu_and_row, **voice_slot)
    controls["replace_cancel"].click(lambda: ("", gr.update(visible=False)), None, [voice_msg, controls["replace_row"]])
    # Said in the Voices workspace where the button is, and in Speak where the voice is picked.
    controls["rename"].click(
        callbacks.rename_voice, [language, voices, controls["rename_to"]], [voice_msg, voices, card], **quiet
    ).then(lambda words: words, voice_msg, controls["library_msg"], **quiet)
    controls["save_transcript"].click(
        callbacks.save_voice_transcript, [language, voices, transcript], [voice_msg, card, mode], **quiet
    ).then(callbacks.voice_list, language, controls["voice_list"], **quiet).then(
        lambda words: words, voice_msg, controls["library_msg"], **quiet
    )
    wire_delete_controls(controls, callbacks, language)
