"""The page's two languages at run time: re-labelling every registered control, and Gradio's own words.

Every control whose words depend on the language is registered in a :class:`LabelBook`, so the
language switch re-labels all of them at once; :func:`gradio_locale_js` moves Gradio's built-in words
(upload area, record button) to the same language through its locale.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import gradio as gr

from cosyvoice_mac.webui.strings import DEFAULT_LANGUAGE
from cosyvoice_mac.webui.strings import text as say


class LabelBook:
    """Owns the list of (component, property -> strings key or function of the language) to re-label."""

    def __init__(self, lang: str = DEFAULT_LANGUAGE):
        self.lang = lang
        self.entries: list[tuple[gr.components.Component, dict[str, str | Callable[[str], object]]]] = []

    def make(self, factory, words: dict[str, str | Callable[[str], object]], **fixed):
        """``factory(**fixed, **words in the starting language)``, registered for re-labelling."""
        return self.add(factory(**fixed, **self.render(self.lang, words)), words)

    def add(self, component, words: dict[str, str | Callable[[str], object]]):
        self.entries.append((component, words))
        return component

    @staticmethod
    def render(lang: str, words: dict) -> dict:
        return {name: source(lang) if callable(source) else say(lang, source) for name, source in words.items()}

    @property
    def components(self) -> list:
        return [component for component, _ in self.entries]

    def updates(self, lang: str) -> list:
        return [gr.update(**self.render(lang, words)) for _, words in self.entries]


def gradio_locale_js() -> str:
    """Browser code that moves Gradio's built-in words (upload area, record button...) to the page's language.

    Gradio picks its locale from the browser; its frontend module exports ``changeLocale``, which this
    imports from the same URL the page loaded it from (so it is the same module instance). When this
    Gradio build has no such module the switch only re-labels our own controls.
    """
    module = _gradio_core_module()
    if module is None:
        return "(lang) => lang"
    return (
        "async (lang) => { try { const core = await import(new URL('assets/" + module + "', document.baseURI).href);"
        " core.changeLocale(lang === 'zh' ? 'zh-CN' : 'en'); } catch (error) { console.warn(error); } return lang; }"
    )


def _gradio_core_module() -> str | None:
    assets = Path(gr.__file__).parent / "templates" / "frontend" / "assets"
    for candidate in sorted(assets.glob("core-*.js")):
        try:
            if "changeLocale" in candidate.read_text(encoding="utf-8", errors="ignore"):
                return candidate.name
        except OSError:
            continue
    return None
