"""The timing and memory checks, and user metrics: raw samples of both sides (docs/design.md, "Comparisons").

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
from modelci.checks.policy import Finding, Policy, decided, json_number, number_text, skip_head
from modelci.checks.stats import mann_whitney

#: below this many samples on a side the rank test cannot reach p < 0.05, so only the factor decides
MIN_SAMPLES_FOR_TEST = 3
#: a peak-memory difference on one sample a side counts only beyond this many calibrated coefficients of
#: variation of the workload's peak (calibrate: the spread of the per-run peaks)
MEMORY_NOISE_SIGMAS = 3.0


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
        "alpha": alpha,
        "test": "mann-whitney-u",
    }
    if ratio is None:
        # a negative median (a log-likelihood, a score below zero) has no meaningful ratio: the change relative to
        # the baseline's magnitude plays its part, in the direction of the difference (-10 -> -8 is up by 20%)
        change = (cur_median - base_median) / abs(base_median) if base_median else math.copysign(math.inf, cur_median)
        numbers["relative_change"] = json_number(change)
        worse_ratio = max(1.0 + (change if lower_is_better else -change), 0.0)
    else:
        # "worse" is the ratio in the bad direction, so one threshold serves both directions
        worse_ratio = ratio if lower_is_better else (1.0 / ratio if ratio else math.inf)
    direction = "worse" if worse_ratio > 1.0 else "better"
    if min(base.size, cur.size) < MIN_SAMPLES_FOR_TEST:
        numbers["test"] = "factor-only"
        significant = True
    else:
        current_higher = (direction == "worse") == lower_is_better
        p_value = mann_whitney(cur, base, alternative="greater" if current_higher else "less")
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
    floored = abs(numbers["current_median"] - numbers["baseline_median"]) <= floor
    if floored:
        outcome = "same"
    verdict = _VERDICTS[outcome]
    noisy = policy.noise_cv is not None and policy.noise_cv > policy.max_timing_cv
    numbers["noise_cv"] = policy.noise_cv
    words = {"worse": "slower" if lower else "worse", "better": "faster" if lower else "better",
             "same": "ok"}[outcome]
    reason = _rule(outcome, numbers, lower, "s", floor, "timing floor" if policy.tolerance is None else "tolerance")
    if noisy:
        reason += f"; too noisy to gate on timing (cv={policy.noise_cv:.3g} > {policy.max_timing_cv:g})"
    # one sample a side (setup time) has no spread to test against: report it, never gate on it
    few = numbers["test"] == "factor-only"
    if few and outcome != "same":
        reason += "; too few samples to gate"
    what = f"{name} {_ratio_text(numbers)} {words}"
    return decided("timing", name, verdict, numbers, what, reason, gating=policy.active and not noisy and not few)


def check_memory(name: str, baseline: Sequence[float], current: Sequence[float], policy: Policy) -> Finding:
    """Lower is better. Worse only past `memory_factor` and by more than `memory_floor_bytes`, and only on evidence
    that survives noise: the rank test where each side has enough samples, else (one peak per run, the usual
    case) a calibrated noise floor. Without either, a difference is reported but does not gate until a second
    run confirms it (`needs_confirmation`, which `compare` acts on): paddle's peak RSS moves by about 10% between
    identical runs (docs/zoo.md), and one sample a side against a 1.10 factor called that a regression."""
    baseline, current, dropped = _skip(baseline, current, policy)
    lower = not policy.higher_better(name)
    outcome, numbers = compare_samples(baseline, current, policy.factor(policy.memory_factor), policy.alpha,
                                       lower_is_better=lower)
    difference = numbers["current_median"] - numbers["baseline_median"]
    numbers["difference_bytes"] = difference
    numbers["floor_bytes"] = floor = policy.tolerance if policy.tolerance is not None else policy.memory_floor_bytes
    numbers.update(dropped)
    # allocator rounding and page granularity move RSS by a few MiB on any change; that is not a regression
    if abs(difference) <= floor:
        outcome = "same"
    few = numbers["test"] == "factor-only"
    gating = policy.active
    note = ""
    if few and policy.noise_cv is not None:
        # the calibrated run-to-run spread of this workload's peak: a difference inside it is noise
        numbers["noise_cv"] = policy.noise_cv
        numbers["noise_floor_rtol"] = noise = MEMORY_NOISE_SIGMAS * policy.noise_cv
        if outcome != "same" and numbers["ratio"] is not None and abs(numbers["ratio"] - 1.0) <= noise:
            outcome = "same"
            note = (f"; within the calibrated noise (ratio {_ratio_text(numbers)} within ±{noise:.1%}, "
                    f"{MEMORY_NOISE_SIGMAS:g} x cv {policy.noise_cv:.3g})")
    elif few and outcome != "same":
        gating = False
        numbers["needs_confirmation"] = policy.active
        note = "; one sample a side and no calibrated noise: gates only once a second run confirms it"
    words = {"worse": "more", "better": "less", "same": "ok"}[outcome]
    what = (
        f"{name} {_mib(difference)} {words} ({_mib(numbers['baseline_median'], sign=False)} -> "
        f"{_mib(numbers['current_median'], sign=False)}, {_ratio_text(numbers)})"
    )
    reason = _rule(outcome, numbers, lower, "bytes", floor,
                   "memory floor" if policy.tolerance is None else "tolerance") + note
    return decided("memory", name, _VERDICTS[outcome], numbers, what, reason, gating=gating)


def check_user_metric(name: str, baseline: Sequence[float], current: Sequence[float], policy: Policy) -> Finding:
    """A metric the workload recorded (`accuracy`, ...): medians compared with `metric_factor`, higher is better
    when the name says "acc" (or the policy says so). Report-only unless the policy sets gate_user_metrics."""
    baseline, current, dropped = _skip(baseline, current, policy)
    higher = policy.higher_better(name)
    if not all(math.isfinite(v) for v in [*baseline, *current]):
        return _non_finite_metric(name, baseline, current, policy)
    outcome, numbers = compare_samples(
        baseline, current, policy.factor(policy.metric_factor), policy.alpha, lower_is_better=not higher
    )
    numbers["higher_is_better"] = higher
    numbers.update(dropped)
    if policy.tolerance is not None:
        numbers["tolerance"] = policy.tolerance
        if abs(numbers["current_median"] - numbers["baseline_median"]) <= policy.tolerance:
            outcome = "same"
    what = f"{name} {numbers['baseline_median']:.6g} -> {numbers['current_median']:.6g} ({outcome})"
    reason = _rule(outcome, numbers, not higher, "", policy.tolerance, "tolerance")
    if policy.active and not policy.gate_user_metrics and outcome != "same":
        reason += "; user metrics are report-only unless gate_user_metrics is set"
    gating = policy.active and policy.gate_user_metrics
    return decided("metric", name, _VERDICTS[outcome], numbers, what, reason, gating=gating)


def _non_finite_metric(name: str, baseline: Sequence[float], current: Sequence[float], policy: Policy) -> Finding:
    """A user metric with a NaN or an infinity on either side: no median or rank test means anything there (a
    NaN accuracy was judged "same" as 0.9, and a gated metric passed). Non-finite now and finite before is a
    regression whichever way is better; finite again is an improvement; non-finite on both sides is no change."""
    bad_before = sum(1 for v in baseline if not math.isfinite(v))
    bad_now = sum(1 for v in current if not math.isfinite(v))
    numbers = {"non_finite_baseline": bad_before, "non_finite_current": bad_now, "n_baseline": len(baseline),
               "n_current": len(current)}
    if bad_now and not bad_before:
        verdict, reason = "regression", (f"{bad_now} of {len(current)} samples are not finite (nan or inf) now, "
                                         "none were")
    elif bad_before and not bad_now:
        verdict, reason = "improvement", f"finite again: {bad_before} of {len(baseline)} samples were not"
    else:
        verdict, reason = "ok", (f"not finite on both sides ({bad_before} of {len(baseline)} before, {bad_now} of "
                                 f"{len(current)} now): no change to judge")
    what = f"{name} [{_few(baseline)}] -> [{_few(current)}] ({'not finite' if bad_now else 'finite'})"
    if policy.active and not policy.gate_user_metrics and verdict != "ok":
        reason += "; user metrics are report-only unless gate_user_metrics is set"
    return decided("metric", name, verdict, numbers, what, reason, gating=policy.active and policy.gate_user_metrics)


def _few(values: Sequence[float]) -> str:
    """The first three values, for a message."""
    return ", ".join(f"{v:.6g}" for v in list(values)[:3]) + (", ..." if len(values) > 3 else "")


def _rule(outcome: str, numbers: dict[str, Any], lower: bool, unit: str, floor: float | None, floor_name: str) -> str:
    """The rule that decided a comparison of samples, with its numbers: the floor, the factor or the test."""
    ratio, factor, p_value, alpha = numbers["ratio"], numbers["factor"], numbers["p_value"], numbers["alpha"]
    difference = numbers["current_median"] - numbers["baseline_median"]
    signed = ("+" if difference > 0 else "") + number_text(difference, unit)
    way = "lower" if lower else "higher"
    if p_value is not None:
        test = f"p={p_value:.2g} {'<' if p_value < alpha else '≥'} alpha {alpha:g}"
    else:
        test = f"{numbers['n_baseline']}/{numbers['n_current']} samples, too few for the rank test: factor only"
    if ratio is None:
        # a negative median: the relative change stands in for the ratio (see compare_samples)
        change = numbers.get("relative_change")
        shown = f"{change:+.1%}" if change is not None else "undefined"
        numbers = numbers | {"ratio": None}
        moved = f"change {shown} of |baseline| (a median is negative, so no ratio)"
        if floor is not None and abs(difference) <= floor:
            return f"difference {signed} within the {floor_name} of {number_text(floor, unit)} ({moved}, {test})"
        if outcome in ("worse", "better"):
            side = "bad" if outcome == "worse" else "good"
            return f"{moved} beyond {factor - 1:.0%} the {side} way ({way} is better), {test}"
        return f"{moved} within {factor - 1:.0%} or not significant ({test})"
    if floor is not None and abs(difference) <= floor:
        return (f"difference {signed} within the {floor_name} of {number_text(floor, unit)}, whatever the ratio "
                f"({_ratio_text(numbers)}, {test})")
    past = f"ratio {_ratio_text(numbers)} beyond the factor {factor:g}x"
    beyond = f", difference {signed} beyond the {floor_name} of {number_text(floor, unit)}" if floor is not None else ""
    if outcome == "worse":
        return f"{past} the bad way ({way} is better), {test}{beyond}"
    if outcome == "better":
        return f"{past} the good way ({way} is better), {test}{beyond}"
    bad = ratio if lower else (1.0 / ratio if ratio else math.inf)
    if 1.0 / factor <= bad <= factor:
        return f"ratio {_ratio_text(numbers)} within the factor {factor:g}x ({test})"
    return f"{past} but not significant: {test}"


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


def _mib(value: float, sign: bool = True) -> str:
    """Bytes as MiB for a message, signed for differences."""
    return f"{value / 2**20:{'+' if sign else ''}.1f} MiB"
