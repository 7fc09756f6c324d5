"""The action bar: Generate, Stop, what stops Generate from working, the status line and the last result's
player, in one strip fixed to the bottom of the window, so the action and its reasons are always in sight.

``blocking_reasons`` lists every reason a press of Generate would be refused with the page's current input
(not just the first): the rules are the request's own (``Request.build``, asked once for the voice's side
and once for the text's side), and the prompt file's quick look is ``sound.prompt_check``'s.
``render_reasons`` turns them into the line beside Generate, derived from the engine's state and this tab's
running job as well, never appended: it says "Ready" only when a press would start at once.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import gradio as gr

from cosyvoice_mac.engine import VoiceError
from cosyvoice_mac.engine.messages import EngineState
from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.request import MODES, Request, Voice
from cosyvoice_mac.sound.prompt_check import checked_prompt
from cosyvoice_mac.webui.generation import problem_words
from cosyvoice_mac.webui.render import PROMPT_PROBLEM_KEYS
from cosyvoice_mac.webui.streaming import PLAYER_HTML, PLAYER_JS
from cosyvoice_mac.webui.strings import text as say

STAND_IN_TEXT = "Hello."  # lets the voice's side of the rules be asked without the text's problems
ACTION_BAR_CSS = """
#cv-action-bar { position: fixed; left: 0; right: 0; bottom: 0; z-index: 1000; margin: 0;
  padding: 0.4em 1.2em; background: var(--background-fill-primary);
  border-top: 1px solid var(--border-color-primary); box-shadow: 0 -2px 8px rgba(0, 0, 0, 0.08); }
#cv-action-bar .cv-message p { margin: 0.1em 0; }
#cv-action-buttons { max-width: 15em; min-width: 12em; }
#cv-blockers { color: var(--color-accent); max-height: 6.5em; overflow-y: auto; }
#cv-result { max-height: 7.5em; }
#cv-queue { font-size: 0.85em; opacity: 0.85; }
.gradio-container { padding-bottom: 10em !important; }
"""


class ActionBar(NamedTuple):
    """The bar's controls that the rest of the page wires or updates."""

    generate: gr.Button
    stop: gr.Button
    blockers: gr.Markdown
    status: gr.Markdown
    player: gr.HTML
    result: gr.Audio
    queue: gr.Markdown


def build_action_bar(make, can_generate: bool, first_blockers: str) -> ActionBar:
    """The bar, in page order (``make`` is the page's ``LabelBook.make``). Element ids are the tests' handles."""
    with gr.Row(elem_id="cv-action-bar", equal_height=False):
        with gr.Column(scale=0, min_width=190, elem_id="cv-action-buttons"):
            with gr.Row():
                generate = make(
                    gr.Button,
                    {"value": "generate"},
                    variant="primary",
                    interactive=can_generate,
                    elem_id="cv-generate",
                )
                stop = make(gr.Button, {"value": "stop"}, variant="secondary", elem_id="cv-stop")
        with gr.Column(scale=3, min_width=300):
            blockers = gr.Markdown(first_blockers, elem_id="cv-blockers", elem_classes="cv-message")
            status = gr.Markdown(elem_id="cv-status", elem_classes="cv-message")
            player = gr.HTML("", html_template=PLAYER_HTML, js_on_load=PLAYER_JS, elem_id="cv-stream-player")
            queue = gr.Markdown(elem_id="cv-queue", elem_classes="cv-message")
        with gr.Column(scale=2, min_width=280):
            result = make(
                gr.Audio,
                {"label": "result_label"},
                interactive=False,
                buttons=["download"],
                elem_id="cv-result",
            )
    return ActionBar(generate, stop, blockers, status, player, result, queue)


def blocking_reasons(host, lang, audio, voice, transcript, text, mode, instruct) -> list[str]:
    """Every reason Generate would refuse the page's input now, in ``lang`` (empty: nothing blocks it)."""
    reasons: list[str] = []
    if not host.choices():
        reasons.append(say(lang, "status_no_model"))
    chosen = _chosen_voice(host, lang, audio, voice, transcript, reasons)
    mode = mode if mode in MODES else "zero_shot"
    # The voice's side: the transcript zero-shot needs, the instruction instruct needs.
    stand_in = chosen or replace(Voice.builtin(), transcript=transcript)
    _ask(reasons, lang, lambda: Request.build(STAND_IN_TEXT, stand_in, mode=mode, instruct=instruct, seed=0))
    # The text's side, with a voice that needs nothing.
    _ask(reasons, lang, lambda: Request.build(text or "", Voice.builtin(), mode="cross_lingual", seed=0))
    return reasons


# The engine's states in which a job waits for the model (the line says so instead of "Ready").
MODEL_WAIT_KEYS = {
    EngineState.STARTING: "action_model_loading",
    EngineState.RESTARTING: "action_model_restarting",
    EngineState.UNRESPONSIVE: "action_model_unresponsive",
    EngineState.ERROR: "action_model_failed",
}


def render_reasons(lang: str, reasons: list[str], *, running: bool = False, state: str = EngineState.READY) -> str:
    """The Markdown beside Generate, from the input's ``reasons``, this tab's ``running`` job and the engine's
    ``state``: what is running, whether the model is ready, then one line per reason; "Ready" only when
    nothing blocks, nothing of this tab runs and the model is ready."""
    lines = [say(lang, "action_running")] if running else []
    if state in MODEL_WAIT_KEYS:
        lines.append(say(lang, MODEL_WAIT_KEYS[state]))
    lines += reasons
    if not lines:
        return say(lang, "ready_to_generate")
    return "  \n".join(lines)


def _chosen_voice(host, lang, audio, voice, transcript, reasons: list[str]) -> Voice | None:
    """The saved or uploaded voice the input names, or None (its problem appended to ``reasons``)."""
    if voice:
        engine = host.engine
        if engine is None:
            return None  # "no model" says it already
        try:
            return replace(engine.voice(voice), transcript=transcript)
        except VoiceError as error:
            reasons.append(say(lang, "voice_error", message=str(error)))
            return None
    if not audio:
        reasons.append(say(lang, "prompt_needed"))
        return None
    check = checked_prompt(audio)
    if not check.ok:
        reasons.append(say(lang, PROMPT_PROBLEM_KEYS[check.problem], **check.details))
        return None
    return Voice.recording(audio, transcript=transcript)


def _ask(reasons: list[str], lang: str, build) -> None:
    try:
        build()
    except RequestError as error:
        words = problem_words(lang, error)
        if words not in reasons:
            reasons.append(words)
