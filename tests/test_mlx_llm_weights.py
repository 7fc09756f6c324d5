"""The MLX LLM's weights: cached in the precision it runs (quantised once), and the text table off MLX.

A 64-wide Qwen2 with the real 151936-row text table (so MLX can group its layers by 64) is written as an
official ``llm.pt``; the tiny golden folder's LLM (8 wide) stands in where nothing is quantised.
"""

from __future__ import annotations

import pytest

pytest.importorskip("mlx.core", reason="needs mlx (Linux: pip install 'mlx[cpu]')")

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

from cosyvoice_mac.mlx import convert, llm_gate, llm_weights  # noqa: E402
from cosyvoice_mac.mlx.llm_weights import HostTextTable, load_llm  # noqa: E402
from cosyvoice_mac.mlx.networks import randomize  # noqa: E402
from cosyvoice_mac.mlx.speech_lm import MlxSpeechLM  # noqa: E402
from cosyvoice_mac.models.llm import Qwen2Config, SpeechLMConfig  # noqa: E402
from cosyvoice_mac.models.llm.speech_lm import ENDOFPROMPT_ID  # noqa: E402
from cosyvoice_mac.versions import COSYVOICE3  # noqa: E402

TEXT_ROWS = 151936
SPEECH_TOKENS = 512


def small_config() -> SpeechLMConfig:
    qwen = Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
        rope_theta=1e6,
        vocab_size=TEXT_ROWS,
        max_position_embeddings=4096,
    )
    return SpeechLMConfig(spec=COSYVOICE3, speech_token_size=SPEECH_TOKENS, qwen=qwen)


@pytest.fixture(scope="module")
def small_llm_pt(tmp_path_factory):
    """An official-layout ``llm.pt`` of a seeded random 64-wide LLM."""
    llm = MlxSpeechLM(small_config())
    randomize(llm, 5)
    state = {
        key.replace("backbone.", "llm.model.model.", 1): torch.from_numpy(np.array(array))
        for key, array in tree_flatten(llm.parameters())
    }
    path = tmp_path_factory.mktemp("small-llm") / "llm.pt"
    torch.save(state, path)
    return path


def request(seed: int = 7):
    generator = torch.Generator().manual_seed(seed)
    text = torch.randint(0, 151000, (1, 12), generator=generator)
    prompt_text = torch.cat(
        [torch.randint(0, 151000, (1, 8), generator=generator), torch.tensor([[ENDOFPROMPT_ID]])], 1
    )
    return text, prompt_text, torch.randint(0, SPEECH_TOKENS, (1, 40), generator=generator)


def outputs(llm: MlxSpeechLM) -> tuple[torch.Tensor, list[int]]:
    """Teacher-forced logits of a request and the tokens decoded for seed 3 (through the KV cache)."""
    logits = llm.teacher_forced_logits(llm.build_prompt_embeddings(*request()))
    return logits, list(llm.generate(*request(), llm.make_sampler(seed=3)))


def mlx_tables(llm: MlxSpeechLM) -> list[str]:
    return [name for name, array in tree_flatten(llm.parameters()) if array.shape[0] == TEXT_ROWS]


def test_a_quantised_llm_is_cached_as_it_runs_and_a_second_load_does_not_quantise(small_llm_pt, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = load_llm(small_llm_pt, small_config(), "int8", cache_dir=cache)
    assert isinstance(first.backbone.layers[0].mlp.down_proj, nn.QuantizedLinear)
    digest = convert.file_sha256(small_llm_pt)
    group = llm_gate.group_size("int8")  # the gate's, chosen by measurement
    assert sorted(p.name for p in cache.glob("*.safetensors")) == [f"{digest}-llm-int8-g{group}.safetensors"]

    def never(*args, **kwargs):
        raise AssertionError("the second load quantised or converted again")

    monkeypatch.setattr(llm_weights, "apply_llm_precision", never)  # before: re-quantised at each start
    monkeypatch.setattr(convert, "load_checkpoint", never)
    again = load_llm(small_llm_pt, small_config(), "int8", cache_dir=cache)
    assert again.precision == "int8" and isinstance(again.backbone.layers[1].self_attn.q_proj, nn.QuantizedLinear)
    before, after = dict(tree_flatten(first.parameters())), dict(tree_flatten(again.parameters()))
    assert set(before) == set(after)
    assert all(before[k].dtype == after[k].dtype and mx.array_equal(before[k], after[k]).item() for k in before)
    (logits, tokens), (logits_again, tokens_again) = outputs(first), outputs(again)
    assert torch.equal(logits, logits_again) and tokens == tokens_again and tokens


def test_the_cache_names_precision_and_group_size_and_refuses_a_file_written_for_another(small_llm_pt, tmp_path):
    cache = tmp_path / "cache"
    int8 = llm_weights.cache_path(small_llm_pt, "int8", cache)
    assert int8 != llm_weights.cache_path(small_llm_pt, "int4", cache)
    assert int8.name.endswith(f"-g{llm_gate.group_size('int8')}.safetensors")
    fp16 = load_llm(small_llm_pt, small_config(), "fp16", cache_dir=cache)
    llm_weights.cache_path(small_llm_pt, "fp16", cache).replace(int8)  # an fp16 file under the int8 name
    quantised = load_llm(small_llm_pt, small_config(), "int8", cache_dir=cache)  # not served the fp16 weights
    assert isinstance(quantised.backbone.layers[0].mlp.up_proj, nn.QuantizedLinear)
    assert fp16.backbone.layers[0].mlp.up_proj.weight.dtype == mx.float16


@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_the_low_memory_text_table_is_a_map_of_the_cache_and_gives_the_same_logits_and_tokens(
    small_llm_pt, tmp_path, precision
):
    cache = tmp_path / "cache"
    in_mlx = load_llm(small_llm_pt, small_config(), precision, cache_dir=cache)
    assert mlx_tables(in_mlx) == ["backbone.embed_tokens.weight"]
    table_bytes = in_mlx.backbone.embed_tokens.weight.nbytes
    mx.clear_cache()
    active, _ = mx.get_active_memory(), mx.reset_peak_memory()
    hosted = load_llm(small_llm_pt, small_config(), precision, cache_dir=cache, host_table=True)  # from the cache
    assert mx.get_peak_memory() - active < table_bytes  # the table was never read into MLX
    table = hosted.backbone.embed_tokens
    assert isinstance(table, HostTextTable) and isinstance(table.rows, np.memmap) and table.shape[0] == TEXT_ROWS
    assert mlx_tables(hosted) == []  # before: a (151936, D) MLX array
    (logits, tokens), (logits_hosted, tokens_hosted) = outputs(in_mlx), outputs(hosted)
    assert torch.equal(logits, logits_hosted) and tokens == tokens_hosted


def test_without_a_cache_the_table_is_a_host_array_and_the_first_load_maps_what_it_wrote(small_llm_pt, tmp_path):
    uncached = load_llm(small_llm_pt, small_config(), "int8", cache_dir=None, host_table=True)
    assert type(uncached.backbone.embed_tokens.rows) is np.ndarray and mlx_tables(uncached) == []
    first = load_llm(small_llm_pt, small_config(), "int8", cache_dir=tmp_path, host_table=True)
    assert isinstance(first.backbone.embed_tokens.rows, np.memmap) and mlx_tables(first) == []
    assert torch.equal(outputs(uncached)[0], outputs(first)[0])


def test_a_bf16_table_on_the_host_keeps_its_bits(small_llm_pt, tmp_path):
    in_mlx = load_llm(small_llm_pt, small_config(), "bf16", cache_dir=tmp_path)
    ids = mx.array([[0, 17, TEXT_ROWS - 1]])
    for hosted in (
        HostTextTable.of(in_mlx.backbone.embed_tokens.weight),
        HostTextTable.mapped(next(tmp_path.glob("*bf16*"))),
    ):
        rows = hosted(ids)
        assert rows.dtype == mx.bfloat16 and mx.array_equal(rows, in_mlx.backbone.embed_tokens(ids)).item()


def test_the_low_memory_pipeline_keeps_the_text_table_off_mlx(tmp_path, monkeypatch):
    from cosyvoice_mac.pipeline import CosyVoice
    from tests.fakes.onnx_models import make_tiny_model_dir

    folder = make_tiny_model_dir("cosyvoice3", tmp_path / "model")
    monkeypatch.setenv("COSYVOICE_MLX_CACHE", str(tmp_path / "mlx-cache"))
    monkeypatch.setenv("COSYVOICE_MLX_LLM", "fp16")
    plain = CosyVoice.from_pretrained(folder, device="cpu", engine="mlx").networks.llm
    low = CosyVoice.from_pretrained(folder, device="cpu", engine="mlx", low_memory=True).networks.llm
    assert isinstance(low.backbone.embed_tokens, HostTextTable) and mlx_tables(low) == []
    assert mlx_tables(plain) == ["backbone.embed_tokens.weight"]
    text, prompt_text, _ = request()
    speech = torch.randint(0, low.config.speech_token_size, (1, 30), generator=torch.Generator().manual_seed(1))
    embeds = [llm.build_prompt_embeddings(text, prompt_text, speech) for llm in (plain, low)]
    assert mx.array_equal(*embeds).item()


def test_a_cache_that_cannot_be_written_costs_only_the_next_start(small_llm_pt, tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(llm_weights.mx, "save_safetensors", full)
    llm = load_llm(small_llm_pt, small_config(), "int8", cache_dir=tmp_path, host_table=True)
    assert type(llm.backbone.embed_tokens.rows) is np.ndarray and not list(tmp_path.glob("*-llm-*"))
    assert outputs(llm)[1]
