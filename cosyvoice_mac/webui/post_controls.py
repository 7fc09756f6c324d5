"""The page's post-processing controls (trim, loudness), built the same way for Generate and for the long-form
section, and the one mapping from their values to the request's ``PostSettings``.
"""

from __future__ import annotations

import gradio as gr

from cosyvoice_mac.request import PostSettings
from cosyvoice_mac.settings import slider


def build_post_controls(make, id_prefix: str) -> tuple:
    """(trim checkbox, normalise checkbox, target slider), all off by default; ``make`` is the page's
    LabelBook.make; element ids are ``<id_prefix>-trim``, ``-level`` and ``-loudness``."""
    with gr.Row():
        trim = make(gr.Checkbox, {"label": "lf_trim_label"}, value=False, elem_id=f"{id_prefix}-trim")
        level = make(gr.Checkbox, {"label": "lf_level_label"}, value=False, elem_id=f"{id_prefix}-level")
        target = make(
            gr.Slider,
            {"label": "lf_loudness_label"},
            **slider("loudness_lufs"),
            elem_id=f"{id_prefix}-loudness",
        )
    return trim, level, target


def post_settings(trim, level, target) -> PostSettings:
    """The controls' values as PostSettings (RequestError naming the field for a value out of range)."""
    if isinstance(target, int) and not isinstance(target, bool):
        target = float(target)  # one spelling of a target: a batch's resume key compares them
    return PostSettings(trim=bool(trim), loudness_lufs=target if level else None)
