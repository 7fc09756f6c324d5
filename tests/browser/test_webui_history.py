"""The History workspace at 1366x900 is read from outputs/: a result survives a reload (a new session), a line's
takes are listed under it, a take plays when its row is clicked, and "use these settings again" puts its text,
mode, seed and speed back in Speak."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser.helpers import (
    GENERATE_S,
    audio_duration,
    click_history_row,
    fill,
    generate,
    open_workspace,
    settle,
    upload_prompt,
    wait_until_ready,
)


def test_the_history_survives_a_reload_and_reuses_settings(laptop_page, app, prompt_wav):
    page = laptop_page
    wait_until_ready(page)
    upload_prompt(page, prompt_wav)
    page.locator("#cv-mode input[value=cross_lingual]").check()
    fill(page, "cv-text", "A result worth keeping, with a kiwi in it.")
    fill(page, "cv-seed", "4242")
    before = app.output_files()
    assert "Done" in generate(page)
    (new_file,) = app.output_files() - before
    fill(page, "cv-seed", "4343")  # the same line again: a second take
    settle(page)
    page.click("#cv-generate")
    status = page.locator("#cv-status")
    expect(status).not_to_contain_text(new_file, timeout=GENERATE_S * 1000)  # the first take's line is gone
    expect(status).to_contain_text("Done", timeout=GENERATE_S * 1000)
    (retake,) = app.output_files() - before - {new_file}

    page.reload()
    page.wait_for_selector("#cv-generate")
    open_workspace(page, "history")
    history = page.locator("#cv-history")
    expect(history).to_contain_text(new_file)
    fill(page, "cv-history-search", "kiwi")
    expect(history).to_contain_text("with a kiwi in it")
    fill(page, "cv-history-search", "no such words anywhere")
    expect(history).not_to_contain_text(new_file)
    fill(page, "cv-history-search", "KIWI")
    expect(history).to_contain_text(new_file)

    # Issue 50 item 4: the takes of one line are listed under it, the newest first; the page turns with small
    # buttons; a row clicked plays (here the first take, under the line); reusing opens Speak with its settings.
    rows = page.locator("#cv-history [role=gridcell]")
    expect(rows.filter(has_text="with a kiwi in it. · take 2 of 2")).to_have_count(1)
    expect(rows.filter(has_text="↳ take 1 of 2")).to_have_count(1)
    cells = [cell.strip() for cell in rows.all_inner_texts()]
    assert cells.index(retake) < cells.index(new_file)  # the newer take on top
    for turn in ("#cv-history-prev", "#cv-history-next"):
        assert page.locator(turn).bounding_box()["height"] <= 48
    click_history_row(page, new_file)
    assert audio_duration(page, "cv-history-audio") > 0.1
    expect(page.locator("#cv-history-audio a[download]")).to_have_count(1)
    expect(page.locator("#cv-history-credentials")).to_contain_text("Content credentials hold")  # C2PA, signed
    open_workspace(page, "speak")
    fill(page, "cv-text", "")
    page.locator("#cv-mode input[value=zero_shot]").check()
    open_workspace(page, "history")
    page.click("#cv-history-reuse")
    expect(page.locator("#cv-ws-speak")).to_be_visible()  # the settings are back where they are used
    expect(page.locator("#cv-text textarea")).to_have_value("A result worth keeping, with a kiwi in it.")
    expect(page.locator("#cv-seed input")).to_have_value("4242")
    expect(page.locator("#cv-mode input[value=cross_lingual]")).to_be_checked()
    expect(page.locator("#cv-history-msg")).to_contain_text("uploaded prompt")
