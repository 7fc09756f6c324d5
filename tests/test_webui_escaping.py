"""User strings reach the page as text, never as markup: names, file names and error messages are escaped,
and voice names cannot carry text-direction controls."""

from __future__ import annotations

import html
import re
from types import SimpleNamespace

import pytest

from cosyvoice_mac.engine import VoiceError, VoiceLibrary
from cosyvoice_mac.engine.host import HostConfig, ModelHost, Settings
from cosyvoice_mac.webui.callbacks import Callbacks
from cosyvoice_mac.webui.history import HISTORY_DATATYPES, history_view
from cosyvoice_mac.webui.render import render_status, status_line
from cosyvoice_mac.webui.state import HistoryEntry
from cosyvoice_mac.webui.strings import text as say

HOSTILE = "<img src=x onerror=alert(1)>"
HASH = "a" * 64


def _shown(markdown: str) -> str:
    """What a reader sees: character references decoded (as Markdown does), no tag may survive."""
    assert not re.search(r"<[a-zA-Z/!]", markdown), markdown  # no element, comment or closing tag
    return html.unescape(markdown)


@pytest.fixture
def callbacks(tmp_path):
    host = ModelHost(
        HostConfig(
            models_dir=tmp_path / "models",
            outputs_dir=tmp_path / "outputs",
            cache_dir=tmp_path / "cache",
            preview=False,
        )
    )
    host.engine = SimpleNamespace(voices=VoiceLibrary(tmp_path / "cache"))  # the engine owns the library
    return Callbacks(host, Settings(tmp_path / "cache"))


def test_a_voice_named_like_an_element_is_shown_as_its_characters(callbacks):
    callbacks.voices.save(HOSTILE, audio_hash=HASH, model_id="m")
    picked = callbacks.voice_picked("en", HOSTILE, "")[1]
    assert HOSTILE in _shown(picked)
    deleted = callbacks.delete_voice("en", HOSTILE)[0]
    assert HOSTILE in _shown(deleted)
    missing = callbacks.voice_picked("zh", "**bold** <b>x</b>", "")[1]
    assert "**bold** <b>x</b>" in _shown(missing) and "**bold**" not in missing


def test_markup_errors_keep_their_tag_names():
    message = "Unknown markup in the text: <script> at character 0, <|en|> at character 9"
    line = status_line("en", "status_failed", {"message": message})
    assert message in _shown(line)


def test_status_panel_and_history_escape_what_came_from_outside():
    status = {
        "state": "error",
        "last_error": "could not read </div><script>x</script>",
        "folder": "<b>m</b>",
        "folder_version": "cosyvoice3",
        "version": "cosyvoice3",
        "model": "[link](http://x)",
    }
    panel = render_status("en", status)
    shown = _shown(panel)
    assert "could not read </div><script>x</script>" in shown and "<b>m</b>" in shown
    assert "](http" not in panel  # no Markdown link
    entry = HistoryEntry(
        path="/o/a.wav", text="t", mode="zero_shot", voice=None, seed=1, speed=1.0, duration_s=1.0, model="<i>m</i>"
    )
    model_cell = history_view("en", [entry]).table["data"][0][7]
    assert model_cell == "<i>m</i>" and HISTORY_DATATYPES[7] == "str"  # a plain-text cell: shown as typed


def test_our_own_markdown_is_left_alone():
    assert say("en", "status_failed", message="x").startswith("⚠️")
    preview = render_status("en", {"state": "ready", "folder": "/preview", "folder_version": "preview"})
    assert "`bash run.sh download cosyvoice3`" in preview  # the command stays a code span
    assert "**Licence:**" in preview


@pytest.mark.parametrize(
    "control", ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]
)
def test_voice_names_with_bidi_controls_are_refused(tmp_path, control):
    library = VoiceLibrary(tmp_path)
    with pytest.raises(VoiceError, match="text-direction"):
        library.save(f"Grandpa{control}gnidaer", audio_hash=HASH, model_id="m")
    assert library.list() == []


def test_voice_names_with_c1_controls_are_refused(tmp_path):
    with pytest.raises(VoiceError, match="printable"):
        VoiceLibrary(tmp_path).save("bad\x85name", audio_hash=HASH, model_id="m")


def test_the_download_panel_shows_a_failure_and_its_progress_as_plain_text():
    """Its HTML panel escaped what ``say`` had escaped already: a message with ``_``, ``<`` or ``&`` showed
    entities such as ``&#95;`` raw."""
    import threading

    from cosyvoice_mac.download import DownloadError
    from cosyvoice_mac.webui.download_panel import DownloadCallbacks, progress_html

    failed = threading.Event()
    failed.set()
    reason = "HTTP 404 for FunAudioLLM/Fun_CosyVoice3 <index.json> & no retry [hub]"
    job = SimpleNamespace(finished=failed, error=DownloadError(reason), version="cosyvoice3", source="huggingface")
    panel = SimpleNamespace(downloads=SimpleNamespace(start=lambda version: job))
    (message, *_), *_ = list(DownloadCallbacks.download(panel, "en", "cosyvoice3"))
    assert _shown(message) == f"⚠️ The download stopped: {reason}."
    words = progress_html("en", job, {"done": 1 << 30, "total": 2 << 30, "speed": None, "left": None, "resumed": 0})
    assert "&amp;" not in words and "&#" not in html.unescape(words)
