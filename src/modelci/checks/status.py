"""The status check: did the workload run, compared with its baseline (docs/design.md, "Comparisons")."""

from __future__ import annotations

from modelci.checks.policy import Finding, Policy
from modelci.records import Result


def check_status(current: Result, baseline: Result | None, policy: Policy) -> Finding:
    """ok -> anything else is a regression at once; not ok -> ok is an improvement; no baseline is "new"."""
    gating = policy.active
    if baseline is None:
        outputs = len(current.outputs)
        metrics = len(current.metrics)
        return Finding(
            check="status",
            metric="status",
            verdict="new",
            numbers={"current": current.status, "metrics": metrics, "outputs": outputs,
                     "reason": "no baseline to compare with"},
            message=f"new: no baseline to compare with (status {current.status}, "
            f"{metrics} metric(s), {outputs} output(s))" + _reason(current),
            gating=gating,
        )
    numbers = {"baseline": baseline.status, "current": current.status}
    if baseline.status == "ok" and current.status != "ok":
        verdict, message = "regression", f"status ok -> {current.status}" + _reason(current)
    elif baseline.status != "ok" and current.status == "ok":
        verdict, message = "improvement", f"status {baseline.status} -> ok"
    elif baseline.status == current.status:
        verdict, message = "ok", f"status {current.status}" + _reason(current)
    else:
        # both broken, in different ways: the baseline was already failing, so this is no new regression
        verdict, message = "ok", f"still not ok: {baseline.status} -> {current.status}" + _reason(current)
    numbers["reason"] = message  # the message is the rule here: what the two statuses were
    return Finding("status", "status", verdict, numbers, message, gating=gating)


def _reason(result: Result) -> str:
    """The first line of the result's reason, for a one-line message; empty when it ran fine."""
    reason = result.reason.strip() if result.status != "ok" else ""
    first = reason.splitlines()[0][:200] if reason else ""
    return f": {first}" if first else ""
