"""Click through the page the way a user does: clone a voice, keep it, restart the model, make mistakes,
switch the language. Each test opens its own session on the one app the module starts."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path

from playwright.sync_api import expect

from tests.browser.helpers import (
    FINISHED,
    GENERATE_S,
    audio_duration,
    audio_source,
    fill,
    generate,
    open_workspace,
    screens_dir,
    settle,
    upload_prompt,
    wait_until_ready,
)

TRANSCRIPT = "This is the voice I would like you to copy, please."


def test_generate_plays_the_result_and_saves_it_in_outputs(page, app, prompt_wav):
    wait_until_ready(page)
    before = app.output_files()
    folder = screens_dir()
    if folder:
        page.screenshot(path=str(folder / "main-before.png"), full_page=True)

    upload_prompt(page, prompt_wav)
    expect(page.locator("#cv-prompt-msg")).to_contain_text(re.compile(r"Prompt: \d+\.\d s"))
    fill(page, "cv-transcript", TRANSCRIPT)
    fill(page, "cv-text", "Hello there. This page speaks in a cloned voice.")
    expect(page.locator("#cv-counter")).to_contain_text("48 / 5000")
    status = generate(page)

    assert "Done" in status, status
    new_files = app.output_files() - before
    assert len(new_files) == 1, (new_files, status)
    (new_file,) = new_files
    assert new_file in status
    source = audio_source(page, "cv-result")
    assert source, "the result player got no audio source"
    assert audio_duration(page, "cv-result") > 0.1
    download = page.locator("#cv-result a[download]").get_attribute("href")
    with urllib.request.urlopen(download, timeout=30) as response:
        assert response.read(4) == b"RIFF"
    assert _http_status(f"{app.url}gradio_api/file={app.outputs / new_file}") == 200  # outputs/ is served
    compact = page.locator("#cv-result-compact audio")  # the action row's own small player of the same result
    expect(compact).to_have_attribute("src", re.compile(r"gradio_api/file="))
    # Issue 50 item 2: the lines follow the job's end, none says it still runs.
    expect(page.locator("#cv-queue")).to_contain_text("nothing waiting or running")
    expect(page.locator("#cv-blockers")).to_contain_text("Ready: press Generate")
    open_workspace(page, "history")
    expect(page.locator("#cv-history")).to_contain_text(new_file)
    if folder:
        page.screenshot(path=str(folder / "main-after.png"), full_page=True)


def test_a_saved_voice_is_reused_in_a_new_session_and_deleted(page, app, browser, prompt_wav):
    wait_until_ready(page)
    fill(page, "cv-voice-name", "Narrator")
    page.click("#cv-save-voice")
    expect(page.locator("#cv-voice-msg")).to_contain_text("Upload or record the prompt audio")
    upload_prompt(page, prompt_wav)
    fill(page, "cv-transcript", TRANSCRIPT)
    page.click("#cv-save-voice")  # before any generation: the worker extracts the features now
    expect(page.locator("#cv-voice-msg")).to_contain_text("Saved the voice “Narrator”", timeout=GENERATE_S * 1000)

    page.reload()
    page.wait_for_selector("#cv-generate")
    wait_until_ready(page)
    page.locator("#cv-voices input").click()
    page.get_by_role("option", name="Narrator").click()
    expect(page.locator("#cv-prompt-msg")).to_contain_text("Using the saved voice “Narrator”")
    expect(page.locator("#cv-transcript textarea")).to_have_value(TRANSCRIPT)
    fill(page, "cv-text", "Spoken again without uploading anything.")
    before = app.output_files()
    assert "Done" in generate(page)
    assert len(app.output_files() - before) == 1
    open_workspace(page, "history")
    expect(page.locator("#cv-history")).to_contain_text("Narrator")
    open_workspace(page, "speak")

    settle(page)
    page.click("#cv-delete-voice")  # asks first (issue 50 item 7)
    expect(page.locator("#cv-voice-msg")).to_contain_text("Delete the voice “Narrator”?")
    settle(page)
    page.click("#cv-delete-confirm")
    expect(page.locator("#cv-voice-msg")).to_contain_text("Deleted the voice “Narrator”")
    page.locator("#cv-voices input").click()
    expect(page.get_by_role("option", name="Narrator")).to_have_count(0)


def test_restart_model_shows_progress_then_generates_again(page, app, prompt_wav):
    wait_until_ready(page)
    page.click("#cv-restart")
    expect(page.locator("#cv-model-msg")).to_contain_text("Restarting the model")
    expect(page.locator("#cv-model-msg")).to_contain_text("The model is ready", timeout=GENERATE_S * 1000)
    expect(page.locator("#cv-status-panel")).to_contain_text("ready")

    upload_prompt(page, prompt_wav)
    page.locator("#cv-mode label", has_text="Cross-lingual").click()
    expect(page.locator("#cv-transcript")).to_be_hidden()
    fill(page, "cv-text", "After the restart.")
    before = app.output_files()
    assert "Done" in generate(page)
    assert len(app.output_files() - before) == 1


def test_stop_cancels_a_long_generation(page, app, prompt_wav):
    wait_until_ready(page)
    upload_prompt(page, prompt_wav)
    page.locator("#cv-mode label", has_text="Cross-lingual").click()
    fill(page, "cv-text", " ".join(f"This is sentence number {n}, which keeps the model busy." for n in range(1, 25)))
    before = app.output_files()
    page.click("#cv-generate")
    expect(page.locator("#cv-status")).to_contain_text("Sentence", timeout=GENERATE_S * 1000)
    blockers = page.locator("#cv-blockers")  # issue 50 item 2: never "Ready" above a job that runs
    expect(blockers).to_contain_text("Your job is running")
    expect(blockers).not_to_contain_text("Ready: press Generate")
    page.click("#cv-stop")
    expect(page.locator("#cv-status")).to_contain_text(FINISHED, timeout=GENERATE_S * 1000)
    assert "Stopped" in page.locator("#cv-status").inner_text()
    expect(blockers).to_contain_text("Ready: press Generate")
    assert app.output_files() == before


def test_bad_input_is_explained_next_to_the_field_and_the_page_keeps_working(page, app, not_audio, prompt_wav):
    wait_until_ready(page)
    upload_prompt(page, not_audio, accepted=False)
    expect(page.locator("#cv-prompt-msg")).to_contain_text("notes.wav is not an audio file")
    expect(page.locator("#cv-prompt-audio")).to_contain_text("Click to Upload")  # taken out again
    fill(page, "cv-transcript", TRANSCRIPT)
    fill(page, "cv-text", "This should not be generated.")
    before = app.output_files()
    expect(page.locator("#cv-counter")).to_contain_text("29 / 5000")  # the page has taken the text
    settle(page)  # a click in the moment an answer's stream closes can be lost (see settle)
    page.click("#cv-generate")
    expect(page.locator("#cv-prompt-msg")).to_contain_text("Upload or record a prompt voice")
    expect(page.locator("#cv-status")).to_have_text("")
    assert app.output_files() == before

    upload_prompt(page, prompt_wav)
    expect(page.locator("#cv-prompt-msg")).to_contain_text("Prompt:")
    fill(page, "cv-text", "")
    # The counter shares its line with the text's problem: wait until it has counted the emptied text, or its
    # late answer (seen on a loaded machine) replaces the problem Generate put there.
    expect(page.locator("#cv-counter")).to_contain_text("0 / 5000")
    settle(page)
    page.click("#cv-generate")
    expect(page.locator("#cv-counter")).to_contain_text("There is no text to speak")
    assert "Traceback" not in page.content()
    assert "Traceback" not in app.log.read_text()


def test_the_language_switch_relabels_everything(page, app):
    english = page.locator("#cv-generate").inner_text()
    page.locator("#cv-language label", has_text="中文").click()
    expect(page.locator("#cv-generate")).to_have_text("生成")
    expect(page.locator("#cv-text")).to_contain_text("要朗读的文本")
    expect(page.locator("#cv-mode")).to_contain_text("零样本")
    expect(page.locator("#cv-prompt-audio")).to_contain_text("点击上传")  # Gradio's own words follow too
    expect(page.locator("#cv-counter")).to_contain_text("个字符")
    expect(page.locator("#cv-stream")).to_contain_text("边生成边播放")
    expect(page.locator("#cv-transcribe")).to_have_text("识别文字")
    expect(page.locator("#cv-licences")).to_contain_text("许可证")
    expect(page.locator("#cv-model")).to_contain_text("在 models/ 中找到的模型文件夹")
    expect(page).to_have_title("CosyVoice（Mac 版）")
    labels = page.locator("label, button, .cv-message, h1, h2, h3").all_inner_texts()
    english_words = [label for label in labels if re.search(r"\b(the|and|or|of|to|Prompt|Model|Voice|Text)\b", label)]
    assert not english_words, english_words

    page.locator("#cv-language label", has_text="English").click()
    expect(page.locator("#cv-generate")).to_have_text(english)
    expect(page.locator("#cv-prompt-audio")).to_contain_text("Click to Upload")


def test_the_language_follows_the_browser_then_the_user_s_choice_across_reloads(browser, app):
    """Issue 50 item 6: a Chinese browser gets the Chinese page on its first visit (no Markdown backticks shown as
    themselves); the language picked is remembered over a reload."""
    context = browser.new_context(viewport={"width": 1366, "height": 900}, locale="zh-CN")
    try:
        tab = context.new_page()
        tab.goto(app.url, timeout=120_000)
        expect(tab.locator("#cv-generate")).to_have_text("生成", timeout=60_000)
        expect(tab.locator("#cv-seed-fixed")).to_contain_text("保留这个种子")
        assert "`" not in tab.locator("body").inner_text()
        tab.locator("#cv-language label", has_text="English").click()
        expect(tab.locator("#cv-generate")).to_have_text("Generate")
        tab.reload()
        tab.wait_for_selector("#cv-generate", timeout=120_000)
        tab.wait_for_timeout(2000)  # the page's load events have run: the remembered choice, not the browser's
        expect(tab.locator("#cv-generate")).to_have_text("Generate")
        expect(tab.locator("#cv-language input[value=en]")).to_be_checked()
    finally:
        context.close()


def _http_status(url: str, data: bytes | None = None, headers: dict | None = None) -> int:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_only_app_outputs_are_served_and_big_uploads_are_refused(app):
    model_file = app.root / "models" / "Fun-CosyVoice3-0.5B" / "cosyvoice3.yaml"
    for path in (model_file, Path("/etc/passwd"), app.log):
        assert _http_status(f"{app.url}gradio_api/file={path}") in (403, 404), path
    assert _upload_status(app, bytes(1024 * 1024)) == 200
    assert _upload_status(app, bytes(21 * 1024 * 1024)) == 413


def _upload_status(app, payload: bytes) -> int:
    boundary = "cosyvoice-test-boundary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="upload.wav"\r\n'
            "Content-Type: audio/wav\r\n\r\n"
        ).encode()
        + payload
        + f"\r\n--{boundary}--\r\n".encode()
    )
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    return _http_status(f"{app.url}gradio_api/upload", body, headers)
