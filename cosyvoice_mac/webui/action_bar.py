"""The Speak workspace's action row: Generate, Stop, the one reason that stops Generate now (the others on demand),
the status line and a compact player of the last result, in one strip fixed to the bottom of the window while its
workspace is shown (a hidden workspace hides its row). At most ~90 px on a desktop and ~120 px on a phone, and the
page keeps that much room below its last control, so the row never hides any of it; the full result player sits
in the workspace itself.

``blocking_reasons`` lists every reason a press of Generate would be refused with the page's current input
(not just the first): the rules are the request's own (``Request.build``, asked once for the voice's side
and once for the text's side), and the prompt file's quick look is ``sound.prompt_check``'s.
``render_reasons`` turns them into the line beside Generate, derived from the engine's state and this tab's
running job as well, never appended: it says "Ready" only when a press would start at once.
"""

from __future__ import annotations

import html
from dataclasses import replace
from typing import NamedTuple
from urllib.parse import quote

import gradio as gr

from cosyvoice_mac.engine import VoiceError
from cosyvoice_mac.engine.messages import EngineState
from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.frontend.inline import parse_inline
from cosyvoice_mac.request import MODES, Request, Voice
from cosyvoice_mac.sound.prompt_check import checked_prompt
from cosyvoice_mac.webui.page_request import problem_words, voice_styles
from cosyvoice_mac.webui.render import PROMPT_PROBLEM_KEYS
from cosyvoice_mac.webui.streaming import PLAYER_HTML, PLAYER_JS
from cosyvoice_mac.webui.strings import text as say

STAND_IN_TEXT = "Hello."  # lets the voice's side of the rules be asked without the text's problems
ACTION_BAR_CSS = """
.cv-action-row { position: fixed; left: 0; right: 0; bottom: 0; z-index: 50; margin: 0; padding: 0.35em 1.2em;
  background: var(--background-fill-primary); border-top: 1px solid var(--border-color-primary);
  box-shadow: 0 -2px 8px rgba(0, 0, 0, 0.08); max-height: 90px; overflow: hidden; gap: 0.6em; align-items: center; }
.cv-action-row:has(details[open]) { max-height: 50vh; overflow-y: auto; }
.cv-action-row .cv-message p { margin: 0; }
.cv-action-row .cv-message { line-height: 1.3; }
.cv-action-row > .column, .cv-action-row > div { gap: 0.2em; }
.cv-action-buttons { flex-wrap: nowrap !important; gap: 0.4em; }
.cv-action-buttons button { min-width: 5.5em; padding: 0.35em 0.8em; }
#cv-blockers { color: var(--color-accent); }
#cv-blockers details summary { cursor: pointer; opacity: 0.85; }
#cv-blockers, #cv-status { overflow: hidden; display: -webkit-box; -webkit-line-clamp: 2;
  -webkit-box-orient: vertical; }
.cv-action-row:has(details[open]) #cv-blockers { display: block; }
#cv-result-compact audio { width: 100%; height: 32px; display: block; }
#cv-stream-player { min-height: 0; height: 0; overflow: hidden; padding: 0; border: 0; }
#cv-queue { font-size: 0.85em; opacity: 0.85; }
.gradio-container { padding-bottom: 100px !important; }
@media (max-width: 640px) {
  .gradio-container { padding-bottom: 130px !important; }
  .cv-action-row { max-height: 120px; padding: 0.25em 0.4em; gap: 0.2em; }
  .cv-action-row > .column { min-width: 100% !important; }
  #cv-blockers, #cv-status { -webkit-line-clamp: 1; font-size: 0.9em; }
}
"""


class ActionBar(NamedTuple):
    """The row's controls that the rest of the page wires or updates."""

    generate: gr.Button
    stop: gr.Button
    blockers: gr.Markdown
    status: gr.Markdown
    player: gr.HTML
    compact: gr.HTML


def build_action_bar(make, can_generate: bool, first_blockers: str) -> ActionBar:
    """The row, in page order (``make`` is the page's ``LabelBook.make``). Element ids are the tests' handles;
    the classes ``cv-action`` and ``cv-stop-action`` are what the keyboard's Ctrl/Cmd+Enter and Esc press."""
    with gr.Row(elem_id="cv-action-bar", elem_classes="cv-action-row", equal_height=False):
        with gr.Row(scale=0, elem_classes="cv-action-buttons"):
            generate = make(
                gr.Button,
                {"value": "generate"},
                variant="primary",
                interactive=can_generate,
                elem_id="cv-generate",
                elem_classes="cv-action",
            )
            stop = make(
                gr.Button, {"value": "stop"}, variant="secondary", elem_id="cv-stop", elem_classes="cv-stop-action"
            )
        with gr.Column(scale=3, min_width=240):
            blockers = gr.Markdown(first_blockers, elem_id="cv-blockers", elem_classes="cv-message")
            status = gr.Markdown(elem_id="cv-status", elem_classes="cv-message")
            player = gr.HTML("", html_template=PLAYER_HTML, js_on_load=PLAYER_JS, elem_id="cv-stream-player")
        with gr.Column(scale=2, min_width=220):
            compact = gr.HTML("", elem_id="cv-result-compact")
    return ActionBar(generate, stop, blockers, status, player, compact)


def compact_player(path: str | None) -> str:
    """The row's small player of the last result (a native ``<audio>``, one line high), or nothing."""
    if not path:
        return ""
    source = "gradio_api/file=" + quote(str(path))
    return f'<audio controls preload="metadata" src="{html.escape(source)}"></audio>'


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
    # a malformed inline tag, with its position (a style tag may name the saved voice's recordings)
    _ask(reasons, lang, lambda: parse_inline(text or "", voice_styles(host.engine, voice)))
    return reasons


# The engine's states in which a job waits for the model (the line says so instead of "Ready").
MODEL_WAIT_KEYS = {
    EngineState.STARTING: "action_model_loading",
    EngineState.RESTARTING: "action_model_restarting",
    EngineState.UNRESPONSIVE: "action_model_unresponsive",
    EngineState.ERROR: "action_model_failed",
}


def render_reasons(
    lang: str,
    reasons: list[str],
    *,
    running: bool = False,
    state: str = EngineState.READY,
    notes: list[str] | None = None,
) -> str:
    """The Markdown beside Generate, from the input's ``reasons``, this tab's ``running`` job and the engine's
    ``state``: the most important line first (what runs, whether the model is ready, then the first reason),
    the others folded under "N more"; "Ready" only when nothing blocks, nothing of this tab runs and the model
    is ready. ``notes`` (what the preview voice will leave out) follow, blocking nothing."""
    lines = [say(lang, "action_running")] if running else []
    if state in MODEL_WAIT_KEYS:
        lines.append(say(lang, MODEL_WAIT_KEYS[state]))
    lines += reasons
    if not lines:
        lines = [say(lang, "ready_to_generate")]
    lines += notes or []
    first, rest = lines[0], lines[1:]
    if not rest:
        return first
    more = say(lang, "action_more", count=len(rest))
    return f"{first}\n<details><summary>{more}</summary>\n\n" + "  \n".join(rest) + "\n</details>"


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
