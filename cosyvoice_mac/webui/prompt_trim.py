"""A prompt that is too long is offered its clearest stretch (``sound.clearest``): a button beside the prompt's
line, "Use the clearest 12 s", that puts that stretch in the prompt player, where Gradio's own trim tool moves
its edges further. The recording itself is not changed; the kept part is a new file in the page's temporary
folder (the janitor clears it)."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
from gradio.utils import get_upload_folder

from cosyvoice_mac.sound.clearest import CLEAREST_SECONDS, keep_clearest
from cosyvoice_mac.sound.problems import AudioInputError
from cosyvoice_mac.sound.prompt_check import checked_prompt
from cosyvoice_mac.webui.strings import text as say


class PromptTrimCallbacks:
    """The offer's callbacks, mixed into ``callbacks.Callbacks``."""

    @staticmethod
    def trim_offer(lang: str, audio: str | None):
        """The button, shown only for a prompt whose speech is over the limit."""
        if not audio or checked_prompt(audio).problem != "too_long":
            return gr.update(visible=False)
        return gr.update(visible=True, value=say(lang, "prompt_trim_offer", seconds=CLEAREST_SECONDS))

    @staticmethod
    def keep_clearest(lang: str, audio: str | None):
        """(the prompt player's new recording, the prompt's line, the button hidden)."""
        if not audio:
            return gr.skip(), gr.skip(), gr.update(visible=False)
        try:
            kept, span = keep_clearest(audio, Path(get_upload_folder()) / "clearest")
        except (AudioInputError, OSError):
            return gr.skip(), say(lang, "prompt_trim_failed", seconds=CLEAREST_SECONDS), gr.update(visible=False)
        if not checked_prompt(kept).ok:  # no stretch of that length holds usable speech
            return gr.skip(), say(lang, "prompt_trim_failed", seconds=CLEAREST_SECONDS), gr.update(visible=False)
        words = say(lang, "prompt_trimmed", seconds=span.seconds, start=span.start, end=span.end, total=span.total)
        return str(kept), words, gr.update(visible=False)
