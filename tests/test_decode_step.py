"""The lean decoding step: its operation budget, fused weights under official keys, the bucketed
(graph-shaped) step, and on CUDA the graphs themselves (``COSYVOICE_TEST_DEVICE=cuda``)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from cosyvoice_mac.bench.opcount import count_decode_steps, prompt_embeddings, random_tiny_speech_lm
from cosyvoice_mac.checkpoint import load_strict
from cosyvoice_mac.models.cuda import eager_kernels, products, triton_kernels
from cosyvoice_mac.models.cuda.products import attend_by_products
from cosyvoice_mac.models.llm import DecodeOptions, SpeechLM, step_kernels

TEST_DEVICE = os.environ.get("COSYVOICE_TEST_DEVICE", "cpu")
cuda_only = pytest.mark.skipif(TEST_DEVICE != "cuda" or not torch.cuda.is_available(), reason="needs CUDA")

# Working operations (views and metadata not counted) of one decoded token on the 24-layer model,
# the sampler included. 13 a layer (2 RMSNorm, 4 projections, two of them adding the residual, 3 RoPE,
# 1 KV write, 1 SDPA, SiLU, gate*up) + RoPE rows, position, final norm, head, log-softmax + ~7 sampler
# ops = 324 today. The CPU floor equals the count: RMSNorm and SDPA are single ATen operations there
# (ATen implements the CPU RMSNorm as a composite below the dispatcher; CUDA and MPS have one kernel).
OPS_BUDGET = 400
OPS_PER_LAYER = 13


@pytest.fixture(scope="module")
def tiny():
    return random_tiny_speech_lm()


def test_one_step_of_the_full_depth_model_stays_within_the_op_budget(tiny):
    counter = count_decode_steps(tiny, steps=1)
    work = counter.total("work")
    assert work <= OPS_BUDGET, f"{work} working ops per token (budget {OPS_BUDGET}): {dict(counter.by_op('work'))}"
    per_layer = counter.total("work", scope="layer") / len(tiny.backbone.layers)
    assert per_layer <= OPS_PER_LAYER, dict(counter.by_op("work", scope="layer"))
    assert counter.total("work", scope="sampler") >= 5  # the sampler is counted, not skipped
    assert counter.total("allocation") == 0


def _unfused_logits(lm: SpeechLM, embeds: torch.Tensor) -> torch.Tensor:
    """Teacher-forced logits computed from the official (unfused) keys, Hugging Face's way."""
    state = lm.state_dict()
    config = lm.config.qwen
    heads, kv_heads, head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    length = embeds.shape[1]
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.arange(length).float()[:, None] * inv_freq[None]
    angles = torch.cat((angles, angles), dim=-1)
    cos, sin = angles.cos(), angles.sin()

    def rope(x):
        half = head_dim // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def norm(x, key):
        return state[key] * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + config.rms_norm_eps))

    x = embeds[0]
    for i in range(config.num_hidden_layers):
        p = f"llm.model.model.layers.{i}."
        h = norm(x, p + "input_layernorm.weight")
        q, k, v = (
            F.linear(h, state[p + f"self_attn.{n}_proj.weight"], state[p + f"self_attn.{n}_proj.bias"]) for n in "qkv"
        )
        q = rope(q.view(length, heads, head_dim).transpose(0, 1))
        k = rope(k.view(length, kv_heads, head_dim).transpose(0, 1)).repeat_interleave(heads // kv_heads, 0)
        v = v.view(length, kv_heads, head_dim).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(0, 1).reshape(length, -1)
        x = x + F.linear(attended, state[p + "self_attn.o_proj.weight"])
        h = norm(x, p + "post_attention_layernorm.weight")
        gate, up = (F.linear(h, state[p + f"mlp.{n}_proj.weight"]) for n in ("gate", "up"))
        x = x + F.linear(F.silu(gate) * up, state[p + "mlp.down_proj.weight"])
    x = norm(x, "llm.model.model.norm.weight")
    return F.linear(x, state["llm_decoder.weight"], state.get("llm_decoder.bias"))[None]


def test_fused_logits_match_the_unfused_official_weights(tiny):
    embeds = prompt_embeddings(tiny, prompt_speech=20, text=12)
    with torch.inference_mode():
        fused = tiny.teacher_forced_logits(embeds)
        unfused = _unfused_logits(tiny, embeds)
    torch.testing.assert_close(fused, unfused, atol=1e-5, rtol=0)


def test_state_dict_has_the_official_keys_and_round_trips(tiny):
    state = tiny.state_dict()
    layer = "llm.model.model.layers.3."
    for key in (
        "self_attn.q_proj.weight",
        "self_attn.k_proj.bias",
        "self_attn.v_proj.weight",
        "mlp.gate_proj.weight",
        "mlp.up_proj.weight",
    ):
        assert layer + key in state
    assert not any("qkv_proj" in key or "gate_up_proj" in key for key in state)
    fused = tiny.backbone.layers[3].self_attn.qkv_proj.weight
    q_rows = tiny.config.qwen.num_attention_heads * tiny.config.qwen.head_dim
    assert torch.equal(state[layer + "self_attn.q_proj.weight"], fused[:q_rows])
    assert state[layer + "self_attn.q_proj.weight"].data_ptr() == fused.data_ptr()  # a view, not a copy

    # Loaded back, by copy and by assignment, into a fresh model: the same fused weights.
    state = {key: value.clone() for key, value in state.items()}
    copied = random_tiny_speech_lm(seed=5)
    load_strict(copied, state, source="test")
    with torch.device("meta"):
        assigned = SpeechLM(tiny.config)
    assigned.load_state_dict(state, strict=True, assign=True)
    for model in (copied, assigned):
        for (name, ours), theirs in zip(tiny.named_parameters(), model.parameters()):
            assert torch.equal(ours, theirs), name


def test_a_missing_official_part_is_reported():
    model = random_tiny_speech_lm()
    state = model.state_dict()
    del state["llm.model.model.layers.0.self_attn.k_proj.weight"]
    result = model.load_state_dict(state, strict=False)
    assert "llm.model.model.layers.0.self_attn.k_proj.weight" in result.missing_keys


def _forced_decode(lm: SpeechLM, embeds: torch.Tensor, tokens: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        decoder = lm.start_decoding(embeds, len(tokens))
        steps = [decoder.logp.clone()]
        steps += [decoder.feed(token).clone() for token in tokens[:-1]]
    return torch.stack(steps)


@pytest.mark.parametrize("by_products", [False, True], ids=["sdpa", "products"])
def test_bucketed_step_equals_the_eager_step(tiny, monkeypatch, by_products):
    """The graph-shaped step (whole buckets of slots, unwritten ones masked) computes the same numbers, with
    either way of attending."""
    embeds = prompt_embeddings(tiny, prompt_speech=30, text=10)
    tokens = [int(t) for t in torch.randint(0, 300, (40,), generator=torch.Generator().manual_seed(2))]
    eager = _forced_decode(tiny, embeds, tokens)
    monkeypatch.setattr(torch, "compile", lambda function, **_: function)  # the bucketed step, uncompiled
    calls = []

    def counted(*args):
        calls.append(1)
        return attend_by_products(*args)

    monkeypatch.setattr(products, "attend_by_products", counted)  # the steps must really attend this way
    tiny.decoding.options = DecodeOptions(compile=True, bucket=16, attention_by_products=by_products)
    try:
        bucketed = _forced_decode(tiny, embeds, tokens)
        reused = _forced_decode(tiny, embeds, tokens)  # the same cache, reset and zeroed
    finally:
        tiny.decoding.options = DecodeOptions()
    assert len(calls) == (2 * (len(tokens) - 1) * len(tiny.backbone.layers) if by_products else 0)
    torch.testing.assert_close(bucketed, eager, atol=1e-5, rtol=0)
    torch.testing.assert_close(reused, bucketed, atol=0, rtol=0)


@pytest.mark.parametrize("masked", [False, True])
def test_attention_by_products_is_sdpa_written_out(masked):
    """A decoded position's 14 query heads over 2 KV heads (7 query rows each), 200 slots, the last 37 unwritten."""
    generator = torch.Generator().manual_seed(5)
    shapes = (1, 2, 7, 64), (1, 2, 200, 64), (1, 2, 200, 64)
    queries, keys, values = (torch.randn(shape, generator=generator) for shape in shapes)
    bias = torch.zeros(1, 200).masked_fill_(torch.arange(200) >= 163, float("-inf")) if masked else None
    expected = F.scaled_dot_product_attention(queries, keys, values, attn_mask=bias)
    torch.testing.assert_close(attend_by_products(queries, keys, values, bias), expected, atol=2e-6, rtol=0)
    if masked:  # unwritten slots hold stale finite values (a reused cache is zeroed of NaNs): none leaks through
        keys[..., 163:, :], values[..., 163:, :] = 1e4, -1e4
        torch.testing.assert_close(attend_by_products(queries, keys, values, bias), expected, atol=2e-6, rtol=0)


def test_the_runner_attends_by_products_exactly_in_graphs_mode_at_float32(tiny, monkeypatch):
    runner = tiny.decoding
    monkeypatch.setattr(runner, "options", DecodeOptions())  # the fixture's runner gets its options back afterwards
    assert runner.mode == "eager" and runner._attend() is F.scaled_dot_product_attention  # CPU and MPS: SDPA
    monkeypatch.setattr(type(runner), "mode", property(lambda self: "graphs"))
    assert tiny.backbone.compute_dtype == torch.float32 and runner._attend() is attend_by_products
    monkeypatch.setattr(type(tiny.backbone), "compute_dtype", property(lambda self: torch.float16))
    assert runner._attend() is F.scaled_dot_product_attention  # 16-bit: cuDNN's flash kernel
    runner.options = DecodeOptions(attention_by_products=True)
    assert runner._attend() is attend_by_products  # asked for (the bench measures both)


def test_a_compiled_16_bit_step_keeps_eager_rounding_unless_told(tiny, monkeypatch):
    """The rule for ``DecodeOptions.eager_rounding`` and what it changes: the plan's kernels and inductor's casts."""
    runner = tiny.decoding
    monkeypatch.setattr(runner, "options", DecodeOptions())
    assert runner.mode == "eager" and not runner.keeps_eager_rounding()  # nothing is compiled
    monkeypatch.setattr(type(runner), "mode", property(lambda self: "graphs"))
    assert not runner.keeps_eager_rounding()  # fused at float32: inductor's own rounding samples eager's ids
    monkeypatch.setattr(type(tiny.backbone), "compute_dtype", property(lambda self: torch.bfloat16))
    assert runner.keeps_eager_rounding()
    runner.options = DecodeOptions(fuse=False)
    assert not runner.keeps_eager_rounding()  # the plain graphs run eager's kernels anyway
    monkeypatch.setattr(type(runner), "mode", property(lambda self: "compiled"))
    assert runner.keeps_eager_rounding()
    runner.options = DecodeOptions(eager_rounding=False)
    assert not runner.keeps_eager_rounding()

    settings = []
    monkeypatch.setattr(torch, "compile", lambda function, **kwargs: settings.append(kwargs) or function)
    for wanted in (True, False):
        runner.options = DecodeOptions(eager_rounding=wanted)
        runner._compile(runner._bucketed_step, dynamic=False)
        runner.start(8)
        layer = runner._plan.layers[0]
        assert (layer.qkv_proj.func is eager_kernels.linear) == wanted
        assert layer.attend is (eager_kernels.attention if wanted else F.scaled_dot_product_attention)
        assert layer.down_proj.func is (eager_kernels.linear_added if wanted else step_kernels.plain_linear_added)
        assert layer.silu_mul is (eager_kernels.silu_mul if wanted else step_kernels.plain_silu_mul)
        assert (layer.norm.func is eager_kernels.rms_norm) == wanted and (runner._plan.norm.func is layer.norm.func)
        assert (runner._log_softmax is eager_kernels.float_log_softmax) == wanted
    assert settings == [{"dynamic": False, "options": {"emulate_precision_casts": True}}, {"dynamic": False}]


def test_a_compiled_bf16_step_with_eager_rounding_computes_the_uncompiled_steps_bits(monkeypatch):
    """The CPU's share of the 16-bit fused step's promise (same tokens as eager): torch.compile of the bucketed step
    with eager's rounding gives the uncompiled bucketed step's log-probabilities bit for bit (2 layers: compile time;
    inductor's own rounding differs in 97 % of them on the 24-layer model)."""
    lm = random_tiny_speech_lm(num_hidden_layers=2).to(torch.bfloat16)
    embeds = prompt_embeddings(lm, prompt_speech=30, text=10).to(torch.bfloat16)
    tokens = [int(t) for t in torch.randint(0, 300, (24,), generator=torch.Generator().manual_seed(2))]
    options = DecodeOptions(compile=True, bucket=16, eager_rounding=True)
    lm.decoding.options = options
    compiled = _forced_decode(lm, embeds, tokens)
    assert lm.decoding._compiled is not None
    lm.decoding._compiled = None
    monkeypatch.setattr(torch, "compile", lambda function, **_: function)
    uncompiled = _forced_decode(lm, embeds, tokens)
    assert torch.equal(compiled, uncompiled)


def test_the_bench_reports_why_a_fused_step_is_not_in_use(tiny, monkeypatch):
    """The pipeline bench's ``decode`` block carries the pipeline LM's runner state (a fused step that failed to
    compile is slower and larger, and said nothing else)."""
    from cosyvoice_mac.bench.decode import decode_report

    monkeypatch.setattr(tiny.decoding, "fuse_error", "torch.compile of the sampled decoding step failed (...)")
    report = decode_report(tiny)
    assert report["mode"] == "eager" and report["fuse_error"].startswith("torch.compile of the sampled")
    assert (report["eager_rounding"], report["sampled_graphs"], report["fused_pick"], report["graph_error"]) == (
        False,
        0,
        False,
        None,
    )


def test_the_env_switches_eager_rounding(monkeypatch):
    assert DecodeOptions().eager_rounding is None  # the runner's rule
    monkeypatch.setenv("COSYVOICE_EAGER_ROUNDING", "0")
    assert DecodeOptions().eager_rounding is False
    monkeypatch.setenv("COSYVOICE_EAGER_ROUNDING", "1")
    assert DecodeOptions().eager_rounding is True


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eager_kernels_compute_the_plain_functions_bit_for_bit(dtype):
    generator = torch.Generator().manual_seed(3)
    x, weight, bias = (torch.randn(shape, generator=generator).to(dtype) for shape in ((3, 64), (48, 64), (48,)))
    gain = torch.rand(64, generator=generator).to(dtype)
    assert torch.equal(eager_kernels.linear(x, weight, bias), F.linear(x, weight, bias))
    assert torch.equal(eager_kernels.linear(x, weight, None), F.linear(x, weight))
    residual = torch.randn(3, 48, generator=generator).to(dtype)
    added = step_kernels.plain_linear_added(x, residual.clone(), weight)
    into = residual.clone()
    assert eager_kernels.linear_added(x, into, weight) is into and torch.equal(into, added)  # in place
    two_roundings = residual + F.linear(x, weight)  # where the sum had two, it has one: within an ulp of the largest
    ulp = torch.finfo(dtype).eps * float(two_roundings.abs().max())
    torch.testing.assert_close(added, two_roundings, atol=ulp, rtol=0)
    assert torch.equal(eager_kernels.rms_norm(x, gain, 1e-6), step_kernels.plain_rms_norm(x, gain, 1e-6))
    opaque_norm = step_kernels.norm_with(1e-6, eager_kernels.EAGER_ROUNDING)
    assert opaque_norm.func is eager_kernels.rms_norm and torch.equal(
        opaque_norm(x, gain), torch.rms_norm(x, (64,), gain, 1e-6)
    )
    assert torch.equal(eager_kernels.silu(x), F.silu(x))
    assert torch.equal(eager_kernels.silu_mul(x), F.silu(x[:, :32]) * x[:, 32:])
    assert torch.equal(step_kernels.plain_silu_mul(x), F.silu(x[:, :32]) * x[:, 32:])
    queries, keys, values = (torch.randn(1, 2, rows, 16, generator=generator).to(dtype) for rows in (7, 30, 30))
    mask = torch.zeros(1, 30, dtype=dtype).masked_fill_(torch.arange(30) >= 21, float("-inf"))
    for bias in (None, mask):
        expected = F.scaled_dot_product_attention(queries, keys, values, bias)
        assert torch.equal(eager_kernels.attention(queries, keys, values, bias), expected)
    logp = eager_kernels.float_log_softmax(x)
    assert logp.dtype == torch.float32 and torch.equal(logp, step_kernels.plain_float_log_softmax(x))


def test_inductor_fuses_around_the_eager_kernels_and_rounds_as_eager(monkeypatch):
    """A layer's pieces in bf16 compiled by inductor with emulated casts: bit-equal to the same code run eagerly
    (the CPU's share; the H200's whole step is bench/README.md's "Session 10")."""
    generator = torch.Generator().manual_seed(4)
    x, residual = (torch.randn(2, 64, generator=generator).to(torch.bfloat16) for _ in range(2))
    weight = (torch.randn(256, 64, generator=generator) / 8).to(torch.bfloat16)
    down = (torch.randn(64, 128, generator=generator) / 8).to(torch.bfloat16)
    gain = torch.rand(64, generator=generator).to(torch.bfloat16)

    def block(x, residual):
        hidden = x + residual
        gate, up = eager_kernels.linear(eager_kernels.rms_norm(hidden, gain, 1e-6), weight, None).chunk(2, dim=-1)
        out = eager_kernels.linear_added(eager_kernels.silu(gate) * up, hidden, down)
        return eager_kernels.float_log_softmax(out * 1.5 - 0.25)

    compiled = torch.compile(block, fullgraph=True, options={"emulate_precision_casts": True})
    torch.testing.assert_close(compiled(x, residual), block(x, residual), atol=0, rtol=0)


def test_only_the_newest_decoder_steps_over_a_shared_cache(tiny, monkeypatch):
    embeds = prompt_embeddings(tiny, prompt_speech=5, text=4)
    with torch.inference_mode():
        first, second = tiny.start_decoding(embeds, 4), tiny.start_decoding(embeds, 4)
        first.feed(3), second.feed(3)  # eager decoders own their caches
        monkeypatch.setattr(torch, "compile", lambda function, **_: function)
        tiny.decoding.options = DecodeOptions(compile=True)
        try:
            first = tiny.start_decoding(embeds, 4)
            tiny.start_decoding(embeds, 4)
            with pytest.raises(RuntimeError, match="superseded"):
                first.feed(3)
        finally:
            tiny.decoding.options = DecodeOptions()


def test_eager_step_allocates_no_growing_tensors(tiny):
    embeds = prompt_embeddings(tiny, prompt_speech=5, text=4)
    with torch.inference_mode():
        decoder = tiny.start_decoding(embeds, 6)
        pointer = decoder.cache.kv.data_ptr()
        for token in (1, 2, 3):
            decoder.feed(token)
        assert decoder.cache.kv.data_ptr() == pointer and decoder.cache.length == embeds.shape[1] + 3
        assert int(decoder.cache.position) == decoder.cache.length


# --- CUDA graphs (COSYVOICE_TEST_DEVICE=cuda) -----------------------------------------------------


@cuda_only
def test_cuda_graph_decoding_matches_eager_and_captures_once_per_bucket():
    torch.backends.cuda.matmul.allow_tf32 = False
    lm = random_tiny_speech_lm().to("cuda")
    embeds = prompt_embeddings(lm, prompt_speech=30, text=10)
    tokens = [int(t) for t in torch.randint(0, 300, (150,), generator=torch.Generator().manual_seed(4))]
    lm.decoding.options = DecodeOptions(cuda_graphs=False)
    eager = _forced_decode(lm, embeds, tokens)
    lm.decoding.options = DecodeOptions(cuda_graphs=True, bucket=64)
    assert lm.decoding.mode == "graphs"
    graphed = _forced_decode(lm, embeds, tokens)
    buckets = len({-(-(embeds.shape[1] + i + 1) // 64) for i in range(len(tokens) - 1)})
    assert lm.decoding.captures == buckets and lm.decoding.graph_error is None
    again = _forced_decode(lm, embeds, tokens)  # a later request replays the same graphs
    assert lm.decoding.captures == buckets
    torch.testing.assert_close(graphed, eager, atol=1e-5, rtol=0)
    torch.testing.assert_close(again, graphed, atol=0, rtol=0)


@cuda_only
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_triton_silu_mul_rounds_as_atens_silu_and_product(dtype):
    """Every 16-bit gate value (infinities and NaNs too) against ``F.silu(gate) * up``, bit for bit; and the model's
    shape, several rows, compiled."""
    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)
    up = torch.randn(every.numel(), generator=torch.Generator().manual_seed(6)).to(dtype)
    gate_up = torch.cat([every, up]).view(1, -1).cuda()
    assert triton_kernels.silu_mul_fits(gate_up) and not triton_kernels.silu_mul_fits(gate_up.cpu())
    expected = F.silu(gate_up[:, : every.numel()]) * gate_up[:, every.numel() :]
    torch.testing.assert_close(triton_kernels.silu_mul(gate_up), expected, atol=0, rtol=0, equal_nan=True)
    rows = (torch.randn(3, 2 * 4864, generator=torch.Generator().manual_seed(7)) * 4).to(dtype).cuda()
    expected = F.silu(rows[:, :4864]) * rows[:, 4864:]
    assert torch.equal(triton_kernels.silu_mul(rows), expected)
    assert torch.equal(torch.compile(eager_kernels.silu_mul)(rows), expected)


@cuda_only
def test_cuda_graph_capture_failure_falls_back_to_eager():
    lm = random_tiny_speech_lm().to("cuda")
    embeds = prompt_embeddings(lm, prompt_speech=10, text=6)
    tokens = [5, 9, 13, 2]
    lm.decoding.options = DecodeOptions(cuda_graphs=False)
    eager = _forced_decode(lm, embeds, tokens)

    class Syncing(torch.nn.Module):  # a layer that reads its output on the host cannot be captured
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            out = self.inner(x)
            return out if bool(torch.isfinite(out).all()) else out.nan_to_num()

    layer = lm.backbone.layers[0].mlp
    layer.down_proj = Syncing(layer.down_proj)
    lm.decoding.options = DecodeOptions(cuda_graphs=True)
    fallback = _forced_decode(lm, embeds, tokens)
    assert lm.decoding.graph_error and lm.decoding.mode == "eager"
    torch.testing.assert_close(fallback, eager, atol=1e-5, rtol=0)


@cuda_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_fused_step_under_the_graphs_samples_the_tokens_eager_does(dtype):
    """torch.compile's fusion captured in the bucket graphs: the same tokens for the same seed as the plain graphs (at
    16 bits through eager's rounding, ``DecodeOptions.eager_rounding``), and at fp32 (no TF32) as eager decoding. (At 16
    bits the tiny model's bucketed step itself differs from eager's: its masked span changes SDPA's sums; the full-size
    model's flash kernel does not, and its fused step samples eager's ids: bench/README.md, "Session 10".)"""
    torch.backends.cuda.matmul.allow_tf32 = False
    lm = random_tiny_speech_lm().to("cuda", dtype)
    embeds = prompt_embeddings(lm, prompt_speech=30, text=10).to("cuda", dtype)

    def sampled(options: DecodeOptions) -> list[int]:
        lm.decoding.options = options
        sampler, chosen = lm.make_sampler(seed=7), []
        with torch.inference_mode():
            decoder = lm.start_decoding(embeds, 150)
            for _ in range(150):
                chosen.append(sampler(decoder.logp, chosen, sorted(lm.stop_ids)))
                decoder.feed(chosen[-1])
        return chosen

    eager = sampled(DecodeOptions(cuda_graphs=False))
    plain = sampled(DecodeOptions(cuda_graphs=True, fuse=False, bucket=64))
    fused = sampled(DecodeOptions(cuda_graphs=True, fuse=True, bucket=64))
    assert lm.decoding.mode == "graphs" and lm.decoding.graph_error is None and lm.decoding.fuse_error is None
    assert lm.decoding.cuda_graphs().fused is not None and lm.decoding.captures >= 2
    assert lm.decoding.keeps_eager_rounding() == (dtype != torch.float32)
    assert fused == plain
    if dtype == torch.float32:
        assert fused == eager


def test_a_fused_step_that_fails_to_compile_leaves_the_plain_step(tiny, monkeypatch):
    """The CPU's share of the fused path: the step a graph would capture, and its fallback."""
    runner = tiny.decoding
    runner.options = DecodeOptions(fuse=True)
    monkeypatch.setattr(torch, "compile", lambda function, **_: "compiled " + function.__name__)
    graphs = runner.cuda_graphs()
    assert runner.mode == "eager" and graphs.graph_step() == runner._bucketed_step  # fused only under graphs
    monkeypatch.setattr(type(runner), "mode", property(lambda self: "graphs"))
    assert graphs.graph_step() == "compiled _bucketed_step"
    runner.fuse_error = "torch.compile of the decoding step failed (BackendCompilerFailed: no Triton)"
    assert graphs.graph_step() == runner._bucketed_step
    runner.fuse_error, graphs.fused = None, None
    runner.options = DecodeOptions(fuse=False)
    assert graphs.graph_step() == runner._bucketed_step


def test_decode_options_follow_the_environment(monkeypatch):
    monkeypatch.setenv("COSYVOICE_CUDA_GRAPHS", "0")
    monkeypatch.setenv("COSYVOICE_COMPILE_DECODE", "1")
    options = DecodeOptions()
    assert (options.cuda_graphs, options.compile) == (False, True)
    monkeypatch.delenv("COSYVOICE_CUDA_GRAPHS")
    monkeypatch.delenv("COSYVOICE_COMPILE_DECODE")
    assert (DecodeOptions().cuda_graphs, DecodeOptions().compile) == (True, False)
    assert random_tiny_speech_lm().decoding.mode == "eager"  # on the CPU: no graphs
    assert DecodeOptions().fuse  # on by default (it applies in graphs mode only: CUDA)
    monkeypatch.setenv("COSYVOICE_FUSE_DECODE", "0")
    assert not DecodeOptions().fuse
