"""The Speak form remembered in the browser (issue 50 item 12: "the form is empty after a reload"): the text,
the mode, the instruction and the speed are kept in this browser's localStorage as they change and put back when
the page loads. Browser-side only: no request, and nothing of it reaches the server until Generate.

The voice and its transcript are not kept (an upload does not survive a reload; a saved voice is picked again in
one click), nor the seed (each Generate picks a new one unless kept, and a kept one is in the history).
"""

from __future__ import annotations

import json

FORM_KEY = "cosyvoice-form"
KEPT = ("text", "mode", "instruct", "speed")
DEFAULTS = {"text": "", "mode": "zero_shot", "instruct": "", "speed": 1.0}

SAVE_JS = (
    "("
    + ", ".join(KEPT)
    + ") => { localStorage.setItem('"
    + FORM_KEY
    + "', JSON.stringify({"
    + ", ".join(KEPT)
    + "})); }"
)
# What was kept, field by field, else the field's default (the page's own value: no change event follows).
LOAD_JS = (
    "() => { const defaults = " + json.dumps(DEFAULTS) + "; let kept = {};"
    " try { kept = JSON.parse(localStorage.getItem('" + FORM_KEY + "') || '{}') || {}; } catch (error) { kept = {}; }"
    " return " + json.dumps(list(KEPT)) + ".map((name) => (kept[name] ?? defaults[name])); }"
)


def wire_form_memory(page, controls: dict) -> None:
    """Keep ``controls`` (by the names in KEPT) as they change; put them back when the page loads."""
    import gradio as gr

    fields = [controls[name] for name in KEPT]
    gr.on([field.change for field in fields], None, fields, None, js=SAVE_JS, queue=False, show_progress="hidden")
    page.load(None, None, fields, js=LOAD_JS)
