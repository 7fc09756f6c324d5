"""The page's model column: which model runs and how (model, vocoder and engine menus, Restart), the status
panel, the licences and the replay of earlier outputs; and what each of its controls triggers.

Element ids (``elem_id``) are the browser tests' handles; keep them stable.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import gradio as gr

from cosyvoice_mac.webui.callbacks import Callbacks


class ModelPanel(NamedTuple):
    """The model column's controls that other parts of the page read or update."""

    model_menu: gr.Dropdown
    vocoder_menu: gr.Dropdown
    engine_menu: gr.Dropdown
    restart: gr.Button
    model_msg: gr.Markdown
    status_panel: gr.Markdown
    history_pick: gr.Dropdown
    history_audio: gr.Audio


def build_model_panel(
    make, callbacks: Callbacks, features: dict[str, bool], lang: str, licence_words: Callable[[str], str]
) -> ModelPanel:
    """The column's controls, in page order (``make`` is the page's ``LabelBook.make``)."""
    host = callbacks.host
    can_generate = bool(host.choices())
    make(gr.Markdown, {"value": "section_model"})
    model_menu = make(
        gr.Dropdown,
        {"label": "model_label", "info": "model_info", "choices": callbacks.model_choices},
        value=host.current.name if host.current else None,
        interactive=can_generate,
        elem_id="cv-model",
    )

    def restarting_menu(name: str, choices, value: str, **fixed) -> gr.Dropdown:
        """A menu whose change restarts the model with the new choice (``<name>_label`` / ``<name>_info``)."""
        words = {"label": f"{name}_label", "info": f"{name}_info", "choices": choices}
        return make(gr.Dropdown, words, value=value, interactive=can_generate, elem_id=f"cv-{name}", **fixed)

    vocoder_menu = restarting_menu(
        "vocoder", callbacks.vocoder_choices, host.config.vocoder, visible=features["vocoder_select"]
    )
    engine_menu = restarting_menu("engine", callbacks.engine_choices, host.config.engine)
    restart = make(gr.Button, {"value": "restart"}, size="sm", interactive=can_generate, elem_id="cv-restart")
    model_msg = gr.Markdown(elem_id="cv-model-msg", elem_classes="cv-message")
    status_panel = gr.Markdown(callbacks.status_panel(lang), elem_id="cv-status-panel")
    with make(gr.Accordion, {"label": "licence_heading"}, open=False, elem_id="cv-licences"):
        make(gr.Markdown, {"value": licence_words}, elem_id="cv-licence-text")
    history_pick = make(gr.Dropdown, {"label": "history_pick_label"}, choices=[], value=None, elem_id="cv-history-pick")
    history_audio = make(
        gr.Audio, {"label": "history_audio_label"}, interactive=False, buttons=["download"], elem_id="cv-history-audio"
    )
    return ModelPanel(
        model_menu, vocoder_menu, engine_menu, restart, model_msg, status_panel, history_pick, history_audio
    )


def wire_model_panel(panel: ModelPanel, callbacks: Callbacks, language, session) -> None:
    """Each control's callback. The three menus share one concurrency slot: a model switch and an engine or
    vocoder change each restart the worker, so they run one after the other."""
    outputs = [panel.model_msg, panel.status_panel]
    one_at_a_time = dict(concurrency_id="model", concurrency_limit=1)
    panel.model_menu.input(callbacks.switch_model, [language, panel.model_menu], outputs, **one_at_a_time)
    # Presses at once share one restart (the engine coalesces them), so they must not wait in line.
    panel.restart.click(callbacks.restart, language, outputs, concurrency_id="restart", concurrency_limit=None)
    panel.vocoder_menu.input(callbacks.switch_vocoder, [language, panel.vocoder_menu], outputs, **one_at_a_time)
    panel.engine_menu.input(callbacks.switch_engine, [language, panel.engine_menu], outputs, **one_at_a_time)
    panel.history_pick.input(callbacks.history_picked, [panel.history_pick, session], panel.history_audio)
