"""Timing, memory and user-metric checks on real samples with seeded noise."""

from __future__ import annotations

import numpy as np
import pytest

from modelci.checks import Policy
from modelci.checks.timing import check_memory, check_timing, check_user_metric, compare_samples

MiB = 2**20


def samples(median: float, n: int = 5, noise: float = 0.01, seed: int = 0) -> list[float]:
    return list(median * (1 + np.random.default_rng(seed).normal(0, noise, n)))


def test_two_times_slower_is_a_significant_regression():
    finding = check_timing("time.infer", samples(0.1, seed=1), samples(0.2, seed=2), Policy())
    assert (finding.check, finding.verdict, finding.gating) == ("timing", "regression", True)
    assert finding.numbers["ratio"] == pytest.approx(2.0, rel=0.05)
    assert finding.numbers["p_value"] < 0.05
    assert finding.numbers["test"] == "mann-whitney-u"
    assert (finding.numbers["n_baseline"], finding.numbers["n_current"]) == (5, 5)
    assert "slower" in finding.message and "p=" in finding.message


def test_same_distribution_is_ok():
    for seed in range(10):
        finding = check_timing("time.infer", samples(0.1, seed=seed), samples(0.1, seed=seed + 100), Policy())
        assert finding.verdict == "ok", finding.message


def test_two_times_faster_is_an_improvement():
    finding = check_timing("time.train", samples(0.2, seed=1), samples(0.1, seed=2), Policy())
    assert finding.verdict == "improvement" and "faster" in finding.message


def test_past_the_factor_but_not_significant_is_ok():
    """Medians 1.2x apart, but the samples overlap so much that the rank test cannot tell them apart."""
    base = [1.0, 1.6, 0.7, 1.3, 0.9]
    cur = [1.2, 0.8, 1.5, 1.25, 1.1]
    finding = check_timing("time.infer", base, cur, Policy())
    assert finding.numbers["ratio"] > 1.1
    assert finding.numbers["p_value"] >= 0.05
    assert finding.verdict == "ok"


def test_significant_but_within_the_factor_is_ok():
    finding = check_timing("time.infer", samples(1.0, 20, 0.001, 1), samples(1.05, 20, 0.001, 2), Policy())
    assert finding.numbers["p_value"] < 0.05 and finding.verdict == "ok"


def test_noisy_runner_reports_but_does_not_gate():
    finding = check_timing("time.infer", samples(0.1, seed=1), samples(0.2, seed=2), Policy(noise_cv=0.2))
    assert finding.verdict == "regression" and finding.gating is False
    assert "too noisy to gate on timing (cv=0.2" in finding.message
    quiet = check_timing("time.infer", samples(0.1, seed=1), samples(0.2, seed=2), Policy(noise_cv=0.01))
    assert quiet.gating is True


def test_too_few_samples_decide_by_factor_only():
    finding = check_timing("time.train", [2.0], [3.0], Policy())
    assert finding.verdict == "regression"
    assert finding.numbers["test"] == "factor-only" and finding.numbers["p_value"] is None
    assert check_timing("time.train", [2.0, 2.1], [2.1], Policy()).verdict == "ok"


def test_memory_50_mib_more_is_a_regression_1_mib_is_not():
    base = [200.0 * MiB]
    more = check_memory("mem.peak_rss", base, [250.0 * MiB], Policy())
    assert (more.check, more.verdict) == ("memory", "regression")
    assert more.numbers["difference_bytes"] == 50 * MiB
    assert "+50.0 MiB" in more.message
    assert check_memory("mem.peak_rss", base, [201.0 * MiB], Policy()).verdict == "ok"


def test_memory_floor_ignores_large_ratios_of_small_numbers():
    """2 MiB -> 4 MiB is 2x, but under the 8 MiB floor: allocator noise, not a regression."""
    finding = check_memory("mem.peak_device", [2.0 * MiB], [4.0 * MiB], Policy())
    assert finding.numbers["ratio"] == 2.0 and finding.verdict == "ok"
    no_floor = check_memory("mem.peak_device", [2.0 * MiB], [4.0 * MiB], Policy(memory_floor_bytes=0))
    assert no_floor.verdict == "regression"


def test_memory_less_is_an_improvement_and_many_samples_need_significance():
    assert check_memory("mem.peak_rss", [300.0 * MiB], [200.0 * MiB], Policy()).verdict == "improvement"
    overlapping = check_memory(
        "mem.peak_rss", [100.0 * MiB, 300.0 * MiB, 200.0 * MiB], [310.0 * MiB, 90.0 * MiB, 250.0 * MiB], Policy()
    )
    assert overlapping.numbers["test"] == "mann-whitney-u" and overlapping.verdict == "ok"


def test_user_metrics_are_direction_aware_and_report_only_by_default():
    drop = check_user_metric("accuracy", [0.90], [0.70], Policy())
    assert (drop.check, drop.verdict, drop.gating) == ("metric", "regression", False)
    assert check_user_metric("top1_acc", [0.70], [0.90], Policy()).verdict == "improvement"
    # without "acc" in the name lower is better, unless the policy says otherwise
    assert check_user_metric("perplexity", [10.0], [20.0], Policy()).verdict == "regression"
    assert check_user_metric("bleu", [30.0], [20.0], Policy(higher_is_better=True)).verdict == "regression"
    assert check_user_metric("accuracy", [0.9], [0.7], Policy(gate_user_metrics=True)).gating is True


def test_a_user_metric_that_turns_nan_or_infinite_is_a_regression_never_the_same():
    """A NaN accuracy was judged "same" as 0.9 ("change undefined ... a median is negative"), and a gated metric
    passed; whichever way is better, turning non-finite is a regression."""
    nan, inf = float("nan"), float("inf")
    gated = Policy(gate_user_metrics=True)
    for name, before, now in (("accuracy", [0.9, 0.91], [nan, 0.9]), ("perplexity", [10.0], [inf]),
                              ("bleu", [30.0], [-inf])):
        finding = check_user_metric(name, before, now, gated)
        assert (finding.verdict, finding.gating) == ("regression", True), finding
        assert "not finite (nan or inf) now, none were" in finding.reason
        assert finding.numbers["non_finite_current"] == sum(1 for v in now if v != v or abs(v) == inf)
    assert check_user_metric("accuracy", [nan], [0.9], gated).verdict == "improvement"
    both = check_user_metric("accuracy", [nan], [inf], gated)
    assert both.verdict == "ok" and "no change to judge" in both.reason
    assert check_user_metric("accuracy", [0.9], [nan], Policy()).gating is False  # report-only by default


def test_compare_samples_handles_zero_and_negative_medians():
    assert compare_samples([0.0], [0.0], 1.1, 0.05)[0] == "same"
    outcome, numbers = compare_samples([0.0], [1.0], 1.1, 0.05)
    assert outcome == "worse" and numbers["ratio"] is None  # inf is not strict JSON
    # a negative median has no ratio: the change relative to |baseline| decides, the way the difference goes
    outcome, numbers = compare_samples([-1.0], [-5.0], 1.1, 0.05)
    assert outcome == "better" and numbers["ratio"] is None and numbers["relative_change"] == -4.0
    assert compare_samples([-10.0], [-8.0], 1.1, 0.05)[0] == "worse"  # lower is better: -10 -> -8 went up 20%
    assert compare_samples([-10.0], [-8.0], 1.1, 0.05, lower_is_better=False)[0] == "better"
    assert compare_samples([-10.0], [-10.5], 1.1, 0.05)[0] == "same"  # 5%, within the factor
    with pytest.raises(ValueError):
        compare_samples([], [1.0], 1.1, 0.05)


def test_sub_millisecond_differences_never_count_as_timing_regressions():
    from modelci.checks.policy import Policy
    from modelci.checks.timing import check_timing

    base = [50e-6, 51e-6, 49e-6, 50e-6, 52e-6]
    slower = [v * 2 for v in base]  # 2x, significant, but 50 microseconds in absolute terms
    finding = check_timing("time.train", base, slower, Policy())
    assert finding.verdict == "ok" and finding.numbers["floor_s"] == 1e-3
    finding = check_timing("time.train", [v * 1000 for v in base], [v * 1000 for v in slower], Policy())
    assert finding.verdict == "regression" and finding.gating


def test_single_sample_timing_is_reported_but_does_not_gate():
    from modelci.checks.policy import Policy
    from modelci.checks.timing import check_timing

    finding = check_timing("time.setup", [0.10], [0.30], Policy())
    assert finding.verdict == "regression" and not finding.gating
    assert "too few samples to gate" in finding.message


def test_every_verdict_says_which_rule_decided_it_with_its_numbers():
    from modelci.checks.policy import Policy

    rng = np.random.default_rng(5)
    # 2.2x slower and very significant, but 0.6 ms apart: the timing floor decides, and the reason says so
    base, cur = rng.normal(0.5e-3, 1e-7, 20), rng.normal(1.1e-3, 1e-7, 20)
    floored = check_timing("time.infer", base, cur, Policy())
    assert floored.verdict == "ok"
    assert "within the timing floor of 1 ms" in floored.reason and "2.20x" in floored.reason
    assert floored.reason in floored.message and floored.numbers["reason"] == floored.reason
    # past the factor but not significant: the p-value and alpha are named
    noisy = check_timing("time.train", [1.0, 1.5, 0.6, 1.2], [1.3, 0.9, 1.6, 1.4], Policy())
    assert noisy.verdict == "ok" and "not significant" in noisy.reason and "alpha 0.05" in noisy.reason
    slow = check_timing("time.train", rng.normal(1, 0.01, 10), rng.normal(1.3, 0.01, 10), Policy())
    assert slow.verdict == "regression"
    assert "beyond the factor 1.1x the bad way" in slow.reason and "< alpha 0.05" in slow.reason
    memory = check_memory("mem.peak_rss", [100 * 2**20], [101 * 2**20], Policy())
    assert "within the memory floor of 8.0 MiB" in memory.reason
