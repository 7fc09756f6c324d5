"""The vocoder menu: torch or Core ML with compute units; off macOS the worker says why torch stays."""

from __future__ import annotations

import sys

import pytest

from cosyvoice_mac.engine import Engine, WorkerConfig
from cosyvoice_mac.engine.host import VOCODER_CHOICES, HostConfig, ModelHost
from cosyvoice_mac.request import Request, Voice
from cosyvoice_mac.webui.render import render_status
from cosyvoice_mac.webui.strings import text as say
from tests.fakes.onnx_models import make_tiny_model_dir

DEADLINE = 180.0


def test_menu_offers_torch_and_each_compute_unit_in_both_languages(tmp_path):
    from cosyvoice_mac.engine.host import Settings
    from cosyvoice_mac.webui.callbacks import Callbacks

    host = ModelHost(HostConfig(models_dir=tmp_path, outputs_dir=tmp_path / "out", preview=False))
    callbacks = Callbacks(host, Settings(tmp_path / "settings.json"))
    for lang in ("en", "zh"):
        choices = callbacks.vocoder_choices(lang)
        assert [value for _, value in choices] == list(VOCODER_CHOICES)
        assert len({label for label, _ in choices}) == len(VOCODER_CHOICES)


def test_worker_config_carries_the_choice(tmp_path):
    host = ModelHost(
        HostConfig(models_dir=tmp_path, outputs_dir=tmp_path / "out", preview=False, vocoder="coreml:CPU_AND_NE")
    )
    choice = type("Choice", (), {"is_preview": False, "path": tmp_path, "name": "m"})()
    config = host.worker_config(choice)
    assert (config.vocoder, config.compute_units) == ("coreml", "CPU_AND_NE")
    with pytest.raises(ValueError):
        host.set_vocoder("coreml:EVERYWHERE")


def test_status_panel_names_the_vocoder_or_why_not(tmp_path):
    shown = render_status("en", {"state": "ready", "vocoder": "torch", "vocoder_reason": "not macOS"})
    assert "not macOS" in shown and "Core ML" in shown
    assert say("zh", "status_vocoder", vocoder="x") != say("en", "status_vocoder", vocoder="x")


@pytest.mark.skipif(sys.platform == "darwin", reason="on macOS Core ML may really load; covered by the mac tests")
def test_engine_asked_for_core_ml_off_macos_keeps_torch_and_says_why(tmp_path, make_speech):
    model = make_tiny_model_dir("cosyvoice3", tmp_path / "m")
    config = WorkerConfig(
        model_dir=str(model),
        device="cpu",
        outputs_dir=str(tmp_path / "out"),
        cache_dir=str(tmp_path / "cache"),
        torch_threads=1,
        vocoder="coreml",
        compute_units="ALL",
    )
    engine = Engine(config, stop_timeout_s=5.0, start_timeout_s=DEADLINE)
    try:
        assert engine.start(timeout=DEADLINE), engine.status()
        status = engine.status()
        assert status["vocoder"] == "torch" and "macOS" in status["vocoder_reason"]
        voice = Voice.recording(make_speech("Hello there, a test."))
        job_id = engine.submit(Request.build("Hello.", voice, seed=1))
        assert engine.result(job_id, timeout=DEADLINE).samples().size > 0
    finally:
        engine.close()
