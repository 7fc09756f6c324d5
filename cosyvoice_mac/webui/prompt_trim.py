"""A prompt that is too long is offered its clearest stretch (``sound.clearest``): a button beside the prompt's
line, "Use the clearest 12 s". Pressed, it shows the whole recording's waveform with that stretch selected
(``span_picker``), and the prompt player holds the stretch: the player's recording is what Generate, Save voice,
Transcribe and the checks read, so the part selected is the part used at every control that takes the prompt.
Moving the selection cuts the part chosen instead. The recording itself is not changed; each part kept is a new
file in the page's temporary folder (the janitor clears it).

The original recording stays on the server (a ``gr.State``: the browser only ever sends seconds). The picker
stays while the prompt player holds its latest cut; any other recording (an upload, a voice picked, Gradio's own
trim tool) puts it away.
"""

from __future__ import annotations

import math
from pathlib import Path

import gradio as gr
from gradio.utils import get_upload_folder

from cosyvoice_mac.sound.clearest import (
    CLEAREST_SECONDS,
    LONGEST_SPAN_SECONDS,
    SHORTEST_SPAN_SECONDS,
    keep_clearest,
    keep_span,
    read_mono,
    wave_peaks,
)
from cosyvoice_mac.sound.problems import AudioInputError
from cosyvoice_mac.sound.prompt_check import checked_prompt
from cosyvoice_mac.webui.render import render_prompt_check
from cosyvoice_mac.webui.span_picker import build_span_picker, picker_value
from cosyvoice_mac.webui.strings import text as say


def _parts_folder() -> Path:
    return Path(get_upload_folder()) / "clearest"


def _same_file(audio: str | None, cut: str | None) -> bool:
    """Whether the prompt player holds ``cut``: Gradio moves a file it is given into its own cache folder, under
    the same name (each cut's name is its own: ``clearest._write_span``)."""
    return bool(audio and cut) and Path(audio).name == Path(cut).name


def _seconds(value) -> float | None:
    """A number of seconds the browser sent, or None when it is not one."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class PromptTrimCallbacks:
    """The offer's and the picker's callbacks, mixed into ``callbacks.Callbacks``."""

    @staticmethod
    def trim_offer(lang: str, audio: str | None):
        """The button, shown only for a prompt whose speech is over the limit."""
        if not audio or checked_prompt(audio).problem != "too_long":
            return gr.update(visible=False)
        return gr.update(visible=True, value=say(lang, "prompt_trim_offer", seconds=CLEAREST_SECONDS))

    @classmethod
    def prompt_followed(cls, lang: str, audio: str | None, picked: dict | None):
        """A new recording in the prompt player: (the offer, the picker, its hint, the picked state). The picker
        stays for its own cut, and goes for any other recording."""
        if picked and _same_file(audio, picked.get("cut")):
            return gr.update(visible=False), gr.skip(), gr.skip(), gr.skip()
        return cls.trim_offer(lang, audio), "", gr.update(visible=False), None

    @staticmethod
    def keep_clearest(lang: str, audio: str | None):
        """The offer pressed: (the prompt player's new recording, the prompt's line, the offer hidden, the picker
        with the clearest stretch selected, its hint shown, the picked state: the original and its cut)."""
        skip = gr.skip()
        if not audio:
            return skip, skip, gr.update(visible=False), skip, skip, skip
        failed = (skip, say(lang, "prompt_trim_failed", seconds=CLEAREST_SECONDS), gr.update(visible=False))
        try:
            samples, _ = read_mono(audio)
            kept, span = keep_clearest(audio, _parts_folder())
        except (AudioInputError, OSError):
            return (*failed, skip, skip, skip)
        if not checked_prompt(kept).ok:  # no stretch of that length holds usable speech
            return (*failed, skip, skip, skip)
        words = say(lang, "prompt_trimmed", seconds=span.seconds, start=span.start, end=span.end, total=span.total)
        peaks = wave_peaks(samples)
        picked = {"source": audio, "cut": str(kept), "peaks": peaks}
        shown = gr.update(visible=True)
        return str(kept), words, gr.update(visible=False), picker_value(span, peaks), shown, picked

    @staticmethod
    def span_moved(lang: str, picked: dict | None, event: gr.EventData):
        """The selection moved to ``event``'s start and end (seconds, from the browser: checked and held to the
        recording and the limits here): (the prompt player's new recording, the prompt's line, the picker as
        taken, the picked state)."""
        skip = gr.skip()
        data = getattr(event, "_data", None) or {}
        start, end = _seconds(data.get("start")), _seconds(data.get("end"))
        if not picked or start is None or end is None:
            return skip, skip, skip, skip
        start = max(0.0, start)
        end = min(max(end, start + SHORTEST_SPAN_SECONDS), start + LONGEST_SPAN_SECONDS)
        try:
            kept, span = keep_span(picked["source"], _parts_folder(), start, end)
        except (AudioInputError, OSError, ValueError):  # the original is gone, or the span lies past its end
            return skip, say(lang, "prompt_trim_failed", seconds=CLEAREST_SECONDS), skip, skip
        check = checked_prompt(kept)
        if check.ok:
            words = say(
                lang, "prompt_span_chosen", seconds=span.seconds, start=span.start, end=span.end, total=span.total
            )
        else:  # the part chosen is what is used: its problem is said, and the row refuses it
            words = render_prompt_check(lang, check)
        picked = {**picked, "cut": str(kept)}
        return str(kept), words, picker_value(span, picked["peaks"]), picked


def build_prompt_trim(make) -> dict:
    """The offer, the picker and the picker's one line of help, in page order (under the prompt's line)."""
    controls: dict = {}
    controls["prompt_trim"] = gr.Button(visible=False, size="sm", variant="primary", elem_id="cv-prompt-trim")
    controls["span_picker"] = build_span_picker()
    controls["span_hint"] = make(
        gr.Markdown, {"value": "prompt_span_hint"}, visible=False, elem_id="cv-span-hint", elem_classes="cv-message"
    )
    controls["span_picked"] = gr.State(None)
    return controls


def wire_prompt_trim(controls: dict, callbacks: PromptTrimCallbacks, language) -> None:
    """The offer, the picker and the prompt player's changes, each off the queue like the page's other checks."""
    quiet = dict(queue=False, show_progress="hidden")
    audio, offer, picker = controls["prompt_audio"], controls["prompt_trim"], controls["span_picker"]
    hint, picked, line = controls["span_hint"], controls["span_picked"], controls["prompt_msg"]
    audio.change(callbacks.prompt_followed, [language, audio, picked], [offer, picker, hint, picked], **quiet)
    offer.click(callbacks.keep_clearest, [language, audio], [audio, line, offer, picker, hint, picked], **quiet)
    picker.span(callbacks.span_moved, [language, picked], [audio, line, picker, picked], **quiet)
