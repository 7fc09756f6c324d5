"""What each control does, called directly (no browser), against a real engine running the fake pipeline.

The engine worker is a real spawned process; FakeCosyVoice makes tones instead of speech, quickly.
Output tuples of ``generate`` are (prompt_msg, counter, mode_msg, status, result, history, picks, session,
player). Streaming, transcription, saving voices from a recording and the preview voice have their own
file, tests/test_webui_additions.py.
"""

from __future__ import annotations

import html
import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import soundfile

from cosyvoice_mac.engine.host import HostConfig, ModelHost, Settings, find_models
from cosyvoice_mac.request import Request, Voice
from cosyvoice_mac.webui.callbacks import Callbacks
from cosyvoice_mac.webui.render import format_bytes, render_status, status_line
from cosyvoice_mac.webui.sampling_controls import SAMPLING_CONTROLS
from cosyvoice_mac.webui.state import Session, is_inside
from tests.fakes.fake_pipeline import fake_engine_factory, tone
from tests.provenance_check import ai_credentials

PROMPT, COUNTER, MODE, STATUS, RESULT, HISTORY, PICKS, SESSION, PLAYER = range(9)
TRANSCRIPT = "This is the voice I would like you to copy."


def _is_skip(value) -> bool:
    return isinstance(value, dict) and value == {"__type__": "update"}


_fake_engine = fake_engine_factory(segment_s=0.4)  # the preview voice has no folder: the fake stands in


def _models(root: Path) -> Path:
    for folder, config in (("Fun-CosyVoice3-0.5B", "cosyvoice3.yaml"), ("CosyVoice2-0.5B", "cosyvoice2.yaml")):
        (root / "models" / folder).mkdir(parents=True)
        (root / "models" / folder / config).write_text("sample_rate: 24000\n")
    return root / "models"


@pytest.fixture(scope="module")
def callbacks(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui")
    host = ModelHost(
        HostConfig(
            models_dir=_models(root),
            outputs_dir=root / "outputs",
            cache_dir=root / "cache",
            max_queue=1,
            start_timeout_s=120,
            preview=True,
        ),
        engine_factory=_fake_engine,
    )
    assert host.start().name == "Fun-CosyVoice3-0.5B"  # the newest version is preferred
    assert host.engine.start(wait=True, timeout=120), host.status()
    yield Callbacks(host, Settings(root / "cache"))
    host.close()


@pytest.fixture(scope="module")
def prompt(make_speech) -> str:
    return str(make_speech("This is the voice I would like you to copy.", seconds=4.0))


def _run(
    callbacks,
    *,
    audio=None,
    voice="",
    transcript=TRANSCRIPT,
    text="Hello there. How are you?",
    mode="zero_shot",
    instruct="",
    seed=7,
    speed=1.0,
    stream=False,
    session=None,
    lang="en",
    session_id="s1",
    style=None,
):
    request = SimpleNamespace(session_hash=session_id)
    session = session or Session()
    post = (False, False, None)
    sampling_off = (False,) + (None,) * (SAMPLING_CONTROLS - 1)  # the panel off: its sliders are not read
    fields = (lang, audio, voice, transcript, text, mode, instruct, seed, speed, stream, session, request)
    return list(callbacks.generate(*fields, *post, *sampling_off, style))


def _outputs(callbacks) -> set[str]:
    folder = Path(callbacks.host.config.outputs_dir)
    return {path.name for path in folder.glob("*.wav")} if folder.is_dir() else set()


@pytest.mark.parametrize(
    "changes, slot, words",
    [
        ({"audio": None}, PROMPT, "Upload or record a prompt voice"),
        ({"text": "   "}, COUNTER, "There is no text to speak"),
        ({"text": "x" * 5001}, COUNTER, "5001 / 5000 characters"),
        ({"transcript": ""}, PROMPT, "Zero-shot mode needs the transcript"),
        ({"mode": "instruct", "instruct": " "}, MODE, "Instruct mode needs an instruction"),
        ({"seed": -3}, STATUS, "The seed must be a whole number"),
        ({"seed": 2.5}, STATUS, "The seed must be a whole number"),
        ({"voice": "nobody"}, PROMPT, "there is no saved voice named 'nobody'"),
    ],
)
def test_bad_input_is_answered_in_the_field_s_message_and_nothing_is_queued(callbacks, prompt, changes, slot, words):
    before = _outputs(callbacks)
    options = {"audio": prompt, **changes}
    (outputs,) = _run(callbacks, **options)
    assert words in outputs[slot]
    assert outputs[STATUS] == "" or slot == STATUS
    assert _is_skip(outputs[RESULT])
    assert _outputs(callbacks) == before


def test_a_malformed_inline_tag_or_a_sampling_setting_out_of_range_is_said_before_queueing(callbacks, prompt):
    before = _outputs(callbacks)
    (outputs,) = _run(callbacks, audio=prompt, text="Hello [pase 500ms] there.")
    said = html.unescape(outputs[COUNTER])  # the page writes brackets as entities (they are Markdown)
    assert "at character 7" in said and "did you mean [pause 500ms]" in said
    page = SimpleNamespace(session_hash="s1")
    off = (False, False, None)
    args = ("en", prompt, "", TRANSCRIPT, "Hello.", "zero_shot", "", 7, 1.0, False, Session(), page, *off)
    (outputs,) = list(callbacks.generate(*args, True, 1.0, 0.8, 0, 10))  # the sampling panel on, top-k 0
    assert "top_k 0 must be a whole number from 1 to 100" in html.unescape(outputs[STATUS])
    assert _outputs(callbacks) == before
    reasons = callbacks.blockers("en", prompt, "", TRANSCRIPT, "Hi (hapy).", "zero_shot", "")
    assert "(hapy) is not a style (at character 4)" in html.unescape(reasons)


def test_a_file_that_is_not_audio_is_refused_before_queueing(callbacks, tmp_path):
    fake = tmp_path / "notes.wav"
    fake.write_text("not a recording")
    (outputs,) = _run(callbacks, audio=str(fake))
    assert "notes.wav is not an audio file" in outputs[PROMPT]
    message, voice, audio = callbacks.prompt_uploaded("en", str(fake))
    assert "not an audio file" in message and voice == "" and audio is None  # taken out of the player


def test_generate_reports_progress_then_the_saved_result(callbacks, prompt):
    session = Session()
    before = _outputs(callbacks)
    steps = _run(callbacks, audio=prompt, session=session, text="One sentence. Two sentences. Three.")
    statuses = [step[STATUS] for step in steps if not _is_skip(step[STATUS])]
    assert any("Sentence 1 of 3" in status for status in statuses), statuses
    assert any("Sentence 3 of 3" in status for status in statuses), statuses
    final = steps[-1]
    (new_file,) = _outputs(callbacks) - before
    assert final[STATUS].startswith("✅ Done") and new_file in final[STATUS] and "seed 7" in final[STATUS]
    assert final[RESULT] == str(Path(callbacks.host.config.outputs_dir) / new_file)
    assert final[HISTORY]["data"][0][-1] == new_file and final[HISTORY]["data"][0][4] == 7
    assert [value for _, value in final[PICKS]["choices"]] == [new_file]
    assert final[HISTORY]["data"][0][7].endswith("Fun-CosyVoice3-0.5B")  # the model column (the fake names it so)
    assert final[SESSION] is session and all(_is_skip(step[PLAYER]) for step in steps)  # not streaming
    assert callbacks.history_picked(new_file, session) == final[RESULT]
    saved = Path(final[RESULT])
    made = ai_credentials(saved.read_bytes(), "wav")["org.cosyvoice-mac.generation"]  # the page's output is signed
    assert made["interface"] == "page" and made["model"].endswith("Fun-CosyVoice3-0.5B")
    said = callbacks.history_credentials("en", new_file)
    assert "Content credentials hold" in said and "Fun-CosyVoice3-0.5B" in said and "own key" in said
    data = saved.read_bytes()
    edit = data.index(b"C2PA") - 2000  # in the audio, which ends where the credentials' chunk starts
    saved.write_bytes(data[:edit] + bytes([data[edit] ^ 1]) + data[edit + 1 :])  # one byte of the audio edited
    try:
        assert "changed after it was made" in callbacks.history_credentials("en", new_file)
    finally:
        saved.write_bytes(data)


def test_a_result_outputs_refuses_still_plays_and_carries_its_credentials(callbacks, prompt):
    outputs = Path(callbacks.host.config.outputs_dir)
    outputs.mkdir(exist_ok=True)
    moved = outputs.with_name("outputs-moved")
    outputs.rename(moved)
    outputs.write_text("a file where the folder should be")
    try:
        final = _run(callbacks, audio=prompt, text="Nowhere to keep this.")[-1]
    finally:
        outputs.unlink()
        moved.rename(outputs)
    assert "could not save the result" in final[STATUS]
    made = ai_credentials(Path(final[RESULT]).read_bytes(), "wav")["org.cosyvoice-mac.generation"]
    assert made["model"].endswith("Fun-CosyVoice3-0.5B") and made["mode"] == "zero_shot"


def test_the_history_replays_only_results_in_outputs(callbacks, tmp_path):
    outputs = Path(callbacks.host.config.outputs_dir)
    outside = tmp_path / "secret.wav"
    outside.write_bytes(b"RIFF")
    (outputs / "stray.json").write_text('{"file": "../secret.wav", "text": "x"}')  # a sidecar pointing out
    (outputs / "broken.json").write_text("not json")
    (outputs / "lonely.wav").write_bytes(b"RIFF")  # no sidecar: not a result of ours
    listed = {entry.file_name for entry in callbacks.history_book.entries()}
    assert not listed & {"secret.wav", "lonely.wav"}
    assert callbacks.history_picked("secret.wav") is None
    assert callbacks.history_picked("lonely.wav") is None
    assert callbacks.history_picked("../../etc/passwd") is None
    assert callbacks.history_picked(None) is None
    assert callbacks.history_credentials("en", "secret.wav") == callbacks.history_credentials("en", None) == ""
    for name in ("stray.json", "broken.json", "lonely.wav"):
        (outputs / name).unlink()


def test_the_history_is_read_from_the_sidecars_searched_paged_reused_and_cleared(callbacks, prompt):
    _run(callbacks, audio=prompt, text="A first result about apples.")
    first = callbacks.history_book.entries()[0]
    _run(callbacks, audio=prompt, text="A second result about pears.", seed=11)
    fresh = Callbacks(callbacks.host, callbacks.settings)  # a new page process: nothing kept in memory
    table, badge, words, page, picks = fresh.history_show("en", "", 0)
    assert table["data"][0][1] == "A second result about pears." and table["data"][1][1] == first.text
    assert "Page 1 of 1" in words and badge == ""
    table, _, words, _, picks = fresh.history_show("en", "APPLES", 0)
    assert [row[1] for row in table["data"]] == [first.text] and "(1 result)" in words
    text, mode, instruct, seed, speed, voice, transcript, kept, *convert, message = fresh.history_reuse(
        "en", first.file_name
    )
    assert (text, mode, seed, speed) == (first.text, first.mode, first.seed, first.speed)
    assert kept is True  # "Keep this seed": the next Generate speaks with the result's own seed
    shown, *convert = convert
    assert shown["selected"] == "speak"  # reused from the History workspace: Speak, where the settings are
    assert all(_is_skip(value) for value in convert)  # a generation leaves the Convert workspace as it is
    assert "uploaded prompt" in message and transcript == first.transcript
    assert "Click a result in the table first" in fresh.history_reuse("en", "nothing.wav")[-1]
    cleared = fresh.history_cleared("en", "")
    assert cleared[0]["data"] == [] and "still in outputs/" in cleared[-1]
    assert Path(first.path).is_file()  # Clear hides; the files stay


def test_stop_cancels_the_session_s_running_job(callbacks, prompt):
    steps, done = [], threading.Event()
    text = "[slow] " + " ".join(f"Sentence number {n}." for n in range(30))

    def run():
        request = SimpleNamespace(session_hash="stopper")
        for step in callbacks.generate(
            "en", prompt, "", "", text, "cross_lingual", "", 1, 1.0, False, Session(), request
        ):
            steps.append(step)
        done.set()

    before = _outputs(callbacks)
    threading.Thread(target=run, daemon=True).start()
    deadline = time.monotonic() + 60
    while not any("Sentence" in str(step[STATUS]) for step in steps) and time.monotonic() < deadline:
        time.sleep(0.05)
    callbacks.stop(SimpleNamespace(session_hash="stopper"))
    assert done.wait(60)
    assert steps[-1][STATUS] == "⏹ Stopped."
    assert _outputs(callbacks) == before


def test_a_closed_tab_s_job_is_cancelled_after_the_grace_period_and_the_queue_marks_its_own(callbacks, prompt):
    steps, done = [], threading.Event()
    text = "[slow] " + " ".join(f"Sentence number {n}." for n in range(30))
    closing, other = SimpleNamespace(session_hash="closing"), SimpleNamespace(session_hash="other tab")

    def run():
        for step in callbacks.generate(
            "en", prompt, "", "", text, "cross_lingual", "", 1, 1.0, False, Session(), closing
        ):
            steps.append(step)
        done.set()

    before = _outputs(callbacks)
    threading.Thread(target=run, daemon=True).start()
    deadline = time.monotonic() + 60
    while not any("Sentence" in str(step[STATUS]) for step in steps) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "yours, “&#91;slow&#93; Sentence number 0." in callbacks.queue_words("en", closing)  # escaped
    seen_by_other = callbacks.queue_words("en", other)
    assert "running: another job (page)" in seen_by_other and "Sentence number" not in seen_by_other
    assert callbacks.generation.session_closed(other) is None  # a tab with no job: nothing to cancel
    timer = callbacks.generation.session_closed(closing, grace_s=0.5)
    timer.join(10)
    assert done.wait(60)
    assert "Not finished" in steps[-1][STATUS]  # cancelled, not by this tab's Stop
    assert _outputs(callbacks) == before
    assert callbacks.queue_words("en", other) == "Queue: nothing waiting or running."


def test_a_full_queue_says_busy(callbacks, prompt):
    engine = callbacks.host.engine
    slow = [engine.submit(Request.build("[slow] " + " ".join(["Wait."] * 20), Voice.recording(prompt)))]
    deadline = time.monotonic() + 60
    while engine.position(slow[0]) != 0 and time.monotonic() < deadline:  # running: the line is empty
        time.sleep(0.05)
    slow.append(engine.submit(Request.build("[slow] Wait.", Voice.recording(prompt))))
    try:
        (outputs,) = _run(callbacks, audio=prompt)
        assert "Busy: the queue is full (1 waiting" in outputs[STATUS] and "number 2 in line" in outputs[STATUS]
    finally:
        for job_id in slow:
            engine.cancel(job_id)
        for job_id in slow:
            with pytest.raises(Exception):
                engine.result(job_id, timeout=60)


def test_a_waiting_job_shows_its_place_in_the_queue(callbacks, prompt):
    engine = callbacks.host.engine
    blocker = engine.submit(Request.build("[slow] " + " ".join(["Wait."] * 8), Voice.recording(prompt)))
    deadline = time.monotonic() + 60
    while engine.position(blocker) != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        steps = iter(
            callbacks.generate(
                "en",
                prompt,
                "",
                "",
                "Me next.",
                "cross_lingual",
                "",
                1,
                1.0,
                False,
                Session(),
                SimpleNamespace(session_hash="waiter"),
            )
        )
        first = next(steps)
        assert first[STATUS] == "⏳ In the queue: position 1."
        statuses = [step[STATUS] for step in steps if not _is_skip(step[STATUS])]
        assert statuses[-1].startswith("✅ Done"), statuses
    finally:
        engine.cancel(blocker)


def test_switching_the_model_loads_the_other_folder(callbacks):
    steps = list(callbacks.switch_model("en", "CosyVoice2-0.5B"))
    assert steps[0][0].startswith("⏳ Loading CosyVoice2-0.5B")
    assert steps[-1][0].startswith("✅ The model is ready") and "CosyVoice2-0.5B" in steps[-1][1]
    assert callbacks.host.current.name == "CosyVoice2-0.5B"
    list(callbacks.switch_model("en", "Fun-CosyVoice3-0.5B"))
    assert callbacks.host.current.name == "Fun-CosyVoice3-0.5B" and callbacks.host.status()["state"] == "ready"


def _save(callbacks, name, audio, transcript=TRANSCRIPT, lang="en") -> list[tuple]:
    return list(callbacks.save_voice(lang, name, audio, transcript))


def test_a_voice_is_saved_from_the_prompt_before_any_generation_reused_and_deleted(callbacks, make_speech):
    prompt = str(make_speech("Grandpa reads a story before bedtime.", seconds=3.0))  # never generated with
    extractions = callbacks.host.engine.status()["feature_extractions"]
    steps = _save(callbacks, "Grandpa", prompt)
    assert steps[0][0].startswith("⏳ Preparing the voice")
    message, choices, question = steps[-1]
    assert message == "✅ Saved the voice “Grandpa”."
    assert ("Grandpa", "Grandpa") in choices["choices"] and choices["value"] == "Grandpa"
    assert question["visible"] is False
    assert callbacks.host.engine.status()["feature_extractions"] == extractions + 1  # extracted in the worker
    assert "Type a name" in _save(callbacks, "  ", prompt)[-1][0]
    message, _, question = _save(callbacks, "Grandpa", prompt)[-1]
    assert "already exists" in message and "Replace" in message and question["visible"] is True

    audio, message, transcript, mode, card = callbacks.voice_picked("en", "Grandpa", "")
    assert Path(audio).read_bytes() == Path(prompt).read_bytes()
    assert not Path(audio).is_relative_to(callbacks.voices.folder)  # a copy: the voices folder is never served
    assert "Grandpa" in message and transcript == TRANSCRIPT and mode == "zero_shot"
    assert "Grandpa" in card and "3.0 s" in card and "zero-shot" in card and TRANSCRIPT in card
    final = _run(callbacks, voice="Grandpa", transcript=transcript, text="Spoken by a saved voice.")[-1]
    assert final[STATUS].startswith("✅ Done") and final[HISTORY]["data"][0][3] == "Grandpa"

    # Issue 50 item 7: asked first, then undoable for a few seconds (the recording kept until then).
    question, shown = callbacks.ask_delete("en", "Grandpa")
    assert question.startswith("⚠️ Delete the voice “Grandpa”?") and shown["visible"] is True
    assert callbacks.voices.get("Grandpa")  # asking deletes nothing
    message, update, shown, undo, kept, timer = callbacks.delete_voice("en", "Grandpa")
    assert message.startswith("🗑 Deleted the voice “Grandpa”. Undo") and update["value"] == ""
    assert ("Grandpa", "Grandpa") not in update["choices"] and undo["visible"] is True and timer.active
    assert "Grandpa" not in [entry["name"] for entry in callbacks.voices.list()]
    message, update, undo, kept_now, timer = callbacks.undo_delete("en", kept)
    assert message == "✅ The voice “Grandpa” is back." and update["value"] == "Grandpa" and kept_now is None
    back = callbacks.voices.get("Grandpa")
    assert back["transcript"] == TRANSCRIPT and Path(back["audio_path"]).read_bytes() == Path(prompt).read_bytes()
    kept = callbacks.delete_voice("en", "Grandpa")[4]
    assert Path(kept["copy"]).is_file()
    callbacks.undo_expired(kept)  # the time is up: the copy goes
    assert not Path(kept["copy"]).exists() and "Too late" in callbacks.undo_delete("en", kept)[0]
    assert "Grandpa" not in [entry["name"] for entry in callbacks.voices.list()]
    assert "Pick a saved voice" in callbacks.delete_voice("en", "")[0]


def test_the_page_refuses_a_voice_no_job_could_use_and_a_refused_replace_keeps_the_old(
    callbacks, make_speech, tmp_path
):
    """The page's save, replace, rename and transcript go by the voice library's one rule (as /v1 and the CLI)."""
    speech = str(make_speech("Somebody speaking for the page's voice.", seconds=3.0))
    pure_tone = tmp_path / "hum.wav"
    soundfile.write(pure_tone, tone(3.0, frequency=220.0), 24000, subtype="PCM_16")
    assert "hum.wav holds no speech" in _save(callbacks, "Hum", str(pure_tone))[-1][0]
    (outputs,) = _run(callbacks, audio=str(pure_tone))  # nor is it spoken from
    assert "hum.wav holds no speech" in outputs[PROMPT] and _is_skip(outputs[RESULT])
    assert "built-in preview voice" in _save(callbacks, "preview", speech)[-1][0]
    assert "the limit is 1,000" in _save(callbacks, "Wordy", speech, transcript="x" * 1001)[-1][0]
    assert "Saved the voice" in _save(callbacks, "Page kept", speech)[-1][0]
    kept = callbacks.voices.get("Page kept")
    assert "holds no speech" in list(callbacks.replace_voice("en", "Page kept", str(pure_tone), TRANSCRIPT))[-1][0]
    assert "built-in preview voice" in callbacks.rename_voice("en", "Page kept", "Preview")[0]
    assert "the limit is 1,000" in callbacks.save_voice_transcript("en", "Page kept", "z" * 5000)[0]
    assert callbacks.voices.get("Page kept") == kept
    assert {"Hum", "preview", "Wordy", "Preview"}.isdisjoint(entry["name"] for entry in callbacks.voices.list())
    callbacks.delete_voice("en", "Page kept")


def test_restart_reports_progress_until_ready(callbacks):
    steps = list(callbacks.restart("en"))
    assert steps[0][0].startswith("⏳ Restarting the model")
    assert steps[-1][0].startswith("✅ The model is ready") and "**State:** ready" in steps[-1][1]


def test_only_listed_models_can_be_switched_to(callbacks):
    current = callbacks.host.current
    (step,) = list(callbacks.switch_model("en", "../../somewhere/else"))
    assert _is_skip(step[0]) and callbacks.host.current == current


def test_status_panel_in_both_languages():
    status = {
        "state": "ready",
        "folder": "Fun-CosyVoice3-0.5B",
        "model": "m-1",
        "version": "cosyvoice3",
        "device": "mps",
        "dtype": "float32",
        "fell_back": True,
        "fallback_reason": "out of memory",
        "memory": {"rss_bytes": 3 << 30, "device_allocated_bytes": 0},
        "queue_length": 2,
        "running": "j",
        "cache": {"memory_hits": 3, "disk_hits": 0, "misses": 1},
        "cache_hit_rate": 0.75,
    }
    english = render_status("en", status)
    assert "**State:** ready" in english and "fell back to the CPU: out of memory" in english
    assert "process 3.0 GB" in english and "2 waiting, 1 running" in english and "75% (3 of 4)" in english
    chinese = render_status("zh", status)
    assert "**状态：** 就绪" in chinese and "75%（4 次中 3 次）" in chinese
    assert render_status("en", {"state": "stopped"}) == "**State:** stopped"
    assert format_bytes(None, "en") == "not known yet" and format_bytes(1536, "en") == "1.5 KB"


def test_the_engine_s_notes_follow_the_status_line():
    values = {"duration": 1.0, "seconds": 0.5, "seed": 3, "file": "a.wav", "notes": "preview voice (not CosyVoice)"}
    assert status_line("en", "status_done", values).endswith("  \nℹ️ preview voice (not CosyVoice)")
    assert "ℹ️" not in status_line("zh", "status_done", {**values, "notes": ""})


def test_model_folders_are_found_by_their_yaml(tmp_path):
    root = _models(tmp_path)
    (root / "both").mkdir()
    (root / "both" / "cosyvoice2.yaml").write_text("")
    (root / "both" / "cosyvoice3.yaml").write_text("")
    (root / "CosyVoice-300M").mkdir()
    (root / "CosyVoice-300M" / "cosyvoice.yaml").write_text("")
    (root / "notes.txt").write_text("")
    assert [(m.name, m.version) for m in find_models(root)] == [
        ("CosyVoice2-0.5B", "cosyvoice2"),
        ("Fun-CosyVoice3-0.5B", "cosyvoice3"),
    ]
    assert find_models(tmp_path / "absent") == []


def test_the_first_run_notice_is_remembered(tmp_path):
    settings = Settings(tmp_path / "cache")
    assert not settings.notice_acknowledged
    callbacks = SimpleNamespace(settings=settings)
    Callbacks.acknowledge_notice(callbacks)
    assert Settings(tmp_path / "cache").notice_acknowledged


def test_is_inside_follows_links(tmp_path):
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "a.wav").write_bytes(b"")
    (tmp_path / "outputs" / "escape.wav").symlink_to(tmp_path / "secret")
    assert is_inside(tmp_path / "outputs" / "a.wav", tmp_path / "outputs")
    assert not is_inside(tmp_path / "outputs" / "escape.wav", tmp_path / "outputs")
    assert not is_inside(tmp_path / "outputs" / ".." / "secret", tmp_path / "outputs")


def test_with_stream_on_a_new_prompt_is_prepared_in_the_background(callbacks, make_speech, tmp_path):
    fresh = str(make_speech("A brand new voice is uploaded while Stream is on.", seconds=3.0))
    engine = callbacks.host.engine
    extractions = engine.status()["feature_extractions"]
    assert callbacks.prepare_for_streaming(fresh, False) is None  # Stream off: nothing to do ahead
    worker = callbacks.prepare_for_streaming(fresh, True)
    worker.join(timeout=60)
    assert not worker.is_alive() and engine.status()["feature_extractions"] == extractions + 1
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("not audio at all")
    assert callbacks.prepare_for_streaming(str(not_audio), True) is None  # its own message says why
    final = _run(callbacks, audio=fresh, text="The prepared voice speaks.", stream=True)[-1]
    assert final[STATUS].startswith("✅ Done")
    assert engine.status()["feature_extractions"] == extractions + 1  # the request found it ready


def test_saves_from_the_engine_and_deletes_from_the_page_at_once_lose_nothing(callbacks):
    """One owner of voices.json (the engine): the page's deletes and the engine's saves share its lock."""
    engine, rounds = callbacks.host.engine, 60
    digest = "a1b2c3d4" * 8
    for index in range(rounds):
        engine.voices.save(f"Old {index}", audio_hash=digest, model_id="fake")
    start = threading.Barrier(2)

    def delete_from_the_page():
        start.wait()
        for index in range(rounds):
            assert "Deleted the voice" in callbacks.delete_voice("en", f"Old {index}")[0]

    def save_in_the_engine():
        start.wait()
        for index in range(rounds):
            engine.voices.save(f"New {index}", audio_hash=digest, model_id="fake")

    threads = [threading.Thread(target=delete_from_the_page), threading.Thread(target=save_in_the_engine)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    names = {entry["name"] for entry in engine.voices.list()}
    assert {f"New {index}" for index in range(rounds)} <= names  # no save lost to a concurrent delete
    assert not {f"Old {index}" for index in range(rounds)} & names  # no delete undone by a concurrent save
    assert {name for name, _ in callbacks.voice_choices("en")[1:]} == names  # the page reads the same library
    for index in range(rounds):
        engine.voices.delete(f"New {index}")


def test_a_voice_without_a_transcript_is_cross_lingual_renamed_replaced_and_given_a_transcript(callbacks, make_speech):
    first = str(make_speech("The first recording of this voice.", seconds=3.0))
    second = str(make_speech("A second, longer recording of the same voice.", seconds=4.0))
    message = _save(callbacks, "Plain", first, transcript="")[-1][0]
    assert "Saved the voice “Plain”" in message and "cross-lingual only" in message
    audio, _, _, mode, card = callbacks.voice_picked("en", "Plain", "")
    assert mode == "cross_lingual" and "No transcript" in card and "zero-shot" not in card.splitlines()[0]

    message, menu, card = callbacks.rename_voice("en", "Plain", "Renamed")
    assert "Renamed “Plain” to “Renamed”" in message and menu["value"] == "Renamed" and "Renamed" in card
    assert [entry["name"] for entry in callbacks.voices.list()].count("Plain") == 0
    _save(callbacks, "Other", first, transcript="")
    assert "already exists" in callbacks.rename_voice("en", "Renamed", "Other")[0]

    message, _, question = _save(callbacks, "Renamed", second, transcript="")[-1]
    assert question["visible"] is True and callbacks.voice_picked("en", "Renamed", "")[4].count("3.0 s") == 1
    message, _, question = list(callbacks.replace_voice("en", "Renamed", second, TRANSCRIPT))[-1]
    assert "Replaced the voice “Renamed”" in message and question["visible"] is False
    audio, _, transcript, mode, card = callbacks.voice_picked("en", "Renamed", "")
    assert Path(audio).read_bytes() == Path(second).read_bytes() and "4.0 s" in card
    assert transcript == TRANSCRIPT and mode == "zero_shot"
    assert not any(path.name.startswith("Plain") for path in callbacks.voices.folder.iterdir())

    message, card, mode = callbacks.save_voice_transcript("en", "Other", "The first recording of this voice.")
    assert "can speak zero-shot now" in message and mode == "zero_shot" and "The first recording" in card
    assert callbacks.voices.get("Other")["transcript"] == "The first recording of this voice."
    for name in ("Renamed", "Other"):
        callbacks.delete_voice("en", name)


def test_the_engine_refuses_a_malformed_inline_tag_before_the_job_waits_in_line(callbacks):
    from cosyvoice_mac.errors import RequestError

    engine = callbacks.host.engine
    request = Request.build("Hi [pase 500ms] there.", Voice.builtin(), seed=1)  # every door's job passes here
    with pytest.raises(RequestError, match=r"at character 4.*did you mean \[pause 500ms\]") as refused:
        engine.submit(request)
    assert (refused.value.field, refused.value.code) == ("text", "markup_invalid") and engine.line() == []


def test_a_voice_gets_a_style_is_exported_deleted_and_imported_on_the_page(callbacks, make_speech, tmp_path):
    own = str(make_speech("The page keeps this voice and carries it away.", seconds=3.0))
    happy = str(make_speech("And here it is again, sounding rather happy!", seconds=3.0))
    assert _save(callbacks, "Styled", own)[-1][0] == "✅ Saved the voice “Styled”."
    assert "Upload or record" in callbacks.add_style("en", "Styled", "happy", None, None)[0]
    message, card = callbacks.add_style("en", "Styled", "happy", happy, "And here it is again.")
    assert message == "✅ “Styled” has a “happy” recording now." and "Styles: neutral, happy" in card
    message, exported = callbacks.export_voice("en", "Styled")
    assert message.startswith("✅ Exported “Styled”") and Path(exported).name == "Styled.cvvoices.zip"
    callbacks.delete_voice("en", "Styled")

    damaged = tmp_path / "damaged.cvvoices.zip"
    damaged.write_bytes(Path(exported).read_bytes()[:-200])
    before = callbacks.voices.list()
    message, menu, emptied, _ = callbacks.import_voice_file("en", str(damaged))
    assert message.startswith("⚠️ Not imported, nothing was changed:") and "no zip archive" in message
    assert callbacks.voices.list() == before and _is_skip(menu) and emptied is None
    message, menu, emptied, card = callbacks.import_voice_file("en", exported)
    assert message == "✅ Imported “Styled”." and menu["value"] == "Styled" and emptied is None
    assert "Styles: neutral, happy" in card
    assert "Styles: neutral, happy" in callbacks.voice_picked("en", "Styled", "")[4]

    menu = callbacks.style_choices("en", "Styled")  # Generate speaks the recording picked here
    assert menu["choices"] == [("its own (neutral)", ""), ("happy", "happy")] and menu["visible"]
    assert callbacks.style_picked("Styled", "happy") == "And here it is again."
    assert not callbacks.style_choices("en", "")["visible"]
    before = _outputs(callbacks)
    refused = _run(callbacks, voice="Styled", transcript="", mode="cross_lingual", style="sad")
    assert "has no 'sad' recording; its styles: neutral, happy" in refused[-1][PROMPT] and _outputs(callbacks) == before
    _run(callbacks, voice="Styled", transcript="And here it is again.", style="happy")
    [made] = _outputs(callbacks) - before
    sidecar = json.loads((Path(callbacks.host.config.outputs_dir) / made).with_suffix(".json").read_text())
    assert (
        sidecar["style"] == "happy"
        and sidecar["prompt_hash"] == callbacks.voices.styled("Styled", "happy")["audio_hash"]
    )
    # a text's (style) tag may name the picked voice's recordings ("neutral" is its own: no model style)
    tagged = ("Hi (neutral) there.", "cross_lingual", "")
    assert callbacks.blockers("en", None, "Styled", "", *tagged) == "✅ Ready: press Generate."
    request, problem = callbacks.generation.build_request("en", None, "Styled", "", *tagged, 1, 1.0)
    assert problem is None and request.text == tagged[0]
    said = html.unescape(callbacks.blockers("en", own, "", "", *tagged))  # an uploaded recording has no styles
    assert "(neutral) is not a style (at character 4)" in said
    callbacks.delete_voice("en", "Styled")


def test_a_checked_result_shows_its_verdict_takes_and_captions_and_offers_a_retake(callbacks, prompt):
    """The page's box switches the take check on for one request: the fake's tones are no speech, so every take
    fails and the best stands; the page shows the verdict with each take, the captions and their files, marks the
    history row, and offers a Retake with the next seed."""
    from cosyvoice_mac.pipeline.takes.retake import next_seed

    session, page = Session(), SimpleNamespace(session_hash="s-check")
    text = "Hello there, how are you today?"
    ran = list(
        callbacks.generate(
            "en", prompt, "", TRANSCRIPT, text, "zero_shot", "", 7, 1.0, False, session, page, check=True
        )
    )
    check, captions, files, pick, use, retake = callbacks.last_takes("en", session)
    assert "still fails the check" in check and "**Sentence 1**: kept take" in check, check
    assert len(pick["choices"]) == 2 and pick["visible"] and use["visible"]  # the two takes not kept, to pick
    assert "· take 1, seed 7: " in check or "▶ take 1, seed 7 (kept): " in check
    assert f"seed {next_seed(7)}" in check and retake["visible"]
    assert captions.count('class="cv-word"') == len(text.split()) and 'data-start="0.' in captions
    assert [Path(path).name.split(".", 1)[1] for path in files["value"]] == ["srt", "vtt", "words.json"]
    assert ran[-1][HISTORY]["data"][0][8] == "⚠️"  # the history's check column
    assert callbacks.history_takes("en", Path(ran[-1][RESULT]).name) == (check, captions, files, pick, use)
    assert callbacks.retake_seed(7) == next_seed(7)
    again = callbacks.generate(
        "en", prompt, "", TRANSCRIPT, text, "zero_shot", "", 7, 1.0, False, session, page, check=False
    )
    assert list(again)[-1][STATUS].startswith("✅ Done")  # the box unticked: this request is not checked
    check, captions, files, pick, use, retake = callbacks.last_takes("en", session)
    assert (
        "was not checked" in check
        and not pick["visible"]
        and captions == ""
        and not files["visible"]
        and not retake["visible"]
    )


def test_a_retake_speaks_the_next_seed_whatever_keep_this_seed_says_and_shows_it(callbacks, prompt):
    """The Retake button: Generate with the same inputs and the check's next seed (kept, shown in the field)."""
    from cosyvoice_mac.pipeline.takes.retake import next_seed

    before = _outputs(callbacks)
    controls = (False, False, None, False) + (None,) * (SAMPLING_CONTROLS - 1) + ("", False, False)  # keep: unticked
    page = SimpleNamespace(session_hash="s-retake")
    steps = list(
        callbacks.retake("en", prompt, "", TRANSCRIPT, "Once more.", "zero_shot", "", 7, 1.0, False, Session(), page,
                         *controls)
    )  # fmt: skip
    assert steps[0].seed == next_seed(7) and steps[-1].status.startswith("✅ Done")
    [made] = _outputs(callbacks) - before
    sidecar = json.loads((Path(callbacks.host.config.outputs_dir) / made).with_suffix(".json").read_text())
    assert sidecar["seed"] == next_seed(7)


def test_the_status_lines_are_derived_from_the_engine_the_library_and_this_tab(callbacks, make_speech, monkeypatch):
    """Issue 50 item 2: no line outlives what it describes. A rename, a transcript or a delete through any door
    (the library itself: /v1 and the CLI end there) reaches the menu, the list, the card and the prompt line;
    the line beside Generate says Ready only while nothing of this tab runs and the model is ready."""
    prompt = str(make_speech("A voice for the derived status lines.", seconds=3.0))
    _save(callbacks, "Ada", prompt)
    seen = callbacks.library_seen()
    assert all(_is_skip(value) for value in callbacks.library_changed("en", seen, "Ada")[:3])
    assert callbacks.prompt_status("en", None, "Ada") == "Using the saved voice “Ada”."
    callbacks.voices.rename("Ada", "Ada two")
    menu, listing, card, seen = callbacks.library_changed("en", seen, "Ada")
    assert menu["value"] == "" and ("Ada two", "Ada two") in menu["choices"] and "Ada two" in listing and card == ""
    assert callbacks.prompt_status("en", None, "Ada") == ""
    assert callbacks.prompt_status("zh", None, "Ada two") == "正在使用已保存的声音“Ada two”。"
    callbacks.voices.set_transcript("Ada two", "Other words entirely.")
    menu, listing, card, seen = callbacks.library_changed("en", seen, "Ada two")
    assert menu["value"] == "Ada two" and "Other words entirely." in listing and "Other words entirely." in card
    callbacks.voices.delete("Ada two")
    menu, listing, card, _ = callbacks.library_changed("en", seen, "Ada two")
    assert menu["value"] == "" and "Ada two" not in listing and callbacks.prompt_status("en", None, "Ada two") == ""
    # a tick that left with nothing picked never sets the menu or the card: an import or a save may have since
    menu, listing, card, _ = callbacks.library_changed("en", seen, "")
    assert "value" not in menu and ("", "") in [(v, v) for _, v in menu["choices"]][:1] and _is_skip(card)

    tab = SimpleNamespace(session_hash="derived")
    form = ("en", prompt, "", TRANSCRIPT, "Hello.", "zero_shot", "")
    assert callbacks.blockers(*form, request=tab) == "✅ Ready: press Generate."
    steps = _run(callbacks, audio=prompt, session_id="derived", text="A job of this tab.")
    running = [step.blockers for step in steps if not _is_skip(step.blockers)]
    assert running == ["⏳ Your job is running; Stop stops it."]
    assert steps[-1].status.startswith("✅ Done")
    callbacks.generation.active.set("derived", "a-job")
    assert callbacks.blockers(*form, request=tab).startswith("⏳ Your job is running")
    callbacks.generation.active.clear("derived", "a-job")
    monkeypatch.setattr(callbacks, "engine_state", lambda: "restarting")
    assert callbacks.blockers(*form, request=tab) == "⏳ The model is restarting; a job waits until it is ready."


def test_each_generate_speaks_with_a_new_seed_unless_the_user_keeps_it(callbacks, prompt):
    """Issue 50 item 12: pressing Generate again gives new audio (a new seed, shown in the field so it can be kept
    or reused); with "Keep this seed" ticked the field's seed is the one used."""
    import json

    def generate(seed_fixed: bool) -> tuple[list, int]:
        steps = list(
            callbacks.generate(
                "en", prompt, "", TRANSCRIPT, "Seeds.", "zero_shot", "", 7, 1.0, False, Session(),
                SimpleNamespace(session_hash="seeds"), seed_fixed=seed_fixed,
            )
        )  # fmt: skip
        assert steps[-1].status.startswith("✅ Done")
        newest = max(Path(callbacks.host.config.outputs_dir).glob("*.json"), key=lambda path: path.stat().st_mtime)
        return [step.seed for step in steps if not _is_skip(step.seed)], json.loads(newest.read_text())["seed"]

    (first,), used_first = generate(seed_fixed=False)
    (second,), used_second = generate(seed_fixed=False)
    assert first != second and (used_first, used_second) == (first, second)  # shown = used, and new each time
    assert generate(seed_fixed=True) == ([], 7)


def test_a_tab_s_own_conversion_is_marked_as_its_own_in_the_queue_and_generate_s_stop_leaves_it_alone():
    """Issue 50 item 2: the queue line said "another job (page)" for the tab's own conversion."""
    from contextlib import nullcontext

    from cosyvoice_mac.engine.jobqueue import QueueEntry
    from cosyvoice_mac.webui.convert_tab import ConvertCallbacks
    from cosyvoice_mac.webui.generation import Generation

    line = [QueueEntry("vc-1", 0, "page", "talk.wav"), QueueEntry("api-1", 1, "api", "Hello.")]
    stopped = SimpleNamespace(terminal=True, kind="cancelled", message="")
    feed = SimpleNamespace(of=lambda job_id: iter([stopped]))
    engine = SimpleNamespace(
        line=lambda: line, submit=lambda job: None, position=lambda job_id: 1, subscribe=lambda: nullcontext(feed)
    )
    generation = Generation(SimpleNamespace(engine=engine), history=None)
    converting = ConvertCallbacks(SimpleNamespace(engine=engine), generation.active)
    steps = list(converting._follow("en", engine, SimpleNamespace(job_id="vc-1"), "tab"))
    assert steps[-1][0] == "Stopped: nothing was saved."
    words = generation.queue_words("en", SimpleNamespace(session_hash="tab"))
    assert "▶ running: yours, “talk.wav”" in words and "waiting, number 1: another job (api)" in words
    assert "yours" not in generation.queue_words("en", SimpleNamespace(session_hash="another tab"))
    assert generation.active.get("tab") is None  # Generate's Stop has no conversion to cancel
