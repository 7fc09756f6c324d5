"""The page's long-form section: its controls (dialogue, subtitles, batch, convert-recordings and glossary
tabs; Stop, progress, result) and their wiring to ``LongformCallbacks`` (``longform.py``)."""

from __future__ import annotations

import gradio as gr

from cosyvoice_mac.settings import slider
from cosyvoice_mac.sound.limits import AUDIO_SUFFIXES
from cosyvoice_mac.webui.longform import LongformCallbacks
from cosyvoice_mac.webui.post_controls import build_post_controls
from cosyvoice_mac.webui.sampling_controls import build_sampling_controls
from cosyvoice_mac.webui.strings import DEFAULT_LANGUAGE
from cosyvoice_mac.webui.strings import text as say

GLOSSARY_COLUMNS = ("lf_glossary_col_key", "lf_glossary_col_replacement", "lf_glossary_col_language")
CAST_COLUMNS = ("lf_cast_col_speaker", "lf_cast_col_voice")


def _headers(keys: tuple[str, ...], lang: str = DEFAULT_LANGUAGE) -> list[str]:
    return [say(lang, key) for key in keys]


def _relabelled(keys: tuple[str, ...]):
    """The table's rows as they are, under its column names in the new language: Gradio takes a table's names
    from its value, and the callbacks read the rows by position, not by name."""

    def relabel(lang: str, table):
        import pandas as pd

        rows = table.values.tolist() if hasattr(table, "values") else list(table or [])
        return pd.DataFrame(rows, columns=_headers(keys, lang))

    return relabel


def build_longform_section(make, callbacks, longform: LongformCallbacks, language, page) -> None:
    """The Long form workspace's controls and wiring (inside its tab); ``make`` is the page's LabelBook.make."""
    make(gr.Markdown, {"value": "longform_heading"}, elem_id="cv-longform", elem_classes="cv-message")
    trim, level, target = build_post_controls(make, "cv-lf")
    with make(gr.Accordion, {"label": "sampling_heading"}, open=False, elem_id="cv-lf-sampling"):
        sampling = build_sampling_controls(make, "cv-lf-sampling")  # every spoken line's (not conversions')
    with gr.Tabs():
        with make(gr.Tab, {"label": "lf_tab_dialogue"}, elem_id="cv-lf-tab-dialogue") as dialogue_tab:
            script = make(
                gr.Textbox,
                {"label": "lf_script_label", "placeholder": "lf_script_placeholder"},
                lines=6,
                elem_id="cv-lf-script",
            )
            cast = make(
                gr.Dataframe,
                {"label": "lf_cast_label"},
                headers=_headers(CAST_COLUMNS),
                value=[["", ""]],
                column_count=(2, "fixed"),
                interactive=True,
                elem_id="cv-lf-cast",
            )
            with gr.Row():
                pause = make(
                    gr.Slider,
                    {"label": "lf_pause_label"},
                    **slider("pause"),
                    elem_id="cv-lf-pause",
                )
                per_line = make(gr.Checkbox, {"label": "lf_per_line_label"}, value=False, elem_id="cv-lf-per-line")
            dialogue_start = make(
                gr.Button,
                {"value": "lf_start"},
                variant="primary",
                elem_id="cv-lf-dialogue-start",
                elem_classes="cv-action",
            )
        with make(gr.Tab, {"label": "lf_tab_subtitles"}, elem_id="cv-lf-tab-subtitles") as subtitles_tab:
            srt_file = make(
                gr.File, {"label": "lf_srt_label"}, file_types=[".srt"], type="filepath", elem_id="cv-lf-srt"
            )
            with gr.Row():
                dub_voice = make(
                    gr.Dropdown,
                    {"label": "lf_voice_label", "choices": callbacks.voice_choices},
                    value="",
                    elem_id="cv-lf-dub-voice",
                )
                speed_limit = make(
                    gr.Slider,
                    {"label": "lf_speed_limit_label"},
                    **slider("speed_limit"),
                    elem_id="cv-lf-speed-limit",
                )
            dub_start = make(
                gr.Button, {"value": "lf_start"}, variant="primary", elem_id="cv-lf-dub-start", elem_classes="cv-action"
            )
        with make(gr.Tab, {"label": "lf_tab_batch"}, elem_id="cv-lf-tab-batch") as batch_tab:
            lines_file = make(
                gr.File,
                {"label": "lf_batch_label"},
                file_types=[".txt", ".csv"],
                type="filepath",
                elem_id="cv-lf-lines",
            )
            with gr.Row():
                batch_voice = make(
                    gr.Dropdown,
                    {"label": "lf_voice_label", "choices": callbacks.voice_choices},
                    value="",
                    elem_id="cv-lf-batch-voice",
                )
                batch_name = make(gr.Textbox, {"label": "lf_batch_name_label"}, elem_id="cv-lf-batch-name")
            batch_start = make(
                gr.Button,
                {"value": "lf_start"},
                variant="primary",
                elem_id="cv-lf-batch-start",
                elem_classes="cv-action",
            )
        with make(gr.Tab, {"label": "lf_tab_convert"}, elem_id="cv-lf-tab-convert") as convert_tab:
            sources = make(
                gr.File,
                {"label": "lf_sources_label"},
                file_count="multiple",
                file_types=sorted(AUDIO_SUFFIXES),
                type="filepath",
                elem_id="cv-lf-sources",
            )
            with gr.Row():
                convert_voice = make(
                    gr.Dropdown,
                    {"label": "lf_convert_voice_label", "choices": callbacks.voice_choices},
                    value="",
                    elem_id="cv-lf-convert-voice",
                )
                convert_speed = make(
                    gr.Slider,
                    {"label": "lf_convert_speed_label"},
                    **slider("speed"),
                    elem_id="cv-lf-convert-speed",
                )
                convert_name = make(gr.Textbox, {"label": "lf_batch_name_label"}, elem_id="cv-lf-convert-name")
            convert_start = make(
                gr.Button,
                {"value": "lf_start"},
                variant="primary",
                elem_id="cv-lf-convert-start",
                elem_classes="cv-action",
            )
        with make(gr.Tab, {"label": "lf_tab_glossary"}, elem_id="cv-lf-tab-glossary") as glossary_tab:
            table = make(
                gr.Dataframe,
                {"label": "lf_glossary_table_label"},
                headers=_headers(GLOSSARY_COLUMNS),
                value=[["", "", "all"]],  # the saved rows arrive when the page loads
                column_count=(3, "fixed"),
                interactive=True,
                elem_id="cv-lf-glossary",
            )
            with gr.Row():
                save = make(gr.Button, {"value": "lf_glossary_save"}, elem_id="cv-lf-glossary-save")
                upload = make(
                    gr.File,
                    {"label": "lf_glossary_import_label"},
                    file_types=[".csv"],
                    type="filepath",
                    elem_id="cv-lf-glossary-import",
                )
            glossary_msg = gr.Markdown(elem_id="cv-lf-glossary-msg", elem_classes="cv-message")
            glossary_problem = gr.Markdown(elem_id="cv-lf-glossary-problem", elem_classes="cv-message")
            start_empty = make(gr.Button, {"value": "lf_glossary_reset"}, visible=False, elem_id="cv-lf-glossary-reset")
    audio = make(gr.Audio, {"label": "lf_audio_label"}, interactive=False, buttons=["download"], elem_id="cv-lf-audio")
    files = make(gr.File, {"label": "lf_files_label"}, file_count="multiple", interactive=False, elem_id="cv-lf-files")
    # The workspace's action row: each sub-tab has its own Start (the shown one is the keyboard's action).
    with gr.Row(elem_id="cv-lf-action-row", elem_classes="cv-action-row", equal_height=False):
        stop = make(
            gr.Button,
            {"value": "lf_stop"},
            variant="secondary",
            scale=0,
            elem_id="cv-lf-stop",
            elem_classes="cv-stop-action",
        )
        retake = make(gr.Button, {"value": "lf_retake"}, visible=False, scale=0, elem_id="cv-lf-retake")
        with gr.Column(scale=3, min_width=240):
            progress = gr.HTML("", elem_id="cv-lf-progress-html")
            message = gr.Markdown(elem_id="cv-lf-msg", elem_classes="cv-message")

    outputs = [progress, message, audio, files]
    # The results area is shared by the sub-tabs: another one shown starts it empty (the results stay in History),
    # so a dialogue's result never shows under the subtitles (issue 50 item 12).
    for shown in (dialogue_tab, subtitles_tab, batch_tab, convert_tab, glossary_tab):
        shown.select(lambda: ("", "", None, None), None, outputs, queue=False, show_progress="hidden")
    busy = dict(concurrency_id="longform", concurrency_limit=2, show_progress="hidden")
    post = [trim, level, target, *sampling]  # the post-processing panel, then the sampling controls
    quiet = dict(queue=False, show_progress="hidden")
    for started in (  # each job then offers "Retake the flagged lines" when its check left some flagged
        dialogue_start.click(longform.dialogue, [language, script, cast, pause, per_line, *post], outputs, **busy),
        dub_start.click(longform.dub, [language, srt_file, dub_voice, speed_limit, *post], outputs, **busy),
        batch_start.click(longform.batch, [language, lines_file, batch_voice, batch_name, *post], outputs, **busy),
        retake.click(longform.retake_flagged, [language], outputs, **busy),
        convert_start.click(
            longform.convert_batch,
            [language, sources, convert_voice, convert_name, convert_speed, trim, level, target],
            outputs,
            **busy,
        ),
    ):
        started.then(longform.retake_offered, None, retake, **quiet)
    stop.click(longform.stop, None, None, queue=False, show_progress="hidden")
    for menu in (
        dub_voice,
        batch_voice,
        convert_voice,
    ):  # voices saved since the page loaded appear when the menu opens
        menu.focus(
            lambda lang: gr.update(choices=callbacks.voice_choices(lang)),
            language,
            menu,
            queue=False,
            show_progress="hidden",
        )
    save.click(longform.save_glossary, [language, table], [table, glossary_msg], queue=False).then(
        longform.glossary_state, language, [glossary_problem, start_empty], queue=False
    )
    upload.upload(longform.import_glossary, [language, upload], [table, glossary_msg], queue=False).then(
        longform.glossary_state, language, [glossary_problem, start_empty], queue=False
    )
    page.load(longform.glossary_rows, None, table, queue=False, show_progress="hidden")
    for keys, shown in ((GLOSSARY_COLUMNS, table), (CAST_COLUMNS, cast)):
        language.change(_relabelled(keys), [language, shown], shown, queue=False, show_progress="hidden")
    glossary_tab.select(longform.glossary_state, language, [glossary_problem, start_empty], queue=False)
    start_empty.click(
        longform.start_empty_glossary, language, [table, glossary_msg, glossary_problem, start_empty], queue=False
    )
