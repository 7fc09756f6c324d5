"""The Generate tab's post-processing panel, in a browser: off by default; turned on, the saved result is
trimmed and at the loudness asked for, and the status says what was done (issue 21)."""

from __future__ import annotations

import json

import soundfile
from playwright.sync_api import expect

from cosyvoice_mac.sound.post import loudness
from tests.browser.helpers import fill, generate, upload_prompt, wait_until_ready


def test_the_post_processing_panel_trims_and_normalises_what_generate_saves(preview_page, preview_app, prompt_wav):
    page = preview_page
    wait_until_ready(page)
    page.locator("#cv-post").get_by_text("Post-processing").click()
    trim, level = page.locator("#cv-post-trim input"), page.locator("#cv-post-level input")
    expect(trim).not_to_be_checked()
    expect(level).not_to_be_checked()
    trim.check()
    level.check()
    target = page.locator("#cv-post-loudness input[type=number]")
    target.fill("-30")
    target.press("Enter")

    before = preview_app.output_files()
    upload_prompt(page, prompt_wav)
    fill(page, "cv-transcript", "This is the voice I would like you to copy, please.")
    fill(page, "cv-text", "The panel asks for trimmed audio at minus thirty.")
    status = generate(page)
    assert "Done" in status and "-30.0 LUFS" in status and "trimmed" in status, status
    (new_file,) = preview_app.output_files() - before
    samples, rate = soundfile.read(preview_app.outputs / new_file, dtype="float32")
    post = json.loads((preview_app.outputs / new_file).with_suffix(".json").read_text())["post"]
    assert abs(loudness(samples, rate) + 30) < 0.5 and post["target_lufs"] == -30 and post["trim"]
    assert "Traceback" not in page.content()
