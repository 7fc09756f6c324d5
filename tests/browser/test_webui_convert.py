"""The Convert section in the browser (tiny CosyVoice3: every step is real, the audio is noise): a long
recording converts piece by piece with a moving progress bar into a playable, downloadable result of the
recording's length, saved with its sidecar; a silent recording is refused where it was uploaded; the
section speaks Chinese too."""

from __future__ import annotations

import json
import re

import numpy as np
import soundfile
from playwright.sync_api import expect

from cosyvoice_mac.pipeline import CosyVoice
from tests.browser.conftest import MODEL_NAME
from tests.browser.helpers import (
    GENERATE_S,
    audio_duration,
    audio_source,
    click_history_row,
    open_workspace,
    wait_until_ready,
)
from tests.streamed_audio import rms


def _open(page) -> None:
    wait_until_ready(page)
    open_workspace(page, "convert")


def _long_source(make_speech, folder):
    """~35 s of espeak sentences with pauses: two pieces."""
    speech, rate = soundfile.read(make_speech("The birch canoe slid on the smooth planks."), dtype="float32")
    pause = np.zeros(int(0.7 * rate), np.float32)
    path = folder / "long.wav"
    soundfile.write(path, np.concatenate([speech, pause] * int(35 / (len(speech) / rate + 0.7) + 1)), rate)
    return path, soundfile.info(path).duration


def test_a_long_recording_converts_with_progress_into_a_saved_result(page, app, prompt_wav, make_speech, tmp_path):
    _open(page)
    source, seconds = _long_source(make_speech, tmp_path)
    page.locator("#cv-vc-source input[type=file]").set_input_files(str(source))
    expect(page.locator("#cv-vc-source-msg")).to_contain_text(f"{seconds:.1f} s recording", timeout=30_000)
    page.locator("#cv-vc-prompt input[type=file]").set_input_files(str(prompt_wav))
    page.click("#cv-vc-start")
    expect(page.locator("#cv-vc-progress-text")).to_contain_text("of 2 pieces converted", timeout=GENERATE_S * 1000)
    expect(page.locator("#cv-vc-status")).to_contain_text("Done:", timeout=GENERATE_S * 2 * 1000)
    expect(page.locator("#cv-vc-progress-text")).to_contain_text("2 of 2 pieces converted")
    assert audio_source(page, "cv-vc-result")
    assert abs(audio_duration(page, "cv-vc-result") - seconds) < 0.1
    page.locator("#cv-vc-result").get_by_role("button", name=re.compile("download", re.I)).first.wait_for()
    sidecars = [json.loads(p.read_text()) for p in app.outputs.glob("*.json")]  # a checked result's words: a list
    converted = [facts for facts in sidecars if isinstance(facts, dict) and facts.get("mode") == "voice_conversion"]
    converted.sort(key=lambda facts: facts["created"])  # other modules' conversions share this app's outputs
    assert converted and converted[-1]["interface"] == "page"
    saved, rate = soundfile.read(app.outputs / converted[-1]["file"], dtype="float32")
    model = CosyVoice.from_pretrained(app.root / "models" / MODEL_NAME, device="cpu")  # the app's own folder
    whole = np.concatenate([r.audio for r in model.convert(str(source), str(prompt_wav))])
    assert rate == 24000 and len(saved) == len(whole) and rms(whole) > 1e-2
    assert float(np.abs(saved - whole).max()) < 2e-3  # the model's conversion, not only its length
    assert converted[-1]["source_duration_s"] > 30 and len(converted[-1]["source_hash"]) == 64
    open_workspace(page, "speak")  # issue 50 item 2: the tab's own finished conversion runs no more
    expect(page.locator("#cv-queue")).to_contain_text("nothing waiting or running")
    assert "Traceback" not in page.content()


def test_a_silent_recording_is_refused_and_the_section_speaks_chinese(page, app, tmp_path):
    _open(page)
    silent = tmp_path / "silent.wav"
    soundfile.write(silent, np.zeros(32000, np.float32), 16000)
    page.locator("#cv-vc-source input[type=file]").set_input_files(str(silent))
    expect(page.locator("#cv-vc-source-msg")).to_contain_text("is silent", timeout=30_000)
    page.click("#cv-vc-start")
    expect(page.locator("#cv-vc-status")).to_contain_text("is silent", timeout=30_000)
    page.locator("#cv-language label", has_text="中文").click()
    expect(page.locator("#cv-vc-start")).to_have_text("转换", timeout=30_000)
    expect(page.locator("#cv-convert")).to_contain_text("变声")
    page.locator("#cv-language label", has_text="English").click()
    expect(page.locator("#cv-vc-start")).to_have_text("Convert", timeout=30_000)


def test_a_conversion_is_in_the_history_and_its_settings_come_back_in_the_convert_section(
    page, app, prompt_wav, make_speech, tmp_path
):
    from tests.browser.helpers import fill, upload_prompt

    wait_until_ready(page)
    upload_prompt(page, prompt_wav)
    fill(page, "cv-transcript", "This is the voice I would like you to copy, please.")
    fill(page, "cv-voice-name", "Teller")
    page.click("#cv-save-voice")
    expect(page.locator("#cv-voice-msg")).to_contain_text("Saved the voice “Teller”", timeout=GENERATE_S * 1000)
    source = tmp_path / "interview.wav"
    speech, rate = soundfile.read(make_speech("Rice is often served in round bowls."), dtype="float32")
    soundfile.write(source, speech, rate)
    _open(page)
    page.locator("#cv-vc-source input[type=file]").set_input_files(str(source))
    page.locator("#cv-vc-voice input").click()
    page.get_by_role("option", name="Teller").click()
    page.locator("#cv-vc-speed input[type=number]").fill("1.5")
    page.locator("#cv-vc-speed input[type=number]").press("Enter")
    page.click("#cv-vc-start")
    expect(page.locator("#cv-vc-status")).to_contain_text("Done:", timeout=GENERATE_S * 2 * 1000)

    page.reload()  # the address keeps the workspace: Convert again
    expect(page.locator("#cv-vc-start")).to_be_visible(timeout=120_000)
    open_workspace(page, "history")
    fill(page, "cv-history-search", "interview")
    history = page.locator("#cv-history")
    expect(history).to_contain_text("converted from interview.wav")
    expect(history).to_contain_text("conversion")
    click_history_row(page, "converted from interview.wav")
    assert audio_duration(page, "cv-history-audio") > 0.1
    page.click("#cv-history-reuse")
    expect(page.locator("#cv-history-msg")).to_contain_text("Convert section is open with the same voice (Teller)")
    expect(page.locator("#cv-vc-voice input")).to_have_value("Teller")
    expect(page.locator("#cv-vc-speed input[type=number]")).to_have_value("1.5")
    expect(page.locator("#cv-vc-start")).to_be_visible()  # the Convert workspace is shown
