"""Wrongly typed or missing inputs to a Gradio event are answered with the field and the type it takes, not with
Gradio's words (a Python exception's text such as "type str doesn't define __round__", or every input
component's repr with its memory address).

Gradio checks an event's inputs in two places of its ``Blocks``: ``validate_inputs`` (are there enough?) and
each input component's ``preprocess``, whose failure ``_format_processing_error`` words. Both are looked up
on the Blocks instance, so :func:`name_input_problems` gives the page's own instance ours, for the public
``/synthesize`` and the page's events alike. Gradio's own refusals (a number out of its range, a choice never
offered) are ``gr.Error`` with a clear message already; they do not pass through here.
"""

from __future__ import annotations

import gradio as gr

MAX_SHOWN_CHARS = 60


def name_input_problems(page: gr.Blocks) -> None:
    """Word ``page``'s input problems by field and expected type (see the module's docstring)."""
    gradio_validate = page.validate_inputs
    gradio_format = page._format_processing_error

    def validate_inputs(block_fn, inputs):
        wanted = len(block_fn.inputs)
        # Gradio drops extra inputs unsaid (an event's own JS function may hand it more): refused where none runs
        if isinstance(inputs, list) and (len(inputs) < wanted or (len(inputs) > wanted and not block_fn.js)):
            raise gr.Error(wrong_count(block_fn, len(inputs)), print_exception=False)
        gradio_validate(block_fn, inputs)
        for block, value in zip(block_fn.inputs, inputs or ()):
            if isinstance(block, gr.Textbox) and value is not None and not isinstance(value, str):
                # Gradio's Textbox passes any JSON value through: a list would be spoken as "['a']"
                raise gr.Error(wrong_type(block_fn, block, value), print_exception=False)

    def format_processing_error(block_fn, index, block, value, is_input, original_error):
        if not is_input:  # an output our own code returned: a bug of ours, Gradio's words serve its log
            return gradio_format(block_fn, index, block, value, is_input, original_error)
        # Raised rather than returned: the caller's fault, so the user-facing gr.Error (no traceback logged)
        # instead of the exception Gradio would wrap this message in.
        raise gr.Error(wrong_type(block_fn, block, value), print_exception=False) from None

    page.validate_inputs = validate_inputs
    page._format_processing_error = format_processing_error


def wrong_count(block_fn, given: int) -> str:
    names = ", ".join(field_name(block) for block in block_fn.inputs)
    return f"{event_name(block_fn)} needs {len(block_fn.inputs)} inputs ({names}), got {given}"


def wrong_type(block_fn, block, value) -> str:
    return f"{event_name(block_fn)}: {field_name(block)} must be {expected_type(block)}, got {describe(value)}"


def event_name(block_fn) -> str:
    return block_fn.api_name or block_fn.name or "this event"


def field_name(block) -> str:
    return str(getattr(block, "label", None) or block.get_block_name())


def expected_type(block) -> str:
    if isinstance(block, gr.Number):
        return "a whole number" if block.precision == 0 else "a number"
    if isinstance(block, gr.Slider):
        return "a number"
    if isinstance(block, gr.Checkbox):
        return "true or false"
    if isinstance(block, gr.Textbox):
        return "text"
    if isinstance(block, (gr.Dropdown, gr.Radio)):
        return "one of its choices"
    if isinstance(block, (gr.Audio, gr.File, gr.Image, gr.Video)):
        return 'a file value ({"path": ..., "meta": {"_type": "gradio.FileData"}}, uploaded first)'
    return f"a value a {block.get_block_name()} takes"


def describe(value) -> str:
    """What the caller sent, in JSON's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= MAX_SHOWN_CHARS else value[:MAX_SHOWN_CHARS] + "..."
        return f"the text {shown!r}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"
