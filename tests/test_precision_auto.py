"""precision="auto": the choice logic on injected timings (so it is tested on any CPU), the probe's
cache and its key, explicit dtypes winning, the non-finite-mel redo, and the weight-only int8 module."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from torch import nn

from cosyvoice_mac.device import DeviceError
from cosyvoice_mac.pipeline import CosyVoice, probe
from cosyvoice_mac.pipeline.fullsize import official_config
from cosyvoice_mac.pipeline.loading import qwen_config_for
from cosyvoice_mac.pipeline.precision import (
    Int8Embedding,
    Int8WeightLinear,
    store_weights_in_int8,
)
from cosyvoice_mac.pipeline.precision_plan import auto_pick, plan_precision
from cosyvoice_mac.request import Request, Voice
from tests.fakes.onnx_models import make_tiny_model_dir
from tests.parity.common import parity_dir

CPU, MPS = torch.device("cpu"), torch.device("mps")
# shaped like the measurements: a Xeon with AMX (bf16 flow 2.5x, 16-bit LLM slower) and an AVX2-only EPYC
AMX = {
    "llm": {"float32": 1.0, "float16": 1.2, "bfloat16": 0.9, "int8": 1.4},
    "flow": {"float32": 2.5, "float16": 30.0, "bfloat16": 1.0},
}
AVX2 = {
    "llm": {"float32": 1.0, "float16": 0.5, "bfloat16": 0.45, "int8": "does not run here (RuntimeError: ...)"},
    "flow": {"float32": 1.0, "float16": 12.0, "bfloat16": 9.0},
}


def _plan(device=CPU, timings=None, **kwargs):
    config = official_config("cosyvoice3")
    return plan_precision(device, "cosyvoice3", config, qwen_config_for(None), timings=timings, **kwargs)


def test_auto_takes_the_fastest_dtype_the_gate_allows_per_stage():
    plan = _plan(timings=AMX, precision="auto")
    assert (plan.llm.choice, plan.flow.choice, plan.vocoder.choice) == ("float32", "bfloat16", "float32")
    assert plan.flow.reason == "flow bfloat16: 2.5x faster than float32 here, within the gate"
    assert "bfloat16 1.1x, outside the gate" in plan.llm.reason  # the faster bf16 LLM fails top-25 parity
    plan = _plan(timings=AVX2, precision="auto")
    assert (plan.llm.choice, plan.flow.choice) == ("float16", "float32")  # bf16 is faster still but refused
    assert plan.llm_dtype == torch.float16 and plan.flow_dtype == torch.float32


def test_auto_keeps_float32_unless_the_gain_is_real_and_skips_what_does_not_run():
    assert auto_pick("flow", {"float32": 1.0, "bfloat16": 0.97, "float16": 5.0}, "cpu").choice == "float32"
    assert auto_pick("flow", {"float32": 1.0, "bfloat16": "does not run here (x)"}, "cpu").choice == "float32"
    assert auto_pick("flow", {}, "cpu").choice == "float32"


def test_auto_refuses_a_gpu_fp16_flow_even_when_it_is_fastest():
    timings = {"llm": {"float32": 1.0}, "flow": {"float32": 2.0, "float16": 0.5, "bfloat16": 1.0}}
    assert _plan(MPS, timings, precision="auto").flow.choice == "bfloat16"
    assert _plan(CPU, timings, precision="auto").flow.choice == "float16"  # the gate allows it on the CPU


def test_explicit_dtypes_always_win(monkeypatch):
    monkeypatch.delenv("COSYVOICE_DTYPE", raising=False)
    plan = _plan(timings=AMX, precision="auto", llm_dtype="bfloat16", flow_dtype="float16")
    assert (plan.llm.choice, plan.llm.source, plan.flow.choice) == ("bfloat16", "explicit", "float16")
    plan = _plan(timings=AMX, precision="auto", dtype="float16", llm_dtype="int8")  # --llm-dtype over --dtype
    assert plan.llm.choice == "int8" and plan.llm_dtype == "int8"
    monkeypatch.setenv("COSYVOICE_DTYPE", "bfloat16")
    assert _plan(timings=AMX, precision="auto").llm.choice == "bfloat16"  # the environment names the LLM
    assert _plan(timings=AMX, precision="auto", dtype="float32").llm.choice == "float32"  # the argument wins
    assert _plan(timings=AMX, precision="auto", low_memory=True, llm_dtype="float32").llm.choice == "float32"
    with pytest.raises(DeviceError, match="LLM only"):
        _plan(timings=AMX, flow_dtype="int8")


def test_the_global_dtype_means_the_llm_and_never_halves_the_flow(monkeypatch):
    monkeypatch.delenv("COSYVOICE_DTYPE", raising=False)
    plan = _plan(precision="float32", dtype="float16")
    assert (plan.llm.choice, plan.flow.choice) == ("float16", "float32")
    fp16_flow_fastest = {"llm": {"float32": 1.0}, "flow": {"float32": 2.0, "float16": 0.5, "bfloat16": 3.0}}
    assert _plan(MPS, fp16_flow_fastest, precision="auto", dtype="float16").flow.choice == "float32"


def test_float32_precision_and_explicit_stages_need_no_probe(monkeypatch):
    monkeypatch.setattr(probe, "probe", lambda *a, **k: pytest.fail("probed"))
    plan = _plan(precision="float32")
    assert (plan.llm.choice, plan.flow.choice) == ("float32", "float32") and plan.from_cache is None
    assert _plan(precision="auto", llm_dtype="float32", flow_dtype="bfloat16").flow.choice == "bfloat16"
    assert _plan(precision="float32", low_memory=True).llm.choice == "float16"  # low-memory: smallest that passes
    monkeypatch.setenv("COSYVOICE_PRECISION", "float32")
    assert _plan().flow.reason == "flow float32: precision float32 asked for"
    with pytest.raises(DeviceError, match="precision 'fast'"):
        _plan(precision="fast")


# the cache --------------------------------------------------------------------------------------
def test_the_cache_key_changes_with_device_torch_flags_and_shapes(monkeypatch):
    shapes = probe.timed_shapes(official_config("cosyvoice3"), qwen_config_for(None))
    key = probe.cache_key(CPU, "cosyvoice3", shapes, flags="avx2 fma")
    assert key == probe.cache_key(CPU, "cosyvoice3", shapes, flags="fma avx2".replace("fma avx2", "avx2 fma"))
    assert key != probe.cache_key(CPU, "cosyvoice3", shapes, flags="avx2 fma avx512_bf16 amx_bf16")
    assert key != probe.cache_key(CPU, "cosyvoice2", shapes, flags="avx2 fma")
    assert key != probe.cache_key(CPU, "cosyvoice3", {**shapes, "flow": {"dim": 64}}, flags="avx2 fma")
    monkeypatch.setattr(probe, "device_name", lambda device: "cuda NVIDIA H200 sm90")
    assert key != probe.cache_key(CPU, "cosyvoice3", shapes, flags="avx2 fma")
    monkeypatch.undo()
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    assert key != probe.cache_key(CPU, "cosyvoice3", shapes, flags="avx2 fma")


def test_cpu_flags_are_read_from_this_machine():
    flags = probe.cpu_flags()
    assert flags and flags == probe.cpu_flags()


def test_timings_are_probed_once_then_read_from_the_cache(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(probe, "probe", lambda device, config, qwen: calls.append(1) or AMX)
    path = tmp_path / "probe.json"
    config, qwen = official_config("cosyvoice3"), qwen_config_for(None)
    assert probe.cached_timings(CPU, "cosyvoice3", config, qwen, cache_path=path) == (AMX, False)
    assert probe.cached_timings(CPU, "cosyvoice3", config, qwen, cache_path=path) == (AMX, True)
    assert len(calls) == 1
    assert probe.cached_timings(CPU, "cosyvoice3", config, qwen, cache_path=path, reprobe=True) == (AMX, False)
    assert len(calls) == 2
    entry = json.loads(path.read_text())[probe.cache_key(CPU, "cosyvoice3", probe.timed_shapes(config, qwen))]
    assert entry["timings"] == AMX and "probe_s" in entry
    path.write_text("{not json")  # a damaged cache costs one probe, never an error
    assert probe.cached_timings(CPU, "cosyvoice3", config, qwen, cache_path=path) == (AMX, False)
    assert len(calls) == 3


def test_the_probe_times_every_candidate_at_real_shapes(monkeypatch):
    monkeypatch.setattr(probe, "LLM_LAYERS", 1)
    monkeypatch.setattr(probe, "FLOW_FRAMES", 40)
    monkeypatch.setattr(probe, "REPEATS", 1)
    timings = probe.probe(CPU, official_config("cosyvoice2"), qwen_config_for(None))
    for stage in ("llm", "flow"):
        assert set(timings[stage]) == set(probe.CANDIDATES[stage])
        assert all(isinstance(value, float) and value > 0 for value in timings[stage].values()), timings
    assert probe.llm_step_shapes(qwen_config_for(None))[0] == (896, 896 + 2 * 128)  # q, k, v of Qwen2-0.5B


# shaped like the H200 (torch 2.11): at real depth the graph-replayed fp16 step reads half the bytes,
# and the whole bf16 flow is launch-bound but still 1.3x faster (0.20 vs 0.26 s); one block showed < 1.05x
H200 = {
    "llm": {"float32": 1.0e-3, "float16": 0.55e-3, "bfloat16": 0.54e-3, "int8": 4.0e-3},
    "flow": {"float32": 26e-3, "float16": 19e-3, "bfloat16": 20e-3},
}


def test_auto_on_a_gpu_takes_the_fastest_gated_pair_by_the_full_depth_timings():
    plan = _plan(torch.device("cuda"), H200, precision="auto")
    assert (plan.llm.choice, plan.flow.choice) == ("float16", "bfloat16")
    assert (
        plan.flow.reason == "flow bfloat16: 1.3x faster than float32 here, within the gate (faster but refused: "
        "float16 1.4x, not on cuda (fp16 DiTs give NaN on GPUs for upstream users; name it with --flow-dtype to try))"
    )
    assert "bfloat16 1.9x, outside the gate" in plan.llm.reason  # faster still, but it fails top-25 parity
    one_block = {**H200, "flow": {"float32": 2.0e-3, "float16": 1.95e-3, "bfloat16": 1.97e-3}}
    assert _plan(torch.device("cuda"), one_block, precision="auto").flow.choice == "float32"  # the old probe's view


def test_the_probe_runs_at_full_depth_only_on_gpus(monkeypatch):
    assert [probe.at_full_depth(torch.device(kind)) for kind in ("cpu", "cuda", "mps")] == [False, True, True]
    node = official_config("cosyvoice3")["flow"]
    node["decoder"]["estimator"].update(dim=64, depth=3, heads=2, dim_head=32)
    assert len(probe.probe_estimator(node, CPU).transformer_blocks) == 1
    monkeypatch.setattr(probe, "at_full_depth", lambda device: True)
    assert len(probe.probe_estimator(node, CPU).transformer_blocks) == 3
    node = official_config("cosyvoice2")["flow"]
    node["decoder"]["estimator"].update(channels=[32], num_mid_blocks=3, n_blocks=1, num_heads=2, attention_head_dim=16)
    assert len(probe.probe_estimator(node, CPU).mid_blocks) == 3


def test_the_llm_probe_times_every_layer_at_full_depth(monkeypatch):
    small = dataclasses.replace(
        qwen_config_for(None),
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    timed: list[int] = []
    original = probe.llm_step
    monkeypatch.setattr(
        probe, "llm_step", lambda device, layers, rows: timed.append(len(rows)) or original(device, layers, rows)
    )
    monkeypatch.setattr(probe, "REPEATS", 1)
    probe._time_llm_candidates(CPU, small)
    assert set(timed) == {4 * probe.LLM_LAYERS}
    timed.clear()
    monkeypatch.setattr(probe, "at_full_depth", lambda device: True)
    timings = probe._time_llm_candidates(CPU, small)
    assert set(timed) == {4 * 3} and len(timed) >= len(probe.CANDIDATES["llm"])  # a GPU: in turns
    assert all(isinstance(value, float) and value > 0 for value in timings.values()), timings
    assert probe.llm_step(CPU, [], [])[1] == 1  # the CPU runs the products eagerly, once per timing


def test_gpu_candidates_take_turns_and_their_best_turn_counts(monkeypatch):
    monkeypatch.setattr(probe, "best_seconds", lambda device, function, repeats, clock: function())
    made: list[str] = []
    turns = {"float32": [2.0, 1.0], "float16": [1.5, 1.6], "int8": [9.0, 9.0]}  # float32's first turn: a cold clock

    def maker(choice):
        if choice == "bfloat16":
            return lambda: (_ for _ in ()).throw(RuntimeError("no bf16 kernel"))
        seconds = iter(turns[choice])
        return lambda: made.append(choice) or ((lambda: next(seconds)), 1)

    candidates = {choice: maker(choice) for choice in ("float32", "float16", "bfloat16", "int8")}
    assert probe.timed_in_turn(CPU, candidates) == {
        "float32": 2.0,
        "float16": 1.5,
        "bfloat16": "does not run here (RuntimeError: no bf16 kernel)",
        "int8": 9.0,
    }  # a CPU: one turn each
    made.clear()
    monkeypatch.setattr(probe, "at_full_depth", lambda device: True)
    candidates = {choice: maker(choice) for choice in ("float32", "float16", "bfloat16", "int8")}
    timings = probe.timed_in_turn(CPU, candidates)
    assert made == ["float32", "float16", "int8", "float32", "float16"]  # round-robin; int8 (> 3x) gave up
    assert timings["float32"] == 1.0 and timings["float16"] == 1.5 and timings["int8"] == 9.0
    assert _plan(torch.device("cuda"), {"llm": timings, "flow": {}}, precision="auto").llm.choice == "float32"


# through the model -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    if not (parity_dir() / "cosyvoice3_tiny").is_dir():
        pytest.skip("no tiny cosyvoice3 model")
    return make_tiny_model_dir("cosyvoice3", tmp_path_factory.mktemp("tiny") / "model")


def test_the_model_loads_what_auto_picked_and_reports_why(tiny_dir, monkeypatch):
    monkeypatch.setattr(probe, "cached_timings", lambda *a, **k: (AMX, True))
    model = CosyVoice.from_pretrained(tiny_dir, device="cpu", precision="auto")
    assert next(model.networks.flow.decoder.estimator.parameters()).dtype == torch.bfloat16
    assert model.networks.llm.llm_decoder.weight.dtype == torch.float32
    facts = model.precision.as_dict()
    assert facts["flow"] == {
        "dtype": "bfloat16",
        "source": "auto",
        "reason": "flow bfloat16: 2.5x faster than float32 here, within the gate",
    }
    assert facts["probe_cached"] is True and facts["timings"] == AMX


def test_a_non_finite_mel_is_redone_with_a_float32_flow(tiny_dir, monkeypatch):
    model = CosyVoice.from_pretrained(tiny_dir, device="cpu", precision="float32", flow_dtype="float16")
    flow = model.networks.flow
    honest = flow.inference

    def overflowing(*args, **kwargs):  # what an fp16 DiT does to upstream users on a GPU
        mel = honest(*args, **kwargs)
        return mel * float("nan") if next(flow.decoder.estimator.parameters()).dtype == torch.float16 else mel

    monkeypatch.setattr(flow, "inference", overflowing)
    prompt = np.random.default_rng(0).standard_normal(24000 * 3).astype(np.float32) * 0.1
    for stream in (False, True):
        results = list(
            model.synthesize("Hello there.", prompt_audio=prompt, prompt_sample_rate=24000, seed=0, stream=stream)
        )
        audio = np.concatenate([r.audio for r in results])
        assert audio.size and np.isfinite(audio).all()
        notes = [note for r in results for note in r.notes]
        if not stream:  # the first job found it; the model keeps the float32 flow afterwards
            assert notes == [
                (
                    "the float16 flow gave a non-finite mel; this job was redone with a float32 flow "
                    "(which the model keeps until it is reloaded)"
                )
            ]
        else:
            assert notes == []
    assert next(flow.decoder.estimator.parameters()).dtype == torch.float32
    assert model.precision.flow.choice == "float32" and model.precision.flow.source == "redo"


def test_a_non_finite_streamed_chunk_is_redone_too(tiny_dir, monkeypatch):
    model = CosyVoice.from_pretrained(tiny_dir, device="cpu", precision="float32", flow_dtype="bfloat16")
    flow = model.networks.flow
    honest, honest_first = flow.inference, flow.first_chunk_recording_prefix

    def overflow() -> float:
        return float("nan") if next(flow.decoder.estimator.parameters()).dtype == torch.bfloat16 else 1.0

    def first_chunk(*args, **kwargs):  # off CUDA a new voice's first chunk records its prefix: it overflows too
        mel, prefix = honest_first(*args, **kwargs)
        return mel * overflow(), prefix

    monkeypatch.setattr(flow, "inference", lambda *a, **k: honest(*a, **k) * overflow())
    monkeypatch.setattr(flow, "first_chunk_recording_prefix", first_chunk)
    prompt = np.random.default_rng(1).standard_normal(24000 * 3).astype(np.float32) * 0.1
    results = list(model.synthesize("Hello there.", prompt_audio=prompt, prompt_sample_rate=24000, seed=0, stream=True))
    assert np.isfinite(np.concatenate([r.audio for r in results])).all()
    assert "bfloat16 flow gave a non-finite mel" in results[0].notes[0]
    # The bfloat16 prefix the first chunk recorded is not kept: the voice's prefix was made again in float32.
    (prefix,) = model.flow_prefixes._entries.values()
    assert {t.dtype for step in prefix.steps for t in step.tensors.values()} == {torch.float32}


def test_a_float32_flow_is_not_redone(tiny_dir):
    model = CosyVoice.from_pretrained(tiny_dir, device="cpu", precision="float32")
    notes: list[str] = []
    assert not model.redo_flow_in_float32(notes) and notes == []


# int8 -------------------------------------------------------------------------------------------
class _FusedLayout(nn.Module):
    """A layer layout like issue 17's (fused q/k/v and gate/up), nested, with a bias and a big embedding."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100_000, 64)
        self.block = nn.ModuleDict({"qkv": nn.Linear(64, 192), "gate_up": nn.Linear(64, 256, bias=False)})
        self.down = nn.Linear(128, 64)

    def forward(self, ids):
        x = self.embed(ids)
        q = self.block["qkv"](x)[..., :64]
        gate, up = self.block["gate_up"](x).chunk(2, dim=-1)
        return self.down(torch.nn.functional.silu(gate) * up) + q


def test_int8_replaces_every_linear_whatever_its_name_and_matches_float32():
    torch.manual_seed(0)
    model = _FusedLayout().eval()
    ids = torch.randint(0, 100_000, (1, 7))
    expected = model(ids)
    before = sum(p.numel() * p.element_size() for p in model.parameters())
    saved = store_weights_in_int8(model)
    assert not any(isinstance(m, nn.Linear) for m in model.modules())
    assert sum(isinstance(m, Int8WeightLinear) for m in model.modules()) == 3 and isinstance(model.embed, Int8Embedding)
    after = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    assert before - after == saved
    int8 = [m for m in model.modules() if isinstance(m, Int8WeightLinear)]
    weights = sum(m.in_features * m.out_features for m in int8)
    assert all(m.qweight.dtype == torch.int8 for m in int8)
    assert sum(m.qweight.numel() + 4 * m.scale.numel() for m in int8) < 0.3 * 4 * weights  # a quarter of fp32
    assert model.embed.qweight.dtype == torch.int8 and model.embed.qweight.shape == (100_000, 64)
    for rows in (ids, ids[:, :1]):  # the prefill (widened weight) and one step (the fused kernel: K = 64, 128)
        out = model(rows)
        want = expected[:, : rows.shape[1]]
        assert out.dtype == torch.float32 and ((out - want).norm() / want.norm()) < 2e-2


def test_int8_keeps_odd_inner_sizes_off_the_fused_kernel():
    torch.manual_seed(0)
    linear = nn.Linear(36, 8)  # torch 2.13's CPU kernel returns nan for K = 36
    layer = Int8WeightLinear(linear.weight.detach(), linear.bias.detach())
    row = torch.randn(1, 36)
    assert not layer.fused and torch.allclose(layer(row), linear(row), atol=2e-2)


# what the user sees -------------------------------------------------------------------------------
def test_the_status_panel_and_the_sidecar_say_what_each_stage_runs_in(tiny_dir, tmp_path):
    from cosyvoice_mac.engine import Engine, Job, WorkerConfig
    from cosyvoice_mac.webui.render import render_status
    from tests.fakes.fake_pipeline import tone

    config = WorkerConfig(
        model_dir=str(tiny_dir),
        device="cpu",
        dtype="float16",
        outputs_dir=str(tmp_path / "out"),
        cache_dir=str(tmp_path / "cache"),
        pipeline_kwargs={"precision": "float32", "flow_dtype": "bfloat16"},
    )
    with Engine(config, start_timeout_s=120.0) as engine:
        assert engine.start(timeout=120.0), engine.status()
        result = engine.result(
            engine.submit(Job(Request.build("Hello.", Voice.from_samples(tone(), 24000)))), timeout=120.0
        )
        status = engine.status()
    with open(result.sidecar_path, encoding="utf-8") as handle:
        sidecar = json.load(handle)
    for facts in (sidecar["precision"], status["precision"]):
        assert facts["llm"] == {"dtype": "float16", "source": "explicit", "reason": "llm float16: asked for"}
        assert facts["flow"]["dtype"] == "bfloat16" and facts["vocoder"]["dtype"] == "float32"
    panel = render_status("en", status)
    assert "**Precision:** llm float16: asked for; flow bfloat16: asked for; vocoder float32" in panel
