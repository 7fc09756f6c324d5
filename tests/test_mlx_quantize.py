"""8-bit / 4-bit MLX LLM weights: what gets quantized, at which group size, the memory it saves, and top-25
overlap with fp32.

A small Qwen2 (128 wide, so MLX can group 32, 64 or 128 weights per scale) with seeded random weights. The
gate's verdicts are measured by ``bench/mlx_gate.py`` and checked in tests/test_mlx_gate.py.
"""

from __future__ import annotations

import pytest

pytest.importorskip("mlx.core", reason="needs mlx (Linux: pip install 'mlx[cpu]')")

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
import torch  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

from cosyvoice_mac.config import ConfigError  # noqa: E402
from cosyvoice_mac.mlx import llm_gate  # noqa: E402
from cosyvoice_mac.mlx.networks import apply_llm_precision, llm_precision, randomize  # noqa: E402
from cosyvoice_mac.mlx.quality import top_k_agreement  # noqa: E402
from cosyvoice_mac.mlx.speech_lm import MlxSpeechLM  # noqa: E402
from cosyvoice_mac.models.llm import Qwen2Config, SpeechLMConfig  # noqa: E402
from cosyvoice_mac.models.llm.speech_lm import ENDOFPROMPT_ID  # noqa: E402
from cosyvoice_mac.versions import COSYVOICE3  # noqa: E402

SMALL_QWEN = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    rms_norm_eps=1e-6,
    rope_theta=1e6,
    vocab_size=151936,
    max_position_embeddings=4096,
)
SPEECH_TOKENS = 512


def small_llm(seed: int = 0, **qwen_changes) -> MlxSpeechLM:
    qwen = Qwen2Config(**{**SMALL_QWEN, **qwen_changes})
    config = SpeechLMConfig(spec=COSYVOICE3, speech_token_size=SPEECH_TOKENS, qwen=qwen)
    llm = MlxSpeechLM(config)
    randomize(llm, seed)
    return llm


def request():
    generator = torch.Generator().manual_seed(7)
    text = torch.randint(0, 151000, (1, 12), generator=generator)
    prompt_text = torch.cat(
        [torch.randint(0, 151000, (1, 8), generator=generator), torch.tensor([[ENDOFPROMPT_ID]])], 1
    )
    speech = torch.randint(0, SPEECH_TOKENS, (1, 60), generator=generator)
    return text, prompt_text, speech


def teacher_forced(llm: MlxSpeechLM) -> torch.Tensor:
    return llm.teacher_forced_logits(llm.build_prompt_embeddings(*request()))[0]


def parameter_bytes(llm: MlxSpeechLM) -> int:
    return sum(a.nbytes for _, a in tree_flatten(llm.parameters()))


def test_top_k_agreement_counts_shared_candidates():
    logits = torch.arange(100.0).repeat(3, 1)
    assert top_k_agreement(logits, logits) == {"k": 25, "positions": 3, "mean": 1.0, "worst": 1.0, "top1_same": 1.0}
    moved = logits.clone()
    moved[0, 99] = -1.0  # the best id falls out of the first row's top 25
    agreement = top_k_agreement(logits, moved)
    assert agreement["worst"] == pytest.approx(24 / 25) and agreement["top1_same"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="two \\(L, V\\) tensors"):
        top_k_agreement(logits, logits[:2])


@pytest.mark.parametrize(("precision", "min_agreement"), [("int8", 0.95), ("int4", 0.6)])
def test_quantisation_touches_the_transformer_only_and_keeps_the_top_candidates(precision, min_agreement):
    reference = small_llm()
    fp32_bytes, fp32_logits = parameter_bytes(reference), teacher_forced(reference)
    quantized = apply_llm_precision(small_llm(), precision)
    assert quantized.precision == precision
    layer = quantized.backbone.layers[0]
    assert isinstance(layer.self_attn.q_proj, nn.QuantizedLinear) and isinstance(
        layer.mlp.down_proj, nn.QuantizedLinear
    )
    assert layer.self_attn.q_proj.group_size == llm_gate.group_size(precision)  # the size the gate measured best
    # Before: the tables and the head were quantized too. They stay floats; the text table is stored in fp16.
    assert type(quantized.speech_embedding) is nn.Embedding and type(quantized.llm_decoder) is nn.Linear
    assert quantized.llm_decoder.weight.dtype == mx.float32
    assert type(quantized.backbone.embed_tokens) is nn.Embedding
    assert quantized.backbone.embed_tokens.weight.dtype == mx.float16
    assert parameter_bytes(quantized) < 0.55 * fp32_bytes
    agreement = top_k_agreement(fp32_logits, teacher_forced(quantized))
    assert agreement["mean"] >= min_agreement, agreement
    tokens = list(quantized.generate(*request(), quantized.make_sampler(seed=3)))  # decodes through the cache
    assert tokens and all(0 <= t < SPEECH_TOKENS for t in tokens)


def test_precision_names_are_checked(monkeypatch):
    monkeypatch.setenv("COSYVOICE_MLX_LLM", "int3")
    with pytest.raises(ConfigError, match="MLX LLM precision 'int3' is not one of fp32, fp16, bf16, int8, int4"):
        llm_precision()
    assert llm_precision("INT8") == "int8"
    monkeypatch.delenv("COSYVOICE_MLX_LLM")
    assert llm_precision() == "fp32"


def test_16_bit_storage_halves_the_llm():
    llm = small_llm()
    before = parameter_bytes(llm)
    apply_llm_precision(llm, "bf16")
    assert parameter_bytes(llm) == before // 2 and llm.backbone.norm.weight.dtype == mx.bfloat16
    assert torch.isfinite(teacher_forced(llm)).all()


def test_low_memory_mode_picks_the_gates_mlx_llm_unless_one_is_named(monkeypatch):
    from cosyvoice_mac.pipeline.engines import mlx_llm_choice

    monkeypatch.delenv("COSYVOICE_MLX_LLM", raising=False)
    assert mlx_llm_choice(low_memory=False).precision == "fp32"
    picked = mlx_llm_choice(low_memory=True)
    assert picked.row.passes and picked.why == "low_memory"
    assert picked.precision == llm_gate.gate_choice(low_memory=True).precision  # the rule: tests/test_mlx_gate.py
    monkeypatch.setenv("COSYVOICE_MLX_LLM", "int4")
    named = mlx_llm_choice(low_memory=True)  # named: never refused
    assert (named.precision, named.why, named.named_by) == ("int4", "named", "COSYVOICE_MLX_LLM")
    assert "outside the gate" in named.reason()
    page = mlx_llm_choice(low_memory=True, requested="fp16")  # the page's setting wins over the variable
    assert (page.precision, page.named_by) == ("fp16", "settings")
    assert mlx_llm_choice(low_memory=True, requested="auto").precision == "int4"
    with pytest.raises(ConfigError, match="not one of"):
        mlx_llm_choice(low_memory=True, requested="int3")


def test_int8_from_weights_read_in_16_bits_computes_in_float32_and_keeps_the_gate():
    """The low-memory load reads the LLM in fp16 (never the fp32 copy whole) and quantizes from there."""
    from cosyvoice_mac.mlx.llm_precision import cast_evaluated, read_dtype

    assert read_dtype("int8") == mx.float16 and read_dtype("fp32") is None
    reference = teacher_forced(small_llm())
    read_in_half = small_llm()
    cast_evaluated(read_in_half, mx.float16)
    quantized = apply_llm_precision(read_in_half, "int8")
    assert quantized.backbone.layers[0].self_attn.q_proj.scales.dtype == mx.float32
    assert quantized.compute_dtype == mx.float32 and quantized.llm_decoder.weight.dtype == mx.float32
    assert top_k_agreement(reference, teacher_forced(quantized))["mean"] >= 0.95
