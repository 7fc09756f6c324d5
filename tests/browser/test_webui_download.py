"""Downloading a model from the page, against a fake hub on 127.0.0.1 that serves a tiny model folder: the
button shows the download's progress (bytes, speed), the page switches to the new model without a restart,
and the model speaks."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from cosyvoice_mac.download import MODELS
from cosyvoice_mac.pipeline.model_dir import inference_files
from tests.browser.conftest import MODEL_NAME, NEWCOMER_VIEWPORT, open_page, start_app, stop_app
from tests.browser.helpers import GENERATE_S, READY_S, fill, generate, upload_prompt
from tests.fakes.onnx_models import make_tiny_model_dir
from tests.test_download import FakeHub

TRANSCRIPT = "This is the voice I would like you to copy, please."


def _tiny_repo(folder) -> dict[str, bytes]:
    """The tiny model's inference files as a hub repo holds them (BlankEN as vocab.json + merges.txt, the
    released layout, built from the tiny folder's tokenizer.json)."""
    tiny = make_tiny_model_dir("cosyvoice3", folder)
    bpe = json.loads((tiny / "CosyVoice-BlankEN" / "tokenizer.json").read_text())["model"]
    made = {
        "CosyVoice-BlankEN/vocab.json": json.dumps(bpe["vocab"]).encode(),
        "CosyVoice-BlankEN/merges.txt": (
            "#version: 0.2\n" + "\n".join(" ".join(pair) for pair in bpe["merges"])
        ).encode(),
    }
    return {name: made.get(name) or (tiny / name).read_bytes() for name in inference_files("cosyvoice3")}


@pytest.fixture(scope="module")
def hub_app(tmp_path_factory):
    root = tmp_path_factory.mktemp("webui-download")
    with (
        FakeHub(MODELS["cosyvoice3"].huggingface, _tiny_repo(root / "tiny")) as hub,
        pytest.MonkeyPatch.context() as env,
    ):
        env.setenv("HF_ENDPOINT", hub.url)
        env.setenv("HF_HOME", str(root / "hf-home"))  # no token, no cache of the real user
        env.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        env.delenv("HF_HUB_OFFLINE", raising=False)
        env.delenv("HF_TOKEN", raising=False)
        (root / "models").mkdir()
        app = start_app(root, root / "models")  # no model yet: the preview voice speaks
        try:
            yield app, hub
        finally:
            stop_app(app)


def test_the_download_button_fetches_the_model_shows_progress_and_switches_to_it(browser, hub_app, request, prompt_wav):
    app, hub = hub_app
    with open_page(browser, app, request, NEWCOMER_VIEWPORT) as page:
        expect(page.locator("#cv-status-panel")).to_contain_text("ready", timeout=READY_S * 1000)
        expect(page.locator("#cv-advanced")).to_be_hidden()  # the preview voice has no engine or vocoder menu
        button = page.locator("#cv-download-cosyvoice3")
        # the size the hub announced, before anything is fetched
        expect(button).to_have_text(re.compile(r"^\s*Download Fun-CosyVoice3-0\.5B \(\d+(\.\d)? (B|KB|MB|GB)\)\s*$"))
        expect(button).to_be_visible()  # open at first: no model is installed
        button.click()
        message = page.locator("#cv-download-msg")
        expect(message).to_contain_text("Downloaded Fun-CosyVoice3-0.5B", timeout=GENERATE_S * 1000)
        expect(page.locator("#cv-model-msg")).to_contain_text("The model is ready", timeout=GENERATE_S * 1000)
        expect(page.locator("#cv-status-panel")).to_contain_text(f"Model: {MODEL_NAME}")
        expect(page.locator("#cv-model input")).to_have_value(MODEL_NAME)
        assert sorted(hub.downloaded()) == sorted(inference_files("cosyvoice3"))
        assert (app.root / "models" / MODEL_NAME / "llm.pt").is_file()

        upload_prompt(page, prompt_wav)
        fill(page, "cv-transcript", TRANSCRIPT)
        fill(page, "cv-text", "Spoken by the model the page downloaded.")
        assert "Done" in generate(page)
        sidecar = sorted(app.outputs.glob("*.json"))[-1]
        assert json.loads(sidecar.read_text())["version"] == "cosyvoice3"


def test_the_progress_line_names_bytes_speed_and_source(tmp_path):
    from cosyvoice_mac.webui.download_panel import DownloadJob, progress_html

    job = DownloadJob.__new__(DownloadJob)  # its words only: no thread, no hub
    job.version, job.source = "cosyvoice3", "huggingface"
    words = progress_html(
        "en", job, {"done": 3 << 30, "total": 5 << 30, "speed": 12 << 20, "left": 170.0, "resumed": 0}
    )
    assert "3.0 GB of 5.0 GB" in words and "12.0 MB/s" in words and "about 2 min 50 s left" in words
    assert "from Hugging Face" in words and 'max="5368709120"' in words
    resumed = progress_html("zh", job, {"done": 1, "total": None, "speed": None, "left": None, "resumed": 2 << 20})
    assert "续传" in resumed and "<progress" not in resumed
