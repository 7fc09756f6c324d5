"""The page's later additions, called directly: streaming, prompt transcription, saving a voice from the
recording, and the preview voice standing in for a missing model. The engine is a real worker process
around the fake pipeline (tones); transcription uses the real recogniser process once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest
import soundfile

from cosyvoice_mac.engine import Engine, JobResult, TranscriptionFailed
from cosyvoice_mac.engine.asr import word_error_rate
from cosyvoice_mac.engine.host import PREVIEW_CHOICE, HostConfig, ModelHost, Settings
from cosyvoice_mac.engine.messages import Done
from cosyvoice_mac.preview import PIPELINE_FACTORY, PREVIEW_LABEL, PREVIEW_NOTE
from cosyvoice_mac.preview.labels import DOWNLOAD_COMMAND
from cosyvoice_mac.webui.callbacks import Callbacks
from cosyvoice_mac.webui.generation import _Outputs
from cosyvoice_mac.webui.render import render_status
from cosyvoice_mac.webui.state import Session
from cosyvoice_mac.webui.streaming import StreamBuffer, decode_value
from tests.fakes.fake_pipeline import FAKE_FACTORY

PROMPT, COUNTER, MODE, STATUS, RESULT, HISTORY, PICKS, SESSION, PLAYER = range(9)
SENTENCE = "This is the voice I would like you to copy, please."


def _is_skip(value) -> bool:
    return isinstance(value, dict) and value == {"__type__": "update"}


class _Recording:
    """Engine factory that remembers each worker config the host asked for, then runs the fake pipeline."""

    def __init__(self):
        self.configs = []

    def __call__(self, config, **options):
        self.configs.append(config)
        fake = replace(config, pipeline_factory=FAKE_FACTORY, model_dir=config.model_dir or "preview-stand-in")
        return Engine(fake, stop_timeout_s=5.0, cancel_grace_s=5.0, **options)


@pytest.fixture(scope="module")
def factory():
    return _Recording()


@pytest.fixture(scope="module")
def callbacks(tmp_path_factory, factory):
    root = tmp_path_factory.mktemp("ui-additions")
    (root / "models" / "Fun-CosyVoice3-0.5B").mkdir(parents=True)
    (root / "models" / "Fun-CosyVoice3-0.5B" / "cosyvoice3.yaml").write_text("sample_rate: 24000\n")
    host = ModelHost(
        HostConfig(
            models_dir=root / "models",
            outputs_dir=root / "outputs",
            cache_dir=root / "cache",
            start_timeout_s=120,
            preview=True,
        ),
        engine_factory=factory,
    )
    assert host.start().name == "Fun-CosyVoice3-0.5B"  # a model folder wins over the preview voice
    assert host.engine.start(wait=True, timeout=120), host.status()
    yield Callbacks(host, Settings(root / "cache"))
    host.close()


@pytest.fixture(scope="module")
def prompt(make_speech) -> str:
    return str(make_speech(SENTENCE, seconds=4.0))


def _run(callbacks, *, audio, text="One sentence. Two sentences. Three.", speed=1.0, stream=False, lang="en"):
    return list(
        callbacks.generate(
            lang,
            audio,
            "",
            "",
            text,
            "cross_lingual",
            "",
            3,
            speed,
            stream,
            Session(),
            SimpleNamespace(session_hash="streamer"),
        )
    )


# -- streaming ----------------------------------------------------------------------------------------
def test_streaming_sends_each_chunk_before_the_result_and_still_saves_the_file(callbacks, prompt):
    steps = _run(callbacks, audio=prompt, stream=True, speed=1.5)
    players = [step[PLAYER] for step in steps]
    assert all(isinstance(value, str) for value in players)
    assert all(later.startswith(earlier) for earlier, later in zip(players, players[1:-1]))  # only ever appended
    assert players[-1] == decode_value(players[-2])[0]  # the end: the bare stream id, so it plays on
    streaming = [index for index, step in enumerate(steps) if "Streaming sentence" in str(step[STATUS])]
    assert streaming and streaming[0] < len(steps) - 1  # audio went out before the job ended
    assert "Streaming sentence 1 of 3" in steps[streaming[0]][STATUS]

    final = steps[-1]
    assert final[STATUS].startswith("✅ Done")
    first, elapsed = map(
        float, re.search(r"first audio after ([\d.]+) s, finished after ([\d.]+) s", final[STATUS]).groups()
    )
    assert first <= elapsed
    stream_id, chunks = decode_value(players[-2])
    assert stream_id and len(chunks) == 3 and {rate for rate, _ in chunks} == {24000}
    saved, rate = soundfile.read(final[RESULT], dtype="float32")
    assert rate == 24000 and np.allclose(np.concatenate([audio for _, audio in chunks]), saved, atol=1 / 32768)
    assert final[HISTORY]["data"][0][5] == "1"  # streaming plays at speed 1.0, whatever the slider said


def test_the_stream_toggle_locks_the_speed_at_one():
    speed, note = Callbacks.stream_toggled(True)
    assert speed["value"] == 1.0 and speed["interactive"] is False and note["visible"] is True
    speed, note = Callbacks.stream_toggled(False)
    assert speed["interactive"] is True and "value" not in speed and note["visible"] is False


def test_the_player_value_round_trips_and_restarts_under_a_new_id():
    buffer = StreamBuffer()
    first = buffer.add(np.linspace(-1, 1, 480, dtype=np.float32), 24000)
    assert buffer.add(np.zeros(0, np.float32), 24000) == first  # an empty chunk adds nothing
    buffer.add(np.full(240, 0.5, np.float32), 16000)
    stream_id, chunks = decode_value(buffer.value)
    assert stream_id == buffer.stream_id and [rate for rate, _ in chunks] == [24000, 16000]
    assert np.allclose(chunks[0][1], np.linspace(-1, 1, 480), atol=1e-4) and buffer.chunks == 2
    assert buffer.seconds == pytest.approx(0.02 + 0.015)
    old_id = buffer.stream_id
    assert buffer.restart() == buffer.stream_id != old_id and buffer.chunks == 0


# -- saving a voice -------------------------------------------------------------------------------------
def test_saving_a_voice_needs_a_usable_recording(callbacks, tmp_path):
    notes = tmp_path / "notes.wav"
    notes.write_text("meeting notes")
    assert "Upload or record the prompt audio" in list(callbacks.save_voice("en", "A", None, ""))[-1][0]
    assert "not an audio file" in list(callbacks.save_voice("en", "A", str(notes), ""))[-1][0]
    assert "请上传或录制" in list(callbacks.save_voice("zh", "A", None, ""))[-1][0]


# -- transcription ----------------------------------------------------------------------------------------
class _StubTranscriber:
    def __init__(self, answer, download=False):
        self.answer, self.download, self.asked = answer, download, []

    def transcribe(self, path, language=None, progress=None):
        self.asked.append(str(path))
        if self.download:
            progress(3 << 20, 480 << 20, "downloading")
            import time

            time.sleep(1.2)  # long enough for the page to show the download once
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _transcribe(callbacks, monkeypatch, stub, audio, voice="", lang="en"):
    monkeypatch.setattr(callbacks.host, "transcriber", stub)
    return list(callbacks.transcribe(lang, audio, voice))


def test_transcribe_fills_the_field_or_says_why_not(callbacks, monkeypatch, prompt, tmp_path):
    steps = _transcribe(callbacks, monkeypatch, _StubTranscriber(" Hello there. "), prompt)
    assert steps[-1] == ("Hello there.", "✅ Filled in from the recording. Check the words and correct them if needed.")
    assert all(_is_skip(step[0]) for step in steps[:-1])

    steps = _transcribe(callbacks, monkeypatch, _StubTranscriber("Hi.", download=True), prompt)
    assert any("Downloading the speech recogniser: 3.0 MB of 480.0 MB" in step[1] for step in steps)

    failed = _transcribe(callbacks, monkeypatch, _StubTranscriber(TranscriptionFailed("no speech was found")), prompt)
    assert _is_skip(failed[-1][0]) and failed[-1][1] == "⚠️ no speech was found"
    assert _transcribe(callbacks, monkeypatch, _StubTranscriber("  "), prompt)[-1][1].startswith("⚠️ No words")
    crashed = _transcribe(callbacks, monkeypatch, _StubTranscriber(RuntimeError("boom")), prompt)
    assert crashed[-1][1] == "⚠️ RuntimeError: boom"  # a message, never a traceback

    stub = _StubTranscriber("unused")
    assert "Upload or record a prompt first" in _transcribe(callbacks, monkeypatch, stub, None)[-1][1]
    notes = tmp_path / "notes.wav"
    notes.write_text("meeting notes")
    assert "not an audio file" in _transcribe(callbacks, monkeypatch, stub, str(notes))[-1][1]
    assert "请先上传或录制" in _transcribe(callbacks, monkeypatch, stub, None, lang="zh")[-1][1]
    assert stub.asked == []  # none of these reached the recogniser


def test_transcribe_uses_a_saved_voice_s_own_recording(callbacks, monkeypatch, make_speech):
    recording = str(make_speech("Saved for transcription later.", seconds=2.5))
    list(callbacks.save_voice("en", "Listener", recording, ""))
    stub = _StubTranscriber("Saved for transcription later.")
    steps = _transcribe(callbacks, monkeypatch, stub, None, voice="Listener")
    assert steps[-1][0] == "Saved for transcription later." and Path(stub.asked[0]).parent.name == "voices"


def test_transcribe_with_the_real_recogniser(callbacks, make_speech):
    spoken = str(make_speech(SENTENCE))  # its natural length: a cut repetition would add words
    steps = list(callbacks.transcribe("en", spoken, ""))
    assert steps[0][1].startswith("⏳ Transcribing")
    assert word_error_rate(SENTENCE, steps[-1][0]) < 0.2, steps[-1]


# -- the preview voice ------------------------------------------------------------------------------------
def test_the_preview_voice_stands_in_only_without_a_model_folder(tmp_path):
    host = ModelHost(HostConfig(models_dir=tmp_path / "none", outputs_dir=tmp_path / "out", preview=True))
    assert host.models() == [] and host.default_choice() == PREVIEW_CHOICE
    assert host.choice("preview") == host.choice("/preview") == PREVIEW_CHOICE
    config = host.worker_config(PREVIEW_CHOICE)
    assert config.model_dir is None and config.pipeline_factory == PIPELINE_FACTORY
    without = ModelHost(HostConfig(models_dir=tmp_path / "none", outputs_dir=tmp_path / "out", preview=False))
    assert without.choices() == [] and without.start() is None and without.choice("preview") is None


def test_the_menu_offers_the_preview_voice_and_switching_to_it_is_labelled(callbacks, factory):
    assert callbacks.model_choices("en")[-1] == ("Preview voice (approximate, no download)", "/preview")
    assert callbacks.model_choices("zh")[-1][0].startswith("预览声音")
    steps = list(callbacks.switch_model("en", "/preview"))
    try:
        assert steps[-1][0].startswith("✅ The model is ready")
        assert PREVIEW_LABEL in steps[-1][1] and DOWNLOAD_COMMAND in steps[-1][1]
        assert "**Licence:** Preview voice: Piper TTS" in steps[-1][1]
        assert factory.configs[-1].model_dir is None and factory.configs[-1].pipeline_factory == PIPELINE_FACTORY
    finally:
        list(callbacks.switch_model("en", "Fun-CosyVoice3-0.5B"))
    assert "Apache-2.0" in callbacks.status_panel("en") and PREVIEW_LABEL not in callbacks.status_panel("en")


def test_a_preview_result_is_labelled_in_the_status_and_the_history(callbacks, tmp_path):
    outputs = Path(callbacks.host.config.outputs_dir)
    outputs.mkdir(parents=True, exist_ok=True)
    wav = outputs / "preview-result.wav"
    soundfile.write(wav, np.zeros(2400, np.float32), 24000)
    sidecar = {"file": wav.name, "text": "Hi.", "mode": "instruct", "seed": 1, "speed": 1.0, "version": "preview"}
    (outputs / "preview-result.json").write_text(json.dumps(sidecar))
    ignored = "the preview voice cannot follow instructions; the instruction was ignored"
    result = JobResult(
        job_id="j1",
        duration_s=0.1,
        sample_rate=24000,
        text="Hi.",
        mode="instruct",
        seed=1,
        speed=1.0,
        model="preview-piper",
        device="cpu",
        output_path=str(wav),
        notes=[PREVIEW_NOTE, ignored],
    )
    session = Session()
    job = SimpleNamespace(request=SimpleNamespace(text="Hi."))
    final = callbacks.generation._finish(_Outputs("en", session, None), Done("j1", result), job, None)
    assert PREVIEW_LABEL in final[STATUS] and f"`{DOWNLOAD_COMMAND}`" in final[STATUS]
    assert final[STATUS].count(PREVIEW_LABEL) == 1 and f"ℹ️ {ignored}" in final[STATUS]
    row = final[HISTORY]["data"][0]
    assert row[7] == "🔶 preview" and PREVIEW_LABEL not in row[7]  # the label once, in the badge above
    table, badge, *_ = callbacks.history_show("zh", "")
    assert table["data"][0][7] == "🔶 预览声音" and DOWNLOAD_COMMAND in badge and badge.count("🔶") == 2
    assert callbacks.history_show("en", "")[1].count(PREVIEW_LABEL) == 1
    (outputs / "preview-result.json").unlink()


def test_the_status_panel_names_the_backend_s_licence():
    cosyvoice = render_status("en", {"state": "ready", "folder": "Fun-CosyVoice3-0.5B", "folder_version": "cosyvoice3"})
    assert "**Licence:** CosyVoice2 / Fun-CosyVoice3 weights and this implementation: Apache-2.0." in cosyvoice
    preview = render_status("zh", {"state": "ready", "folder": "/preview", "folder_version": "preview"})
    assert "预览声音" in preview and "`bash run.sh download cosyvoice3`" in preview and "GPL-3.0-or-later" in preview


def test_the_page_builds_without_torch_in_the_ui_process(tmp_path):
    code = (
        "import sys\nfrom pathlib import Path\nfrom cosyvoice_mac.engine.host import HostConfig, ModelHost\n"
        "from cosyvoice_mac.webui.page import build_app\n"
        f"build_app(ModelHost(HostConfig(models_dir=Path({str(tmp_path)!r}), outputs_dir=Path({str(tmp_path)!r}))))\n"
        "print('torch' in sys.modules, 'piper' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False False"  # nor the preview voice's Piper


def checked_transcript(callbacks, lang, audio, voice, typed, session: str = "check") -> tuple:
    """The check as the page runs it: its field left (the recogniser listens on a thread), then the tick that
    brings the answer: (message, verdict, the choices' row); skips when there is nothing to compare."""
    import time

    tab = SimpleNamespace(session_hash=session)
    message, checking = callbacks.check_transcript(lang, audio, voice, typed, tab)
    if _is_skip(checking):
        return message, checking, gr.skip()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        answer = callbacks.transcript_result(lang, checking, tab)
        if not _is_skip(answer[1]):
            return answer
        time.sleep(0.02)
    raise AssertionError("the transcript check never answered")


def test_a_transcript_that_is_not_the_recording_s_is_warned_about(callbacks, monkeypatch, prompt):
    from cosyvoice_mac.webui.transcript_check import transcript_agreement

    heard = "This is the voice I would like you to copy, please."
    monkeypatch.setattr(callbacks.host, "transcriber", _StubTranscriber(heard))

    def check(lang, audio, voice, typed):
        return checked_transcript(callbacks, lang, audio, voice, typed)[0]  # the message

    assert (
        check("en", prompt, "", "this is the voice i'd like you to copy please")
        == "✅ The transcript matches the recording."
    )
    other = check("en", prompt, "", "The weather in Paris is lovely today.")
    assert other.startswith("⚠️ The transcript does not seem to match") and heard in other
    assert "录音听起来是" in check("zh", prompt, "", "完全不同的句子。")
    assert callbacks.check_transcript("en", prompt, "", "Anything.")[0] == (
        "⏳ Checking the transcript against the recording…"
    )
    monkeypatch.setattr(callbacks.host, "transcriber", _StubTranscriber(RuntimeError("no recogniser")))
    assert check("en", prompt, "", "Anything at all.") == ""  # nothing to warn
    for nothing_to_compare in (check("en", None, "", "No recording yet."), check("en", prompt, "", "  ")):
        assert isinstance(nothing_to_compare, type(gr.skip()))  # the message is left as it was
    assert transcript_agreement("你好，世界！", "你好世界") == 1.0 and transcript_agreement("", "x") == 0.0
