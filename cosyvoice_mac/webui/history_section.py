"""The History workspace's widgets and their wiring (``history.HistoryCallbacks`` answers them): the search, the
table whose clicked row plays, the pick's content credentials and takes, reuse and clear."""

from __future__ import annotations

import gradio as gr

from cosyvoice_mac.webui.history import HISTORY_COLUMN_WIDTHS, HISTORY_DATATYPES, HistoryCallbacks
from cosyvoice_mac.webui.takes_view import build_takes_panel


def build_history_section(make, lang: str):
    """The History workspace's controls (inside its tab), in page order; a dict by name. A row clicked plays;
    the page turns in a row as small as a search field."""
    controls: dict = {}
    with gr.Row(equal_height=False, elem_id="cv-history-pager"):
        controls["search"] = make(
            gr.Textbox,
            {"label": "history_search_label", "placeholder": "history_search_placeholder"},
            scale=3,
            elem_id="cv-history-search",
        )
        with gr.Row(scale=1, elem_classes="cv-history-turn"):
            controls["prev"] = make(
                gr.Button, {"value": "history_prev"}, size="sm", min_width=40, scale=0, elem_id="cv-history-prev"
            )
            controls["page_words"] = gr.Markdown(elem_id="cv-history-page", elem_classes="cv-message")
            controls["next"] = make(
                gr.Button, {"value": "history_next"}, size="sm", min_width=40, scale=0, elem_id="cv-history-next"
            )
    controls["badge"] = gr.Markdown(elem_id="cv-history-badge", elem_classes="cv-message")
    make(gr.Markdown, {"value": "history_row_hint"}, elem_classes="cv-message")
    controls["table"] = make(
        gr.Dataframe,
        {"label": "history_label"},
        interactive=False,
        wrap=True,
        column_widths=HISTORY_COLUMN_WIDTHS,
        datatype=HISTORY_DATATYPES,
        max_height=420,
        elem_id="cv-history",
    )
    # The row clicked (its file name): the menu is not shown, it only holds the pick for the buttons.
    controls["pick"] = gr.Dropdown(choices=[], value=None, visible=False, elem_id="cv-history-pick")
    controls["audio"] = make(
        gr.Audio,
        {"label": "history_audio_label"},
        interactive=False,
        buttons=["download"],
        elem_id="cv-history-audio",
    )
    with gr.Row(equal_height=True):
        controls["reuse"] = make(
            gr.Button, {"value": "history_reuse"}, size="sm", variant="primary", elem_id="cv-history-reuse"
        )
        controls["clear"] = make(gr.Button, {"value": "history_clear"}, size="sm", elem_id="cv-history-clear")
    with gr.Row(visible=False, elem_id="cv-history-clear-row") as clear_row:
        make(gr.Markdown, {"value": "history_clear_question"}, elem_classes="cv-message")
        controls["clear_yes"] = make(
            gr.Button, {"value": "history_clear_yes"}, size="sm", variant="stop", elem_id="cv-history-clear-yes"
        )
        controls["clear_no"] = make(gr.Button, {"value": "voice_replace_no"}, size="sm", elem_id="cv-history-clear-no")
    controls["clear_row"] = clear_row
    controls["msg"] = gr.Markdown(elem_id="cv-history-msg", elem_classes="cv-message")
    controls["credentials"] = gr.Markdown(elem_id="cv-history-credentials", elem_classes="cv-message")
    controls["takes"] = build_takes_panel(make, "cv-history-takes")
    controls["page"] = gr.State(0)
    return controls


def wire_history_section(controls: dict, callbacks: HistoryCallbacks, language, form: dict) -> None:
    """Each history control's callback; ``form`` names the controls "use these settings again" fills."""
    quiet = dict(queue=False, show_progress="hidden")
    shown = [controls[name] for name in ("table", "badge", "page_words", "page", "pick")]
    query = [language, controls["search"]]
    controls["search"].change(callbacks.history_show, query, shown, trigger_mode="always_last", **quiet)
    controls["prev"].click(
        lambda lang, words, page: callbacks.history_turn(lang, words, page, -1),
        [*query, controls["page"]],
        shown,
        **quiet,
    )
    controls["next"].click(
        lambda lang, words, page: callbacks.history_turn(lang, words, page, 1),
        [*query, controls["page"]],
        shown,
        **quiet,
    )
    controls["pick"].input(callbacks.history_picked, controls["pick"], controls["audio"], **quiet)
    takes = controls["takes"]
    picked = controls["table"].select(
        callbacks.history_row_clicked, language, [controls["pick"], controls["audio"], controls["msg"]], **quiet
    )
    # What the picked file's credentials say, and its takes: picked by its row (or by the menu, as the API does).
    for then in (picked.then, controls["pick"].input):
        then(callbacks.history_credentials, [language, controls["pick"]], controls["credentials"], **quiet)
        then(callbacks.history_takes, [language, controls["pick"]], list(takes), **quiet)
    takes.use.click(
        callbacks.history_use_take, [language, controls["pick"], takes.pick], [controls["audio"], *takes], **quiet
    )
    filled = [
        form[name]
        for name in (
            "text",
            "mode",
            "instruct",
            "seed",
            "speed",
            "voices",
            "transcript",
            "seed_fixed",
            "workspaces",
            "convert_voice",
            "convert_speed",
        )
    ]
    controls["reuse"].click(callbacks.history_reuse, [language, controls["pick"]], [*filled, controls["msg"]], **quiet)
    controls["clear"].click(lambda: gr.update(visible=True), None, controls["clear_row"], **quiet)
    controls["clear_no"].click(lambda: gr.update(visible=False), None, controls["clear_row"], **quiet)
    controls["clear_yes"].click(
        callbacks.history_cleared, query, [*shown, controls["clear_row"], controls["msg"]], **quiet
    )
