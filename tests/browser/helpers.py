"""What a user does on the page, as Playwright steps with deadlines (a hung step fails, never hangs)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from playwright.sync_api import Page, expect

GENERATE_S = 180  # one short generation with the tiny model, model load included, on busy cores
READY_S = 240
FINISHED = re.compile("Done|failed|Stopped|完成|失败|已停止")
SETTLE_MS = 500


def screens_dir() -> Path | None:
    """Where screenshots of the page before and after a generation go ($COSYVOICE_SCREENSHOT_DIR), if set."""
    folder = os.environ.get("COSYVOICE_SCREENSHOT_DIR")
    if not folder:
        return None
    Path(folder).mkdir(parents=True, exist_ok=True)
    return Path(folder)


def wait_until_ready(page: Page) -> None:
    expect(page.locator("#cv-status-panel")).to_contain_text("ready", timeout=READY_S * 1000)


def upload_prompt(page: Page, path: Path, accepted: bool = True) -> None:
    """Upload a prompt file; unless told it will be refused, wait until the page has taken it. The upload reaches
    the server after set_input_files returns: a click in between acts on a page that has no prompt yet."""
    page.locator("#cv-prompt-audio input[type=file]").set_input_files(str(path))
    if accepted:
        expect(page.locator("#cv-prompt-msg")).to_contain_text(re.compile(r"Prompt: \d+\.\d s"), timeout=60_000)


def fill(page: Page, element_id: str, value: str) -> None:
    page.locator(f"#{element_id} textarea, #{element_id} input").first.fill(value)


def settle(page: Page) -> None:
    """Wait a beat before a click that follows a finished event. Gradio's page client (seen with 6.30 and 6.31)
    can lose an event submitted in the very moment the previous event's message stream closes: it posts the
    event but never reads its messages, so the click seems to hang. A person never clicks that fast after an
    answer; a test does, and failed now and then on a loaded machine."""
    page.wait_for_timeout(SETTLE_MS)


def generate(page: Page) -> str:
    """Click Generate and wait for the outcome; the final status line."""
    settle(page)
    page.click("#cv-generate")
    status = page.locator("#cv-status")
    expect(status).to_contain_text(FINISHED, timeout=GENERATE_S * 1000)
    return status.inner_text()


def audio_source(page: Page, element_id: str, timeout_s: float = 30) -> str:
    """The src of the playable <audio> inside a Gradio audio component (its player lives in a shadow root,
    which locators pierce), once the player has loaded one."""
    players = page.locator(f"#{element_id} audio[src]")
    expect(players.first).to_have_attribute("src", re.compile(r"\S"), timeout=timeout_s * 1000)
    return players.first.get_attribute("src")


def audio_duration(page: Page, element_id: str, timeout_s: float = 30) -> float:
    """Seconds of audio the browser decoded for the component's player (0 if it could not)."""
    player = page.locator(f"#{element_id} audio[src]").first
    return player.evaluate(
        "(audio, ms) => audio.readyState >= 1 ? audio.duration : new Promise(done => {"
        " audio.addEventListener('loadedmetadata', () => done(audio.duration), {once: true});"
        " setTimeout(() => done(audio.duration || 0), ms); })",
        timeout_s * 1000,
    )


def open_workspace(page: Page, name: str) -> None:
    """Show workspace ``name`` (speak, convert, longform, voices, history) by its tab, as a user does."""
    page.click(f"#cv-ws-{name}-button")
    expect(page.locator(f"#cv-ws-{name}")).to_be_visible()


def click_history_row(page: Page, words: str) -> None:
    """Click the history row that shows ``words`` (the History workspace shown), on the cell the table draws
    (``role=gridcell``; it also keeps hidden copies of its cells to measure them), as a person does: it plays."""
    page.locator("#cv-history [role=gridcell]", has_text=words).first.click()
    expect(page.locator("#cv-history-msg")).to_contain_text("▶")
