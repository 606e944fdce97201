"""Change points over the history: one series per (runner, workload, metric), one point per target.

Targets are put in order of release version (packaging.version), and of commit date among builds of one version
(git targets). A point is the median over the target's runs of the metric's median (the final value for a
curve). The detector is `modelci.checks.history` (flat and straight segments, thresholds from the noise): its
noise is the policy's calibrated `noise_cv` when set, else estimated from the series.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import case, func, select

from modelci.checks.policy import Finding, Policy, decided, json_number
from modelci.store.schema import MetricRow, ResultRow, RunLinkRow, RunRow, TargetRow
from modelci.targets import label as target_label, order_key

if TYPE_CHECKING:  # ruptures and scipy.stats take seconds to import: only detection pays for them
    from modelci.checks import history

#: the change must start within the last TAIL points to be reported after a run (history.detect_latest): a change
#: found within 5 runs of its first target has 6 points
TAIL = 6
#: only the last WINDOW points are segmented after a run (older changes were reported when they were new)
WINDOW = 60


@dataclass
class Series:
    """One metric of one workload on one runner, one point per target, oldest target first."""

    runner: str
    workload: str
    metric: str
    kind: str
    unit: str
    labels: list[str] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    target_ids: list[int] = field(default_factory=list)


@dataclass
class SeriesChange:
    """A change point of one series, and whether it goes the bad way for that metric."""

    series: Series
    change: history.ChangePoint
    worse: bool
    #: the metric's better direction as the verdict read it ("lower is better", ...)
    direction: str = ""

    def finding(self) -> Finding:
        """The change as a `history` finding. It never gates: the run that reveals a change (3+ points after it)
        is rarely the one that caused it; the alarm names the first target after the change instead."""
        c = self.change
        numbers = {
            "first_target": c.label, "index": c.index, "points": len(self.series.values),
            "magnitude": json_number(c.magnitude), "before_mean": c.before_mean, "before_sd": c.before_sd,
            "after_mean": c.after_mean, "after_sd": c.after_sd, "p_value": c.p_value, "unit": self.series.unit,
            "shift": c.after_mean - c.before_mean, "noise_sd": c.noise_sd,
        }
        verdict = "regression" if self.worse else "improvement"
        way = "up" if c.after_mean > c.before_mean else "down"
        judged = f"{'worse' if self.worse else 'better'}: it went {way}, {self.direction}"
        reason = f"{c.rule}; {judged}" if c.rule else judged
        return decided("history", self.series.metric, verdict, numbers, f"change point: {c.evidence}", reason,
                       gating=False)


def load_series(store: Any, runner: str | None = None, workloads: Iterable[str] | None = None,
                metric: str | None = None) -> list[Series]:
    """Every series of the history (or of one runner, some workloads, one metric), from ok results of complete
    runs: one query for the points, one for the targets they belong to. A value that is not finite (an
    infinite or NaN loss) is no point of a series: it has no level to compare."""
    value = case((MetricRow.kind == "curve", MetricRow.final), else_=MetricRow.median)
    stmt = (
        select(RunRow.runner, ResultRow.workload, MetricRow.name, MetricRow.kind, MetricRow.unit, value,
               RunRow.target_id)
        .select_from(MetricRow).join(ResultRow, MetricRow.result_id == ResultRow.id)
        .join(RunRow, ResultRow.run_id == RunRow.id)
        .where(ResultRow.status == "ok", RunRow.status == "complete", value.is_not(None),
               RunRow.id.not_in(select(RunLinkRow.run_id)))  # a confirmation run is part of the run it confirms
    )
    if runner:
        stmt = stmt.where(RunRow.runner == runner)
    if workloads is not None:
        stmt = stmt.where(ResultRow.workload.in_(sorted(set(workloads))))
    if metric:
        stmt = stmt.where(MetricRow.name == metric)
    # (runner, workload, metric) -> target id -> [values], and each series' kind and unit
    from modelci.checks.history import MAX_LEVEL

    points: dict[tuple[str, str, str], dict[int, list[float]]] = {}
    shapes: dict[tuple[str, str, str], tuple[str, str]] = {}
    with store.read() as session:
        for run_runner, workload, name, kind, unit, number, target_id in session.execute(stmt):
            if not math.isfinite(number) or abs(number) > MAX_LEVEL:
                # a diverged loss or an overflowed counter: the pairwise checks report it; a level it has none
                # (PostgreSQL keeps a NaN where SQLite stores NULL, which the query leaves out already). Past
                # MAX_LEVEL (1e300) the detector's sums of squares overflowed, and its verdict was NaN's
                continue
            key = (run_runner, workload, name)
            points.setdefault(key, {}).setdefault(target_id, []).append(number)
            if key not in shapes:
                shapes[key] = (kind, unit)
        ids = {tid for per_target in points.values() for tid in per_target}
        first = func.min(RunRow.id).label("first_run")
        targets = session.execute(
            select(TargetRow.id, TargetRow.kind, TargetRow.name, TargetRow.version, TargetRow.commit,
                   TargetRow.commit_date, TargetRow.wheel_sha256, TargetRow.spec, first)
            .join(RunRow, RunRow.target_id == TargetRow.id).where(TargetRow.id.in_(sorted(ids)))
            .group_by(TargetRow.id)
        ).all() if ids else []
    rows = {row.id: row for row in targets}
    # parsing versions is the slow part: once each
    order = {tid: order_key(row.version, row.commit_date, row.first_run, tid) for tid, row in rows.items()}
    labels = {tid: target_label(row.kind, row.name, row.version, row.commit, row.wheel_sha256, row.spec)
              for tid, row in rows.items()}
    series = []
    for key in sorted(points):
        ordered = sorted(points[key], key=order.__getitem__)
        kind, unit = shapes[key]
        series.append(Series(*key, kind=kind, unit=unit, labels=[labels[t] for t in ordered],
                             values=[float(statistics.median(points[key][t])) for t in ordered], target_ids=ordered))
    return series


def detection_settings(series: Series, policy: Policy) -> dict[str, Any]:
    """The detector's arguments for a series: the calibrated noise when the policy has it (with the runs it was
    measured from, so that the detector pools it with the series' own estimate), and the smallest
    relative change worth naming (the policy's threshold; curve_rtol for curves, whose values repeat exactly)."""
    minimum = policy.curve_rtol if series.kind == "curve" else 0.0
    if policy.threshold is not None:
        minimum = policy.threshold
    runs = policy.noise_cv_runs if policy.noise_cv is not None else None
    return {"noise_cv": policy.noise_cv, "noise_runs": runs, "min_magnitude": minimum, "metric": series.metric,
            "unit": series.unit}


def worse(series: Series, change: history.ChangePoint, policy: Policy) -> bool:
    """Whether a change goes the bad way: up for lower-is-better metrics, down for higher-is-better ones, and
    either way for a curve with no direction set (a moved final loss is suspect both ways). The way is the sign
    of the difference of the levels, never of a ratio: -10 -> -8 went up."""
    if series.kind == "curve" and policy.direction is None:
        return True
    up = change.after_mean > change.before_mean
    return not up if policy.higher_better(series.metric) else up


def direction_text(series: Series, policy: Policy) -> str:
    """The metric's better direction in words, for the reason of a history finding."""
    if series.kind == "curve" and policy.direction is None:
        return "and a curve with no direction set is suspect either way"
    return "and higher is better" if policy.higher_better(series.metric) else "and lower is better"


def worse_way(series: Series, policy: Policy) -> str:
    """The way a change of the series is a regression, as history.detect_latest takes it: its one-sided test then
    sees smaller regressions at the same false-alarm rate, and ignores improvements."""
    if series.kind == "curve" and policy.direction is None:
        return "both"
    return "down" if policy.higher_better(series.metric) else "up"


def _large_enough(series: Series, change: history.ChangePoint, policy: Policy) -> bool:
    """The absolute floors of the pairwise checks hold here too: a shift of a few MiB of RSS or a microsecond
    is no change worth an alarm."""
    difference = abs(change.after_mean - change.before_mean)
    if policy.tolerance is not None:
        return difference > policy.tolerance
    if series.metric.startswith("time."):
        return difference > policy.timing_floor_s
    if series.metric.startswith("mem."):
        return difference > policy.memory_floor_bytes
    return True


#: policy_for(runner, workload)(metric) -> Policy
PolicyFor = Callable[[str, str], Callable[[str], Policy]]


def calibrated(config: Any, store: Any) -> PolicyFor:
    """The config's policies with each runner's calibrated noise (`modelci calibrate`) where it was measured: its
    run-to-run CV of a metric's median is the noise of one point of a series, so it sets the penalty."""
    from modelci import calibrate

    cache: dict[tuple[str, str], Callable[[str], Policy]] = {}

    def policy_for(runner: str, workload: str) -> Callable[[str], Policy]:
        if (runner, workload) not in cache:
            noise = calibrate.profile(store, runner, workload)
            cache[runner, workload] = calibrate.with_noise(config.policy_for(workload), noise)
        return cache[runner, workload]

    return policy_for


def find_changes(series_list: Iterable[Series], policy_for: PolicyFor) -> list[SeriesChange]:
    """Every change point of every series (for `modelci history --changes`)."""
    from modelci.checks import history

    found = []
    for series in series_list:
        policy = policy_for(series.runner, series.workload)(series.metric)
        for change in history.detect_changes(series.values, series.labels, **detection_settings(series, policy)):
            if _large_enough(series, change, policy):
                found.append(SeriesChange(series, change, worse(series, change, policy),
                                          direction_text(series, policy)))
    return found


def noise_pools(series_list: Iterable[Series]) -> dict[tuple[str, str], history.NoisePool]:
    """The noise pool (history.pool_noise) of each runner's metric over its series here, where they are enough:
    the workloads of one runner share its noise (a machine's drift moves their timings together), and each
    series' own estimate from at most 200 points is what keeps the online check from small steps."""
    from modelci.checks import history

    groups: dict[tuple[str, str], list[list[float]]] = {}
    for series in series_list:
        groups.setdefault((series.runner, series.metric), []).append(series.values)
    pools = {key: history.pool_noise(values, tail=TAIL) for key, values in groups.items()}
    return {key: pool for key, pool in pools.items() if pool is not None}


def latest_changes(series_list: Iterable[Series], policy_for: PolicyFor,
                   pool_from: Iterable[Series] | None = None) -> list[SeriesChange]:
    """The change, if any, that begins within the last TAIL points of each series: the check after every run.
    Each series' noise is pooled with that of the other series of its runner and metric (noise_pools) among
    ``pool_from`` (by default the series checked)."""
    from modelci.checks import history

    series_list = list(series_list)
    pools = noise_pools(series_list if pool_from is None else pool_from)
    found = []
    for series in series_list:
        policy = policy_for(series.runner, series.workload)(series.metric)
        change = history.detect_latest(series.values, series.labels, tail=TAIL, window=WINDOW,
                                       worse=worse_way(series, policy), noise_pool=pools.get((series.runner,
                                                                                               series.metric)),
                                       **detection_settings(series, policy))
        if change is not None and _large_enough(series, change, policy):
            found.append(SeriesChange(series, change, worse(series, change, policy),
                                      direction_text(series, policy)))
    return found


def back_to_normal(series: Series, numbers: dict[str, Any], points: int = 3) -> bool:
    """Whether the last `points` values of a series sit nearer the level before a change than after it: the
    recovery rule of a `history` alarm (numbers are the alarm's: before_mean, after_mean)."""
    before, after = numbers.get("before_mean"), numbers.get("after_mean")
    if before is None or after is None or len(series.values) < points:
        return False
    recent = statistics.mean(series.values[-points:])
    return abs(recent - before) < abs(recent - after)
