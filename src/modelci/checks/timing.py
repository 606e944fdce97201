"""The timing and memory checks, and user metrics: raw samples of both sides (DESIGN.md, "Comparisons").

All three ask one question of two sets of samples: is the current side worse by more than a factor, and is the
difference significant (one-sided Mann-Whitney U)? They differ in the factor, the direction and what they add:
memory ignores small absolute differences, timing stops gating when the runner is too noisy, user metrics are
report-only by default.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from modelci.checks.policy import Finding, Policy, json_number, skip_head

#: below this many samples on a side the rank test cannot reach p < 0.05, so only the factor decides
MIN_SAMPLES_FOR_TEST = 3


def compare_samples(
    baseline: Sequence[float], current: Sequence[float], factor: float, alpha: float, lower_is_better: bool = True
) -> tuple[str, dict[str, Any]]:
    """Judge two sets of samples: "worse" when the median ratio passes `factor` in the bad direction and the
    one-sided Mann-Whitney U test agrees (p < alpha), "better" likewise the other way, else "same".
    Returns that word and the numbers (ratio = current/baseline medians, p_value, medians, counts, test)."""
    base = np.asarray(baseline, dtype=np.float64)
    cur = np.asarray(current, dtype=np.float64)
    if not base.size or not cur.size:
        raise ValueError("compare_samples needs at least one sample on each side")
    base_median, cur_median = float(np.median(base)), float(np.median(cur))
    ratio = _ratio(cur_median, base_median)
    numbers: dict[str, Any] = {
        "ratio": json_number(ratio),
        "p_value": None,
        "baseline_median": base_median,
        "current_median": cur_median,
        "n_baseline": int(base.size),
        "n_current": int(cur.size),
        "factor": factor,
        "test": "mann-whitney-u",
    }
    if ratio is None:
        return "same", numbers | {"test": "none: ratio undefined for negative medians"}
    # "worse" is the ratio in the bad direction, so one threshold serves both directions
    worse_ratio = ratio if lower_is_better else (1.0 / ratio if ratio else math.inf)
    direction = "worse" if worse_ratio > 1.0 else "better"
    if min(base.size, cur.size) < MIN_SAMPLES_FOR_TEST:
        numbers["test"] = "factor-only"
        significant = True
    else:
        # scipy.stats takes seconds to import; only a comparison that reaches the test should pay for it
        from scipy.stats import mannwhitneyu

        current_higher = (direction == "worse") == lower_is_better
        p_value = float(mannwhitneyu(cur, base, alternative="greater" if current_higher else "less").pvalue)
        numbers["p_value"] = p_value
        significant = p_value < alpha
    if direction == "worse" and worse_ratio > factor and significant:
        return "worse", numbers
    if direction == "better" and worse_ratio < 1.0 / factor and significant:
        return "better", numbers
    return "same", numbers


def _ratio(current: float, baseline: float) -> float | None:
    """current/baseline, with 0/0 = 1 and x/0 = inf; None when a median is negative and a ratio means nothing."""
    if current < 0 or baseline < 0:
        return None
    if baseline == 0:
        return 1.0 if current == 0 else math.inf
    return current / baseline


def check_timing(name: str, baseline: Sequence[float], current: Sequence[float], policy: Policy) -> Finding:
    """Lower is better (unless the policy's direction says otherwise). Worse only past `timing_factor` (or 1 +
    threshold) and significant; on a runner whose measured CV is above `max_timing_cv` it is reported, not gated."""
    baseline, current, dropped = _skip(baseline, current, policy)
    lower = not policy.higher_better(name)
    factor = policy.factor(policy.timing_factor)
    outcome, numbers = compare_samples(baseline, current, factor, policy.alpha, lower_is_better=lower)
    numbers["floor_s"] = floor = policy.tolerance if policy.tolerance is not None else policy.timing_floor_s
    numbers.update(dropped)
    if abs(numbers["current_median"] - numbers["baseline_median"]) <= floor:
        outcome = "same"
    verdict = _VERDICTS[outcome]
    noisy = policy.noise_cv is not None and policy.noise_cv > policy.max_timing_cv
    numbers["noise_cv"] = policy.noise_cv
    words = {"worse": "slower" if lower else "worse", "better": "faster" if lower else "better",
             "same": f"within {factor:g}x"}[outcome]
    message = f"{name} {_ratio_text(numbers)} {words} ({_evidence(numbers)})"
    if noisy:
        message += f"; too noisy to gate on timing (cv={policy.noise_cv:.3g} > {policy.max_timing_cv:g})"
    # one sample a side (setup time) has no spread to test against: report it, never gate on it
    few = numbers["test"] == "factor-only"
    if few and outcome != "same":
        message += "; too few samples to gate"
    return Finding("timing", name, verdict, numbers, message, gating=policy.active and not noisy and not few)


def check_memory(name: str, baseline: Sequence[float], current: Sequence[float], policy: Policy) -> Finding:
    """Lower is better. Worse only past `memory_factor` and by more than `memory_floor_bytes`, and significant
    when each side has enough samples (usually there is one: peak memory barely varies)."""
    baseline, current, dropped = _skip(baseline, current, policy)
    outcome, numbers = compare_samples(baseline, current, policy.factor(policy.memory_factor), policy.alpha,
                                       lower_is_better=not policy.higher_better(name))
    difference = numbers["current_median"] - numbers["baseline_median"]
    numbers["difference_bytes"] = difference
    numbers["floor_bytes"] = floor = policy.tolerance if policy.tolerance is not None else policy.memory_floor_bytes
    numbers.update(dropped)
    # allocator rounding and page granularity move RSS by a few MiB on any change; that is not a regression
    if abs(difference) <= floor:
        outcome = "same"
    words = {"worse": "more", "better": "less", "same": "within tolerance"}[outcome]
    message = (
        f"{name} {_mib(difference)} {words} ({_mib(numbers['baseline_median'], sign=False)} -> "
        f"{_mib(numbers['current_median'], sign=False)}, {_ratio_text(numbers)}; {_evidence(numbers)})"
    )
    return Finding("memory", name, _VERDICTS[outcome], numbers, message, gating=policy.active)


def check_user_metric(name: str, baseline: Sequence[float], current: Sequence[float], policy: Policy) -> Finding:
    """A metric the workload recorded (`accuracy`, ...): medians compared with `metric_factor`, higher is better
    when the name says "acc" (or the policy says so). Report-only unless the policy sets gate_user_metrics."""
    baseline, current, dropped = _skip(baseline, current, policy)
    higher = policy.higher_better(name)
    outcome, numbers = compare_samples(
        baseline, current, policy.factor(policy.metric_factor), policy.alpha, lower_is_better=not higher
    )
    numbers["higher_is_better"] = higher
    numbers.update(dropped)
    if policy.tolerance is not None:
        numbers["tolerance"] = policy.tolerance
        if abs(numbers["current_median"] - numbers["baseline_median"]) <= policy.tolerance:
            outcome = "same"
    message = (
        f"{name} {numbers['baseline_median']:.6g} -> {numbers['current_median']:.6g} "
        f"({outcome}, {_ratio_text(numbers)}; {_evidence(numbers)})"
    )
    gating = policy.active and policy.gate_user_metrics
    return Finding("metric", name, _VERDICTS[outcome], numbers, message, gating=gating)


_VERDICTS = {"worse": "regression", "better": "improvement", "same": "ok"}


def _skip(
    baseline: Sequence[float], current: Sequence[float], policy: Policy
) -> tuple[Sequence[float], Sequence[float], dict[str, Any]]:
    """Both sides without the policy's warm-up samples, and the numbers saying how many went (none: no key)."""
    if not policy.skip_head:
        return baseline, current, {}
    baseline, dropped_baseline = skip_head(baseline, policy)
    current, dropped_current = skip_head(current, policy)
    return baseline, current, {"skip_head": policy.skip_head, "skipped": [dropped_baseline, dropped_current]}


def _ratio_text(numbers: dict[str, Any]) -> str:
    """The median ratio as "2.03x"."""
    return f"{numbers['ratio']:.2f}x" if numbers["ratio"] is not None else "ratio undefined"


def _evidence(numbers: dict[str, Any]) -> str:
    """What backed the verdict: the p-value, or the sample counts when there were too few for the test."""
    if numbers["p_value"] is not None:
        return f"p={numbers['p_value']:.3g}"
    return f"{numbers['test']}, n={numbers['n_baseline']}/{numbers['n_current']}"


def _mib(value: float, sign: bool = True) -> str:
    """Bytes as MiB for a message, signed for differences."""
    return f"{value / 2**20:{'+' if sign else ''}.1f} MiB"
