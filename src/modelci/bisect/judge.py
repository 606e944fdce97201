"""Which check a bisect follows, and the verdict of one probe against the good end.

Each probe is judged with the same checks as `run` (checks.evaluate), against the good end's result as the
reference. Timing and memory use the timing check's statistics (ratio of medians plus a one-sided Mann-Whitney U
test); their threshold is raised to the geometric middle between the two ends, so a probe counts as bad only when
it is significantly closer to the bad end than to the good one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from modelci import checks
from modelci.bisect import compat_probe
from modelci.errors import BisectRefused, UserError
from modelci.records import Result

#: the checks bisect can follow, in the order it picks one when both ends differ in several
CHECKS = ("status", "precision", "curve", "memory", "timing")
#: checks whose measurements are noisy: their boundary is re-run before a culprit is reported
NOISY = ("timing", "memory")


@dataclass
class Criterion:
    """The check a bisect follows: which metrics, judged against which reference, with which policy."""

    check: str
    metrics: list[str]
    reference: Result
    #: the checks' own policy: used for the ends and to confirm the boundary
    policy: Callable[[str], checks.Policy]
    #: what the bad end's finding said, for the report
    evidence: str = ""
    #: timing/memory: the smallest bad/good ratio of medians seen between the ends
    ratio: float | None = None
    #: the policy probes are judged by; timing/memory raise its factor to sqrt(ratio) (see `split`)
    probe_policy: Callable[[str], checks.Policy] | None = None

    @property
    def noisy(self) -> bool:
        """Whether verdicts rest on statistics and the boundary must be confirmed."""
        return self.check in NOISY


def choose(good: Result, bad: Result, policy: Callable[[str], checks.Policy], check: str | None,
           good_label: str, bad_label: str, bad_word: str = "bad") -> Criterion:
    """The criterion for this bisect: the check asked for, or the first in CHECKS that fails between the ends.

    Only gating findings count, with `--check` as without: a report-only finding (a one-sample `time.setup`, a
    user metric) is not a regression to bisect. For timing and memory the bisect follows the one metric that
    moved most, so that a second metric that barely passed the factor cannot turn probes bad on its own.
    Raises BisectRefused when the good end is not good or the bad end is not bad for that check.

    With `--improvement` the caller passes the ends swapped (the newer, better end as `good`, the reference):
    the older end then "regresses" against the newer one by the same checks and the same rules.
    """
    if check is not None and check not in CHECKS:
        raise UserError(f"--check {check!r} is not one of {', '.join(CHECKS)}")
    if good.status != "ok":
        # an `error` at the good end is most often the build itself (a --build command that fails everywhere),
        # which no choice of good commit mends
        fix = ("; if the build failed, fix how commits are built (--build) or pick a commit that builds"
               if good.status == "error" else "; pick a commit where it passes")
        raise BisectRefused(f"{good_label} is not good: {good.workload} is {good.status}"
                            f"{' (' + good.reason.splitlines()[0] + ')' if good.reason else ''}{fix}")
    if bad.status in ("error", "skipped"):
        raise BisectRefused(f"{bad_label} cannot be tested: {bad.workload} is {bad.status} "
                            f"({bad.reason.splitlines()[0] if bad.reason else 'no reason given'}); pick a bad end "
                            "that builds and runs")
    findings = [f for f in checks.evaluate(bad, good, policy) if f.verdict == "regression"]
    gating = [f for f in findings if f.gating and f.check in CHECKS]
    if check is None:
        if not gating:
            raise BisectRefused(f"{bad_label} is not {bad_word}: no check fails for {bad.workload} between "
                                f"{good_label} and {bad_label}" + _report_only(findings) + "; nothing to bisect")
        check = min(gating, key=lambda f: CHECKS.index(f.check)).check
    failing = [f for f in gating if f.check == check]
    if not failing:
        raise BisectRefused(f"{bad_label} is not {bad_word} for the {check} check: {bad.workload} passes it "
                            f"against {good_label}" + _report_only([f for f in findings if f.check == check])
                            + _other_failures(gating))
    if check in NOISY:
        failing = [max(failing, key=lambda f: _moved(f.numbers.get("ratio")))]
    metrics = sorted({f.metric for f in failing})
    ratios = [f.numbers["ratio"] for f in failing if f.numbers.get("ratio")]
    return Criterion(check, metrics, good, policy, "; ".join(f.message for f in failing),
                     ratio=min(ratios) if ratios else None)


def _moved(ratio: Any) -> float:
    """How far a ratio of medians is from 1, either way (a memory or timing ratio below 1 moved too)."""
    try:
        value = float(ratio)
    except (TypeError, ValueError):
        return 0.0
    return max(value, 1.0 / value) if value > 0 else 0.0


def _report_only(findings: list[Any]) -> str:
    """Why the findings that did fail do not count: they are report-only (with the policy's reason)."""
    quiet = [f for f in findings if not f.gating and f.verdict == "regression"]
    if not quiet:
        return ""
    return (" (report-only, not gating: " + "; ".join(f.message for f in quiet[:3])
            + (f"; {len(quiet) - 3} more" if len(quiet) > 3 else "") + ")")


def split(criterion: Criterion, ratio: float | None = None) -> None:
    """Set the policy probes are judged by: for timing and memory the factor becomes sqrt(ratio), halfway
    (geometrically) between the ends, so a probe is bad only when it is significantly nearer the bad end.
    `ratio` is a second measurement of the ends; the smaller one counts."""
    if ratio is not None:
        criterion.ratio = min(criterion.ratio or ratio, ratio)
    criterion.probe_policy = criterion.policy
    if criterion.noisy and criterion.ratio:
        criterion.probe_policy = _midway(criterion.policy, criterion.check, math.sqrt(criterion.ratio))


def verdict(criterion: Criterion, result: Result | None) -> tuple[str, str, dict[str, Any]]:
    """("good" | "bad" | "skip", why, numbers) for one probe's result; no result at all is a skip."""
    if criterion.check == "compat":  # the probe loaded the producer's saved models: see compat_probe
        return compat_probe.verdict(result)
    if result is None:
        return "skip", "no result for the workload", {}
    first_line = result.reason.splitlines()[0] if result.reason else ""
    if result.status in ("error", "skipped"):
        return "skip", f"untestable: {result.status}" + (f" ({first_line})" if first_line else ""), {}
    if criterion.check == "status":
        if result.status == "ok":
            return "good", "ok", {}
        return "bad", f"{result.status}" + (f" ({first_line})" if first_line else ""), {}
    if result.status != "ok":
        return "skip", f"{result.status}, so its {criterion.check} cannot be judged ({first_line})", {}
    policy = criterion.probe_policy or criterion.policy
    findings = [f for f in checks.evaluate(result, criterion.reference, policy)
                if f.check == criterion.check and f.metric in criterion.metrics]
    worst = [f for f in findings if f.verdict == "regression"]
    if worst:
        return "bad", worst[0].message, worst[0].numbers
    return "good", findings[0].message if findings else "nothing to compare", findings[0].numbers if findings else {}


def confirm(criterion: Criterion, before: Result, after: Result) -> tuple[bool, str, dict[str, Any]]:
    """Whether fresh runs of two commits still differ: `after` judged against `before` alone, by the check's own
    policy (its factor and its significance test)."""
    if before.status != "ok" or after.status != "ok":
        return False, f"the re-run is not ok ({before.status} -> {after.status})", {}
    local = dataclasses.replace(criterion, reference=before, probe_policy=criterion.policy)
    word, why, numbers = verdict(local, after)
    return word == "bad", why, numbers


def _midway(policy: Callable[[str], checks.Policy], check: str, middle: float) -> Callable[[str], checks.Policy]:
    """The policy with the factor raised to `middle` where it is lower."""
    field = "timing_factor" if check == "timing" else "memory_factor"

    def lookup(metric: str) -> checks.Policy:
        base = policy(metric)
        if middle <= getattr(base, field):
            return base
        return dataclasses.replace(base, **{field: middle})

    return lookup


def _other_failures(findings: list[Any]) -> str:
    others = sorted({f.check for f in findings if f.gating}, key=CHECKS.index)
    return f" (it fails {', '.join(others)}; pass --check {others[0]})" if others else ""
