"""The workspaces and their action rows (issue 50 item 1): at 1366x900 and on a 390x844 phone, Generate and the
one most important reason it would refuse stay in sight (the others folded under "N more"), the row is at most
~90 px (~120 px on the phone), the workspace shown is in the address and survives a reload, Convert's row says
nothing of Generate's reasons, Ctrl/Cmd+Enter and Esc press the shown workspace's action and Stop, and the text
typed is still there after a reload (item 12)."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser.helpers import (
    GENERATE_S,
    audio_duration,
    audio_source,
    fill,
    open_workspace,
    upload_prompt,
    wait_until_ready,
)

TRANSCRIPT = "This is the voice I would like you to copy, please."


def _in_sight(page, most_px: int = 90) -> None:
    expect(page.locator("#cv-generate")).to_be_in_viewport()
    expect(page.locator("#cv-blockers")).to_be_in_viewport()
    assert page.locator("#cv-action-bar").bounding_box()["height"] <= most_px


def test_generate_and_its_blocking_reasons_are_in_sight(laptop_page, prompt_wav):
    page = laptop_page
    wait_until_ready(page)
    blockers = page.locator("#cv-blockers")
    _in_sight(page)
    expect(blockers).to_contain_text("Upload or record a prompt voice")  # the first, in view
    expect(blockers.locator("summary")).to_have_text("2 more")  # the others on demand
    expect(blockers).to_contain_text("no text to speak")
    expect(blockers).to_contain_text("Zero-shot mode needs the transcript")
    blockers.locator("summary").click()
    expect(page.locator("#cv-blockers details")).to_have_attribute("open", "")

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


def test_each_workspace_keeps_its_row_its_address_and_its_keys_on_a_phone(phone_page, app):
    page = phone_page
    wait_until_ready(page)
    _in_sight(page, most_px=120)
    fill(page, "cv-text", "Pressed from the keyboard.")
    expect(page.locator("#cv-counter")).to_contain_text("26 / 5000")
    page.locator("#cv-text textarea").press("Control+Enter")  # Generate, refused: there is no voice yet
    expect(page.locator("#cv-prompt-msg")).to_contain_text("Upload or record a prompt voice")
    page.keyboard.press("Escape")  # Stop: the stream player is told to stop too
    expect(page.locator("#cv-stream-player .cv-stream-player")).to_have_attribute("data-state", "stopped")

    open_workspace(page, "convert")
    assert page.url.endswith("#convert")
    row = page.locator("#cv-vc-action-row")
    expect(row).to_be_in_viewport()
    assert row.bounding_box()["height"] <= 120
    expect(row).not_to_contain_text("prompt voice")  # Generate's reasons stay in Speak
    page.keyboard.press("Control+Enter")  # Convert, refused: nothing to convert yet
    expect(page.locator("#cv-vc-status")).to_contain_text("recording to convert")

    page.reload()
    expect(page.locator("#cv-vc-start")).to_be_visible(timeout=120_000)  # the address kept the workspace
    expect(page.locator("#cv-generate")).to_be_hidden()
    open_workspace(page, "speak")  # item 12: the form is not empty after a reload
    expect(page.locator("#cv-text textarea")).to_have_value("Pressed from the keyboard.")
    page.evaluate("location.hash = 'history'")  # a link to another workspace
    expect(page.locator("#cv-history-search")).to_be_visible(timeout=120_000)  # a link opens a workspace


def test_a_prompt_over_the_limit_is_offered_its_clearest_stretch_on_its_waveform(page, make_speech):
    """Issue 50 item 10: a 40 s prompt is not only refused: the page offers its clearest 12 s, shows it selected on
    the recording's waveform, and the part the person moves the selection to (by mouse, then by keys) is the one the
    prompt player holds, which is what Generate and Save voice read."""
    wait_until_ready(page)
    long = make_speech("The birch canoe slid on the smooth planks, and the wind blew.", seconds=40.0)
    upload_prompt(page, long, accepted=False)
    expect(page.locator("#cv-prompt-msg")).to_contain_text("the model takes at most")
    offer = page.locator("#cv-prompt-trim")
    expect(offer).to_have_text("Use the clearest 12 s")
    offer.click()
    expect(page.locator("#cv-prompt-msg")).to_contain_text("Kept the clearest")
    expect(offer).to_be_hidden()
    expect(page.locator("#cv-blockers")).not_to_contain_text("at most")  # the prompt is usable now
    selection = page.locator("#cv-span-picker .cv-span-sel")
    expect(selection).to_be_visible()
    expect(page.locator("#cv-span-hint")).to_be_visible()
    start, end = (float(selection.get_attribute(f"data-{edge}")) for edge in ("start", "end"))
    assert 0 <= start < end < 40 and abs(audio_duration(page, "cv-prompt-audio") - (end - start)) < 0.1
    before = audio_source(page, "cv-prompt-audio")

    held, wave = selection.bounding_box(), page.locator("#cv-span-picker .cv-span").bounding_box()
    page.mouse.move(held["x"] + held["width"] / 2, held["y"] + held["height"] / 2)
    page.mouse.down()
    page.mouse.move(wave["x"] + wave["width"] + 40, held["y"] + held["height"] / 2, steps=6)  # to the very end
    page.mouse.up()
    message = page.locator("#cv-prompt-msg")
    expect(message).to_contain_text("Kept the part you chose")
    expect(message).to_contain_text("-40.0 s of 40.0 s)")
    expect(selection).to_have_attribute("data-end", "40.00")
    expect(page.locator("#cv-prompt-audio audio[src]").first).not_to_have_attribute("src", before)
    assert abs(audio_duration(page, "cv-prompt-audio") - (end - start)) < 0.1  # the same length, moved
    selection.focus()
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    expect(message).to_contain_text("-39.0 s of 40.0 s)")
    expect(selection).to_be_visible()  # the picker stays while the player holds its part
