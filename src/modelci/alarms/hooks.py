"""What runs after every `modelci run` and on `modelci alarms check` (docs/design.md, "Flow": alarms.update + notify).

    (check_config, alarms or not: [[policy]] metrics, workload patterns that match nothing)
        → change points of this run's series → observations → lifecycle.apply
        → stale runners → notify (never loses the run: it is stored already)
"""

from __future__ import annotations

import fnmatch
import logging
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from sqlalchemy import select

from modelci.alarms import changes, lifecycle, notify, settings
from modelci.alarms.lifecycle import AlarmEvent, Observation
from modelci.errors import UserError
from modelci.store.alarms_schema import AlarmRow
from modelci.store.schema import MetricRow, OutputRow, ResultRow

log = logging.getLogger("modelci.alarms")


@dataclass
class AlarmReport:
    """What the alarm step did for one run: events (opened, recovered), change points found, deliveries."""

    events: list[AlarmEvent] = field(default_factory=list)
    #: events whose delivery failed before, sent again with this run's (notify.undelivered)
    resent: list[AlarmEvent] = field(default_factory=list)
    changes: list[changes.SeriesChange] = field(default_factory=list)
    deliveries: list[notify.Delivery] = field(default_factory=list)

    @property
    def failed_deliveries(self) -> list[notify.Delivery]:
        """The notifiers that could not deliver, after their retries."""
        return [d for d in self.deliveries if not d.ok]


def after_run(config: Any, store: Any, outcome: Any, *, today: date | None = None) -> AlarmReport:
    """The alarm step of `run`, once the run is stored and judged: history change points (added to the
    comparisons and stored as `history` findings), alarm updates, then notifications. A failing notifier is
    logged and reported in the returned AlarmReport, never raised. The configuration's checks come before it,
    alarms or not (`check_config`)."""
    report = AlarmReport()
    if outcome.run_id is None:  # every result was reused: nothing new to judge
        return report
    runner = config.runner
    if config.alarms.get("changes", True):
        fresh = {c.result.workload for c in outcome.comparisons if c.result.status == "ok"}
        # every series of the runner, not only this run's: a run of a few workloads (`run -k`) pools their noise
        # with the runner's others, so a series gets the same verdict whether its neighbours ran this time or not
        everything = changes.load_series(store, runner=runner)
        series = [s for s in everything if s.workload in fresh]
        report.changes = changes.latest_changes(series, changes.calibrated(config, store), pool_from=everything)
        by_workload: dict[str, list] = {}
        for change in report.changes:
            by_workload.setdefault(change.series.workload, []).append(change.finding())
        for comparison in outcome.comparisons:
            found = by_workload.get(comparison.result.workload, [])
            if found and comparison.result.id is not None:
                comparison.findings.extend(found)
                store.add_findings(comparison.result.id, None, found)
    else:
        series = []
    observations = observe(config, store, outcome, report.changes, series)
    observations += lifecycle.stale_observations(store, config.alarms.get("stale_after_days", 7))
    target_id = store.run_target_id(outcome.run_id)
    report.events = lifecycle.apply(store, config, observations, run_id=outcome.run_id, target_id=target_id,
                                    target_label=outcome.target.label, today=today)
    resend = notify.undelivered(config, store, outcome.run_id)
    report.resent = [event for events in resend.values() for event in events]
    report.deliveries = notify.deliver(config, report.events, outcome=outcome, store=store, run_id=outcome.run_id,
                                       resend=resend)
    _say_failures(report)
    return report


def check_now(config: Any, store: Any, *, today: date | None = None) -> AlarmReport:
    """`modelci alarms check`: the stale-runner check and silences that lapsed, then notifications; for a
    scheduler to call between runs, so that a runner that stopped running is noticed at all."""
    report = AlarmReport()
    observations = lifecycle.stale_observations(store, config.alarms.get("stale_after_days", 7))
    report.events = lifecycle.apply(store, config, observations, today=today)
    resend = notify.undelivered(config, store)
    report.resent = [event for events in resend.values() for event in events]
    report.deliveries = notify.deliver(config, report.events, store=store, resend=resend)
    _say_failures(report)
    return report


def observe(config: Any, store: Any, outcome: Any, found: list[changes.SeriesChange],
            series: list[changes.Series]) -> list[Observation]:
    """What this run says about each alarm key: the gating regressions and failed results fire; results and
    findings that are fine again are evidence of recovery."""
    runner = config.runner
    observations: list[Observation] = build_observations(runner, outcome)
    seen: set[str] = set()
    for comparison in outcome.comparisons:
        result = comparison.result
        policy = config.policy_for(result.workload)
        seen.add(result.workload)
        if result.info.get("build_failed"):
            continue  # one `build` alarm says it for the whole target, not one status alarm per workload
        if result.status not in ("ok", "skipped") and policy("status").active:
            kind = "empty-suite" if result.workload.endswith("/(suite)") else "status"
            reason = result.reason.strip().splitlines()[0] if result.reason.strip() else ""
            observations.append(Observation(runner, result.workload, "status", "status", True, kind=kind,
                                            message=f"status {result.status}" + (f": {reason}" if reason else ""),
                                            numbers={"status": result.status}))
        elif result.status == "ok":
            observations.append(Observation(runner, result.workload, "status", "status", False, message="status ok"))
        baseline_id = comparison.baseline.id if comparison.baseline is not None else None
        for finding in comparison.findings:
            if finding.check in ("status", "history") or "unreadable" in (finding.numbers or {}):
                continue  # (an output whose stored array cannot be read was not compared: it says nothing)
            if finding.verdict == "regression" and finding.gating:
                kind = "disappeared" if "metric disappeared" in finding.message else "regression"
                observations.append(Observation(runner, result.workload, finding.check, finding.metric, True,
                                                kind=kind, message=finding.message, numbers=finding.numbers,
                                                baseline_result_id=baseline_id))
            elif finding.verdict in ("ok", "improvement", "new"):  # "new": a metric that came back
                observations.append(Observation(runner, result.workload, finding.check, finding.metric, False,
                                                message=finding.message, result=result))
    # a step the pairwise checks already alarmed on is one problem, not two: no change alarm on top of it
    covered = _alarmed_metrics(store, runner) | {(o.workload, o.metric) for o in observations if o.firing}
    for change in found:
        policy = config.policy_for(change.series.workload)(change.series.metric)
        alarm_worthy = policy.active and (settings.is_builtin_metric(change.series.metric) or policy.gate_user_metrics)
        if change.worse and alarm_worthy and (change.series.workload, change.series.metric) not in covered:
            finding = change.finding()
            observations.append(Observation(runner, change.series.workload, "history", change.series.metric, True,
                                            kind="change", message=finding.message, numbers=finding.numbers))
    observations += _history_recoveries(store, runner, series)
    observations += _suite_recoveries(store, runner, seen)
    return observations


def build_series(target: Any) -> str:
    """The alarm series of a git target's builds: one per repository (and project folder) and build strategy,
    shown as the workload `(build)/<repository>`."""
    from modelci.builds import BuildPlan

    name = (target.repo or "").rstrip("/").rsplit("/", 1)[-1].removesuffix(".git") or "repository"
    where = f"/{target.subdirectory}" if getattr(target, "subdirectory", None) else ""
    return f"(build)/{name}{where} [{BuildPlan.parse(target.build).text}]"


def build_observations(runner: str, outcome: Any) -> list[Observation]:
    """A git target that did not build fires its `build` series (one alarm, whatever the number of workloads);
    one that built is normal, so an open build alarm recovers at the first commit that builds again."""
    target = outcome.target
    if getattr(target, "kind", "") != "git" or not outcome.comparisons:
        return []
    failed = next((c.result for c in outcome.comparisons if c.result.info.get("build_failed")), None)
    series = build_series(target)
    if failed is None:
        return [Observation(runner, series, "build", "build", False, message=f"commit {target.commit[:12]} built")]
    return [Observation(runner, series, "build", "build", True, kind="build", message=failed.reason,
                        numbers={"commit": target.commit, "build": failed.info.get("build", "")})]


def _alarmed_metrics(store: Any, runner: str) -> set[tuple[str, str]]:
    """(workload, metric) of the live alarms of the pairwise checks on a runner."""
    with store.read() as session:
        stmt = select(AlarmRow.workload, AlarmRow.metric).where(
            AlarmRow.runner == runner, AlarmRow.state != "resolved", AlarmRow.check != "history")
        return {(row.workload, row.metric) for row in session.execute(stmt)}


def _history_recoveries(store: Any, runner: str, series: list[changes.Series]) -> list[Observation]:
    """Live `history` alarms whose series is back near its level before the change."""
    by_key = {(s.workload, s.metric): s for s in series}
    with store.read() as session:
        rows = session.scalars(select(AlarmRow).where(AlarmRow.runner == runner, AlarmRow.check == "history",
                                                      AlarmRow.state != "resolved")).all()
    found = []
    for row in rows:
        current = by_key.get((row.workload, row.metric))
        if current is not None and changes.back_to_normal(current, row.numbers or {}):
            found.append(Observation(runner, row.workload, "history", row.metric, False,
                                     message=f"{row.metric} back near {row.numbers.get('before_mean'):.4g}"))
    return found


def _suite_recoveries(store: Any, runner: str, seen: set[str]) -> list[Observation]:
    """A suite that yielded no workloads, or a file that failed to import, has no result of its own once fixed:
    it recovers when its suite ran again without that error result."""
    suites = {workload.split("/", 1)[0] for workload in seen}
    with store.read() as session:
        rows = session.scalars(select(AlarmRow).where(AlarmRow.runner == runner, AlarmRow.check == "status",
                                                      AlarmRow.state != "resolved")).all()
    found = []
    for row in rows:
        pseudo = row.workload.endswith("/(suite)") or row.workload.endswith(".py")
        if pseudo and row.workload not in seen and row.workload.split("/", 1)[0] in suites:
            found.append(Observation(runner, row.workload, "status", "status", False,
                                     message=f"suite {row.workload.split('/', 1)[0]!r} yields its workloads again"))
    return found


def check_config(config: Any, store: Any, outcome: Any) -> list[str]:
    """The checks of the configuration that need the history, run once a run is stored and judged, whether or
    not the alarm step follows (`--no-alarms`, a PR build, is judged by the same entries): a [[policy]] metric
    that no workload records is an error, any other pattern that matches nothing a warning.

    The errors are kept in `outcome.config_errors` (and returned), not raised: a metric name only the results
    can confirm is known to be wrong only once the run is stored, and raising then lost the run's verdicts, its
    alarm and its report files, while the stored run became the next one's baseline. Such an entry matches no
    metric of the run, so it judged nothing: the verdicts of the other entries stand, and the command says the
    bad entry after its report (`modelci run` exits 2 for it unless the run regressed, docs/alarms.md)."""
    if outcome.run_id is None:  # every result was reused: the history holds nothing new to check against
        return []
    outcome.config_errors = [f"{problem} (run {outcome.run_id} is judged and reported without it: the "
                             "entry matches no metric of the run, so it judged nothing)"
                             for problem in unknown_policy_metrics(config, store)]
    warn_unmatched(config, store, outcome)
    return outcome.config_errors


def check_policy_metrics(config: Any, store: Any, prefix: str = "") -> None:
    """Refuse a [[policy]] naming a user metric or output that no workload records (settings.check_policy_metrics)."""
    problems = unknown_policy_metrics(config, store, prefix)
    if problems:
        raise UserError(problems[0])


def unknown_policy_metrics(config: Any, store: Any, prefix: str = "") -> list[str]:
    """One message per [[policy]] entry naming a user metric or output that no workload in the history records."""
    pending = [p for p in config.policies if not settings.is_builtin_metric(p["metric"])]
    if not pending:
        return []
    with store.read() as session:
        names = set(session.scalars(select(MetricRow.name).distinct()))
        names |= {f"output:{n}" for n in session.scalars(select(OutputRow.name).distinct())}
    where = f"{prefix} {config.file or 'config'}".strip()
    return settings.unknown_policy_metrics(pending, names, where)


def warn_unmatched(config: Any, store: Any, outcome: Any) -> None:
    """Warn of each [[overrides]], [[policy]] and [[allow]] entry whose workload pattern matches no workload in
    the history, and of each [[overrides]] and [[allow]] entry whose user metric or output matches none it
    records ([[policy]] refuses those: check_policy_metrics): its settings judge nothing, silently (a typo such
    as `models/resnt*` or `acuracy`, or `[`, which fnmatch reads as itself). A warning, not an error: an entry
    may be meant for a suite that no runner has run yet. What the run recorded is tried first; the history is
    read only for a pattern none of it matches."""
    ran = {c.result.workload for c in outcome.comparisons}
    recorded = {name for c in outcome.comparisons
                for name in [*c.result.metrics, *(f"output:{n}" for n in c.result.outputs)]}
    tables = (("overrides", config.overrides), ("policy", config.policies), ("allow", config.allow))
    loose = [(kind, "workload", entry) for kind, table in tables for entry in table
             if "workload" in entry and not any(fnmatch.fnmatchcase(name, entry["workload"]) for name in ran)]
    # "*" is [[allow]]'s metric when it names a workload only: everything, even in a run that recorded nothing
    loose += [(kind, "metric", entry) for kind, table in tables[::2] for entry in table
              if entry.get("metric", "*") != "*" and not settings.is_builtin_metric(entry["metric"])
              and not any(fnmatch.fnmatchcase(name, entry["metric"]) for name in recorded)]
    if not loose:
        return
    with store.read() as session:
        known = {"workload": set(session.scalars(select(ResultRow.workload).distinct())),
                 "metric": set(session.scalars(select(MetricRow.name).distinct()))
                 | {f"output:{n}" for n in session.scalars(select(OutputRow.name).distinct())}}
    what = {"workload": "workload in the history", "metric": "metric or output that a workload in the history records"}
    for kind, key, entry in loose:
        pattern = entry[key]
        if not any(fnmatch.fnmatchcase(name, pattern) for name in known[key]):
            log.warning("modelci: %s: [[%s]] entry %s: %s = %r matches no %s, so it judges nothing; fix the "
                        "pattern or remove the entry", config.file or "config", kind, entry.get("_entry", "?"),
                        key, pattern, what[key])


def _say_failures(report: AlarmReport) -> None:
    """A notifier that failed is logged as a warning naming it (stderr, when nothing else handles logging); the run
    is stored already and its exit code does not change."""
    for delivery in report.failed_deliveries:
        log.warning("modelci: notification not delivered (the run is stored): %s", delivery.error)
