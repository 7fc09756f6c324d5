"""Issue 50's second pass, below the browser: the transcript check as a blocker with its two ways out (item 3),
the action row's one reason with the others folded (item 1), the preview voice's limits said before a job and
naming the markup typed (item 11), the trained instructions' menu (item 11), and a history row clicked (item 4).
No model, no server: a host that starts nothing, plain callbacks."""

from __future__ import annotations

import html
import json
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest
import soundfile

from cosyvoice_mac.engine.host import HostConfig, ModelHost, Settings
from cosyvoice_mac.preview.limits import markup_example, markup_note
from cosyvoice_mac.webui.action_bar import render_reasons
from cosyvoice_mac.webui.callbacks import Callbacks
from cosyvoice_mac.webui.derived_status import StatusCallbacks
from cosyvoice_mac.webui.strings import preset_choice
from cosyvoice_mac.webui.transcript_verdict import blocks_generate, transcript_blocker
from tests.test_webui_additions import checked_transcript

TYPED = "The weather in Paris is lovely today."
HEARD = "This is the voice I would like you to copy, please."


@pytest.fixture(scope="module")
def callbacks(tmp_path_factory) -> Callbacks:
    root = tmp_path_factory.mktemp("workspaces")
    (root / "models").mkdir()
    host = ModelHost(HostConfig(models_dir=root / "models", outputs_dir=root / "outputs", cache_dir=root / "cache"))
    return Callbacks(host, Settings(root / "cache"))


class _Hears:
    def __init__(self, words: str):
        self.words = words

    def transcribe(self, path: str) -> str:
        return self.words


def test_a_transcript_the_recogniser_disagrees_with_blocks_zero_shot_until_the_user_chooses(
    callbacks, monkeypatch, tmp_path
):
    recording = tmp_path / "prompt.wav"
    rate = 16000
    soundfile.write(recording, 0.3 * np.sin(np.linspace(0, 3000, 4 * rate)).astype(np.float32), rate)
    monkeypatch.setattr(callbacks.host, "transcriber", _Hears(HEARD))
    audio = str(recording)
    message, checking = callbacks.check_transcript("en", audio, "", TYPED)  # the recogniser listens on a thread
    assert transcript_blocker("en", checking, audio, "", TYPED, "zero_shot") == message  # said, not blocking
    assert not blocks_generate(checking, audio, "", TYPED, "zero_shot")
    assert callbacks.blockers("en", audio, "", TYPED, "Hello.", "zero_shot", "", checking).startswith("✅ Ready")

    message, verdict, choices = checked_transcript(callbacks, "en", audio, "", TYPED)
    assert choices["visible"] is True and HEARD in message
    assert blocks_generate(verdict, audio, "", TYPED, "zero_shot")
    line = callbacks.blockers("en", audio, "", TYPED, "Hello.", "zero_shot", "", verdict)
    assert line.startswith("⚠️ The transcript does not match the recording") and "Use what I hear" in line
    tab = SimpleNamespace(session_hash="check")  # the session checked_transcript ran the check in
    refused = list(callbacks.generate("en", audio, "", TYPED, "Hello.", "zero_shot", "", 1, 1.0, False, None, tab))
    assert len(refused) == 1 and HEARD in refused[0].status  # refused before the engine is asked
    # Stale as soon as the recording, the transcript or the mode is another: it blocks nothing then.
    for other in (
        (str(tmp_path / "other.wav"), "", TYPED, "zero_shot"),
        (audio, "", TYPED + " Edited.", "zero_shot"),
        (audio, "", TYPED, "cross_lingual"),
    ):
        assert not blocks_generate(verdict, *other)

    transcript, message, agreed, choices = callbacks.transcript_use_heard("en", verdict, tab)
    assert transcript == HEARD and choices["visible"] is False
    assert not blocks_generate(agreed, audio, "", HEARD, "zero_shot")
    assert callbacks.transcript_checks.latest("check") == agreed  # what Generate reads now
    words, kept, _ = callbacks.transcript_keep_mine("zh", verdict, tab)
    assert not blocks_generate(kept, audio, "", TYPED, "zero_shot") and "保留" in words
    assert len(list(callbacks.generate("en", audio, "", TYPED, "Hello.", "zero_shot", "", 1, 1.0, False, None, tab)))


def test_the_action_row_shows_the_first_reason_and_folds_the_others():
    assert render_reasons("en", []) == "✅ Ready: press Generate."
    assert render_reasons("en", ["⚠️ one"]) == "⚠️ one"
    folded = render_reasons("en", ["⚠️ one", "⚠️ two", "⚠️ three"], state="restarting")
    first, rest = folded.split("\n", 1)
    assert first.startswith("⏳ The model is restarting") and "<summary>3 more</summary>" in rest
    assert "⚠️ one" in rest and "⚠️ three" in rest
    assert "还有 1 条" in render_reasons("zh", ["⚠️ 一", "⚠️ 二"])
    noted = render_reasons("en", [], notes=["ℹ️ a note"])
    assert noted.startswith("✅ Ready") and "ℹ️ a note" in noted  # a note blocks nothing


def test_the_preview_voice_says_what_it_will_leave_out_before_the_job_naming_what_was_typed():
    preview = SimpleNamespace(host=SimpleNamespace(current=SimpleNamespace(is_preview=True)))
    cosyvoice = SimpleNamespace(host=SimpleNamespace(current=SimpleNamespace(is_preview=False)))
    arpabet = "Say [M][AY0][N][UW1][T] twice."
    notes = StatusCallbacks.preview_notes(preview, "en", arpabet, "instruct")
    assert len(notes) == 2 and "cannot follow instructions" in notes[0]
    shown = html.unescape(notes[1])  # Markdown shows the escaped brackets as brackets
    assert "[M][AY0][N][UW1][T]" in shown and "[breath]" not in shown
    assert StatusCallbacks.preview_notes(preview, "en", "Plain words.", "zero_shot") == []
    assert StatusCallbacks.preview_notes(cosyvoice, "en", arpabet, "instruct") == []
    assert markup_example("A [breath] here") == "[breath]" and markup_example("none") is None
    assert "<strong>" in markup_note(markup_example("An <strong>important</strong> word"))


def test_an_english_preset_shows_the_trained_words_it_puts_in_the_box():
    assert preset_choice("en", "Sichuan dialect", "请用四川话表达。") == "Sichuan dialect · 请用四川话表达。"
    assert preset_choice("en", "Very soft", "Please say a sentence in a very soft voice.") == "Very soft"
    assert "·" not in preset_choice("zh", "Sichuan dialect", "请用四川话表达。")


def test_a_history_row_clicked_plays_its_result(callbacks):
    outputs = Path(callbacks.host.config.outputs_dir)
    outputs.mkdir(parents=True, exist_ok=True)
    wav = outputs / "row-result.wav"
    soundfile.write(wav, np.zeros(2400, np.float32), 24000)
    sidecar = {"file": wav.name, "text": "A row.", "mode": "cross_lingual", "seed": 3, "speed": 1.0}
    (outputs / "row-result.json").write_text(json.dumps(sidecar))
    table = callbacks.history_show("en", "")[0]
    (row,) = [row for row in table["data"] if row[-1] == wav.name]
    pick, audio, message = callbacks.history_row_clicked("en", SimpleNamespace(row_value=row))
    assert pick == wav.name and Path(audio) == wav and wav.name in message
    pick, audio, message = callbacks.history_row_clicked("en", SimpleNamespace(row_value=["..", "/etc/passwd"]))
    assert isinstance(pick, type(gr.skip())) and "Click a result" in message
