"""Voice conversions in the page's history (read from their sidecars, ``mode: voice_conversion``): listed with
their recording's name and length, found by that name, played from outputs/, and "use these settings again"
opens the Convert workspace with the same voice and speed, or says why it cannot be repeated."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.engine.host import Settings
from cosyvoice_mac.webui.history import HistoryBook, HistoryCallbacks, history_view


class Page(HistoryCallbacks):
    """The history's callbacks over ``outputs`` with a voice library holding ``names``."""

    def __init__(self, outputs, cache, names):
        self.history_book, self.names = HistoryBook(outputs, Settings(cache)), names

    def _voices(self):
        return SimpleNamespace(list=lambda: [{"name": name} for name in self.names])


def _result(outputs, stem, **facts):
    soundfile.write(outputs / f"{stem}.wav", np.zeros(2400, np.float32), 24000)
    sidecar = {"file": f"{stem}.wav", "sample_rate": 24000, "duration_s": 12.3, "seed": 0, "model": "m", **facts}
    (outputs / f"{stem}.json").write_text(json.dumps(sidecar))


@pytest.fixture()
def page(tmp_path):
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    conversion = {"mode": "voice_conversion", "text": "", "speed": 1.25, "source_duration_s": 12.3}
    _result(outputs, "1-tts", mode="zero_shot", text="Hello there.", voice="Anna", speed=1.0)
    _result(outputs, "2-vc", **conversion, source="talk.mp3", voice="Anna", source_hash="abc")
    _result(outputs, "3-vc-upload", **conversion, source="memo.wav", voice=None)
    _result(outputs, "4-vc-gone", **conversion, source="old.wav", voice="Zed")
    return Page(outputs, tmp_path / "cache", ["Anna", "Bob"])


def _row(view, file_name):
    return next(row for row in view.table["data"] if row[-1] == file_name)


def test_a_conversion_is_listed_with_its_recording_and_found_and_played_by_its_name(page):
    view = history_view("en", page.history_book.entries())
    row = _row(view, "2-vc.wav")
    assert row[1] == "🔁 converted from talk.mp3 (12.3 s)" and row[2] == "conversion" and row[3] == "Anna"
    assert _row(view, "1-tts.wav")[2] == "zero-shot"  # a generation is listed as before
    assert _row(history_view("zh", page.history_book.entries()), "2-vc.wav")[1] == "🔁 由 talk.mp3 转换（12.3 秒）"
    found = page.history_book.entries("TALK")
    assert [entry.file_name for entry in found] == ["2-vc.wav"] and found[0].source_duration_s == 12.3
    assert page.history_picked("2-vc.wav").endswith("2-vc.wav")  # the player (and its download) gets the WAV


def test_using_a_conversion_again_opens_the_convert_section_with_its_voice_and_speed(page):
    *form, section, voice, speed, message = page.history_reuse("en", "2-vc.wav")
    assert all(value == {"__type__": "update"} for value in form)  # the Generate form is left as it is
    assert section["selected"] == "convert" and voice["value"] == "Anna" and ("Anna", "Anna") in voice["choices"]
    assert speed == 1.25 and "upload it again" in message and "talk.mp3" in message

    *_, voice, speed, message = page.history_reuse("en", "3-vc-upload.wav")
    assert voice["value"] == "" and "cannot be repeated" in message and "memo.wav" in message
    *_, voice, speed, message = page.history_reuse("zh", "4-vc-gone.wav")
    assert voice["value"] == "" and "“Zed”已不再保存" in message
