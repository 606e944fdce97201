"""The curve check: a per-step series such as the training loss against the baseline's (docs/design.md, "Comparisons").

Training compounds rounding differences, so the tolerance may grow with the step (`curve_growth`). The check
reports the first step that leaves the tolerance and the final values, which is what a person looks at first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from modelci.checks.policy import Finding, Policy, decided, json_number


def curve_tolerance(baseline: np.ndarray, policy: Policy, first_step: int = 0) -> np.ndarray:
    """Allowed absolute difference at each step: (atol + rtol*|base|) * (1 + growth*step), never tighter
    than the calibrated noise (noise_rtol*|base|). The policy's tolerance and threshold replace atol and rtol;
    `first_step` is the step of baseline[0] when a warm-up head was dropped."""
    steps = np.arange(first_step, first_step + baseline.size, dtype=np.float64)
    magnitude = np.abs(baseline)
    atol = policy.tolerance if policy.tolerance is not None else policy.curve_atol
    rtol = policy.threshold if policy.threshold is not None else policy.curve_rtol
    tolerance = (atol + rtol * magnitude) * (1.0 + policy.curve_growth * steps)
    return np.maximum(tolerance, policy.noise_rtol * magnitude)


def check_curve(
    name: str, baseline: Sequence[float], current: Sequence[float], policy: Policy, check: str = "curve"
) -> Finding:
    """Compare two curves step by step over their common length; a step outside the tolerance, or a change in
    length, is a regression. Curves have no improvement: a lower loss after a change is as suspect as a higher,
    unless the policy sets a direction; then only steps that move the bad way regress. The policy's skip_head
    drops warm-up steps; step numbers stay those of the whole curve."""
    # the same head on both sides, so that step numbers line up; at least one step is always kept
    skipped = max(0, min(policy.skip_head, len(baseline) - 1, len(current) - 1))
    base = np.asarray(baseline[skipped:], dtype=np.float64)
    cur = np.asarray(current[skipped:], dtype=np.float64)
    common = min(base.size, cur.size)
    a, b = base[:common], cur[:common]
    with np.errstate(all="ignore"):  # inf - inf and x / 0 are masked below
        tolerance = curve_tolerance(a, policy, skipped)
        both_nan = np.isnan(a) & np.isnan(b)
        diff = np.abs(a - b)
        # NaN at the same step on both sides counts as equal; a NaN on one side always diverges
        equal = (a == b) | both_nan
        diverged = ~equal & ~(diff <= tolerance)
        improved = np.zeros_like(diverged)
        if policy.direction is not None:
            # a NaN on one side is never "better"; only a finite move the good way is
            better = (b < a) if policy.direction == "lower" else (b > a)
            improved, diverged = diverged & better, diverged & ~better
        finite = np.isfinite(a) & np.isfinite(b) & (a != 0)
        rel = np.where(finite, diff / np.abs(a), 0.0)
    first = int(np.argmax(diverged)) if diverged.any() else None
    numbers: dict[str, Any] = {
        "first_diverging_step": first + skipped if first is not None else None,
        "max_rel_diff": json_number(rel.max()) if rel.size else 0.0,
        "final_baseline": json_number(base[-1]) if base.size else None,
        "final_current": json_number(cur[-1]) if cur.size else None,
        "steps_compared": int(common),
        "length_baseline": int(base.size + skipped),
        "length_current": int(cur.size + skipped),
        "length_mismatch": bool(base.size != cur.size),
    }
    if policy.skip_head:
        numbers["skip_head"] = skipped
    if policy.direction is not None:
        numbers["direction"] = policy.direction
    if first is not None:
        numbers["baseline_at_first"] = json_number(a[first])
        numbers["current_at_first"] = json_number(b[first])
        numbers["tolerance_at_first"] = json_number(tolerance[first])
    final = f"final {_value(cur)} vs {_value(base)} baseline"
    atol = policy.tolerance if policy.tolerance is not None else policy.curve_atol
    rtol = policy.threshold if policy.threshold is not None else policy.curve_rtol
    rule = f"atol={atol:g} + rtol={rtol:g}·|baseline|"
    if policy.curve_growth:
        rule += f", growing by {policy.curve_growth:g} per step"
    if policy.noise_rtol:
        rule += f", never under the calibrated noise rtol={policy.noise_rtol:g}"
    if first is not None:
        verdict = "regression"
        what = f"{name} diverges from step {first + skipped} ({b[first]:.6g} vs {a[first]:.6g}); {final}"
        reason = (f"step {first + skipped}: |{b[first]:.6g} - {a[first]:.6g}| = {diff[first]:.3g} beyond the "
                  f"tolerance {tolerance[first]:.3g} ({rule})")
        if policy.direction is not None:
            reason += f", the bad way ({policy.direction} is better)"
    elif base.size != cur.size:
        verdict = "regression"
        what = f"{name} has {cur.size + skipped} steps, baseline {base.size + skipped}; {final}"
        reason = f"the curve's length must not change; the {common} common steps are within {rule}"
    elif improved.any():
        verdict = "improvement"
        step = int(np.argmax(improved)) + skipped
        what = f"{name} better ({policy.direction} is better) from step {step}; {final}"
        reason = f"step {step} moved beyond the tolerance ({rule}) the good way ({policy.direction} is better)"
    else:
        verdict = "ok"
        max_rel = numbers["max_rel_diff"] or 0.0
        what = f"{name} within tolerance over {common} steps (max_rel {max_rel:.2e}); {final}"
        reason = f"all {common} steps within {rule}" if np.any(~equal) else f"all {common} steps identical"
    return decided(check, name, verdict, numbers, what, reason, gating=policy.active)


def _value(values: np.ndarray) -> str:
    """The last value of a curve, for a message."""
    return f"{values[-1]:.6g}" if values.size else "none"
