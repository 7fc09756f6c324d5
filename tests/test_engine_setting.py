"""The engine setting: the page's Auto / MLX / PyTorch menu, what the app starts with, and ``synth --engine``.

A change on the page restarts the worker with the new choice, so the jobs after it run on that engine
(the status and each sidecar say which, and why). The page tests drive ``Callbacks`` over a real worker
process: first around the fake pipeline (tones; it reports what the real choice rule picks), then around
real tiny CosyVoice3 folders, where MLX runs on its CPU backend and a worker without mlx falls back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from cosyvoice_mac.config import ConfigError
from cosyvoice_mac.engine import Engine, JobCancelled
from cosyvoice_mac.engine.host import HostConfig, ModelHost, Settings, starting_engine
from cosyvoice_mac.mlx import ENGINE_ENV, ENGINES, mlx_available
from cosyvoice_mac.request import Request, Voice
from cosyvoice_mac.webui.callbacks import Callbacks
from cosyvoice_mac.webui.render import render_status
from tests.fakes.fake_pipeline import FAKE_FACTORY, fake_request
from tests.fakes.mlx_pipeline import WITHOUT_MLX_FACTORY
from tests.fakes.onnx_models import make_tiny_model_dir

DEADLINE = 180.0
SHORT_WARM_UP = "Hi."  # each worker start warms up; the tiny random LLM speaks any text to its length limit
MODEL = "Fun-CosyVoice3-0.5B"
needs_mlx = pytest.mark.skipif(not mlx_available(), reason="needs mlx (Linux: pip install 'mlx[cpu]')")


def _host(
    root: Path, factory=None, real_model: bool = False, engine: str = "auto", version: str = "cosyvoice3"
) -> ModelHost:
    """A started host over one model folder (a real tiny one, or a CosyVoice3 yaml for the fake pipeline)."""
    folder = root / "models" / MODEL
    if real_model:
        make_tiny_model_dir(version, folder)
    else:
        folder.mkdir(parents=True)
        (folder / "cosyvoice3.yaml").write_text("sample_rate: 24000\n")
    host = ModelHost(
        HostConfig(
            models_dir=root / "models",
            outputs_dir=root / "outputs",
            cache_dir=root / "cache",
            device="cpu",
            torch_threads=1,
            start_timeout_s=DEADLINE,
            preview=False,
            engine=engine,
        ),
        engine_factory=factory or (lambda config, **options: Engine(config, stop_timeout_s=5.0, **options)),
    )
    host.start()
    assert host.engine.start(wait=True, timeout=DEADLINE), host.status()
    return host


def _fake_engine(config, segment_s: float = 0.05, load_s: float = 0.0, **options):
    """The host's engine around the fake pipeline; the host's pipeline kwargs (the engine choice) pass on."""
    kwargs = {**config.pipeline_kwargs, "segment_s": segment_s, "load_s": load_s}
    fake = replace(config, pipeline_factory=FAKE_FACTORY, pipeline_kwargs=kwargs)
    return Engine(fake, stop_timeout_s=5.0, cancel_grace_s=5.0, **options)


def _short_warm_up(config, **options):
    """The real engine with a short warm-up: the tiny random LLM speaks to its length limit, slow on MLX-CPU."""
    return Engine(replace(config, warmup_text=SHORT_WARM_UP), stop_timeout_s=5.0, **options)


def _without_mlx_engine(config, **options):
    fallback = replace(config, pipeline_factory=WITHOUT_MLX_FACTORY, warmup_text=SHORT_WARM_UP)
    return Engine(fallback, stop_timeout_s=5.0, **options)


def _switch(callbacks: Callbacks, value: str, lang: str = "en") -> tuple[str, str]:
    """Choose ``value`` in the engine menu and wait for the restart: (the last model message, status panel)."""
    updates = list(callbacks.switch_engine(lang, value))
    return updates[-1]


def _sidecar(result) -> dict:
    return json.loads(Path(result.sidecar_path).read_text())


# -- the menu and the start-up choice ---------------------------------------------------------------
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_menu_offers_auto_mlx_and_torch(tmp_path, lang):
    choices = Callbacks.engine_choices(lang)
    assert [value for _, value in choices] == list(ENGINES) == ["auto", "mlx", "torch"]
    labels = [label for label, _ in choices]
    assert len(set(labels)) == 3 and labels[1:] == ["MLX", "PyTorch"] and "MLX" in labels[0]


def test_the_start_up_flag_then_the_variable_then_the_saved_choice_then_auto(tmp_path, monkeypatch):
    settings = Settings(tmp_path)
    monkeypatch.delenv(ENGINE_ENV, raising=False)
    assert starting_engine(None, settings) == "auto"
    settings.update(engine="mlx")
    assert starting_engine(None, settings) == "mlx"  # remembered across app restarts
    monkeypatch.setenv(ENGINE_ENV, "torch")
    assert starting_engine(None, settings) == "torch"  # the variable wins over the remembered choice
    assert starting_engine("auto", settings) == "auto"  # --engine wins over both
    monkeypatch.setenv(ENGINE_ENV, "Metal")
    with pytest.raises(ConfigError, match="COSYVOICE_ENGINE=Metal is not an engine; use one of auto, mlx, torch"):
        starting_engine(None, settings)
    monkeypatch.delenv(ENGINE_ENV)
    settings.update(engine="metal")  # a hand-edited settings file
    assert starting_engine(None, settings) == "auto"


def test_the_app_names_a_bad_variable_at_start_not_a_traceback(monkeypatch, capsys):
    from cosyvoice_mac.app import parse_args

    monkeypatch.setenv(ENGINE_ENV, "metal")
    with pytest.raises(SystemExit) as exit_info:
        parse_args([])
    assert exit_info.value.code == 2
    assert "COSYVOICE_ENGINE=metal is not an engine; use one of auto, mlx, torch" in capsys.readouterr().err
    monkeypatch.delenv(ENGINE_ENV)
    assert parse_args(["--engine", "mlx"]).engine == "mlx" and parse_args([]).engine is None


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_panel_names_the_engine_the_setting_and_why(lang):
    reason = "MLX was asked for but is not available on this machine: the mlx package is not installed"
    shown = render_status(lang, {"state": "ready", "engine": "torch", "engine_reason": reason, "engine_setting": "mlx"})
    assert "PyTorch" in shown and "MLX" in shown and reason in shown
    shown = render_status(lang, {"state": "ready", "engine": "mlx", "engine_setting": "auto"})
    assert "MLX" in shown and ("Auto" in shown if lang == "en" else "自动" in shown)


# -- the page over the fake pipeline -----------------------------------------------------------------
@needs_mlx
def test_a_change_on_the_page_restarts_on_that_engine_and_is_remembered(tmp_path, monkeypatch):
    monkeypatch.delenv(ENGINE_ENV, raising=False)
    host = _host(tmp_path, _fake_engine)
    callbacks = Callbacks(host, Settings(tmp_path / "cache"))
    try:
        status = host.status()
        assert (status["engine"], status["engine_setting"]) == ("torch", "auto")
        assert "Apple Silicon" in status["engine_reason"]  # why Auto picked PyTorch here
        assert "setting: Auto" in callbacks.status_panel("en")
        first_worker = host.status()["worker_pid"]

        message, panel = _switch(callbacks, "mlx")
        assert "The model is ready" in message and "**Engine:** MLX (setting: MLX)" in panel
        assert host.status()["worker_pid"] != first_worker and host.status()["engine"] == "mlx"
        done = host.engine.result(host.engine.submit(fake_request("On MLX now.")), DEADLINE)
        assert _sidecar(done)["engine"] == "mlx"
        assert Settings(tmp_path / "cache").load()["engine"] == "mlx"
        assert starting_engine(None, Settings(tmp_path / "cache")) == "mlx"  # the next app start keeps it
        assert callbacks.on_load("en")[-1] == "mlx"  # a tab opened now shows the choice

        message, panel = _switch(callbacks, "torch", lang="zh")
        assert "**引擎：** PyTorch（设置：PyTorch）" in panel
        done = host.engine.result(host.engine.submit(fake_request("Back on PyTorch.")), DEADLINE)
        assert _sidecar(done)["engine"] == "torch"
        assert Settings(tmp_path / "cache").load()["engine"] == "torch"
        restarts = host.status()["restarts"]
        list(callbacks.switch_engine("en", "torch"))  # the same choice: nothing restarts
        list(callbacks.switch_engine("en", "metal"))  # a value the menu never listed: ignored
        assert host.status()["restarts"] == restarts and host.config.engine == "torch"
    finally:
        host.close()


@needs_mlx
def test_jobs_waiting_during_the_switch_keep_their_place_and_run_on_the_new_engine(tmp_path):
    host = _host(tmp_path, lambda config, **options: _fake_engine(config, segment_s=2.0, **options), engine="torch")
    try:
        engine = host.engine
        with engine.subscribe() as heard:
            running = engine.submit(fake_request("[slow] One. Two. Three. Four. Five. Six."))
            heard.wait_for(running, ("started",), DEADLINE)
        waiting = engine.submit(fake_request("I was waiting."))
        assert host.set_engine("mlx")
        assert host.engine is engine  # the same engine and queue; only its worker was replaced
        assert _sidecar(engine.result(waiting, DEADLINE))["engine"] == "mlx"
        with pytest.raises(JobCancelled, match="the engine setting changed to mlx"):
            engine.result(running, DEADLINE)
    finally:
        host.close()


@needs_mlx
def test_a_change_while_the_model_still_loads_is_not_lost(tmp_path):
    (tmp_path / "models" / MODEL).mkdir(parents=True)
    (tmp_path / "models" / MODEL / "cosyvoice3.yaml").write_text("sample_rate: 24000\n")
    config = HostConfig(
        models_dir=tmp_path / "models", outputs_dir=tmp_path / "outputs", cache_dir=tmp_path / "cache", preview=False
    )
    host = ModelHost(config, engine_factory=lambda config, **options: _fake_engine(config, load_s=3.0, **options))
    try:
        host.start()  # loading (with Auto) for 3 s; the menu changes meanwhile
        deadline = time.monotonic() + DEADLINE
        while host.status().get("worker_pid") is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the worker is spawned (with Auto) and loading
        assert host.status()["state"] == "starting"
        assert host.set_engine("mlx")
        assert host.status()["engine"] == "mlx"
    finally:
        host.close()


# -- the page over real tiny CosyVoice3 folders -------------------------------------------------------
@pytest.fixture(scope="module")
def voice(make_speech):
    return Voice.recording(str(make_speech("This is the voice I would like you to copy, please.", seconds=4.0)))


@needs_mlx
def test_mlx_and_torch_chosen_on_the_page_run_the_real_model(tmp_path, voice):
    host = _host(tmp_path, _short_warm_up, real_model=True, engine="torch")
    callbacks = Callbacks(host, Settings(tmp_path / "cache"))
    try:
        message, panel = _switch(callbacks, "mlx")
        assert "The model is ready" in message and "MLX (setting: MLX)" in panel, (message, panel)
        status = host.status()
        assert status["engine"] == "mlx" and status["mlx_memory"]["peak_bytes"] > 0
        assert status["mlx_llm"]["precision"] and "**MLX LLM:**" in panel  # the worker reports why, the panel says it
        done = host.engine.result(host.engine.submit(Request.build("Spoken by MLX.", voice, seed=3)), DEADLINE)
        sidecar = _sidecar(done)
        assert done.samples().size > 0 and sidecar["engine"] == "mlx" and sidecar["engine_reason"] is None

        message, panel = _switch(callbacks, "torch")
        assert "PyTorch (setting: PyTorch)" in panel and host.status()["mlx_memory"] is None
        done = host.engine.result(host.engine.submit(Request.build("Spoken by PyTorch.", voice, seed=3)), DEADLINE)
        assert done.samples().size > 0 and _sidecar(done)["engine"] == "torch"
    finally:
        host.close()


def test_mlx_chosen_where_it_cannot_import_says_why_and_torch_runs(tmp_path, voice):
    host = _host(tmp_path, _without_mlx_engine, real_model=True, engine="torch")
    callbacks = Callbacks(host, Settings(tmp_path / "cache"))
    try:
        message, panel = _switch(callbacks, "mlx")
        assert "The model is ready" in message, message  # a fallback, not a failed start
        assert "Traceback" not in message + panel
        reason = host.status()["engine_reason"]
        assert host.status()["engine"] == "torch" and "MLX was asked for but is not available on this machine" in reason
        assert "**Engine:** PyTorch (setting: MLX; MLX was asked for but is not available on this machine" in panel
        done = host.engine.result(host.engine.submit(Request.build("Still spoken.", voice, seed=3)), DEADLINE)
        sidecar = _sidecar(done)
        assert done.samples().size > 0 and sidecar["engine"] == "torch" and sidecar["engine_reason"] == reason
    finally:
        host.close()


@needs_mlx
def test_mlx_chosen_for_cosyvoice2_runs_it_on_mlx(tmp_path, voice):
    host = _host(tmp_path, _short_warm_up, real_model=True, engine="mlx", version="cosyvoice2")
    try:
        status = host.status()
        assert (status["engine"], status["engine_reason"]) == ("mlx", None)
        assert status["mlx_memory"]["peak_bytes"] > 0
        panel = Callbacks(host, Settings(tmp_path / "cache")).status_panel("en")
        assert "**Engine:** MLX (setting: MLX)" in panel
        done = host.engine.result(host.engine.submit(Request.build("By MLX.", voice, seed=3)), DEADLINE)
        sidecar = _sidecar(done)
        assert done.samples().size > 0 and (sidecar["engine"], sidecar["engine_reason"]) == ("mlx", None)
    finally:
        host.close()


# -- the command line -----------------------------------------------------------------------------
@pytest.mark.parametrize("engine", [pytest.param("mlx", marks=needs_mlx), "torch"])
def test_synth_runs_the_engine_asked_for(tmp_path, make_speech, engine):
    model = make_tiny_model_dir("cosyvoice3", tmp_path / "m")
    out = tmp_path / "out.wav"
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop(ENGINE_ENV, None)
    done = subprocess.run(
        [sys.executable, "-m", "cosyvoice_mac", "synth", "--model", str(model), "--engine", engine]
        + ["--prompt-wav", str(make_speech("Hello there, this is a test.")), "--text", "Hello world."]
        + ["--device", "cpu", "--local", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert f"engine: {engine}\n" in done.stderr and out.stat().st_size > 1000
