"""Retakes: a sentence whose take fails the check is made again with a new seed, up to ``retakes`` more times;
the best take is kept, and every take's seed and verdict is reported (the sidecar keeps them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from cosyvoice_mac.pipeline.takes import thresholds as limits
from cosyvoice_mac.pipeline.takes.check import FLAGGED, PASSED, RETAKEN, TakeVerdict
from cosyvoice_mac.settings.fields import MAX_SEED

Piece = TypeVar("Piece")
CHECK_NOTE_STARTS = ("retaken: ", "kept take ")  # how the check's notes begin (a door finds them among the rest)


@dataclass
class Take(Generic[Piece]):
    """One try at a sentence: what the pipeline made, with which seed, and what the check said of it."""

    piece: Piece
    seed: int
    verdict: TakeVerdict


@dataclass
class TakeChoice(Generic[Piece]):
    """Every take of one sentence and which of them is kept (``kept``: an index into ``takes``)."""

    takes: list[Take[Piece]]
    kept: int

    @property
    def piece(self) -> Piece:
        return self.takes[self.kept].piece

    @property
    def verdict(self) -> TakeVerdict:
        return self.takes[self.kept].verdict

    @property
    def status(self) -> str:
        """passed (the first take), retaken (a later take passed) or flagged (none passed: the best stands)."""
        if not self.verdict.passed:
            return FLAGGED
        return PASSED if len(self.takes) == 1 else RETAKEN

    @property
    def note(self) -> str | None:
        """What a user should know, in plain words; None when the first take passed."""
        count, kept = len(self.takes), self.kept + 1
        if self.status == PASSED:
            return None
        if self.status == RETAKEN:
            failed = "; ".join(f"take {i}: {take.verdict.summary()}" for i, take in enumerate(self.takes[:-1], 1))
            return f"retaken: take {kept} of {count} passed ({failed})"
        return f"kept take {kept} of {count}: {self.verdict.summary()}"

    def as_dict(self) -> dict:
        return {
            "status": self.status,
            "kept": self.kept + 1,
            "note": self.note,
            "takes": [{"seed": take.seed, **take.verdict.as_dict()} for take in self.takes],
        }


def next_seed(seed: int) -> int:
    """The seed of the next retake: far from ``seed`` and its neighbouring sentences', within the seed range."""
    return (seed + limits.RETAKE_SEED_STRIDE) % (MAX_SEED + 1)


def retake_until_passed(
    first: Piece,
    first_seed: int,
    check: Callable[[Piece], TakeVerdict],
    remake: Callable[[int], Piece],
    retakes: int,
    should_stop: Callable[[], bool] = lambda: False,
    first_verdict: TakeVerdict | None = None,
) -> TakeChoice[Piece]:
    """Check ``first`` (made with ``first_seed``; ``first_verdict`` when it was checked already); while the last take
    fails and retakes are left, ``remake`` the sentence with the next seed and check that. The best take
    (``TakeVerdict.badness``, earliest on a tie) is kept."""
    takes = [Take(first, first_seed, first_verdict if first_verdict is not None else check(first))]
    seed = first_seed
    while not takes[-1].verdict.passed and len(takes) <= retakes and not should_stop():
        seed = next_seed(seed)
        piece = remake(seed)
        takes.append(Take(piece, seed, check(piece)))
    kept = min(range(len(takes)), key=lambda index: takes[index].verdict.badness)
    return TakeChoice(takes, kept)
