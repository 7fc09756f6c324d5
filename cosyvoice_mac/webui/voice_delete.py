"""Deleting a saved voice from the page: asked first, then undoable for a few seconds.

Delete asks ("Delete the voice X?"); Yes removes it from the library at once (every door sees it gone), while a
copy of its recording waits in the page's temporary folder with the entry's facts. Undo, within ``UNDO_S``,
saves it again under its name with its transcript; when the time is up the copy is removed and the button goes.
Element ids (``elem_id``) are the browser tests' handles; keep them stable.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import gradio as gr
from gradio.utils import get_upload_folder

from cosyvoice_mac.engine import EngineError, VoiceExists
from cosyvoice_mac.webui.strings import text as say

UNDO_S = 10.0  # how long a deleted voice can be brought back


class VoiceDeleteCallbacks:
    """Delete's question, the deletion and its undo, mixed into ``callbacks.Callbacks`` (which provides
    ``_voices`` and ``voice_choices``). ``kept`` is the tab's undo record: the deleted entry and its copy."""

    def ask_delete(self, lang: str, name: str):
        """Returns (voice message, the question's visibility)."""
        if not name:
            return say(lang, "voice_pick_to_delete"), gr.update(visible=False)
        return say(lang, "voice_delete_ask", name=name), gr.update(visible=True)

    def delete_voice(self, lang: str, name: str, kept: dict | None = None):
        """Delete the voice, keeping what Undo needs. Returns (voice message, voices menu, question, Undo button,
        undo record, undo timer)."""
        hidden = gr.update(visible=False)
        if not name:
            return say(lang, "voice_pick_to_delete"), gr.skip(), hidden, gr.skip(), gr.skip(), gr.skip()
        forget_kept(kept)  # one undo at a time: a second delete ends the first one's chance
        try:
            entry = self._voices().get(name)
            copy = _keep_recording(entry.get("audio_path"))
            self._voices().delete(name)
        except (EngineError, OSError) as error:
            return say(lang, "voice_error", message=error), gr.skip(), hidden, hidden, None, gr.Timer(active=False)
        record = {"entry": {key: entry.get(key) for key in ("name", "audio_hash", "model_id", "transcript")}}
        record["copy"] = copy
        menu = gr.update(choices=self.voice_choices(lang), value="")
        words = say(lang, "voice_deleted_undo", name=name, seconds=round(UNDO_S))
        return words, menu, hidden, gr.update(visible=True), record, gr.Timer(active=True)

    def undo_delete(self, lang: str, kept: dict | None):
        """Save the deleted voice again. Returns (voice message, voices menu, Undo button, undo record, timer)."""
        hidden, stopped = gr.update(visible=False), gr.Timer(active=False)
        if not kept or not kept.get("copy") or not Path(kept["copy"]).is_file():
            return say(lang, "voice_undo_gone"), gr.skip(), hidden, None, stopped
        entry = kept["entry"]
        try:
            self._voices().save(
                entry["name"],
                audio_hash=entry["audio_hash"],
                model_id=entry["model_id"],
                transcript=entry.get("transcript"),
                audio=kept["copy"],
            )
        except VoiceExists:  # the name was taken meanwhile (another door): the copy stays until the time is up
            return say(lang, "voice_undo_taken", name=entry["name"]), gr.skip(), hidden, kept, gr.skip()
        except EngineError as error:
            return say(lang, "voice_error", message=error), gr.skip(), hidden, kept, gr.skip()
        forget_kept(kept)
        menu = gr.update(choices=self.voice_choices(lang), value=entry["name"])
        return say(lang, "voice_restored", name=entry["name"]), menu, hidden, None, stopped

    @staticmethod
    def undo_expired(kept: dict | None):
        """The undo time is up: the copy goes. Returns (Undo button, undo record, timer)."""
        forget_kept(kept)
        return gr.update(visible=False), None, gr.Timer(active=False)


def _keep_recording(recording: str | None) -> str | None:
    """A copy of the voice's recording in the page's temporary folder (the janitor clears what is left)."""
    if not recording or not Path(recording).is_file():
        return None
    folder = Path(get_upload_folder()) / "deleted-voices"
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / f"{uuid.uuid4().hex}{Path(recording).suffix}"
    shutil.copyfile(recording, copy)
    return str(copy)


def forget_kept(kept: dict | None) -> None:
    if kept and kept.get("copy"):
        Path(kept["copy"]).unlink(missing_ok=True)


def build_delete_controls(make) -> dict:
    """The question under Delete and the Undo button, hidden until needed; the undo record and its timer."""
    controls: dict = {}
    with gr.Row(visible=False, elem_id="cv-delete-row") as delete_row:
        controls["delete_confirm"] = make(
            gr.Button, {"value": "voice_delete_yes"}, size="sm", variant="stop", elem_id="cv-delete-confirm"
        )
        controls["delete_cancel"] = make(gr.Button, {"value": "voice_delete_no"}, size="sm", elem_id="cv-delete-cancel")
    controls["delete_row"] = delete_row
    controls["undo"] = make(gr.Button, {"value": "voice_undo"}, size="sm", visible=False, elem_id="cv-undo-delete")
    controls["kept"] = gr.State(None)
    controls["undo_timer"] = gr.Timer(UNDO_S, active=False)
    return controls


def wire_delete_controls(controls: dict, callbacks: VoiceDeleteCallbacks, language) -> None:
    quiet = dict(queue=False, show_progress="hidden")
    voices, voice_msg, kept = controls["voices"], controls["voice_msg"], controls["kept"]
    undo, timer, row = controls["undo"], controls["undo_timer"], controls["delete_row"]
    controls["delete_voice"].click(callbacks.ask_delete, [language, voices], [voice_msg, row], **quiet)
    controls["delete_cancel"].click(lambda: ("", gr.update(visible=False)), None, [voice_msg, row], **quiet)
    controls["delete_confirm"].click(
        callbacks.delete_voice, [language, voices, kept], [voice_msg, voices, row, undo, kept, timer], **quiet
    )
    undo.click(callbacks.undo_delete, [language, kept], [voice_msg, voices, undo, kept, timer], **quiet)
    timer.tick(callbacks.undo_expired, kept, [undo, kept, timer], **quiet)
