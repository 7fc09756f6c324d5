"""A job belongs to its tab: another tab sees it in the queue (without its text) but cannot stop it, and
closing the tab that started it cancels it after a short grace period, saving nothing."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from cosyvoice_mac.request import MAX_TEXT_CHARS
from tests.browser.conftest import NEWCOMER_VIEWPORT
from tests.browser.helpers import GENERATE_S, fill, settle, upload_prompt, wait_until_ready

SENTENCE = "This is sentence number {n}, which keeps the model busy. "
# As long as one request may be: the job must outlast the checks below and the grace period even on a fast
# machine (the tiny model says a sentence in a fraction of a second there).
LONG_TEXT = "".join(SENTENCE.format(n=n) for n in range(1, 200))[: MAX_TEXT_CHARS - 10].rsplit(". ", 1)[0] + "."


def test_closing_a_tab_cancels_its_job(browser, app, prompt_wav):
    first = browser.new_context(viewport=NEWCOMER_VIEWPORT, locale="en-US")
    second = browser.new_context(viewport=NEWCOMER_VIEWPORT, locale="en-US")
    try:
        # The watching tab is open before the job starts, so the job's time goes on the checks alone.
        watcher = second.new_page()
        watcher.goto(app.url, timeout=120_000)
        wait_until_ready(watcher)
        queue = watcher.locator("#cv-queue")

        starter = first.new_page()
        starter.goto(app.url, timeout=120_000)
        wait_until_ready(starter)
        upload_prompt(starter, prompt_wav)
        starter.locator("#cv-mode input[value=cross_lingual]").check()
        fill(starter, "cv-text", LONG_TEXT)
        before = app.output_files()
        settle(starter)
        starter.click("#cv-generate")
        expect(starter.locator("#cv-status")).to_contain_text("Sentence", timeout=GENERATE_S * 1000)
        expect(starter.locator("#cv-queue")).to_contain_text("yours", timeout=30_000)

        expect(queue).to_contain_text("running: another job (page)", timeout=30_000)
        expect(queue).not_to_contain_text("sentence number")
        watcher.click("#cv-stop")  # not this tab's job: nothing stops
        watcher.wait_for_timeout(1000)
        expect(queue).to_contain_text("running: another job")

        first.close()  # the tab goes away: after the grace period its job is cancelled
        expect(queue).to_contain_text(re.compile("nothing waiting or running"), timeout=60_000)
        assert app.output_files() == before, "the job ended by itself before the grace period was over"
    finally:
        second.close()
        try:
            first.close()
        except Exception:  # noqa: BLE001 - closed above already
            pass
