"""``sampling.sample_rows``: a batch's rows sampled together draw exactly the ids each row's sampler draws alone (one
softmax and top-k for the batch instead of a sort of the whole vocabulary per row), ties and all."""

from __future__ import annotations

import random

import pytest
import torch

from cosyvoice_mac.models.llm.sampling import GreedySampler, RasSampler, sample_rows


def _rows(seed: int, rows: int, vocab: int, ties: bool) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    logps = torch.log_softmax(3 * torch.randn(rows, vocab, generator=generator), dim=1)
    if ties:  # half the vocabulary equal to the first id: the top-k's cut falls inside a tie
        logps[:, : vocab // 2] = logps[:, :1]
    return logps


@pytest.mark.parametrize(
    ("rows", "vocab", "ties", "temperature"),
    [(4, 6561, False, 1.0), (5, 50, True, 1.0), (3, 30, False, 0.7), (6, 400, True, 1.3)],
)
def test_sampled_together_each_row_draws_what_its_sampler_draws_alone(rows, vocab, ties, temperature):
    for trial in range(25):
        pick = random.Random(trial)
        settings = [
            {"top_k": pick.choice([1, 5, 25]), "top_p": pick.choice([0.5, 0.8, 1.0]), "temperature": temperature}
            for _ in range(rows)
        ]
        alone = [RasSampler(seed=trial * 10 + row, **settings[row]) for row in range(rows)]
        together = [RasSampler(seed=trial * 10 + row, **settings[row]) for row in range(rows)]
        # short windows of few ids: the repetition re-draw over the whole vocabulary happens too
        histories = [[pick.randrange(min(vocab, 4)) for _ in range(12)] for _ in range(rows)]
        ignores = [[0, 1, 2] if row % 2 else [] for row in range(rows)]
        logps = _rows(trial, rows, vocab, ties)
        for _ in range(6):
            expected = [sampler(logps[row], histories[row], ignores[row]) for row, sampler in enumerate(alone)]
            assert sample_rows(together, logps, histories, ignores) == expected
            for history, token in zip(histories, expected):
                history.append(token)


def test_rows_of_other_samplers_are_sampled_one_by_one():
    logps = _rows(0, 3, 40, ties=False)
    samplers = [GreedySampler(), RasSampler(seed=1), GreedySampler()]
    expected = [int(logps[0].argmax()), RasSampler(seed=1)(logps[1], [], ()), int(logps[2].argmax())]
    assert sample_rows(samplers, logps, [[], [], []], [(), (), ()]) == expected


def test_the_callers_log_probabilities_are_left_as_they_were():
    logps = _rows(1, 2, 50, ties=False)
    before = logps.clone()
    sample_rows([RasSampler(seed=0), RasSampler(seed=1)], logps, [[3] * 10, []], [[0, 1], []])
    assert torch.equal(logps, before)
