"""The MLX LLM precision on the page: the menu offers what the quality gate passes (read from the gate's
table), the setting reaches the worker, and the status panel says which precision runs and why."""

from __future__ import annotations

import dataclasses

import pytest

from cosyvoice_mac.engine.host import HostConfig, ModelChoice, ModelHost, Settings, starting_mlx_llm
from cosyvoice_mac.mlx import llm_gate, mlx_available
from cosyvoice_mac.webui.callbacks import Callbacks
from cosyvoice_mac.webui.render import render_status

EIGHT_GIB = 8 * 2**30


def figure(choice: str) -> str:
    """A row's measured agreement as the page writes it."""
    return f"{100 * llm_gate.mlx_llm_row(choice).agreement:.1f} %"


PASSING = [row.choice for row in llm_gate.MLX_LLM_GATE if row.passes]
FAILING = [row.choice for row in llm_gate.MLX_LLM_GATE if not row.passes]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_menu_offers_only_the_precisions_that_pass_the_gate(lang, monkeypatch):
    choices = Callbacks.mlx_llm_choices(lang)
    values = [value for _, value in choices]
    assert values[0] == "auto" and sorted(values[1:]) == sorted(PASSING)
    assert not set(FAILING) & set(values)  # outside the gate: never offered
    labels = dict((value, label) for label, value in choices)
    for value in values[1:]:
        if llm_gate.mlx_llm_row(value).agreement is not None:
            assert figure(value) in labels[value]
    flipped = tuple(dataclasses.replace(row, passes=row.choice != "int8") for row in llm_gate.MLX_LLM_GATE)
    monkeypatch.setattr(llm_gate, "MLX_LLM_GATE", flipped)  # the table decides, not a list in the page
    values = [value for _, value in Callbacks.mlx_llm_choices(lang)]
    assert "int8" not in values and "int4" in values and "bf16" in values


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_panel_says_which_precision_runs_and_why(lang):
    picked = llm_gate.choose_mlx_llm(low_memory=True, ram_bytes=EIGHT_GIB)
    shown = render_status(lang, {"state": "ready", "engine": "mlx", "mlx_llm": picked.as_dict()})
    assert picked.precision in shown and "8 GB" in shown
    if picked.row.agreement is not None:
        assert figure(picked.precision) in shown
        assert ("passes the quality gate at" in shown) if lang == "en" else ("通过质量门槛" in shown)
    else:  # no smaller precision passes: the reference runs, and the panel says why
        assert ("no smaller one passes the quality gate" in shown) if lang == "en" else ("没有更小的精度" in shown)
    named = llm_gate.choose_mlx_llm(low_memory=True, requested="fp16").as_dict()
    shown = render_status(lang, {"state": "ready", "engine": "mlx", "mlx_llm": named})
    assert "fp16" in shown and figure("fp16") in shown and ("engine settings" in shown or "引擎设置" in shown)
    reference = render_status(
        lang, {"state": "ready", "engine": "mlx", "mlx_llm": llm_gate.gate_choice(False).as_dict()}
    )
    assert "fp32" in reference


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_precision_named_outside_the_gate_is_run_and_said_so_with_its_figure(lang, monkeypatch):
    monkeypatch.setenv(llm_gate.LLM_PRECISION_ENV, "int4")
    named = llm_gate.choose_mlx_llm(low_memory=True, ram_bytes=EIGHT_GIB).as_dict()
    shown = render_status(lang, {"state": "ready", "engine": "mlx", "mlx_llm": named})
    assert "int4" in shown and "COSYVOICE_MLX_LLM" in shown and "95 %" in shown and figure("int4") in shown
    assert ("outside the quality gate" in shown) if lang == "en" else ("未通过质量门槛" in shown)


def test_the_setting_reaches_the_worker_and_only_a_passing_one_is_kept(tmp_path, monkeypatch):
    passing, failing = PASSING[-1], FAILING[-1]  # the smallest that passes (fp32 at least); one that fails
    host = ModelHost(HostConfig(models_dir=tmp_path / "models", outputs_dir=tmp_path / "out", preview=False))
    folder = tmp_path / "models" / "Fun-CosyVoice3-0.5B"
    choice = ModelChoice(folder.name, folder, "cosyvoice3")
    assert host.worker_config(choice).pipeline_kwargs["mlx_llm"] == "auto"
    assert host.set_mlx_llm(passing) is False and host.config.mlx_llm == passing  # no model running yet
    assert host.worker_config(choice).pipeline_kwargs["mlx_llm"] == passing
    with pytest.raises(ValueError, match="not one the quality gate passes") as refused:
        host.set_mlx_llm(failing)
    assert figure(failing) in str(refused.value)  # refused with its measured figure
    callbacks = Callbacks(host, Settings(tmp_path / "cache"))
    list(callbacks.switch_mlx_llm("en", failing))  # a value the menu never listed: ignored
    assert host.config.mlx_llm == passing
    settings = Settings(tmp_path / "cache")
    monkeypatch.delenv(llm_gate.LLM_PRECISION_ENV, raising=False)
    settings.update(mlx_llm=passing)
    assert starting_mlx_llm(settings) == passing  # remembered
    settings.update(mlx_llm=failing)  # a hand-edited file, or a row that no longer passes
    assert starting_mlx_llm(settings) == "auto"
    monkeypatch.setenv(llm_gate.LLM_PRECISION_ENV, "fp16")
    settings.update(mlx_llm=passing)
    assert starting_mlx_llm(settings) == "auto"  # the variable set at start-up wins over the remembered choice


@pytest.mark.skipif(not mlx_available(), reason="needs mlx (Linux: pip install 'mlx[cpu]')")
def test_the_low_memory_worker_reports_the_gates_choice_on_this_machine(tmp_path, monkeypatch):
    from cosyvoice_mac import device
    from cosyvoice_mac.bench.memory import _MachineWithRam
    from cosyvoice_mac.pipeline import CosyVoice
    from cosyvoice_mac.pipeline.engines import engine_status
    from tests.fakes.onnx_models import make_tiny_model_dir

    monkeypatch.setattr(device, "psutil", _MachineWithRam(EIGHT_GIB))
    monkeypatch.setenv("COSYVOICE_MLX_CACHE", str(tmp_path / "mlx-cache"))
    monkeypatch.delenv(llm_gate.LLM_PRECISION_ENV, raising=False)
    folder = make_tiny_model_dir("cosyvoice3", tmp_path / "model")
    model = CosyVoice.from_pretrained(folder, device="cpu", engine="mlx", low_memory=True)
    reported = engine_status(model)["mlx_llm"]
    expected = llm_gate.gate_choice(low_memory=True).precision  # the best that passes: tests/test_mlx_gate.py
    assert reported["precision"] == model.networks.llm.precision == expected
    assert (reported["why"], reported["ram_bytes"], reported["passes"]) == ("low_memory", EIGHT_GIB, True)
    shown = render_status("en", {"state": "ready", **engine_status(model)})
    assert f"**MLX LLM:** {expected}: 8 GB of RAM (low-memory mode)" in shown
    page = CosyVoice.from_pretrained(folder, device="cpu", engine="mlx", low_memory=True, mlx_llm="fp16")
    assert page.networks.llm.precision == "fp16" and engine_status(page)["mlx_llm"]["named_by"] == "settings"
