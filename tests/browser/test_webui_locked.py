"""A server opened to the network with a key, in a real browser: the page asks for the key once, then works
as ever through its cookie: the upload of a prompt, the queue's event stream, the result's audio."""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import start_app, stop_app
from tests.browser.helpers import audio_source, fill, generate, upload_prompt, wait_until_ready

KEY = "browser-" + uuid.uuid4().hex
TRANSCRIPT = "This is the voice I would like you to copy, please."


@pytest.fixture(scope="module")
def locked_app(tmp_path_factory):
    root = tmp_path_factory.mktemp("webui-locked")
    (root / "models").mkdir()
    running = start_app(root, root / "models", ("--host", "0.0.0.0", "--api-key", KEY))
    yield running
    stop_app(running)


def test_the_page_asks_for_the_key_once_and_then_uploads_and_generates(browser, locked_app, prompt_wav):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, locale="en-US")
    context.set_default_timeout(60_000)
    page = context.new_page()
    try:
        page.goto(locked_app.url, timeout=120_000)
        page.fill("#key", "not-the-key")
        page.click("button[type=submit]")
        expect(page.locator(".wrong")).to_contain_text("not this server's key")
        page.fill("#key", KEY)
        page.click("button[type=submit]")
        page.wait_for_selector("#cv-generate", timeout=120_000)
        cookie = next(item for item in context.cookies() if item["name"].startswith("cosyvoice-key-"))
        assert cookie["name"] == "cosyvoice-key-" + locked_app.url.rstrip("/").rsplit(":", 1)[1]  # its port's own
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["value"] != KEY
        expect(page.locator("#cv-api-notice")).to_contain_text("locked with its key")
        wait_until_ready(page)

        before = locked_app.output_files()
        upload_prompt(page, prompt_wav)
        fill(page, "cv-transcript", TRANSCRIPT)
        fill(page, "cv-text", "Spoken behind a locked door.")
        status = generate(page)
        assert "Done" in status, status
        (new_file,) = locked_app.output_files() - before
        assert new_file in status
        source = audio_source(page, "cv-result")
        if "/gradio_api/file=" in source:  # the player's file, asked for with the page's cookie
            url = source if source.startswith("http") else locked_app.url.rstrip("/") + source
            played = page.request.get(url)
            assert played.status == 200 and played.body()[:4] == b"RIFF"

        page.reload()  # the cookie keeps the door open: no form again
        page.wait_for_selector("#cv-generate", timeout=120_000)
        assert "Traceback" not in page.content()
    finally:
        context.close()
