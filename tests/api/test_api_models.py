"""/v1 in front of a CosyVoice model folder (the test stand-in pipeline): models are listed by folder, an
installed but unloaded one is a 409, and while the model loads speech requests get a 503 with Retry-After."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr
import httpx
import pytest

from cosyvoice_mac.api import serve_page
from cosyvoice_mac.engine import Engine, VoiceLibrary
from cosyvoice_mac.engine.host import HostConfig, ModelHost
from tests.fakes.fake_pipeline import FAKE_FACTORY

LOADED, OTHER = "Fun-CosyVoice3-0.5B", "CosyVoice2-0.5B"


@pytest.fixture(scope="module")
def loading_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("loading")
    for name, config in ((LOADED, "cosyvoice3.yaml"), (OTHER, "cosyvoice2.yaml")):
        (root / "models" / name).mkdir(parents=True)
        (root / "models" / name / config).write_text("{}\n")
    VoiceLibrary(root / "cache").save("Ada", audio_hash="0123456789abcdef", model_id="fake-" + LOADED)

    def slow_engine(config, **options):  # loads for longer than the tests take
        return Engine(replace(config, pipeline_factory=FAKE_FACTORY, pipeline_kwargs={"load_s": 120}), **options)

    host = ModelHost(
        HostConfig(
            models_dir=root / "models",
            outputs_dir=root / "outputs",
            cache_dir=root / "cache",
            device="cpu",
            preview=False,
            preferred_model=LOADED,
        ),
        engine_factory=slow_engine,
    )
    host.start()
    with gr.Blocks() as page:
        gr.Markdown("page")
    server = serve_page(
        page, host, bind_host="127.0.0.1", port=0, api_key=None, max_queue=2, upload_limit_bytes=1 << 20
    )
    yield server
    server.close()
    host.close()


def test_models_are_the_installed_folders_with_the_loaded_one_marked(loading_server):
    models = {model["id"]: model for model in httpx.get(loading_server.url + "v1/models", timeout=30).json()["data"]}
    assert set(models) == {LOADED, OTHER}
    assert models[LOADED]["loaded"] and not models[OTHER]["loaded"]
    assert models[OTHER]["version"] == "cosyvoice2" and not models[OTHER]["preview"]
    voices = httpx.get(loading_server.url + "v1/voices", timeout=30).json()["data"]
    assert [voice["name"] for voice in voices] == ["Ada"]  # no preview voice when a model is installed


def test_speech_while_the_model_loads_is_a_503_with_retry_after(loading_server):
    answer = httpx.post(
        loading_server.url + "v1/audio/speech",
        timeout=30,
        json={"model": LOADED, "voice": "Ada", "input": "Hello.", "response_format": "wav"},
    )
    assert answer.status_code == 503 and int(answer.headers["retry-after"]) >= 1
    assert answer.json()["error"]["code"] == "model_loading"


def test_an_installed_model_that_is_not_loaded_is_a_409_and_an_unknown_one_a_404(loading_server):
    body = {"voice": "Ada", "input": "Hello."}
    other = httpx.post(loading_server.url + "v1/audio/speech", json={**body, "model": OTHER}, timeout=30)
    assert other.status_code == 409 and other.json()["error"]["code"] == "model_not_loaded"
    assert LOADED in other.json()["error"]["message"]
    unknown = httpx.post(loading_server.url + "v1/audio/speech", json={**body, "model": "tts-9"}, timeout=30)
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "model"
    preview = httpx.post(
        loading_server.url + "v1/audio/speech", json={**body, "voice": "preview", "model": LOADED}, timeout=30
    )
    assert preview.status_code == 404  # the preview voice only stands in while no model is installed
