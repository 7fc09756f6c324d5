"""Parity of the speech LM (Qwen2LM / CosyVoice3LM) with the reference's golden vectors.

The model is built in the reference-compatible mode (only id S masked before min_len), because
that is what produced the vectors. Sampling is checked by replaying the recorded multinomial
draws ``(n_candidates, index)``: our sampler must offer the same number of candidates at every
draw and, fed the recorded indices, must emit the same tokens.
"""

from __future__ import annotations

import pytest
import torch

from cosyvoice_mac.config import read_yaml_config
from cosyvoice_mac.models.llm import FULL, NUCLEUS, GreedySampler, SpeechLM, drop_long_silent_runs, load_speech_lm
from tests.parity.common import ParityContext, assert_close

_MODELS: dict[str, SpeechLM] = {}


def _model(ctx: ParityContext) -> SpeechLM:
    key = str(ctx.model_dir)
    if key not in _MODELS:
        config = read_yaml_config(ctx.model_dir / f"{ctx.version}.yaml", overrides={"qwen_pretrain_path": ""})
        _MODELS[key] = load_speech_lm(ctx.model_dir, config["llm"], mask_all_stop_ids_before_min_len=False)
    return _MODELS[key]


def _prompt(ctx: ParityContext, text: torch.Tensor | None = None):
    inputs = ctx.vectors("inputs")
    return (inputs["text"] if text is None else text), inputs["prompt_text"], inputs["prompt_speech_token"]


class _ReplayDraws:
    """A ``draw`` that checks the candidate count and returns the recorded index, row by row."""

    def __init__(self, rows: torch.Tensor, vocab: int):
        self.rows = rows.tolist()
        self.vocab = vocab
        self.used = 0

    def __call__(self, probs: torch.Tensor, kind: str) -> int:
        assert self.used < len(self.rows), f"draw {self.used + 1} but the reference made only {len(self.rows)}"
        count, index = self.rows[self.used]
        assert kind == (FULL if count == self.vocab else NUCLEUS), f"draw {self.used}: {kind} draw, reference n={count}"
        assert probs.numel() == count, f"draw {self.used}: {probs.numel()} candidates, reference {count}"
        self.used += 1
        return index

    def assert_all_used(self) -> None:
        assert self.used == len(self.rows), f"used {self.used} of the reference's {len(self.rows)} draws"


class _Recording:
    """Wraps a sampler and keeps the id it returned last (the stop id when decoding ended on one)."""

    def __init__(self, sampler):
        self.sampler = sampler
        self.last: int | None = None

    def __call__(self, logp, history, ignore_ids):
        self.last = self.sampler(logp, history, ignore_ids)
        return self.last


def _replay(ctx: ParityContext, rows: torch.Tensor, text: torch.Tensor | None = None):
    model = _model(ctx)
    draws = _ReplayDraws(rows, model.config.speech_vocab_size)
    sampler = _Recording(model.make_sampler(seed=0, draw=draws))
    tokens = list(model.generate(*_prompt(ctx, text), sampler))
    draws.assert_all_used()
    return model, tokens, sampler.last


def check_lm_input_embeds(ctx: ParityContext) -> None:
    model, vectors = _model(ctx), ctx.vectors("llm")
    forced = ctx.vectors("inputs")["forced_speech_tokens"].to(model.speech_embedding.weight.device, torch.long)
    with torch.inference_mode():
        embeds = torch.cat((model.build_prompt_embeddings(*_prompt(ctx)), model.speech_embedding(forced)), dim=1)
    assert torch.equal(embeds.cpu(), vectors["lm_input_embeds"]), "lm_input_embeds differ (they are table lookups)"


def check_logits_teacher_forced(ctx: ParityContext) -> None:
    model, vectors = _model(ctx), ctx.vectors("llm")
    logits = model.teacher_forced_logits(vectors["lm_input_embeds"])
    assert_close(logits, vectors["logits_teacher_forced"], "llm_logits", "logits_teacher_forced")


def check_incremental_logp_forced(ctx: ParityContext) -> None:
    model, expected = _model(ctx), ctx.vectors("llm")["incremental_logp_forced"]
    forced = ctx.vectors("inputs")["forced_speech_tokens"][0].tolist()
    seen: list[torch.Tensor] = []

    def force(logp, history, ignore_ids):
        return forced[len(history)] if len(history) < len(forced) else model.eos

    tokens = list(model.generate(*_prompt(ctx), force, on_step=lambda step, logp: seen.append(logp.clone())))
    assert tokens == forced
    actual = torch.stack(seen)
    assert torch.equal(torch.isinf(actual), torch.isinf(expected)), "-inf entries differ"
    finite = torch.isfinite(expected)
    assert_close(actual[finite], expected[finite], "llm_logits", "incremental_logp_forced (finite entries)")


def check_greedy(ctx: ParityContext) -> None:
    model, vectors = _model(ctx), ctx.vectors("llm")
    expected = vectors["greedy_tokens"].tolist()
    first = vectors["greedy_logp_first40"]
    seen: list[torch.Tensor] = []
    sampler = _Recording(GreedySampler())
    on_step = lambda step, logp: seen.append(logp.clone()) if step < len(first) else None  # noqa: E731
    tokens = list(model.generate(*_prompt(ctx), sampler, on_step=on_step))
    if expected and expected[-1] in model.stop_ids:  # the reference lists the stop id it sampled
        assert sampler.last == expected[-1], f"stopped on {sampler.last}, reference on {expected[-1]}"
        expected = expected[:-1]
    assert tokens == expected, f"greedy tokens differ first at {_first_difference(tokens, expected)}"
    actual = torch.stack(seen)
    assert torch.equal(torch.isinf(actual), torch.isinf(first)), "greedy_logp_first40: -inf entries differ"
    finite = torch.isfinite(first)
    assert_close(actual[finite], first[finite], "llm_logits", "greedy_logp_first40 (finite entries)")


def check_ras_seed4321_replay(ctx: ParityContext) -> None:
    vectors = ctx.vectors("llm")
    model, tokens, last = _replay(ctx, vectors["ras_seed4321_multinomial"])
    expected = vectors["ras_seed4321_tokens"].tolist()
    assert expected[-1] in model.stop_ids and last == expected[-1], f"stop id {last}, reference {expected[-1]}"
    assert tokens == expected[:-1], f"RAS tokens differ first at {_first_difference(tokens, expected[:-1])}"


def check_ras_seed4321_own_generator(ctx: ParityContext) -> None:
    """Our sampler's own generator seeded with ``ras_seed`` draws exactly what the reference's global RNG drew.

    Only meaningful with the reference's torch version (multinomial's algorithm is not a stable API).
    """
    reference_torch = ctx.manifest.get("environment", {}).get("torch", "")
    if reference_torch.split("+")[0] != torch.__version__.split("+")[0]:
        pytest.skip(f"torch {torch.__version__} differs from the reference's {reference_torch}")
    model, vectors = _model(ctx), ctx.vectors("llm")
    tokens = list(model.generate(*_prompt(ctx), model.make_sampler(seed=ctx.case_params.ras_seed)))
    expected = vectors["ras_seed4321_tokens"].tolist()[:-1]
    assert tokens == expected, f"seeded RAS tokens differ first at {_first_difference(tokens, expected)}"


def check_e2e_speech_tokens_replay(ctx: ParityContext) -> None:
    e2e = ctx.vectors("e2e")
    model, tokens, _ = _replay(ctx, e2e["multinomial"], text=e2e["text"])
    kept = drop_long_silent_runs(tokens, model.silent_ids)
    expected = e2e["speech_tokens"][0].tolist()
    assert kept == expected, f"e2e speech tokens differ first at {_first_difference(kept, expected)}"


def _first_difference(a: list[int], b: list[int]) -> str:
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"index {index}: {x} != {y}"
    return f"lengths {len(a)} != {len(b)}"


CASES = {
    "lm_input_embeds": check_lm_input_embeds,
    "logits_teacher_forced": check_logits_teacher_forced,
    "incremental_logp_forced": check_incremental_logp_forced,
    "greedy_tokens": check_greedy,
    "ras_seed4321_tokens": check_ras_seed4321_replay,
    "ras_seed4321_own_generator": check_ras_seed4321_own_generator,
    "e2e_speech_tokens": check_e2e_speech_tokens_replay,
}
