"""The action bar at 1366x900: Generate and every reason it would refuse stay in sight, without scrolling,
on the first load and after a voice is picked, in both languages."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser.helpers import GENERATE_S, fill, upload_prompt, wait_until_ready

TRANSCRIPT = "This is the voice I would like you to copy, please."


def _in_sight(page) -> None:
    expect(page.locator("#cv-generate")).to_be_in_viewport()
    expect(page.locator("#cv-blockers")).to_be_in_viewport()


def test_generate_and_its_blocking_reasons_are_in_sight(laptop_page, prompt_wav):
    page = laptop_page
    wait_until_ready(page)
    blockers = page.locator("#cv-blockers")
    _in_sight(page)
    expect(blockers).to_contain_text("Upload or record a prompt voice")
    expect(blockers).to_contain_text("no text to speak")
    expect(blockers).to_contain_text("Zero-shot mode needs the transcript")

    upload_prompt(page, prompt_wav)
    fill(page, "cv-text", "Hello there.")
    expect(blockers).not_to_contain_text("Upload or record a prompt voice")
    expect(blockers).not_to_contain_text("no text to speak")
    expect(blockers).to_contain_text("Zero-shot mode needs the transcript")
    _in_sight(page)

    # A voice kept without a transcript, then picked: the reason follows the voice, still in sight.
    fill(page, "cv-voice-name", "Bar test voice")
    page.click("#cv-save-voice")
    expect(page.locator("#cv-voice-msg")).to_contain_text("Saved the voice", timeout=GENERATE_S * 1000)
    page.reload()
    page.wait_for_selector("#cv-generate")
    page.locator("#cv-voices input").click()
    page.get_by_role("option", name="Bar test voice").click()
    fill(page, "cv-text", "Hello there.")
    _in_sight(page)
    expect(blockers).to_contain_text("Ready: press Generate")  # a voice without a transcript: cross-lingual
    page.locator("#cv-mode input[value=zero_shot]").check()
    expect(blockers).to_contain_text("Zero-shot mode needs the transcript")
    _in_sight(page)
    fill(page, "cv-transcript", TRANSCRIPT)
    expect(blockers).to_contain_text("Ready: press Generate")

    page.locator("#cv-language label", has_text="中文").click()
    expect(blockers).to_contain_text("已就绪")
    fill(page, "cv-text", "")
    expect(blockers).to_contain_text("没有")  # the empty text's reason, in Chinese
    _in_sight(page)
