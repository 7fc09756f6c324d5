"""The page's sampling controls (temperature, top-p, top-k, repetition window) and the one mapping from their
values to the request's ``Sampling``: off (the default), the model's own settings; on, the sliders' values."""

from __future__ import annotations

import gradio as gr

from cosyvoice_mac.request import Sampling
from cosyvoice_mac.settings import slider
from cosyvoice_mac.settings.fields import SAMPLING_FIELDS

SAMPLING_CONTROLS = 1 + len(SAMPLING_FIELDS)  # how many values the controls pass: the on box, then a slider each


def build_sampling_controls(make, id_prefix: str) -> tuple:
    """(on checkbox, temperature, top-p, top-k, repetition window sliders); the checkbox starts off and the
    sliders at the models' own values (the table's ``page_default``). Element ids ``<id_prefix>-on``,
    ``-temperature``, ``-top_p``, ``-top_k``, ``-repetition_window``."""
    use = make(gr.Checkbox, {"label": "sampling_on_label"}, value=False, elem_id=f"{id_prefix}-on")
    with gr.Row():
        sliders = tuple(
            make(gr.Slider, {"label": f"{name}_label"}, **slider(name), elem_id=f"{id_prefix}-{name}")
            for name in SAMPLING_FIELDS
        )
    return (use, *sliders)


def sampling_settings(use=False, *values) -> Sampling:
    """The controls' values as Sampling (RequestError naming the field for a value out of range)."""
    if not use:
        return Sampling()
    return Sampling.build(**dict(zip(SAMPLING_FIELDS, values)))
