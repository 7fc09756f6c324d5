"""Saved voices at 1366x900: a picked voice plays its own recording and sets the mode it can speak in; a
Save under a taken name asks before replacing; a voice is renamed from its card, exported as a voices file,
deleted and imported again."""

from __future__ import annotations

import re

import httpx
from playwright.sync_api import expect

from tests.browser.helpers import (
    GENERATE_S,
    audio_duration,
    audio_source,
    fill,
    open_workspace,
    settle,
    upload_prompt,
    wait_until_ready,
)

TRANSCRIPT = "This is the voice I would like you to copy, please."


def _pick(page, name: str) -> None:
    page.locator("#cv-voices input").click()
    page.get_by_role("option", name=name, exact=True).click(timeout=15_000)


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

    # Issue 50 item 2: the voice list follows a transcript saved for the voice.
    fill(page, "cv-transcript", "Words typed later for this voice.")
    open_workspace(page, "voices")
    voice_list = page.locator("#cv-voice-list")
    expect(voice_list).not_to_contain_text("Words typed later for this voice.")
    settle(page)
    page.click("#cv-voice-save-transcript")
    expect(voice_list).to_contain_text("Words typed later for this voice.")
    fill(page, "cv-rename-to", "Card voice renamed")
    settle(page)
    page.click("#cv-rename-voice")
    expect(page.locator("#cv-library-msg")).to_contain_text("Renamed “Card voice” to “Card voice renamed”")
    expect(page.locator("#cv-voice-list")).to_contain_text("Card voice renamed")
    open_workspace(page, "speak")
    expect(message).to_contain_text("Renamed “Card voice” to “Card voice renamed”")
    expect(card).to_contain_text("Card voice renamed")
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
        expect(message).to_contain_text("Delete the voice “Card voice renamed”?")
        settle(page)
        page.click("#cv-delete-confirm")
        expect(message).to_contain_text("Deleted the voice “Card voice renamed”")
        if not imported:
            page.locator("#cv-import-voices input[type=file]").set_input_files(str(exported))
            expect(message).to_contain_text("Imported “Card voice renamed”", timeout=GENERATE_S * 1000)
            expect(card).to_contain_text("Words typed later for this voice.")  # the transcript it was saved with


def _names(app) -> set[str]:
    return {voice["name"] for voice in httpx.get(app.url + "v1/voices", timeout=30).json()["data"]}


def test_the_voice_lines_follow_every_door_and_a_delete_asks_then_can_be_undone(laptop_page, app, prompt_wav):
    """Issue 50 items 2, 7 and 8: a voice saved or renamed through /v1 reaches the open page's menu without a
    reload, and no line keeps naming a voice that is gone; Delete asks first and Undo brings the voice back."""
    page = laptop_page
    wait_until_ready(page)
    with open(prompt_wav, "rb") as recording:
        added = httpx.post(
            app.url + "v1/voices",
            data={"name": "Via the API", "transcript": TRANSCRIPT},
            files={"audio": recording},
            timeout=300,
        )
    assert added.status_code == 201, added.text
    try:
        _pick(page, "Via the API")  # offered by the page's next tick
        prompt_msg, message = page.locator("#cv-prompt-msg"), page.locator("#cv-voice-msg")
        expect(prompt_msg).to_contain_text("Using the saved voice “Via the API”")
        renamed = httpx.patch(f"{app.url}v1/voices/Via the API", json={"name": "Renamed via the API"}, timeout=30)
        assert renamed.status_code == 200, renamed.text
        expect(prompt_msg).not_to_contain_text("Via the API", timeout=15_000)
        expect(page.locator("#cv-voice-card")).to_be_empty()
        _pick(page, "Renamed via the API")
        expect(prompt_msg).to_contain_text("Using the saved voice “Renamed via the API”")

        settle(page)
        page.click("#cv-delete-voice")
        expect(message).to_contain_text("Delete the voice “Renamed via the API”?")
        assert "Renamed via the API" in _names(app)  # asking deletes nothing
        settle(page)
        page.click("#cv-delete-confirm")
        expect(message).to_contain_text("Deleted the voice “Renamed via the API”. Undo")
        expect(prompt_msg).not_to_contain_text("Renamed via the API")
        assert "Renamed via the API" not in _names(app)
        settle(page)
        page.click("#cv-undo-delete")
        expect(message).to_contain_text("The voice “Renamed via the API” is back")
        expect(page.locator("#cv-voices input")).to_have_value("Renamed via the API")
        assert "Renamed via the API" in _names(app)
    finally:
        for name in {"Via the API", "Renamed via the API"} & _names(app):
            httpx.delete(f"{app.url}v1/voices/{name}", timeout=30)
