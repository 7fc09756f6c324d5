"""Long-form work through the page: a dialogue whose progress bar moves and whose Stop keeps the finished
lines, and an .srt dubbed on its timeline."""

from __future__ import annotations

import re
import time

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
SRT = (
    "1\n00:00:00,500 --> 00:00:02,500\nHello there.\n\n2\n00:00:03,000 --> 00:00:05,000\nGood to see you.\n\n"
    "3\n00:00:05,500 --> 00:00:07,500\nGoodbye.\n"
)


def _save_voice(page, prompt_wav, name):
    upload_prompt(page, prompt_wav)
    fill(page, "cv-transcript", TRANSCRIPT)
    fill(page, "cv-voice-name", name)
    page.click("#cv-save-voice")
    expect(page.locator("#cv-voice-msg")).to_contain_text(f"Saved the voice “{name}”", timeout=GENERATE_S * 1000)


def test_a_dialogue_shows_progress_and_stop_keeps_the_finished_lines(page, app, prompt_wav):
    wait_until_ready(page)
    _save_voice(page, prompt_wav, "Host")
    open_workspace(page, "longform")
    # Sixteen lines: the engine speaks a long job's lines in batches, so the lines of the batch under way can all land
    # between the poll and the click; with eight, the stop once came after the last of them ("Done: 8 of 8 lines.").
    lines = 16
    script = "\n".join(f"Host: This is line number {n} of the show." for n in range(1, lines + 1))
    fill(page, "cv-lf-script", script)
    page.click("#cv-lf-dialogue-start")
    bar = page.locator("#cv-lf-progress")
    seen, between = set(), set(range(1, lines))  # lines done while the job still runs
    deadline = time.monotonic() + GENERATE_S * 2
    # Two different counts in between: the bar moves line by line. (Not "1 and 2": on a loaded machine a poll
    # can miss a count, and the test then waited out its whole deadline for a value long gone.)
    while time.monotonic() < deadline and len(seen & between) < 2:
        if bar.count():
            seen.add(int(bar.get_attribute("value") or 0))
        time.sleep(0.2)
    assert len(seen & between) >= 2, f"the progress bar showed {sorted(seen)}"
    expect(page.locator("#cv-lf-progress-text")).to_contain_text(re.compile(rf"of {lines} lines done"))
    page.click("#cv-lf-stop")
    message = page.locator("#cv-lf-msg")
    expect(message).to_contain_text("Stopped", timeout=GENERATE_S * 1000)
    done = int(re.search(r"the (\d+) finished", message.inner_text()).group(1))
    assert 2 <= done < lines
    assert audio_source(page, "cv-lf-audio") and audio_duration(page, "cv-lf-audio") > 0.1
    timings = list((app.outputs / "longform").glob("*-dialogue-*.timing.json"))
    assert len(timings) == 1 and timings[0].read_text().count('"line"') == done
    page.get_by_role("tab", name="Subtitles").click()  # item 12: the dialogue's result stays with the dialogue
    expect(message).to_be_empty()
    expect(page.locator("#cv-lf-audio audio[src]")).to_have_count(0)


def test_a_subtitle_file_is_dubbed_through_the_page(page, app, prompt_wav, tmp_path):
    wait_until_ready(page)
    _save_voice(page, prompt_wav, "Dubber")
    open_workspace(page, "longform")
    page.get_by_role("tab", name="Subtitles").click()
    srt = tmp_path / "scene.srt"
    srt.write_text(SRT)
    page.locator("#cv-lf-srt input[type=file]").set_input_files(str(srt))
    page.locator("#cv-lf-dub-voice input").click()
    page.get_by_role("option", name="Dubber").click()
    page.click("#cv-lf-dub-start")
    expect(page.locator("#cv-lf-msg")).to_contain_text("Done: 3 of 3 cues", timeout=GENERATE_S * 3 * 1000)
    assert audio_duration(page, "cv-lf-audio") >= 7.4  # the audio spans the subtitle timeline
    assert "Traceback" not in page.content()


def test_several_recordings_are_converted_through_the_page_and_a_bad_one_is_named(page, app, prompt_wav, tmp_path):
    import numpy as np
    import soundfile

    wait_until_ready(page)
    _save_voice(page, prompt_wav, "Narrator")
    speech, rate = soundfile.read(prompt_wav, dtype="float32")
    recordings = [tmp_path / name for name in ("one.wav", "two.wav", "three.wav")]
    soundfile.write(recordings[0], speech, rate)
    soundfile.write(recordings[1], np.zeros(rate * 2, np.float32), rate)  # silence: named, the rest go on
    soundfile.write(recordings[2], speech[: len(speech) // 2], rate)
    open_workspace(page, "longform")
    page.get_by_role("tab", name="Convert recordings").click()
    page.locator("#cv-lf-sources input[type=file]").set_input_files([str(path) for path in recordings])
    page.locator("#cv-lf-convert-voice input").click()
    page.get_by_role("option", name="Narrator").click()
    page.click("#cv-lf-convert-start")
    message = page.locator("#cv-lf-msg")
    expect(message).to_contain_text("Converted 2", timeout=GENERATE_S * 3 * 1000)
    expect(message).to_contain_text("two.wav (two.wav is silent")
    expect(page.locator("#cv-lf-progress-text")).to_contain_text("3 of 3 recordings done")
    for name in ("one.wav", "three.wav"):  # each converted recording is offered for download by its own name
        expect(page.locator(f"#cv-lf-files a[href$='/{name}']")).to_have_count(1)
    expect(page.locator("#cv-lf-files a[href$='/two.wav']")).to_have_count(0)
    assert "Traceback" not in page.content()
