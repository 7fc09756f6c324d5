"""Behaviour of the speech LM that the golden vectors do not cover (inputs, masking, cache, dtype, device)."""

from __future__ import annotations

import json

import pytest
import torch

from cosyvoice_mac.checkpoint import load_checkpoint
from cosyvoice_mac.config import ConfigError, read_yaml_config
from cosyvoice_mac.models.llm import (
    ENDOFPROMPT_ID,
    FULL,
    NUCLEUS,
    GreedySampler,
    Qwen2Config,
    RasSampler,
    SpeechLM,
    SpeechLMConfig,
    SpeechLMInputError,
    drop_long_silent_runs,
    filter_silent_runs,
    load_speech_lm,
)
from tests.parity.common import parity_dir

TINY = {version: parity_dir() / f"{version}_tiny" for version in ("cosyvoice2", "cosyvoice3")}


def _llm_node(version: str) -> dict:
    return read_yaml_config(TINY[version] / f"{version}.yaml", overrides={"qwen_pretrain_path": ""})["llm"]


@pytest.fixture(scope="module")
def models():
    """(version, fixed_mode) -> tiny SpeechLM with the parity weights."""
    return {
        (version, fixed): load_speech_lm(TINY[version], _llm_node(version), mask_all_stop_ids_before_min_len=fixed)
        for version in TINY
        for fixed in (True, False)
    }


def _prompt(text_len: int = 4, version: str = "cosyvoice3"):
    text = torch.tensor([[11, 461, 417, 256][:text_len] + [13] * max(0, text_len - 4)])
    prompt_text = torch.tensor([[514, ENDOFPROMPT_ID, 511, 277] if version == "cosyvoice3" else [511, 277]])
    prompt_speech = torch.tensor([[5, 17, 300, 42, 42, 7]])
    return text, prompt_text, prompt_speech


def _stop_eager(model: SpeechLM, seen_ignores: list):
    """A sampler that ends decoding whenever any stop id is still allowed."""

    def sample(logp, history, ignore_ids):
        seen_ignores.append(tuple(ignore_ids))
        for stop in sorted(model.stop_ids):
            if torch.isfinite(logp[stop]) and stop not in ignore_ids:
                return stop
        return int(torch.argmax(logp[: model.config.speech_token_size]))

    return sample


# --- configs -------------------------------------------------------------------------------------


def test_qwen_config_from_tiny_json():
    config = Qwen2Config.from_json(TINY["cosyvoice3"] / "CosyVoice-BlankEN" / "config.json")
    assert (config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (8, 2, 1, 4)
    assert config.rope_theta == 1e6 and config.vocab_size == 151936


def test_qwen_config_rejects_missing_key_and_rope_scaling(tmp_path):
    good = json.loads((TINY["cosyvoice3"] / "CosyVoice-BlankEN" / "config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in good.items() if k != "rope_theta"}))
    with pytest.raises(ConfigError, match="rope_theta"):
        Qwen2Config.from_json(path)
    path.write_text(json.dumps({**good, "rope_scaling": {"type": "yarn", "factor": 4}}))
    with pytest.raises(ConfigError, match="rope_scaling"):
        Qwen2Config.from_json(path)


def test_speech_lm_config_from_yaml():
    qwen = Qwen2Config.from_json(TINY["cosyvoice3"] / "CosyVoice-BlankEN" / "config.json")
    v3 = SpeechLMConfig.from_yaml(_llm_node("cosyvoice3"), qwen)
    v2 = SpeechLMConfig.from_yaml(_llm_node("cosyvoice2"), qwen)
    assert (v3.spec.name, v3.speech_vocab_size, v3.mask_all_stop_ids_before_min_len) == ("cosyvoice3", 712, True)
    assert (v2.spec.name, v2.speech_vocab_size) == ("cosyvoice2", 515)
    assert (v3.top_p, v3.top_k, v3.win_size, v3.tau_r) == (0.8, 25, 10, 0.1)
    with pytest.raises(ConfigError, match="TransformerLM"):
        SpeechLMConfig.from_yaml({**_llm_node("cosyvoice3"), "_tag": "new:cosyvoice.llm.llm.TransformerLM"}, qwen)
    with pytest.raises(ConfigError, match="hidden_size"):
        SpeechLMConfig.from_yaml({**_llm_node("cosyvoice3"), "llm_input_size": 16}, qwen)


def test_state_dict_keys_are_llm_pt_keys_without_lm_head(models):
    state = load_checkpoint(TINY["cosyvoice2"] / "llm.pt")
    assert set(models["cosyvoice2", True].state_dict()) == set(state) - {"llm.model.lm_head.weight"}


# --- ids and inputs ------------------------------------------------------------------------------


def test_special_ids(models):
    v2, v3 = models["cosyvoice2", False], models["cosyvoice3", False]
    assert (v2.sos, v2.task_id, v2.eos, v2.stop_ids) == (0, 1, 512, frozenset({512, 513, 514}))
    assert (v3.sos, v3.task_id, v3.eos, v3.stop_ids) == (512, 514, 513, frozenset(range(512, 712)))
    assert v2.masked_before_min_len == (512,) and v3.masked_before_min_len == (512,)
    assert models["cosyvoice3", True].masked_before_min_len == tuple(range(512, 712))
    assert v2.silent_ids == () and 55 in v3.silent_ids


def test_v3_without_endofprompt_is_rejected_when_called(models):
    text, _, speech = _prompt()
    with pytest.raises(SpeechLMInputError, match="endofprompt"):
        models["cosyvoice3", True].generate(text, torch.tensor([[511, 277]]), speech, GreedySampler())
    # v2 has no such requirement
    tokens = models["cosyvoice2", True].generate(text, torch.tensor([[511, 277]]), speech, GreedySampler())
    assert next(iter(tokens)) >= 0


def test_empty_text_and_bad_ids_are_rejected(models):
    model = models["cosyvoice3", True]
    text, prompt_text, speech = _prompt()
    with pytest.raises(SpeechLMInputError, match="empty"):
        model.build_prompt_embeddings(torch.zeros(1, 0, dtype=torch.long), prompt_text, speech)
    with pytest.raises(SpeechLMInputError, match="speech token range"):
        model.build_prompt_embeddings(text, prompt_text, torch.tensor([[3, 512]]))
    with pytest.raises(SpeechLMInputError, match="shape"):
        model.build_prompt_embeddings(text.repeat(2, 1), prompt_text, speech)
    with pytest.raises(SpeechLMInputError, match="integer"):
        model.build_prompt_embeddings(text.float(), prompt_text, speech)


def test_empty_prompts_are_allowed(models):
    model = models["cosyvoice3", True]
    text = torch.tensor([[ENDOFPROMPT_ID, 11, 461]])
    nothing = torch.zeros(1, 0, dtype=torch.long)
    embeds = model.build_prompt_embeddings(text, nothing, nothing)
    assert embeds.shape == (1, 1 + 3 + 1, 8)


# --- stop-id masking -----------------------------------------------------------------------------


def test_fixed_mode_never_stops_before_min_len(models):
    model = models["cosyvoice3", True]
    text, prompt_text, speech = _prompt(text_len=4)
    min_len, max_len = model.length_limits(4)
    seen: list = []
    tokens = list(model.generate(text, prompt_text, speech, _stop_eager(model, seen)))
    assert len(tokens) == min_len  # masked through min_len, stops at the first step it may
    assert all(set(ignore) == model.stop_ids for ignore in seen[:min_len])
    assert seen[min_len] == ()


def test_reference_mode_reproduces_the_v3_early_stop(models):
    model = models["cosyvoice3", False]
    seen: list = []
    tokens = list(model.generate(*_prompt(text_len=4), _stop_eager(model, seen)))
    assert tokens == [] and seen == [(512,)]  # upstream masks only S (= v3's SOS), so EOS ends at once


def test_ras_sampler_never_returns_ignored_ids_even_on_fallback():
    logp = torch.full((20,), -30.0)
    logp[15:] = 0.0  # ids 15..19 hold almost all the mass
    sampler = RasSampler(seed=1)
    for _ in range(50):
        # history makes every candidate a repeat, so the full-distribution fallback runs too
        token = sampler(logp, list(range(10)) * 2, ignore_ids=range(15, 20))
        assert token < 15


# --- sampler mechanics ---------------------------------------------------------------------------


def test_nucleus_size_and_repetition_fallback():
    calls = []

    def draw(probs, kind):
        calls.append((kind, probs.numel()))
        return 0

    sampler = RasSampler(top_p=0.8, top_k=25, draw=draw)
    logp = torch.log(torch.tensor([0.05, 0.6, 0.3, 0.05]))
    assert sampler(logp, history=[]) == 1  # candidates: 0.6 (mass before 0), 0.3 (mass before 0.6 < 0.8)
    assert calls == [(NUCLEUS, 2)]
    calls.clear()
    assert sampler(logp, history=[1, 3]) == 0  # id 1 repeats -> full draw without id 1, index 0
    assert calls == [(NUCLEUS, 2), (FULL, 4)]
    assert RasSampler(top_k=1, draw=draw).nucleus_size(torch.tensor([0.3, 0.3, 0.4])) == 1


def test_seeded_sampler_is_reproducible_and_leaves_input_untouched():
    logp = torch.randn(300, generator=torch.Generator().manual_seed(0)).log_softmax(0)
    original = logp.clone()
    sampler_a, sampler_b = RasSampler(seed=7), RasSampler(seed=7)
    history: list[int] = []
    seq_a = [sampler_a(logp, history, [3]) for _ in range(30)]
    seq_b = [sampler_b(logp, history, [3]) for _ in range(30)]
    assert seq_a == seq_b and 3 not in seq_a
    assert len(set(seq_a)) > 1  # it does sample, not argmax
    assert torch.equal(logp, original)


# --- cache, dtype, device ------------------------------------------------------------------------


def test_kv_cache_is_written_in_place_and_matches_full_forward(models):
    model = models["cosyvoice2", True]
    embeds = model.build_prompt_embeddings(*_prompt(version="cosyvoice2"))
    forced = [7, 100, 7, 450, 3]
    decoder = model.start_decoding(embeds, max_new_tokens=len(forced))
    cache = decoder.cache
    pointers, shape = (cache.keys.data_ptr(), cache.values.data_ptr()), cache.keys.shape
    steps = [decoder.logp.clone()]
    for token in forced:
        steps.append(decoder.feed(token).clone())
        assert (cache.keys.data_ptr(), cache.values.data_ptr()) == pointers and cache.keys.shape == shape
    assert cache.length == embeds.shape[1] + len(forced) == cache.capacity
    with torch.inference_mode():
        full = torch.cat((embeds, model.speech_embedding(torch.tensor([forced]))), dim=1)
    reference = model.teacher_forced_logits(full)[0, embeds.shape[1] - 1 :].log_softmax(-1)
    torch.testing.assert_close(torch.stack(steps), reference, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="capacity"):
        decoder.feed(1)


def test_chunk_after_cached_prefix_matches_full_forward(models):
    backbone = models["cosyvoice3", True].backbone
    embeds = torch.randn(1, 12, 8, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        full = backbone(embeds)
        cache = backbone.new_cache(12)
        parts = [backbone(embeds[:, :5], cache), backbone(embeds[:, 5:9], cache), backbone(embeds[:, 9:], cache)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=0)


def test_bfloat16_runs_with_finite_logits():
    config = SpeechLMConfig.from_yaml(
        _llm_node("cosyvoice3"), Qwen2Config.from_json(TINY["cosyvoice3"] / "CosyVoice-BlankEN" / "config.json")
    )
    model = SpeechLM.from_checkpoint(TINY["cosyvoice3"] / "llm.pt", config, dtype=torch.bfloat16)
    assert model.speech_embedding.weight.dtype == torch.bfloat16
    embeds = model.build_prompt_embeddings(*_prompt())
    assert embeds.dtype == torch.bfloat16
    logits = model.teacher_forced_logits(embeds)
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()
    steps: list[torch.Tensor] = []
    sampler = model.make_sampler(seed=0)
    tokens = list(model.generate(*_prompt(text_len=2), sampler, on_step=lambda step, logp: steps.append(logp)))
    assert len(tokens) >= 4  # min_len = 2 * 2 in the fixed mode
    assert all(step.dtype == torch.float32 and not torch.isnan(step).any() for step in steps)


def test_model_follows_the_device_of_its_parameters():
    qwen = Qwen2Config.from_json(TINY["cosyvoice3"] / "CosyVoice-BlankEN" / "config.json")
    with torch.device("meta"):
        model = SpeechLM(SpeechLMConfig.from_yaml(_llm_node("cosyvoice3"), qwen))
    embeds = model.build_prompt_embeddings(*_prompt())  # ids arrive on the CPU
    assert embeds.device.type == "meta" and embeds.shape == (1, 1 + 8 + 1 + 6, 8)
    logits = model.teacher_forced_logits(embeds)
    assert logits.device.type == "meta" and logits.shape == (1, 16, 712)
    cache = model.backbone.new_cache(32)
    assert cache.keys.device.type == "meta" and cache.keys.shape == (2, 1, 1, 32, 4)


# --- v3 post-filter ------------------------------------------------------------------------------


def test_silent_run_filter_keeps_at_most_five_in_a_row():
    silent = {1, 55}
    tokens = [7, 1, 1, 55, 1, 1, 1, 1, 9, 55, 55, 1, 1, 1, 1, 1, 55, 8]
    expected = [7, 1, 1, 55, 1, 1, 9, 55, 55, 1, 1, 1, 8]
    assert drop_long_silent_runs(tokens, silent) == expected
    stream = filter_silent_runs(iter(tokens), silent)
    assert next(stream) == 7  # lazy: works on a live token stream
    assert [7, *stream] == expected
