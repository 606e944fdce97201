"""`modelci run --bisect-on-alarm --repo R --good REF`: when a run opens alarms, bisect each to its
commit.

The run is stored and its alarms are opened and notified first: people hear about a regression at once, not after
a bisect that may take an hour. Then every opened alarm that a bisect can follow is bisected between `--good` and
the run's own commit, one bisect per (workload, check). The outcome goes into each alarm's event log ("bisected" with
the culprit, or "bisect-failed" with the reason) and out to the notifiers as a "bisected" event.

A bisect that cannot start or ends without a culprit never changes the run's outcome: the run and its alarms are
already stored. Its probes are stored runs, so `modelci bisect` with the same ends resumes where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from modelci import targets
from modelci.errors import UserError

#: alarm kinds a bisect can follow: a finding of a check, a status, a change point of a metric's history
BISECTABLE_KINDS = ("regression", "status", "change")
#: the check a history change point of a built-in metric maps to; other metrics let the bisect choose
_HISTORY_CHECKS = (("time.", "timing"), ("mem.", "memory"), ("output:", "precision"), ("loss", "curve"),
                   ("status", "status"))


@dataclass
class AlarmBisect:
    """One bisect started by alarms: which alarms, the check followed, and what it found (or why not)."""

    workload: str
    check: str | None
    alarm_ids: list[int]
    #: a compat alarm: the build that saved the models that no longer load (`bisect --check compat --from`)
    from_spec: str | None = None
    #: a forward compat alarm: the older build that no longer loads what newer ones save (`--into`)
    into_spec: str | None = None
    result: Any = None  # modelci.bisect.BisectResult when the bisect ran to the end
    error: str = ""
    summary: str = ""
    deliveries: list[Any] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """For the run's JSON report."""
        return {"workload": self.workload, "check": self.check, "alarm_ids": self.alarm_ids,
                "summary": self.summary, "error": self.error,
                "result": self.result.to_json() if self.result is not None else None}


def bad_end(target: targets.Target) -> str:
    """The commit a run's alarms are bisected up to: the run's own. Only a git target has one."""
    if target.kind != "git" or not target.commit:
        raise UserError(f"--bisect-on-alarm needs a git target (--repo PATH --ref REF, or --target git+URL@REF); "
                        f"{target.label} is a {target.kind} target. For releases use `modelci bisect --versions`")
    return target.commit


def check_for(check: str, metric: str) -> str | None:
    """The bisect check that follows an alarm: its own check, or for a history change point the one its metric
    belongs to (None: let the bisect pick whichever check fails between the ends)."""
    from modelci.bisect import CHECKS

    if check in CHECKS or check == "compat":
        return check
    return next((name for prefix, name in _HISTORY_CHECKS if metric.startswith(prefix)), None)


def plan(events: list[Any]) -> list[AlarmBisect]:
    """One bisect per (workload, check) among the alarms that just opened, in the order they opened; for compat
    alarms one per (workload, producer), following the models that producer saved, and for forward compat alarms
    (a newer build saved models an older one no longer loads) one per (workload, consumer), following each probe's
    own models into that consumer."""
    plans: dict[tuple[str, str | None, str | None, str | None], AlarmBisect] = {}
    for event in events:
        alarm = event.alarm
        if event.event != "open" or alarm.kind not in BISECTABLE_KINDS or not alarm.workload:
            continue
        check = check_for(alarm.check, alarm.metric)
        numbers = alarm.numbers or {}
        producer = consumer = None
        if check == "compat":
            if numbers.get("direction") == "backward" and numbers.get("producer"):
                producer = numbers["producer"]
            elif numbers.get("direction") == "forward" and numbers.get("consumer"):
                consumer = numbers["consumer"]
            else:
                continue  # a compat alarm that names no build to load from or into has no range to bisect
        key = (alarm.workload, check, producer, consumer)
        plans.setdefault(key, AlarmBisect(alarm.workload, check, [], from_spec=producer,
                                          into_spec=consumer)).alarm_ids.append(alarm.id)
    return list(plans.values())


def bisect_alarms(config: Any, store: Any, outcome: Any, suite_specs: list[str], *, repo: str, good: str,
                  build: str | None = None, first_parent: bool = False, jobs: int = 1,
                  log: Callable[[str], object] = print, command: str = "", pool: Any = None) -> list[AlarmBisect]:
    """Bisect the alarms `outcome` opened between `good` and the run's commit; record and notify each outcome.
    `pool` (workflow.WorkerPool) lends the run's warm workers to the probes.

    Raises only workflow.Interrupted (a cancelling signal); every other failure of a bisect is recorded in its
    alarms.
    """
    from modelci.alarms import lifecycle, notify
    from modelci.bisect import BisectRefused, bisect

    events = outcome.alarms.events if outcome.alarms is not None else []
    plans = plan(events)
    if not plans:
        return []
    bad = bad_end(outcome.target)
    for item in plans:
        ids = ", ".join(f"#{i}" for i in item.alarm_ids)
        log(f"bisecting alarm {ids}: {item.workload} on the {item.check or 'failing'} check, "
            f"{good} .. {bad[:10]}")
        try:
            item.result = bisect(config, suite_specs, item.workload, repo=repo, good=good, bad=bad,
                                 check=item.check, first_parent=first_parent, build=build, jobs=jobs, log=log,
                                 command=command, from_spec=item.from_spec, into_spec=item.into_spec, pool=pool,
                                 store=store)
        except BisectRefused as exc:
            item.error = f"bisect refused: {exc}"
        except UserError as exc:
            item.error = f"bisect failed: {exc}"
        item.summary = item.error or describe(item.result)
        found = item.result is not None and item.result.status == "found"
        lifecycle.log_event(store, item.alarm_ids, "bisected" if found else "bisect-failed", outcome.run_id,
                            detail=item.summary)
        alarms = [lifecycle.get_alarm(store, alarm_id) for alarm_id in item.alarm_ids]
        item.deliveries = notify.deliver(config, [lifecycle.AlarmEvent("bisected", a) for a in alarms],
                                         store=store, run_id=outcome.run_id)
    return plans


def describe(result: Any) -> str:
    """One line for the alarm and its notifications: the culprit with sha, author, date and PR, and the cost."""
    cost = f"{result.builds} builds, {result.rounds} rounds over {result.range_size} candidates"
    if result.status != "found" or result.culprit is None:
        return f"no culprit ({result.status}): {result.message}; {cost}"
    culprit, commit = result.culprit, result.culprit.commit
    text = f"first bad: {culprit.label}"
    if commit is not None:
        text += f" ({commit.sha}, {commit.author}, {commit.date}" + (f", PR #{commit.pr}" if commit.pr else "") + ")"
    if result.last_good is not None:
        text += f"; last good: {result.last_good.label}"
    return f"{text}; {cost}"
