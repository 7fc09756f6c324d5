"""The engine menu in a browser: choosing MLX restarts the model on it, the status panel and the next
output say so, and the choice is still there when the app starts again. This module runs its own app (its
choices must not leak into the other modules' app); MLX runs on its CPU backend here."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from cosyvoice_mac.mlx import mlx_available
from cosyvoice_mac.webui.features import ENGINE_MENU_VARIABLE
from tests.browser.conftest import MODEL_NAME, open_page, start_app, stop_app
from tests.browser.helpers import GENERATE_S, fill, generate, upload_prompt, wait_until_ready
from tests.fakes.onnx_models import make_tiny_model_dir

pytestmark = pytest.mark.skipif(not mlx_available(), reason="needs mlx (Linux: pip install 'mlx[cpu]')")
TRANSCRIPT = "This is the voice I would like you to copy, please."


@pytest.fixture(scope="module")
def engine_root(tmp_path_factory):
    """The module's app folder; its apps offer the engine menu on Linux too (MLX's CPU backend)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENGINE_MENU_VARIABLE, "1")
        yield _engine_root(tmp_path_factory)


def _engine_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("webui-engine")
    make_tiny_model_dir("cosyvoice3", root / "models" / MODEL_NAME)
    return root


def _open_advanced(page) -> None:
    """The engine menu lives in the Advanced fold (closed at first)."""
    if not page.locator("#cv-engine input").is_visible():
        page.locator("#cv-advanced").get_by_role("button").first.click()


def _choose_engine(page, label: str) -> None:
    _open_advanced(page)
    page.locator("#cv-engine input").click()
    page.get_by_role("option", name=label, exact=True).click()


def test_choosing_mlx_on_the_page_runs_the_model_on_mlx_and_is_kept(browser, engine_root, request, prompt_wav):
    panel_says = re.compile(r"Engine: MLX \(setting: MLX\)")
    app = start_app(engine_root, engine_root / "models")
    try:
        with open_page(browser, app, request) as page:
            wait_until_ready(page)
            panel = page.locator("#cv-status-panel")
            expect(panel).to_contain_text("Engine: PyTorch (setting: Auto; Auto uses MLX on Apple Silicon Macs only")
            _choose_engine(page, "MLX")
            expect(page.locator("#cv-model-msg")).to_contain_text("Restarting on the chosen engine")
            expect(page.locator("#cv-model-msg")).to_contain_text("The model is ready", timeout=GENERATE_S * 1000)
            expect(panel).to_contain_text(panel_says)

            upload_prompt(page, prompt_wav)
            fill(page, "cv-transcript", TRANSCRIPT)
            fill(page, "cv-text", "Spoken by the MLX engine.")
            before = app.output_files()
            assert "Done" in generate(page)
            (new_file,) = app.output_files() - before
            sidecar = json.loads((app.outputs / new_file).with_suffix(".json").read_text())
            assert sidecar["engine"] == "mlx"

            _choose_engine(page, "PyTorch")
            expect(panel).to_contain_text("Engine: PyTorch (setting: PyTorch)", timeout=GENERATE_S * 1000)
            _choose_engine(page, "MLX")
            expect(panel).to_contain_text(panel_says, timeout=GENERATE_S * 1000)
    finally:
        stop_app(app)

    again = start_app(engine_root, engine_root / "models")  # the same cache folder: the choice was saved there
    try:
        with open_page(browser, again, request) as page:
            wait_until_ready(page)
            _open_advanced(page)
            expect(page.locator("#cv-engine input")).to_have_value("MLX")
            expect(page.locator("#cv-status-panel")).to_contain_text(panel_says)
    finally:
        stop_app(again)
