"""No model folder at all: the page says how to download one, and the preview voice generates meanwhile,
labelled as a preview wherever its results appear."""

from __future__ import annotations

from playwright.sync_api import expect

from cosyvoice_mac.preview.labels import DOWNLOAD_COMMAND, PREVIEW_LABEL
from tests.browser.helpers import (
    audio_source,
    fill,
    generate,
    open_workspace,
    screens_dir,
    upload_prompt,
    wait_until_ready,
)

TRANSCRIPT = "This is the voice I would like you to copy, please."


def test_without_a_model_the_preview_voice_generates_and_is_labelled(preview_page, preview_app, prompt_wav):
    page = preview_page
    no_model = page.locator("#cv-no-model")
    expect(no_model).to_contain_text("No model installed yet")
    expect(no_model).to_contain_text(DOWNLOAD_COMMAND)
    expect(no_model).to_contain_text("preview voice")
    wait_until_ready(page)
    panel = page.locator("#cv-status-panel")
    expect(panel).to_contain_text(PREVIEW_LABEL)
    expect(panel).to_contain_text(DOWNLOAD_COMMAND)
    expect(panel).to_contain_text("Piper TTS")  # the running backend's licence
    expect(page.locator("#cv-model input")).to_have_value("Preview voice (approximate, no download)")

    before = preview_app.output_files()
    upload_prompt(page, prompt_wav)
    fill(page, "cv-transcript", TRANSCRIPT)
    # Issue 50 item 11: what the preview voice will leave out is said before the job, naming the markup typed.
    fill(page, "cv-text", "Hello [M][AY0][N][UW1][T] preview.")
    expect(page.locator("#cv-blockers")).to_contain_text("does not understand markup such as [M][AY0][N][UW1][T]")
    fill(page, "cv-text", "Hello from the preview voice.")
    page.locator("#cv-check input").check()  # the suite runs with the take check off: this result is checked
    expect(page.locator("#cv-blockers")).not_to_contain_text("markup")
    status = generate(page)

    assert "Done" in status and PREVIEW_LABEL in status and DOWNLOAD_COMMAND in status, status
    (new_file,) = preview_app.output_files() - before
    assert new_file in status
    assert audio_source(page, "cv-result")
    open_workspace(page, "history")
    history = page.locator("#cv-history")
    expect(history).to_contain_text(new_file)
    expect(history).to_contain_text("🔶 preview")  # each row marked; the label once, above the table
    expect(page.locator("#cv-history-badge")).to_contain_text(PREVIEW_LABEL)
    expect(history).not_to_contain_text(PREVIEW_LABEL)
    open_workspace(page, "speak")
    assert audio_source(page, "cv-result")
    _checked_with_captions(page)
    expect(no_model).to_contain_text(DOWNLOAD_COMMAND)  # still there after generating

    page.locator("#cv-licences").get_by_text("Licences").click()
    expect(page.locator("#cv-licence-text")).to_contain_text("Apache-2.0")
    expect(page.locator("#cv-licence-text")).to_contain_text("GPL-3.0-or-later")
    folder = screens_dir()
    if folder:
        page.screenshot(path=str(folder / "preview-after.png"), full_page=True)
    assert "Traceback" not in page.content()


def _checked_with_captions(page) -> None:
    """The preview voice's real speech passes the take check; the captions list the text's words with their times,
    and the page's script marks the word at the captions player's time."""
    expect(page.locator("#cv-takes-check")).to_contain_text("Every sentence passed the check", timeout=30_000)
    words = page.locator("#cv-takes-captions .cv-word")
    expect(words).to_have_count(5)
    expect(words.first).to_have_text("Hello")
    preview = words.nth(3)
    start, end = (float(preview.get_attribute(name)) for name in ("data-start", "data-end"))
    page.evaluate(
        "(at) => { const player = document.querySelector('#cv-takes-captions audio'); player.currentTime = at;"
        " player.dispatchEvent(new Event('timeupdate')); }",
        (start + end) / 2,
    )
    expect(page.locator("#cv-takes-captions .cv-word-now")).to_have_text("preview")
    expect(page.locator("#cv-takes-files")).to_contain_text(".srt")
