"""The Gradio page for a model host: its layout and callbacks, its style sheet and the tab title's script.

``build_app`` builds the page without starting a model or a server; the composition root
(``cosyvoice_mac.app``) serves it beside the ``/v1`` API.
"""

from __future__ import annotations

import json

from cosyvoice_mac.engine.host import ModelHost, Settings
from cosyvoice_mac.webui.strings import EN, ZH

TITLE = EN["title"]


def build_app(host: ModelHost, settings: Settings | None = None):
    """The Gradio page for ``host`` (its models and engine); does not start a model."""
    from cosyvoice_mac.webui.callbacks import Callbacks
    from cosyvoice_mac.webui.features import detect_features
    from cosyvoice_mac.webui.layout import build_page

    settings = settings or Settings(host.config.cache_dir)
    callbacks = Callbacks(host, settings)
    return build_page(callbacks, detect_features(), has_model=bool(host.models()))


def page_css() -> str:
    from cosyvoice_mac.webui.layout import CSS

    return CSS


def title_js() -> str:
    """The page's load script: keeps the browser tab's title in the page's language when the language switch
    changes, and marks the caption word being spoken (``takes_view``)."""
    from cosyvoice_mac.webui.takes_view import CAPTIONS_FOLLOW_JS

    titles = json.dumps({"en": EN["title"], "zh": ZH["title"]}, ensure_ascii=False)
    return (
        "() => { const titles = " + titles + ";"
        " document.addEventListener('change', () => { const picked = document.querySelector("
        "'#cv-language input:checked'); if (picked && titles[picked.value]) document.title = titles[picked.value];"
        " }); " + CAPTIONS_FOLLOW_JS + " }"
    )
