"""The page's events that keep many lines true at once: a language switch (every word, in one answer) and the
timer's tick (every derived line, in one answer; ``derived_status``).

Each event the page fires off Gradio's queue is a request of its own, and the page's answers come one after
another, the timer's among them: a switch made of a dozen events reached its last (the re-mounted players'
Gradio words) seconds later on a loaded machine, and four events per tick kept it waiting longer.
"""

from __future__ import annotations

from typing import NamedTuple

import gradio as gr

from cosyvoice_mac.webui.callbacks import Callbacks
from cosyvoice_mac.webui.language import LabelBook
from cosyvoice_mac.webui.render import status_line
from cosyvoice_mac.webui.state import Session


class LanguageOutputs(NamedTuple):
    """What a language switch rewrites, in the order of its one event's outputs."""

    book: list  # every registered control's labels
    lines: list  # counter, prompt, status, status panel, voice, mode, model and transcript messages
    voice: list  # the picked voice's card, the voice list
    history: list  # table, badge, page words, page, pick menu
    remounted: list  # hidden here, shown again by the event's follow-up (Gradio's own words re-render)

    @property
    def components(self) -> list:
        return _unique(self.book + self.lines + self.voice + self.history + self.remounted)


def switch_language(
    callbacks: Callbacks, book: LabelBook, outputs: LanguageOutputs, lang, words, audio, voice, session, query
) -> list:
    """Every word the page shows, in ``lang``, as one list of updates (a control named twice gets one update
    holding both). Messages are rebuilt in the new language; one-off messages are cleared rather than left
    untranslated."""
    session = session if isinstance(session, Session) else Session()
    status = status_line(lang, *session.last_status) if session.last_status else ""
    lines = [
        callbacks.counter(lang, words),
        callbacks.prompt_status(lang, audio, voice),
        status,
        callbacks.status_panel(lang),
        "",
        "",
        "",
        "",
    ]
    merged: dict[int, dict] = {}
    pairs = list(zip(outputs.book, book.updates(lang)))
    pairs += zip(outputs.lines, lines)
    pairs += zip(outputs.voice, callbacks.voice_words(lang, voice))
    pairs += zip(outputs.history, callbacks.history_show(lang, query))
    pairs += [(component, gr.update(visible=False)) for component in outputs.remounted]
    for component, update in pairs:
        if not (isinstance(update, dict) and "__type__" in update):  # a value (the history's table is a dict)
            update = gr.update(value=update)
        merged.setdefault(id(component), {}).update({k: v for k, v in update.items() if k != "__type__"})
    return [gr.update(**merged[id(component)]) for component in outputs.components]


def _unique(components: list) -> list:
    seen: set[int] = set()
    return [c for c in components if not (id(c) in seen or seen.add(id(c)))]


def wire_derived_lines(
    callbacks: Callbacks, page, timer, language, voice_controls, blocker_inputs, bar, panel, queue, verdict
) -> None:
    """The lines that follow the state they describe (``derived_status``): recomputed when the selection changes,
    and on each tick for what changes elsewhere (the library through another door, the model's state, the queue).
    The tick is one request (off the queue: never "busy"), not one per line: the page's own events are answered
    one after another, and four per tick kept a language switch's answers waiting."""
    quiet = dict(queue=False, show_progress="hidden")
    voices, prompt_audio = voice_controls["voices"], voice_controls["prompt_audio"]
    voices.change(callbacks.prompt_status, [language, prompt_audio, voices], voice_controls["prompt_msg"], **quiet)
    # A check of the transcript against a recording says nothing about the next recording or voice.
    gr.on(
        [prompt_audio.change, voices.change],
        lambda: ("", gr.update(visible=False)),
        None,
        [voice_controls["transcript_msg"], voice_controls["transcript_choices"]],
        **quiet,
    )
    seen = gr.State("")
    page.load(callbacks.library_seen, None, seen, **quiet)
    timer.tick(
        callbacks.tick,
        [language, seen, *blocker_inputs[1:]],
        [
            panel.status_panel,
            queue,
            voices,
            voice_controls["voice_list"],
            voice_controls["card"],
            seen,
            bar.blockers,
            voice_controls["transcript_msg"],
            verdict,
            voice_controls["transcript_choices"],
        ],
        **quiet,
    )
