"""Checks: one result against its baseline, as a list of findings (docs/design.md, "Comparisons").

`evaluate` is the only entry point the pipeline needs; the per-check functions are public so that `compare`,
`calibrate` and the tests can call them alone. Everything here is pure: arrays and numbers in, findings out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from modelci.checks.curve import check_curve
from modelci.checks.policy import Finding, Policy, json_number, policy_for, regressed
from modelci.checks.precision import check_outputs
from modelci.checks.status import check_status
from modelci.checks.timing import check_memory, check_timing, check_user_metric
from modelci.records import Metric, Result

__all__ = ["Finding", "Policy", "check_kind", "check_metrics", "evaluate", "policy_for", "preload", "regressed"]


def preload(segments: bool = False) -> None:
    """Import what the checks import only where they use it: scipy.stats (the rank tests of timing and of the
    history check) and, with `segments`, ruptures and scipy.ndimage (the history check's segmentation).

    Together they take 0.6-1.0 s to import. A run calls this in a thread while its worker imports the framework,
    when its history says the checks will need them (a baseline; 8 targets for the segmentation), so that the
    checks and alarm steps do not pay for them after the workloads.
    """
    import scipy.stats  # noqa: F401

    if segments:
        import ruptures  # noqa: F401
        import scipy.ndimage  # noqa: F401


def evaluate(current: Result, baseline: Result | None, policy: Callable[[str], Policy]) -> list[Finding]:
    """All checks of one result against its baseline. policy(metric_name) gives the policy for that metric."""
    findings = [check_status(current, baseline, policy("status"))]
    # with no baseline everything is new, and one line says so; a broken side has nothing trustworthy to compare
    if baseline is None or current.status != "ok" or baseline.status != "ok":
        return findings
    findings += check_outputs(current.outputs, baseline.outputs, policy)
    findings += check_metrics(current.metrics, baseline.metrics, policy)
    return findings


def check_metrics(
    current: Mapping[str, Metric], baseline: Mapping[str, Metric], policy: Callable[[str], Policy]
) -> list[Finding]:
    """One finding per metric present on either side, in name order: curves step by step, `time.*` as timing,
    `mem.*` as memory, anything else as a user metric. A metric with no values counts as absent."""
    current = {name: m for name, m in current.items() if m.values}
    baseline = {name: m for name, m in baseline.items() if m.values}
    findings = []
    for name in sorted(set(current) | set(baseline)):
        base, cur, rules = baseline.get(name), current.get(name), policy(name)
        check = check_kind(name, (cur or base).kind)
        gating = rules.active and (check != "metric" or rules.gate_user_metrics)
        if base is None:
            numbers = _shape_of(cur, "current") | {"reason": "no baseline value to compare with"}
            findings.append(Finding(check, name, "new", numbers, f"{name} is new", gating=gating))
        elif cur is None:
            numbers = _shape_of(base, "baseline") | {"reason": "the baseline recorded it, this run did not"}
            findings.append(Finding(check, name, "regression", numbers, f"{name}: metric disappeared", gating))
        elif cur.kind != base.kind:
            numbers = {"baseline_kind": base.kind, "current_kind": cur.kind,
                       "reason": "a metric's kind must not change"}
            message = f"{name}: metric kind changed {base.kind} -> {cur.kind}"
            findings.append(Finding(check, name, "regression", numbers, message, gating))
        else:
            findings.append(_CHECKS[check](name, base.values, cur.values, rules))
    return findings


def check_kind(name: str, kind: str) -> str:
    """Which check judges a metric: "curve", "timing", "memory", or "metric" for user metrics."""
    if kind == "curve":
        return "curve"
    if name.startswith("time."):
        return "timing"
    if name.startswith("mem."):
        return "memory"
    return "metric"


_CHECKS = {"curve": check_curve, "timing": check_timing, "memory": check_memory, "metric": check_user_metric}


def _shape_of(metric: Metric, side: str) -> dict[str, Any]:
    """Kind, count and value (final step of a curve, median of samples) of a metric seen on one side only."""
    value = metric.values[-1] if metric.kind == "curve" else metric.median
    return {
        f"{side}_kind": metric.kind,
        f"n_{side}": len(metric.values),
        f"{side}_value": json_number(value),
        "unit": metric.unit,
    }
