"""Saved voices at 1366x900: a picked voice plays its own recording and sets the mode it can speak in; a
Save under a taken name asks before replacing; a voice is renamed from its card, exported as a voices file,
deleted and imported again."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.browser.helpers import (
    GENERATE_S,
    audio_duration,
    audio_source,
    fill,
    settle,
    upload_prompt,
    wait_until_ready,
)

TRANSCRIPT = "This is the voice I would like you to copy, please."


def _pick(page, name: str) -> None:
    page.locator("#cv-voices input").click()
    page.get_by_role("option", name=name, exact=True).click()


def _save(page, name: str) -> None:
    fill(page, "cv-voice-name", name)
    page.click("#cv-save-voice")


def test_a_saved_voice_plays_its_recording_is_replaced_renamed_and_carried_in_a_file(
    laptop_page, prompt_wav, make_speech, tmp_path
):
    page = laptop_page
    wait_until_ready(page)
    upload_prompt(page, prompt_wav)
    _save(page, "Card voice")  # no transcript: kept as a cross-lingual voice
    message = page.locator("#cv-voice-msg")
    expect(message).to_contain_text("Saved the voice “Card voice”", timeout=GENERATE_S * 1000)
    expect(message).to_contain_text("cross-lingual only")

    page.reload()
    page.wait_for_selector("#cv-generate")
    _pick(page, "Card voice")
    card = page.locator("#cv-voice-card")
    expect(card).to_contain_text("4.0 s")
    expect(card).to_contain_text("No transcript")
    expect(page.locator("#cv-mode input[value=cross_lingual]")).to_be_checked()
    assert audio_source(page, "cv-prompt-audio")
    assert abs(audio_duration(page, "cv-prompt-audio") - 4.0) < 0.2  # its own recording, in the prompt player
    expect(page.locator("#cv-blockers")).not_to_contain_text("transcript")

    # Save a longer recording under the same name: asked first, then replaced.
    page.locator("#cv-prompt-audio").get_by_role("button", name=re.compile("clear", re.I)).click()
    upload_prompt(page, make_speech("A second and longer recording of the same speaker, please.", seconds=5.0))
    page.locator("#cv-mode input[value=zero_shot]").check()  # the picked voice had set cross-lingual
    fill(page, "cv-transcript", TRANSCRIPT)
    _save(page, "Card voice")
    expect(message).to_contain_text("already exists", timeout=GENERATE_S * 1000)
    page.click("#cv-replace-confirm")
    expect(message).to_contain_text("Replaced the voice “Card voice”", timeout=GENERATE_S * 1000)
    expect(page.locator("#cv-replace-row")).to_be_hidden()
    _pick(page, "Card voice")
    expect(card).to_contain_text("5.0 s")
    expect(card).to_contain_text(TRANSCRIPT)
    expect(page.locator("#cv-mode input[value=zero_shot]")).to_be_checked()

    page.click("#cv-voice-manage button, #cv-voice-manage .label-wrap")
    fill(page, "cv-rename-to", "Card voice renamed")
    settle(page)
    page.click("#cv-rename-voice")
    expect(message).to_contain_text("Renamed “Card voice” to “Card voice renamed”")
    expect(card).to_contain_text("Card voice renamed")
    expect(page.locator("#cv-voice-list")).to_contain_text("Card voice renamed")

    # Carried away and back: exported, deleted, imported (the voices file's own checks: tests/test_voice_files.py).
    page.click("#cv-voice-files button, #cv-voice-files .label-wrap")
    page.click("#cv-export-voice")
    expect(message).to_contain_text("Exported “Card voice renamed”")
    with page.expect_download() as download:
        page.locator("#cv-voice-file a").first.click()
    exported = tmp_path / "card.cvvoices.zip"
    download.value.save_as(exported)
    for imported in (False, True):
        settle(page)
        page.click("#cv-delete-voice")
        expect(message).to_contain_text("Deleted the voice “Card voice renamed”")
        if not imported:
            page.locator("#cv-import-voices input[type=file]").set_input_files(str(exported))
            expect(message).to_contain_text("Imported “Card voice renamed”", timeout=GENERATE_S * 1000)
            expect(card).to_contain_text(TRANSCRIPT)
