"""The decoding-step guard's verdict (``cosyvoice_mac.bench.guard``, run by ``bench/decode_guard.py``): no timing."""

import pytest

from cosyvoice_mac.bench import guard


def rounds(*ms: float, ids=(1, 2, 3)) -> list[dict]:
    return [{"ms": each, "cpu_ms": 2 * each, "ids": list(ids)} for each in ms]


def test_a_tree_slower_than_the_margin_fails_and_one_within_it_passes():
    reference = rounds(50, 52, 51)
    slower, close = rounds(60, 62, 61), rounds(53, 55, 54)
    failed = guard.verdict(guard.summarise(slower), guard.summarise(reference), 0.10, slower, reference)
    passed = guard.verdict(guard.summarise(close), guard.summarise(reference), 0.10, close, reference)
    assert not failed["passed"] and failed["slowdown"] == pytest.approx(1.2, abs=0.01)
    assert passed["passed"] and passed["slowdown"] == pytest.approx(1.06, abs=0.01)
    assert failed["paired"] and failed["same_ids"]


def test_paired_rounds_cancel_load_that_hits_both_trees_alike():
    """A busy spell doubles both trees' round 2: the per-round ratios stay at 1, though the medians would not."""
    this, reference = rounds(50, 100, 100), rounds(50, 100, 50)
    paired = guard.verdict(guard.summarise(this), guard.summarise(reference), 0.10, this, reference)
    by_medians = guard.verdict(guard.summarise(this), guard.summarise(reference))
    assert paired["passed"] and paired["slowdown"] == pytest.approx(1.0)
    assert not by_medians["paired"] and not by_medians["passed"]  # 100 against 50


def test_the_cpu_clock_judges_by_cpu_time_when_asked():
    """Another program took the cores during this tree's rounds: wall time doubled, CPU time did not."""
    this = [{"ms": 100, "cpu_ms": 80, "ids": [1]}] * 3
    reference = [{"ms": 50, "cpu_ms": 80, "ids": [1]}] * 3
    summaries = guard.summarise(this), guard.summarise(reference)
    by_wall = guard.verdict(*summaries, 0.10, this, reference)
    by_cpu = guard.verdict(*summaries, 0.10, this, reference, clock="cpu")
    assert not by_wall["passed"] and by_wall["cpu_slowdown"] == pytest.approx(1.0)
    assert by_cpu["passed"] and by_cpu["slowdown"] == pytest.approx(1.0) and by_cpu["wall_slowdown"] == 2.0
    with pytest.raises(guard.GuardError, match="clock"):
        guard.verdict(*summaries, clock="cycles")


def test_summary_reports_tokens_per_second_and_whether_the_ids_held():
    steady = guard.summarise(rounds(40, 50, 60))
    assert steady["ms_per_token"] == 50 and steady["tokens_per_s"] == pytest.approx(20.0)
    assert steady["cpu_ms_per_token"] == 100 and steady["ids_stable"]
    drifting = guard.summarise(rounds(40, ids=(1,)) + rounds(40, ids=(2,)))
    assert not drifting["ids_stable"]
    other_ids = guard.verdict(guard.summarise(rounds(40, ids=(9,))), steady)
    assert not other_ids["same_ids"]


def test_a_kept_figure_from_another_machine_or_configuration_is_refused():
    kept = {"machine": {"chip": "AMD EPYC", "cpu_flags": ["avx2"], "cores": 2}, "torch": "2.13.0", "dtype": "float16"}
    guard.check_comparable(kept, dict(kept))
    with pytest.raises(guard.GuardError, match="machine"):
        guard.check_comparable(kept, {**kept, "machine": {**kept["machine"], "cpu_flags": ["avx2", "avx512_bf16"]}})
    with pytest.raises(guard.GuardError, match="dtype"):
        guard.check_comparable(kept, {**kept, "dtype": "bfloat16"})


def test_nonsense_inputs_are_refused():
    with pytest.raises(guard.GuardError):
        guard.summarise([])
    with pytest.raises(guard.GuardError):
        guard.verdict(guard.summarise(rounds(1)), guard.summarise(rounds(1)), margin=-0.1)
    with pytest.raises(guard.GuardError):
        guard.verdict(guard.summarise(rounds(1)), guard.summarise(rounds(1)), 0.1, rounds(1), rounds(1, 2))
