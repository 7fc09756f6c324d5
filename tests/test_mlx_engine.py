"""Choosing the MLX or the PyTorch engine, and PyTorch taking over a job that fails on MLX.

The pipelines are real tiny CosyVoice3/CosyVoice2 folders; MLX runs on its CPU backend here.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("mlx.core", reason="needs mlx (Linux: pip install 'mlx[cpu]')")

from cosyvoice_mac.config import ConfigError  # noqa: E402
from cosyvoice_mac.engine import Engine, Job, WorkerConfig  # noqa: E402
from cosyvoice_mac.mlx import choice  # noqa: E402
from cosyvoice_mac.mlx.networks import MlxNetworks  # noqa: E402
from cosyvoice_mac.pipeline import CosyVoice  # noqa: E402
from cosyvoice_mac.pipeline.loading import Networks  # noqa: E402
from cosyvoice_mac.request import Request, Voice  # noqa: E402
from tests.fakes.mlx_pipeline import FAILING_MLX_FACTORY, MLX_FAILURE  # noqa: E402
from tests.fakes.onnx_models import make_tiny_model_dir  # noqa: E402

DEADLINE = 180.0


@pytest.fixture
def apple_silicon(monkeypatch):
    monkeypatch.setattr(choice, "is_apple_silicon", lambda: True)
    monkeypatch.setattr(choice, "mlx_available", lambda: True)
    monkeypatch.delenv("COSYVOICE_DEVICE", raising=False)


def test_auto_picks_mlx_for_either_version_on_apple_silicon_only(apple_silicon, monkeypatch):
    monkeypatch.delenv(choice.ENGINE_ENV, raising=False)
    picked = choice.choose_engine(None, "cosyvoice3")
    assert picked.engine == "mlx" and "Auto" in picked.reason and "Apple Silicon" in picked.reason
    assert choice.choose_engine("auto", "cosyvoice3", "mps").engine == "mlx"
    on_cpu = choice.choose_engine("auto", "cosyvoice3", "cpu")  # an explicit CPU stays PyTorch, and says so
    assert on_cpu.engine == "torch" and "the device is set to cpu" in on_cpu.reason
    assert choice.choose_engine("auto", "cosyvoice2").engine == "mlx"
    monkeypatch.setattr(choice, "is_apple_silicon", lambda: False)
    elsewhere = choice.choose_engine("auto", "cosyvoice3")
    assert elsewhere.engine == "torch" and "Apple Silicon Macs only" in elsewhere.reason


def test_a_cpu_device_policy_keeps_auto_on_torch(apple_silicon, monkeypatch):
    monkeypatch.delenv(choice.ENGINE_ENV, raising=False)
    monkeypatch.setenv("COSYVOICE_DEVICE", "cpu")
    assert choice.choose_engine(None, "cosyvoice3").engine == "torch"
    monkeypatch.setenv("COSYVOICE_DEVICE", "mps")
    assert choice.choose_engine(None, "cosyvoice3").engine == "mlx"


def test_the_environment_and_the_argument_choose_explicitly(apple_silicon, monkeypatch):
    monkeypatch.setenv(choice.ENGINE_ENV, "torch")
    assert choice.choose_engine(None, "cosyvoice3").engine == "torch"
    assert choice.choose_engine("mlx", "cosyvoice3").engine == "mlx"  # the argument wins
    monkeypatch.setenv(choice.ENGINE_ENV, "metal")
    with pytest.raises(ConfigError, match="COSYVOICE_ENGINE=metal is not an engine; use one of auto, mlx, torch"):
        choice.choose_engine(None, "cosyvoice3")


def test_mlx_asked_for_where_it_cannot_run_says_why(monkeypatch):
    monkeypatch.setattr(choice, "mlx_available", lambda: False)
    missing = choice.choose_engine("mlx", "cosyvoice3")
    assert missing.engine == "torch" and "not available on this machine" in missing.reason
    assert "mlx package is not installed" in missing.reason
    monkeypatch.setattr(choice, "mlx_available", lambda: True)
    assert choice.choose_engine("mlx", "cosyvoice2") == choice.EngineChoice("mlx")


def test_a_version_whose_row_lacks_an_mlx_stage_runs_on_torch_and_says_which(apple_silicon, monkeypatch):
    from dataclasses import replace

    from cosyvoice_mac import versions

    partial = replace(versions.COSYVOICE2, mlx_stages=("llm", "hift"))
    monkeypatch.setitem(versions.SPECS, "cosyvoice2", partial)
    for asked in ("auto", "mlx"):
        picked = choice.choose_engine(asked, "cosyvoice2")
        assert picked == choice.EngineChoice("torch", "cosyvoice2 runs on PyTorch: its flow has no MLX port")
    assert choice.choose_engine("mlx", "cosyvoice3").engine == "mlx"


def test_mlx_that_is_installed_but_does_not_import_says_why(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def broken(name, *args, **kwargs):
        if name == "mlx.core" or name.startswith("mlx"):
            raise ImportError("libmlx.dylib: incompatible macOS version")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(choice, "mlx_available", lambda: True)
    monkeypatch.setattr(builtins, "__import__", broken)
    picked = choice.choose_engine("mlx", "cosyvoice3")
    assert picked.engine == "torch" and "not available on this machine" in picked.reason
    assert "mlx does not import (ImportError: libmlx.dylib: incompatible macOS version)" in picked.reason


@pytest.mark.parametrize(
    ("version", "engine", "networks"),
    [
        ("cosyvoice3", "mlx", MlxNetworks),
        ("cosyvoice3", "torch", Networks),
        ("cosyvoice2", "mlx", MlxNetworks),
        ("cosyvoice2", "torch", Networks),
    ],
)
def test_from_pretrained_builds_the_chosen_engine(tmp_path, version, engine, networks):
    model = CosyVoice.from_pretrained(make_tiny_model_dir(version, tmp_path / version), device="cpu", engine=engine)
    assert isinstance(model.networks, networks)
    counts = model.networks.parameter_count()
    assert set(counts) == {"llm", "flow", "hift"} and min(counts.values()) > 0


def _config(tmp_path, version: str = "cosyvoice3", **changes) -> WorkerConfig:
    model_dir = make_tiny_model_dir(version, tmp_path / "model")
    options = dict(
        model_dir=str(model_dir),
        device="cpu",
        outputs_dir=str(tmp_path / "outputs"),
        cache_dir=str(tmp_path / "cache"),
        torch_threads=1,
        pipeline_factory=FAILING_MLX_FACTORY,
        warmup_text="Hi.",  # the tiny random LLM speaks to its length limit: short texts keep MLX-CPU quick
    )
    return WorkerConfig(**{**options, **changes})


@pytest.fixture(scope="module")
def voice(make_speech):
    return str(make_speech("This is the voice I would like you to copy, please.", seconds=4.0))


@pytest.mark.parametrize("version", ["cosyvoice3", "cosyvoice2"])
def test_a_job_failing_on_mlx_is_finished_by_torch_with_the_reason_kept(tmp_path, voice, version):
    with Engine(_config(tmp_path, version), stop_timeout_s=5.0, start_timeout_s=DEADLINE) as engine:
        assert engine.start(timeout=DEADLINE), engine.status()
        assert engine.status()["engine"] == "mlx" and engine.status()["mlx_memory"]["peak_bytes"] > 0
        result = engine.result(engine.submit(Job(Request.build("Read this.", Voice.recording(voice)))), DEADLINE)
        assert result.samples().size > 0 and np.isfinite(result.samples()).all()
        reason = next(note for note in result.notes if "MLX engine failed" in note)
        assert MLX_FAILURE in reason
        status = engine.status()
        assert status["engine"] == "torch" and MLX_FAILURE in status["engine_reason"]
        sidecar = json.loads(open(result.sidecar_path).read())
        assert sidecar["engine"] == "torch" and MLX_FAILURE in sidecar["engine_reason"]
        assert any(MLX_FAILURE in note for note in sidecar["notes"])
        again = engine.result(engine.submit(Job(Request.build("And this.", Voice.recording(voice)))), DEADLINE)
        assert again.samples().size > 0 and not any("MLX" in note for note in again.notes)


def test_mlx_failing_its_warm_up_leaves_torch_running_the_model(tmp_path, voice):
    config = _config(tmp_path, pipeline_kwargs={"fail_from_call": 1})
    with Engine(config, stop_timeout_s=5.0, start_timeout_s=DEADLINE) as engine:
        assert engine.start(timeout=DEADLINE), engine.status()
        status = engine.status()
        assert status["state"] == "ready" and status["engine"] == "torch" and MLX_FAILURE in status["engine_reason"]
        result = engine.result(
            engine.submit(Job(Request.build("Torch from the start.", Voice.recording(voice)))), DEADLINE
        )
        assert result.samples().size > 0


def test_bench_runs_the_mlx_engine_next_to_torch(tmp_path, capsys):
    from cosyvoice_mac.bench import cli

    model_dir = make_tiny_model_dir("cosyvoice3", tmp_path / "model")
    status = cli.main(
        [
            "--model",
            str(model_dir),
            "--devices",
            "cpu",
            "--dtypes",
            "float32",
            "--engine",
            "mlx,torch",
            "--tokens",
            "6",
            "--runs",
            "1",
            "--in-process",
            "--no-floors",
        ]
    )
    assert status == 0
    captured = capsys.readouterr()
    reports = json.loads(captured.out)["benchmarks"]
    assert [r["engine"] for r in reports] == ["mlx", "torch"]
    mlx_report, torch_report = reports
    assert mlx_report["llm_dtype"] == "fp32" and mlx_report["peak_device_mb"] > 0 and "floors" not in mlx_report
    for report in reports:
        median = report["median"]
        assert median["llm_tokens_per_s"] > 0 and median["rtf"] > 0 and median["first_audio_s"] > 0
        assert median["mel_finite"] and median["wave_finite"]
    assert "\nmlx " in captured.err  # the table names the engine


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_status_panel_names_the_engine_and_why(lang):
    from cosyvoice_mac.webui.render import render_status

    shown = render_status(lang, {"state": "ready", "device": "cpu", "dtype": "float32", "engine": "mlx"})
    assert "MLX" in shown and "PyTorch" not in shown
    reason = "the MLX engine failed (RuntimeError: boom); PyTorch runs this model now"
    shown = render_status(
        lang, {"state": "ready", "device": "mps", "dtype": "float32", "engine": "torch", "engine_reason": reason}
    )
    assert "PyTorch" in shown and reason in shown


def test_mlx_runs_llm_rl_pt_when_it_was_asked_for(tmp_path, monkeypatch):
    import mlx.core as mx
    import torch

    from cosyvoice_mac.mlx.convert import to_torch

    folder = make_tiny_model_dir("cosyvoice3", tmp_path / "model")
    state = torch.load(folder / "llm.pt", map_location="cpu", weights_only=True)
    tuned = {key: value * 1.5 if value.is_floating_point() else value for key, value in state.items()}
    torch.save(tuned, folder / "llm.rl.pt")
    monkeypatch.setenv("COSYVOICE_LLM", "rl")
    monkeypatch.setenv("COSYVOICE_MLX_CACHE", str(tmp_path / "mlx-cache"))
    model = CosyVoice.from_pretrained(folder, device="cpu", engine="mlx")
    assert model.llm_weights == "llm.rl.pt"  # what the status panel and the sidecar say...
    ran = to_torch(model.networks.llm.speech_embedding.weight.astype(mx.float32))
    torch.testing.assert_close(ran, tuned["speech_embedding.weight"].float())  # ...is what MLX runs
    monkeypatch.setenv("COSYVOICE_LLM", "base")
    base = CosyVoice.from_pretrained(folder, device="cpu", engine="mlx")
    torch.testing.assert_close(
        to_torch(base.networks.llm.speech_embedding.weight), state["speech_embedding.weight"].float()
    )
