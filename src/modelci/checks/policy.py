"""What the checks judge by (Policy) and what they produce (Finding).

Both live here, apart from the checks themselves, so that every check module can import them without a cycle
through `modelci.checks`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from modelci.errors import UserError

#: verdicts a finding can carry
VERDICTS = ("ok", "regression", "improvement", "new")


@dataclass
class Finding:
    """One comparison of one metric or output against the baseline, with its verdict and the numbers behind it."""

    check: str  # "status" | "precision" | "curve" | "timing" | "memory" | "metric"
    metric: str  # "status", "output:<name>", "loss", "time.train", "mem.peak_rss", user metric names
    verdict: str  # "ok" | "regression" | "improvement" | "new"
    numbers: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    #: False when the policy says report-only; a non-gating regression must not fail a run
    gating: bool = True

    @property
    def reason(self) -> str:
        """The rule that decided the verdict, with its numbers ("ratio 2.20x > factor 1.10x and p=5e-07 < alpha
        0.05, ..."). The check writes it into ``numbers["reason"]`` (and at the end of the message), so it is
        stored, alarmed on and rendered with the finding, and every report shows the same text."""
        return str((self.numbers or {}).get("reason") or "")


def decided(
    check: str, metric: str, verdict: str, numbers: dict[str, Any], what: str, reason: str, gating: bool = True
) -> Finding:
    """A finding whose message is ``what`` happened and ``reason``, the rule that decided it, with its numbers;
    the reason is also kept alone in ``numbers["reason"]`` for the tables that show it in a column."""
    numbers["reason"] = reason
    message = f"{what}: {reason}" if what and reason else what or reason
    return Finding(check, metric, verdict, numbers, message, gating=gating)


def number_text(value: Any, unit: str = "") -> str:
    """A number for a reason: seconds as ms below 1 s, bytes as MiB, others in 4 significant digits."""
    if value is None:
        return "none"
    if unit == "s":
        return f"{value * 1e3:.3g} ms" if abs(value) < 1 else f"{value:.4g} s"
    if unit == "bytes":
        return f"{value / 2**20:.1f} MiB"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


@dataclass
class Policy:
    """How strictly one metric is judged; the defaults are those of docs/design.md ("Comparisons")."""

    timing_factor: float = 1.10
    memory_factor: float = 1.10
    #: smaller absolute memory differences never count: allocators and page rounding move RSS by a few MiB
    memory_floor_bytes: int = 8 * 2**20
    #: significance level of the one-sided Mann-Whitney U test
    alpha: float = 0.05
    #: None -> the dtype-aware default of the baseline output (see precision.default_tolerance)
    rtol: float | None = None
    atol: float | None = None
    curve_rtol: float = 1e-5
    curve_atol: float = 1e-8
    #: tolerance at step s = base * (1 + curve_growth * s): rounding differences compound over training
    curve_growth: float = 0.0
    #: floor from calibrate: a tolerance is never tighter than the measured run-to-run noise
    noise_rtol: float = 0.0
    #: measured run-to-run CV of the metric (calibrate): above max_timing_cv timing is reported, not gated; for
    #: memory it is the noise floor of a one-sample comparison
    noise_cv: float | None = None
    #: how many runs noise_cv was measured from (calibrate sets it): the history check pools such a noise with
    #: the series' own estimate, since a CV from 5 runs is off by a third (sd); None: noise_cv is exact
    noise_cv_runs: int | None = None
    max_timing_cv: float = 0.05
    #: timing differences of the medians below this many seconds never count: at sub-millisecond scale the
    #: scheduler and the timer decide, not the code under test
    timing_floor_s: float = 1e-3
    #: False -> findings are reported with gating=False
    active: bool = True
    #: user metrics (`accuracy`, ...) are compared with this factor on their medians
    metric_factor: float = 1.10
    #: user metrics are report-only unless this is set: their meaning is the author's, not modelci's
    gate_user_metrics: bool = False
    #: None -> guessed from the name: higher is better when it contains "acc"
    higher_is_better: bool | None = None
    #: "lower" or "higher" is better (Paddle CE KPI objects); wins over higher_is_better; None -> the check's own
    #: default (lower for time.*, mem.*; the name guess for user metrics; no direction for curves)
    direction: str | None = None
    #: relative change that counts (0.05 = 5%); replaces timing_factor/memory_factor/metric_factor (as 1 +
    #: threshold) and curve_rtol
    threshold: float | None = None
    #: absolute difference that never counts (seconds, bytes, loss units); replaces timing_floor_s,
    #: memory_floor_bytes and curve_atol, and holds user metrics too
    tolerance: float | None = None
    #: warm-up samples (time.*, mem.*, user metrics) or steps (curves) dropped from both sides before comparing
    skip_head: int = 0

    def higher_better(self, metric: str) -> bool:
        """Whether a higher value of `metric` is better: `direction`, else `higher_is_better`, else lower for
        time.*, mem.*, loss and curves, and the name guess ("acc") for user metrics."""
        if self.direction is not None:
            return self.direction == "higher"
        if self.higher_is_better is not None:
            return self.higher_is_better
        builtin = metric.startswith(("time.", "mem.", "output:")) or metric in ("loss", "status")
        return not builtin and "acc" in metric.lower()

    def factor(self, default: float) -> float:
        """The ratio a change must pass: 1 + threshold when the policy sets one, else the check's `default`."""
        return 1.0 + self.threshold if self.threshold is not None else default

    def with_overrides(self, overrides: Mapping[str, Any], where: str = "") -> Policy:
        """A copy with some fields replaced; an unknown key is a UserError naming `where` (file and key)."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise UserError(
                f"{where or 'policy'}: unknown check setting(s) {', '.join(unknown)}; "
                f"known settings are {', '.join(sorted(known))}"
            )
        return dataclasses.replace(self, **dict(overrides))


def policy_for(
    overrides: Mapping[str, Mapping[str, Any]] | None = None, default: Policy | None = None
) -> Callable[[str], Policy]:
    """A `policy(metric_name)` lookup: every glob pattern matching the name (e.g. "time.*", "output:logits")
    applies its overrides on top of `default`, in the order given, so later patterns win."""
    base = default or Policy()
    table = list((overrides or {}).items())
    # validate eagerly so a typo in the config fails at load time, not in the middle of a run
    for pattern, values in table:
        base.with_overrides(values, where=pattern)

    def lookup(metric: str) -> Policy:
        policy = base
        for pattern, values in table:
            if fnmatch.fnmatchcase(metric, pattern):
                policy = policy.with_overrides(values, where=pattern)
        return policy

    return lookup


def skip_head(values: Sequence[float], policy: Policy) -> tuple[Sequence[float], int]:
    """Drop the policy's warm-up head; always keep the last value, since a side left empty has nothing to compare.
    Returns the kept values and how many were dropped."""
    drop = min(policy.skip_head, max(len(values) - 1, 0))
    return values[drop:], drop


def regressed(findings: Iterable[Finding]) -> bool:
    """True when any gating finding is a regression; this is what turns a run's exit code to 1."""
    return any(f.gating and f.verdict == "regression" for f in findings)


def json_number(value: Any) -> float | int | None:
    """A float or int that JSON can carry: NaN and infinities become None (strict JSON cannot spell them)."""
    if value is None:
        return None
    if isinstance(value, numbers.Integral):  # numpy integers too; a float would round a large ULP count
        return int(value)
    value = float(value)
    return value if math.isfinite(value) else None
