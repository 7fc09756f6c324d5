"""The page's model column: which model runs and how (model, vocoder, engine and MLX LLM precision menus,
Restart), the status panel and the licences; and what each of its controls triggers.

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
    mlx_llm_menu: gr.Dropdown  # the MLX LLM's precision: only those the quality gate passes
    restart: gr.Button
    model_msg: gr.Markdown
    status_panel: gr.Markdown
    advanced: gr.Accordion
    menus: tuple[bool, bool]  # whether the vocoder and the engine menu apply on this machine


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

    # Folded away, and only where they apply (features.py): the preview voice has neither to choose.
    menus = features.get("vocoder_select", False), features.get("engine_select", False)
    with make(gr.Accordion, {"label": "advanced_heading"}, open=False, elem_id="cv-advanced") as advanced:
        vocoder_menu = restarting_menu("vocoder", callbacks.vocoder_choices, host.config.vocoder, visible=menus[0])
        engine_menu = restarting_menu("engine", callbacks.engine_choices, host.config.engine, visible=menus[1])
        mlx_llm_menu = restarting_menu("mlx_llm", callbacks.mlx_llm_choices, host.config.mlx_llm, visible=menus[1])
    advanced.visible = callbacks.advanced_applies(menus)
    restart = make(gr.Button, {"value": "restart"}, size="sm", interactive=can_generate, elem_id="cv-restart")
    model_msg = gr.Markdown(elem_id="cv-model-msg", elem_classes="cv-message")
    status_panel = gr.Markdown(callbacks.status_panel(lang), elem_id="cv-status-panel")
    with make(gr.Accordion, {"label": "licence_heading"}, open=False, elem_id="cv-licences"):
        make(gr.Markdown, {"value": licence_words}, elem_id="cv-licence-text")
    return ModelPanel(
        model_menu, vocoder_menu, engine_menu, mlx_llm_menu, restart, model_msg, status_panel, advanced, menus
    )


def wire_model_panel(panel: ModelPanel, callbacks: Callbacks, language) -> None:
    """Each control's callback. The menus share one concurrency slot: a model switch and an engine, precision
    or vocoder change each restart the worker, so they run one after the other."""
    outputs = [panel.model_msg, panel.status_panel]
    one_at_a_time = dict(concurrency_id="model", concurrency_limit=1)
    panel.model_menu.input(callbacks.switch_model, [language, panel.model_menu], outputs, **one_at_a_time).then(
        lambda: gr.update(visible=callbacks.advanced_applies(panel.menus)), None, panel.advanced, queue=False
    )
    # Presses at once share one restart (the engine coalesces them), so they must not wait in line.
    panel.restart.click(callbacks.restart, language, outputs, concurrency_id="restart", concurrency_limit=None)
    panel.vocoder_menu.input(callbacks.switch_vocoder, [language, panel.vocoder_menu], outputs, **one_at_a_time)
    panel.engine_menu.input(callbacks.switch_engine, [language, panel.engine_menu], outputs, **one_at_a_time)
    panel.mlx_llm_menu.input(callbacks.switch_mlx_llm, [language, panel.mlx_llm_menu], outputs, **one_at_a_time)
