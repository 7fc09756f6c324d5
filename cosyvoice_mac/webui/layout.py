"""The page: which controls exist, where they sit, and which callback each one triggers.

Every control whose words depend on the language is registered in a :class:`LabelBook` (``language.py``),
so the language switch re-labels all of them at once. The model column is ``model_panel.py``, the
long-form section ``longform.py``. Element ids (``elem_id``) are the browser tests' handles; keep them stable.
"""

from __future__ import annotations

import gradio as gr

from cosyvoice_mac.frontend.special_tokens import INSTRUCTIONS
from cosyvoice_mac.settings import bounds, resolve, slider
from cosyvoice_mac.webui.action_bar import ACTION_BAR_CSS, build_action_bar, compact_player
from cosyvoice_mac.webui.callbacks import Callbacks
from cosyvoice_mac.webui.convert_tab import ConvertCallbacks, build_convert_section
from cosyvoice_mac.webui.download_panel import build_download_panel, wire_download_panel
from cosyvoice_mac.webui.form_memory import wire_form_memory
from cosyvoice_mac.webui.generation import GenerateOutputs
from cosyvoice_mac.webui.history_section import build_history_section, wire_history_section
from cosyvoice_mac.webui.language import LabelBook, gradio_locale_js
from cosyvoice_mac.webui.longform_layout import build_longform_section
from cosyvoice_mac.webui.model_panel import build_model_panel, wire_model_panel
from cosyvoice_mac.webui.page_events import LanguageOutputs, switch_language, wire_derived_lines
from cosyvoice_mac.webui.post_controls import build_post_controls
from cosyvoice_mac.webui.prompt_trim import wire_prompt_trim
from cosyvoice_mac.webui.sampling_controls import build_sampling_controls
from cosyvoice_mac.webui.state import Session
from cosyvoice_mac.webui.streaming import STOP_JS
from cosyvoice_mac.webui.strings import DEFAULT_LANGUAGE, LANGUAGES, preset_choice
from cosyvoice_mac.webui.strings import text as say
from cosyvoice_mac.webui.takes_view import CAPTIONS_CSS, build_takes_panel
from cosyvoice_mac.webui.voice_cards import build_voice_library, build_voice_section, wire_voice_section
from cosyvoice_mac.webui.voice_files import build_voice_file_controls, wire_voice_file_controls
from cosyvoice_mac.webui.workspaces import DEFAULT_WORKSPACE, WORKSPACE_CSS, wire_workspaces, workspace

CSS = (
    """
.cv-message p { margin: 0.2em 0; }
.cv-notice { border: 1px solid var(--color-accent); border-radius: 8px; padding: 0.6em 1em; }
#cv-dice { max-width: 4em; min-width: 3em; }
#cv-stream-player { min-height: 0; }
#cv-notice-short { display: none; }
#cv-notice-box.cv-accepted { padding: 0.2em 1em; }
#cv-notice-box.cv-accepted #cv-notice, #cv-notice-box.cv-accepted #cv-notice-ok { display: none; }
#cv-notice-box.cv-accepted #cv-notice-short { display: block; }
"""
    + ACTION_BAR_CSS
    + CAPTIONS_CSS
    + WORKSPACE_CSS
)
NOTICE_KEY = "cosyvoice-notice-accepted"
NOTICE_LOAD_JS = (
    "() => { if (localStorage.getItem('" + NOTICE_KEY + "')) "
    "document.getElementById('cv-notice-box')?.classList.add('cv-accepted'); }"
)
NOTICE_ACCEPT_JS = (
    "() => { localStorage.setItem('" + NOTICE_KEY + "', '1'); "
    "document.getElementById('cv-notice-box')?.classList.add('cv-accepted'); }"
)
DICE = "🎲"
LANGUAGE_KEY = "cosyvoice-language"
# The language this browser chose before, else the browser's own (Chinese for any zh-*), else English.
LANGUAGE_LOAD_JS = (
    "() => { const kept = localStorage.getItem('" + LANGUAGE_KEY + "'); if (kept === 'en' || kept === 'zh') "
    "return kept; return (navigator.language || '').toLowerCase().startsWith('zh') ? 'zh' : 'en'; }"
)
LANGUAGE_KEEP_JS = "(lang) => { localStorage.setItem('" + LANGUAGE_KEY + "', lang); return lang; }"


def build_page(callbacks: Callbacks, features: dict[str, bool], has_model: bool) -> gr.Blocks:
    """The whole page. ``has_model`` False shows the download command; Generate still works when the
    preview voice can stand in (it is then labelled as a preview everywhere), and is disabled otherwise.

    ``features`` (see features.py) switches optional controls on: the Transcribe button (``asr``) and the
    Stream toggle (``stream``); the vocoder menu (``vocoder_select``) sits in the model column.
    """
    book, host, lang = LabelBook(), callbacks.host, DEFAULT_LANGUAGE
    make = book.make
    can_generate = bool(host.choices())
    offers_preview = any(choice.is_preview for choice in host.choices())

    def no_model_words(lang: str) -> str:
        return say(lang, "no_model") + ("\n\n" + say(lang, "no_model_preview") if offers_preview else "")

    def licence_words(lang: str) -> str:
        lines = [say(lang, "licence_cosyvoice")] + ([say(lang, "licence_preview")] if offers_preview else [])
        return "\n\n".join(lines)

    with gr.Blocks(title=say(lang, "title")) as page:
        session = gr.State(Session())
        with gr.Row(equal_height=True):
            with gr.Column(scale=4):
                make(
                    gr.Markdown,
                    {"value": lambda lang: f"# {say(lang, 'title')}\n{say(lang, 'subtitle')}"},
                    elem_id="cv-title",
                )
            language = make(
                gr.Radio,
                {"label": "language_label"},
                choices=list(LANGUAGES),
                value=lang,
                scale=1,
                elem_id="cv-language",
            )
        # The consent notice in full until this browser accepts it (localStorage), then as one line.
        with gr.Group(elem_classes="cv-notice", elem_id="cv-notice-box"):
            make(gr.Markdown, {"value": "notice"}, elem_id="cv-notice")
            make(gr.Markdown, {"value": "notice_short"}, elem_id="cv-notice-short")
            notice_ok = make(gr.Button, {"value": "notice_ok"}, size="sm", elem_id="cv-notice-ok")
        make(gr.Markdown, {"value": no_model_words}, visible=not has_model, elem_id="cv-no-model")

        with gr.Tabs(selected=DEFAULT_WORKSPACE, elem_id="cv-workspaces") as workspaces:
            with workspace(make, "speak") as speak_tab:
                with gr.Row():
                    with gr.Column(scale=3):
                        voice_controls = build_voice_section(make, callbacks, features)
                        voice_controls.update(build_voice_file_controls(make))
                        voices, prompt_audio = voice_controls["voices"], voice_controls["prompt_audio"]
                        prompt_msg, transcript = voice_controls["prompt_msg"], voice_controls["transcript"]
                        transcribe, transcript_row = voice_controls["transcribe"], voice_controls["transcript_row"]
                        transcript_msg, voice_msg = voice_controls["transcript_msg"], voice_controls["voice_msg"]

                        make(gr.Markdown, {"value": "section_text"})
                        text = make(
                            gr.Textbox,
                            {"label": "text_label", "placeholder": "text_placeholder"},
                            lines=4,
                            elem_id="cv-text",
                        )
                        counter = gr.Markdown(
                            callbacks.counter(lang, ""), elem_id="cv-counter", elem_classes="cv-message"
                        )
                        make(gr.Markdown, {"value": "markup_help"}, elem_id="cv-markup-help")
                        mode = make(
                            gr.Radio,
                            {"choices": _mode_choices, "label": "mode_label"},
                            value="zero_shot",
                            elem_id="cv-mode",
                        )
                        with gr.Row():
                            preset = make(
                                gr.Dropdown,
                                {"choices": _preset_choices, "label": "preset_label", "info": "preset_info"},
                                value=None,
                                visible=False,
                                elem_id="cv-preset",
                            )
                            instruct = make(
                                gr.Textbox,
                                {"label": "instruct_label", "placeholder": "instruct_placeholder"},
                                visible=False,
                                elem_id="cv-instruct",
                            )
                        mode_msg = gr.Markdown(elem_id="cv-mode-msg", elem_classes="cv-message")
                        with gr.Row(equal_height=True):
                            seed = make(
                                gr.Number,
                                {"label": "seed_label", "info": "seed_info"},
                                value=0,
                                precision=0,
                                minimum=bounds("seed")[0],
                                maximum=bounds("seed")[1],
                                scale=3,
                                elem_id="cv-seed",
                            )
                            dice = gr.Button(DICE, scale=0, elem_id="cv-dice")
                            seed_fixed = make(
                                gr.Checkbox,
                                {"label": "seed_fixed_label"},
                                value=False,
                                scale=1,
                                elem_id="cv-seed-fixed",
                            )
                            speed = make(
                                gr.Slider,
                                {"label": "speed_label"},
                                **slider("speed"),
                                scale=3,
                                elem_id="cv-speed",
                            )
                        stream = make(
                            gr.Checkbox,
                            {"label": "stream_label", "info": "stream_info"},
                            value=False,
                            visible=bool(features.get("stream")),
                            elem_id="cv-stream",
                        )
                        check = make(
                            gr.Checkbox,
                            {"label": "check_label", "info": "check_info"},
                            value=bool(resolve("check")),
                            elem_id="cv-check",
                        )
                        stream_note = make(
                            gr.Markdown,
                            {"value": "stream_speed_note"},
                            visible=False,
                            elem_id="cv-stream-note",
                            elem_classes="cv-message",
                        )
                        with make(gr.Accordion, {"label": "post_heading"}, open=False, elem_id="cv-post"):
                            make(gr.Markdown, {"value": "post_info"}, elem_classes="cv-message")
                            post_controls = build_post_controls(make, "cv-post")
                        with make(gr.Accordion, {"label": "sampling_heading"}, open=False, elem_id="cv-sampling"):
                            make(gr.Markdown, {"value": "sampling_info"}, elem_classes="cv-message")
                            sampling_controls = build_sampling_controls(make, "cv-sampling")
                    with gr.Column(scale=2):
                        make(gr.Markdown, {"value": "result_heading"})
                        result = make(
                            gr.Audio,
                            {"label": "result_label"},
                            interactive=False,
                            type="filepath",
                            buttons=["download"],
                            elem_id="cv-result",
                        )
                        queue_line = gr.Markdown(elem_id="cv-queue", elem_classes="cv-message")
                        panel = build_model_panel(make, callbacks, features, lang, licence_words)
                        downloads = build_download_panel(make, callbacks, has_model)
                with make(gr.Accordion, {"label": "takes_heading"}, open=True, elem_id="cv-takes-section"):
                    takes = build_takes_panel(make, "cv-takes")
                    retake = make(gr.Button, {"value": "retake"}, size="sm", visible=False, elem_id="cv-retake")
                bar = build_action_bar(make, can_generate, callbacks.blockers(lang, None, "", "", "", "zero_shot", ""))
            with workspace(make, "convert") as convert_tab:
                convert_controls = build_convert_section(
                    make, ConvertCallbacks(host, callbacks.generation.active), language
                )
            with workspace(make, "longform") as longform_tab:
                build_longform_section(make, callbacks, callbacks.longform, language, page)
            with workspace(make, "voices") as voices_tab:
                build_voice_library(make, voice_controls)
            with workspace(make, "history") as history_tab:
                history_controls = build_history_section(make, lang)
        make(gr.Markdown, {"value": "ws_keys"}, elem_id="cv-keys", elem_classes="cv-message")
        history = history_controls["table"]
        generate, stop, status, player = bar.generate, bar.stop, bar.status, bar.player
        wire_workspaces(page, workspaces, (speak_tab, convert_tab, longform_tab, voices_tab, history_tab))
        timer = gr.Timer(2.0)

        # -- wiring ----------------------------------------------------------------------------------
        # Every event the page fires on its own (a change, a load, a tick, a follow-up) runs off Gradio's
        # queue. Gradio's page client (6.31) can lose a queued event that joins in the moment the session's
        # message stream closes after the last queued event: it posts the event but never reads its answer,
        # so a Generate pressed just as a queued check finishes would spin forever. Off the queue, only what
        # the user presses opens and closes that stream.
        quiet = dict(queue=False, show_progress="hidden")

        def prepare(audio, stream_on) -> None:  # the page waits for nothing: the worker prepares in the background
            callbacks.prepare_for_streaming(audio, stream_on)

        prompt_audio.upload(
            callbacks.prompt_uploaded, [language, prompt_audio], [prompt_msg, voices, prompt_audio], **quiet
        ).then(prepare, [prompt_audio, stream], None, **quiet)
        prompt_audio.stop_recording(
            callbacks.prompt_uploaded, [language, prompt_audio], [prompt_msg, voices, prompt_audio], **quiet
        ).then(prepare, [prompt_audio, stream], None, **quiet)
        prompt_audio.clear(lambda: "", None, prompt_msg, **quiet)
        wire_prompt_trim(voice_controls, callbacks, language)  # a prompt over the limit: a part picked on its wave
        wire_voice_section(voice_controls, callbacks, language, mode)
        wire_voice_file_controls(voice_controls, callbacks, language)
        form = dict(
            text=text, mode=mode, instruct=instruct, seed=seed, speed=speed, voices=voices, transcript=transcript
        )
        form["seed_fixed"] = seed_fixed
        form.update({f"convert_{name}": control for name, control in convert_controls.items()})
        form["workspaces"] = workspaces  # "use these settings again" opens Speak or Convert
        wire_history_section(history_controls, callbacks, language, form)
        history_shown = [history_controls[name] for name in ("table", "badge", "page_words", "page", "pick")]
        history_query = [language, history_controls["search"]]
        page.load(callbacks.history_show, history_query, history_shown, **quiet)
        if transcribe is not None:
            transcribe.click(
                callbacks.transcribe,
                [language, prompt_audio, voices],
                [transcript, transcript_msg],
                concurrency_id="asr",
                concurrency_limit=1,
                show_progress="hidden",
            )
        verdict, choices = gr.State({}), voice_controls["transcript_choices"]  # the transcript check's (its module)
        blocker_inputs = [language, prompt_audio, voices, transcript, text, mode, instruct, verdict]
        transcript.input(lambda: ("", gr.update(visible=False)), None, [transcript_msg, choices], **quiet)
        if transcribe is not None:  # the recogniser is there: a transcript that is not the recording's is said
            # Leaving the field is most often a press of Generate: the check stays off the queue (see quiet).
            # The verdict is one of the row's inputs: its change recomputes the row; the tick brings the answer.
            checked = [language, prompt_audio, voices, transcript]
            transcript.blur(callbacks.check_transcript, checked, [transcript_msg, verdict], **quiet)
            voice_controls["use_heard"].click(
                callbacks.transcript_use_heard,
                [language, verdict],
                [transcript, transcript_msg, verdict, choices],
                **quiet,
            )
            voice_controls["keep_mine"].click(
                callbacks.transcript_keep_mine, [language, verdict], [transcript_msg, verdict, choices], **quiet
            )
        text.change(callbacks.counter, [language, text], counter, trigger_mode="always_last", **quiet)
        mode.change(callbacks.mode_changed, mode, [transcript_row, preset, instruct, mode_msg], **quiet)
        mode.change(lambda: "", None, transcript_msg, **quiet)
        stream.change(callbacks.stream_toggled, stream, [speed, stream_note], **quiet)
        stream.input(prepare, [prompt_audio, stream], None, **quiet)
        preset.input(lambda chosen: chosen or gr.skip(), preset, instruct, **quiet)
        dice.click(callbacks.roll_seed, None, seed, **quiet)
        # A seed typed in is one the user wants kept: ticked in the browser at once, before a Generate can follow.
        seed.input(None, None, seed_fixed, js="() => true", **quiet)

        generate_outputs = dict(
            prompt_msg=prompt_msg,
            counter=counter,
            mode_msg=mode_msg,
            status=status,
            result=result,
            history=history,
            history_pick=history_controls["pick"],
            session=session,
            player=player,
            blockers=bar.blockers,
            seed=seed,
        )
        generating = dict(
            fn=callbacks.generate,
            inputs=[language, prompt_audio, voices, transcript, text, mode, instruct, seed, speed, stream, session]
            + list(post_controls)  # after the session: Generation.run takes them last, off by default
            + list(sampling_controls)  # then the sampling controls (off: the model's own)
            + [voice_controls["speak_style"]]  # the saved voice's recording to speak with ("": its own)
            + [check, seed_fixed],  # last, the take check's box and "Keep this seed"
            outputs=[generate_outputs[name] for name in GenerateOutputs._fields],
            # Every request reaches the engine at once: its queue is the one bound, and it answers a request
            # over the bound with the app's own message (a Gradio-side limit would hold requests unseen).
            concurrency_limit=None,
            concurrency_id="generate",
            show_progress="minimal",
            show_progress_on=[result],
        )

        def after_run(event) -> None:  # the status panel, the history, the result's check and captions, the bar
            event.then(callbacks.status_panel, language, panel.status_panel, **quiet).then(
                callbacks.history_show, history_query, history_shown, **quiet
            ).then(callbacks.last_takes, [language, session], [*takes, retake], **quiet).then(
                callbacks.blockers, blocker_inputs, bar.blockers, **quiet
            ).then(callbacks.queue_words, language, queue_line, **quiet)

        after_run(generate.click(**generating))
        takes.use.click(  # another kept take put in the last result, then the history shows its new length
            callbacks.use_last_take, [language, session, takes.pick], [result, *takes, retake], **quiet
        ).then(callbacks.history_show, history_query, history_shown, **quiet)
        # A Retake (offered when a sentence stayed flagged, as a streamed one can) is Generate with the next seed.
        after_run(retake.click(**{**generating, "fn": callbacks.retake}))
        stop.click(callbacks.stop, None, None, **quiet)
        stop.click(None, None, None, js=STOP_JS)
        result.change(compact_player, result, bar.compact, **quiet)
        wire_form_memory(page, form)
        wire_model_panel(panel, callbacks, language)
        wire_download_panel(downloads, callbacks, language, panel, page)
        wire_derived_lines(
            callbacks, page, timer, language, voice_controls, blocker_inputs, bar, panel, queue_line, verdict
        )
        page.unload(callbacks.session_closed)
        notice_ok.click(callbacks.acknowledge_notice, None, None, js=NOTICE_ACCEPT_JS, **quiet)
        page.load(None, None, None, js=NOTICE_LOAD_JS)
        page.load(
            callbacks.on_load,
            language,
            [voices, panel.status_panel, seed, panel.model_menu, panel.mlx_llm_menu, panel.engine_menu],
            **quiet,
        )

        # One event for every control, so the page runs it one at a time and the last change's reasons are
        # the ones left showing ("always_last"); off the queue like every event the page fires on its own.
        gr.on(
            [control.change for control in blocker_inputs],
            callbacks.blockers,
            blocker_inputs,
            bar.blockers,
            trigger_mode="always_last",
            **quiet,
        )
        page.load(callbacks.blockers, blocker_inputs, bar.blockers, **quiet)

        history_search = history_controls["search"]
        # Gradio words inside these (upload area, record button) follow the new locale only when re-mounted.
        remounted = [prompt_audio, result, history_controls["audio"]]
        relabelled = LanguageOutputs(
            book=book.components,
            lines=[
                counter,
                prompt_msg,
                status,
                panel.status_panel,
                voice_msg,
                mode_msg,
                panel.model_msg,
                transcript_msg,
            ],
            voice=[voice_controls["card"], voice_controls["voice_list"]],
            history=history_shown,
            remounted=remounted,
        )
        # The browser-side parts first (they need no answer), then ONE request for every word on the page and
        # one to show the re-mounted players again: each event the page fires off the queue is a request of its
        # own, answered one after another with the timer's, and a dozen of them took several seconds to reach
        # the last (the Gradio words), seen as a flaky language test on a loaded machine.
        language.change(None, language, None, js=gradio_locale_js())
        language.change(None, language, None, js=LANGUAGE_KEEP_JS)
        language.change(
            lambda lang, words, audio, voice, session, query: switch_language(
                callbacks, book, relabelled, lang, words, audio, voice, session, query
            ),
            [language, text, prompt_audio, voices, session, history_search],
            relabelled.components,
            **quiet,
        ).then(lambda: [gr.update(visible=True)] * len(remounted), None, remounted, **quiet)
        page.load(None, None, language, js=LANGUAGE_LOAD_JS)  # a change from English relabels the page
    return page


def _mode_choices(lang: str) -> list[tuple[str, str]]:
    return [(say(lang, f"mode_{mode}"), mode) for mode in ("zero_shot", "cross_lingual", "instruct")]


def _preset_choices(lang: str) -> list[tuple[str, str]]:
    return [(preset_choice(lang, preset.label, preset.text), preset.text) for preset in INSTRUCTIONS]
