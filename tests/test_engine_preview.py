"""The engine running the offline preview backend: outputs are real speech and say they are a preview."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cosyvoice_mac.engine import Engine
from cosyvoice_mac.preview import PREVIEW_LABEL
from cosyvoice_mac.request import Request, Voice
from tests.fakes.fake_pipeline import preview_worker_config, result_and_events

DEADLINE = 180.0


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    config = preview_worker_config(tmp_path_factory.mktemp("preview-engine"), torch_threads=1)
    engine = Engine(config, stop_timeout_s=5.0, start_timeout_s=DEADLINE)
    assert engine.start(timeout=DEADLINE), engine.status()
    yield engine
    engine.close()


def test_preview_job_writes_a_wav_labelled_as_preview(engine, make_speech):
    voice = str(make_speech("This is the voice I would like you to copy, please.", seconds=4.0))
    job_id = engine.submit(Request.build("Hello from the preview voice.", Voice.recording(voice), seed=1))
    result = engine.result(job_id, timeout=DEADLINE)
    assert engine.status()["version"] == "preview"
    assert result.samples().size > 0 and np.isfinite(result.samples()).all()
    assert any(PREVIEW_LABEL in note for note in result.notes)
    sidecar = json.loads(open(result.sidecar_path).read())
    assert sidecar["version"] == "preview" and any(PREVIEW_LABEL in note for note in sidecar["notes"])


def test_preview_streams_its_audio_and_a_voice_can_be_saved_first(engine, make_speech):
    voice = str(make_speech("A voice for the preview to copy, saved before any generation.", seconds=4.0))
    saved = engine.save_voice_from_audio("Preview narrator", voice, None, timeout=DEADLINE)
    assert saved["model_id"] == engine.status()["model"]
    result, events = result_and_events(
        engine,
        Request.build("First sentence here. And a second one.", engine.voice("Preview narrator"), stream=True, seed=2),
        DEADLINE,
    )
    chunks = [event.audio for event in events if event.kind == "progress"]
    assert chunks and result.cache_hit  # a short text is one segment, so maybe one chunk
    assert np.allclose(np.concatenate(chunks), result.samples(), atol=1e-4)


@pytest.fixture(scope="module")
def calm_recording(engine, make_speech) -> str:
    """The file of the "calm" recording of the saved voice "Styled narrator", made here with its own recording;
    the calm one is in a higher voice, so a style is heard."""
    own = str(make_speech("The narrator's own recording, read in a plain voice.", seconds=4.0))
    calm = str(make_speech("The same narrator again, reading slowly and calmly now.", seconds=4.0, voice="en-us+f4"))
    engine.save_voice_from_audio("Styled narrator", own, "Own words.", timeout=DEADLINE)
    engine.add_voice_style("Styled narrator", "calm", calm, "Calm words.", timeout=DEADLINE)
    return calm


def test_a_request_speaks_a_saved_voice_s_style_and_an_unknown_style_is_refused_before_queueing(
    engine, calm_recording, tmp_path
):
    from cosyvoice_mac.engine import VoiceStyleUnknown
    from cosyvoice_mac.longform.runner import run_dialogue
    from cosyvoice_mac.longform.speakers import EngineSpeak, VoiceUnusable

    calm = calm_recording
    calm_hash = engine.voices.styled("Styled narrator", "calm")["audio_hash"]
    voice = engine.voice("Styled narrator", " CALM ")  # as the voice spells it, with that recording's transcript
    assert (voice.style, voice.transcript) == ("calm", "Calm words.")
    result = engine.result(engine.submit(Request.build("Hello there.", voice, seed=3)), timeout=DEADLINE)
    assert result.prompt_hash == calm_hash != engine.voices.get("Styled narrator")["audio_hash"]
    assert json.loads(open(result.sidecar_path).read())["style"] == "calm"
    loud = Request.build("Hello there.", Voice.saved_voice("Styled narrator", style="loud"), seed=3)
    with pytest.raises(VoiceStyleUnknown, match="no 'loud' recording; its styles: neutral, calm"):
        engine.submit(loud)
    assert engine.line() == []  # refused before it waited in line

    speak = EngineSpeak(engine, timeout_s=DEADLINE)  # long form: a dialogue line names its style in its tag
    script = "Styled narrator: Hi.\nStyled narrator (loud): Hi!"
    with pytest.raises(VoiceUnusable, match="no 'loud' recording; its styles: neutral, calm"):
        run_dialogue(script, {}, ["Styled narrator"], speak, tmp_path / "a")
    assert list(tmp_path.iterdir()) == [] and engine.line() == []  # before any line was spoken
    spoken = []

    class NotingSpeak(EngineSpeak):  # notes which recording each line's job spoke with
        def _facts(self, result) -> dict:
            spoken.append(result.prompt_hash)
            return super()._facts(result)

    script = "Styled narrator (calm): Slowly.\nStyled narrator: Plainly."
    run_dialogue(script, {}, ["Styled narrator"], NotingSpeak(engine, timeout_s=DEADLINE), tmp_path / "talk")
    assert spoken == [calm_hash, engine.voices.get("Styled narrator")["audio_hash"]]

    python_door = engine.voices.recording_voice("Styled narrator", "calm")  # for a model loaded in this process
    assert python_door.kind == "audio" and python_door.transcript == "Calm words."
    assert open(python_door.audio, "rb").read() == open(calm, "rb").read()


def test_an_inline_style_tag_speaks_the_voice_s_recording_of_it_and_its_credentials_name_that_recording(
    engine, calm_recording
):
    from cosyvoice_mac.errors import RequestError

    voice = engine.voice("Styled narrator")  # its own recording, zero-shot with its own words
    own_hash, calm_hash = (engine.voices.styled("Styled narrator", style)["audio_hash"] for style in (None, "calm"))
    plain_result, tagged_result = (
        engine.result(engine.submit(Request.build(text, voice, seed=4)), timeout=DEADLINE)
        for text in ("Plain words here. Plain words here.", "Plain words here. (calm) Plain words here.")
    )
    plain, tagged = plain_result.samples(), tagged_result.samples()
    quarter = min(plain.size, tagged.size) // 4  # each sentence is about half (the voices differ in length a little)

    def change(part: slice) -> float:  # how far the tagged text's audio is from the plain one's, relative
        return float(np.sqrt(np.mean((plain[part] - tagged[part]) ** 2) / np.mean(plain[part] ** 2)))

    head, tail = change(slice(None, quarter)), change(slice(-quarter, None))
    assert head < 0.2 < tail, (head, tail)  # the untagged sentence stays, the calm recording spoke the other
    sidecar = json.loads(open(tagged_result.sidecar_path).read())
    assert (sidecar["prompt_hash"], sidecar["voice_hashes"]) == (own_hash, [own_hash, calm_hash])
    with pytest.raises(RequestError, match=r"\(calmer\) is not a style \(at character 1\): did you mean \(calm\)"):
        engine.submit(Request.build("(calmer) Hello.", voice, seed=4))  # the voice's styles are named among them
    assert engine.line() == []
