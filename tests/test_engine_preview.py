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
