"""Streaming and prompt transcription in the browser, on the tiny-model app the session shares.

The streaming test compares times on the browser's own clock: when the player received its first chunk
(and started it on the AudioContext) against when the status line first said "Done".
"""

from __future__ import annotations

import re

from playwright.sync_api import expect

from cosyvoice_mac.engine.asr import word_error_rate
from tests.browser.helpers import (
    FINISHED,
    GENERATE_S,
    audio_source,
    fill,
    open_workspace,
    settle,
    upload_prompt,
    wait_until_ready,
)

SENTENCE = "This is the voice I would like you to copy, please."
LONG_TEXT = " ".join(f"This is sentence number {n}, spoken while the rest is still being made." for n in range(1, 9))

# Notes, on the browser's clock, when the status line first shows a finished job.
WATCH_FOR_DONE = """() => {
  window.cvDoneAt = null;
  const status = document.querySelector('#cv-status');
  new MutationObserver(() => {
    if (window.cvDoneAt === null && /Done|failed|Stopped/.test(status.innerText)) window.cvDoneAt = performance.now();
  }).observe(status, {subtree: true, childList: true, characterData: true});
}"""


def test_streaming_plays_the_first_chunk_before_the_job_is_done(page, app, prompt_wav):
    wait_until_ready(page)
    upload_prompt(page, prompt_wav)
    page.locator("#cv-mode label", has_text="Cross-lingual").click()
    page.locator("#cv-stream input[type=checkbox]").check()
    expect(page.locator("#cv-stream-note")).to_contain_text("Speed stays at 1.0 while streaming")
    expect(page.locator("#cv-speed input[type=range]")).to_be_disabled()
    fill(page, "cv-text", LONG_TEXT)
    before = app.output_files()
    page.evaluate(WATCH_FOR_DONE)

    page.click("#cv-generate")
    status = page.locator("#cv-status")
    expect(status).to_contain_text("first audio after", timeout=GENERATE_S * 1000)
    assert "Done" not in status.inner_text()  # the job is still running while the first chunk plays
    player = page.locator("#cv-stream-player .cv-stream-player")
    expect(player).to_have_attribute("data-first-chunk-ms", re.compile(r"\d"))
    expect(status).to_contain_text(FINISHED, timeout=GENERATE_S * 1000)

    final = status.inner_text()
    assert "Done" in final, final
    facts = player.evaluate("element => ({...element.dataset})")
    done_at = page.evaluate("() => window.cvDoneAt")
    assert done_at is not None and float(facts["firstChunkMs"]) < done_at, (facts, done_at)
    assert float(facts["firstPlayMs"]) < done_at and facts["state"] in ("playing", "ended"), facts
    assert int(facts["chunks"]) >= 2 and float(facts["receivedSeconds"]) > 1.0, facts
    first, elapsed = map(float, re.search(r"first audio after ([\d.]+) s, finished after ([\d.]+) s", final).groups())
    assert first < elapsed, final

    (new_file,) = app.output_files() - before  # the whole take is still saved, and listed
    assert new_file in final
    assert audio_source(page, "cv-result")
    open_workspace(page, "history")
    expect(page.locator("#cv-history")).to_contain_text(new_file)
    open_workspace(page, "speak")

    page.locator("#cv-stream input[type=checkbox]").uncheck()
    expect(page.locator("#cv-speed input[type=range]")).to_be_enabled()
    expect(page.locator("#cv-stream-note")).to_be_hidden()


def test_transcribe_fills_the_prompt_transcript(page, app, make_speech):
    spoken = make_speech(SENTENCE)  # its natural length: a cut repetition would add words
    upload_prompt(page, spoken)
    expect(page.locator("#cv-prompt-msg")).to_contain_text("Prompt:")
    page.click("#cv-transcribe")
    message = page.locator("#cv-transcript-msg")
    expect(message).to_contain_text(re.compile("Filled in|⚠️"), timeout=GENERATE_S * 1000)
    assert "Filled in from the recording" in message.inner_text(), message.inner_text()
    words = page.locator("#cv-transcript textarea").input_value()
    assert word_error_rate(SENTENCE, words) < 0.2, words
    fill(page, "cv-transcript", words + " Edited.")  # it stays an ordinary, editable field
    expect(page.locator("#cv-transcript textarea")).to_have_value(words + " Edited.")
    assert "Traceback" not in page.content()


def test_stop_silences_a_stream_and_saves_nothing(page, app, prompt_wav):
    wait_until_ready(page)
    upload_prompt(page, prompt_wav)
    page.locator("#cv-mode label", has_text="Cross-lingual").click()
    page.locator("#cv-stream input[type=checkbox]").check()
    fill(page, "cv-text", LONG_TEXT + " " + LONG_TEXT)
    before = app.output_files()
    page.click("#cv-generate")
    status = page.locator("#cv-status")
    expect(status).to_contain_text("first audio after", timeout=GENERATE_S * 1000)
    page.click("#cv-stop")
    expect(status).to_contain_text(FINISHED, timeout=GENERATE_S * 1000)
    assert "Stopped" in status.inner_text()
    expect(page.locator("#cv-stream-player .cv-stream-player")).to_have_attribute("data-state", "stopped")
    assert app.output_files() == before


def test_leaving_the_transcript_checks_it_and_a_generate_pressed_from_it_runs(page, app, make_speech):
    wait_until_ready(page)
    upload_prompt(page, make_speech(SENTENCE))
    expect(page.locator("#cv-prompt-msg")).to_contain_text("Prompt:")
    fill(page, "cv-text", "Spoken after the transcript was checked.")
    message = page.locator("#cv-transcript-msg")
    fill(page, "cv-transcript", "The weather in Paris is lovely today.")
    page.locator("#cv-text textarea").click()  # leaving the field checks it against the recording
    expect(message).to_contain_text("does not seem to match", timeout=GENERATE_S * 1000)
    # Issue 50 item 3: the mismatch is the action row's blocker, and refuses zero-shot until the user chooses.
    blockers = page.locator("#cv-blockers")
    expect(blockers).to_contain_text("does not match the recording")
    before = app.output_files()
    settle(page)
    page.click("#cv-generate")
    expect(page.locator("#cv-status")).to_contain_text("does not match the recording")
    assert app.output_files() == before
    page.click("#cv-transcript-use-heard")
    expect(page.locator("#cv-transcript textarea")).not_to_have_value("The weather in Paris is lovely today.")
    expect(blockers).to_contain_text("Ready: press Generate")
    expect(page.locator("#cv-transcript-choices")).to_be_hidden()

    fill(page, "cv-transcript", SENTENCE)
    page.locator("#cv-transcript textarea").focus()
    before = app.output_files()
    page.click("#cv-generate")  # the press leaves the field: its check and the job start together
    expect(page.locator("#cv-status")).to_contain_text(FINISHED, timeout=GENERATE_S * 1000)
    assert "Done" in page.locator("#cv-status").inner_text()
    assert len(app.output_files() - before) == 1
    expect(message).to_contain_text("matches the recording", timeout=GENERATE_S * 1000)
    page.locator("#cv-prompt-audio").get_by_role("button", name=re.compile("clear", re.I)).click()
    upload_prompt(page, make_speech("A different recording, which nobody has checked."))  # issue 50 item 2
    expect(message).not_to_contain_text("matches the recording")
