"""The alarm lifecycle (docs/design.md, "alarm"): open → acknowledged → resolved, or silenced until a date.

A run produces observations: a finding that fires, or evidence that one is back to normal. `apply` folds them
into the alarms table in one transaction. A finding already alarmed updates its alarm (count, last seen, latest
numbers) instead of opening another. An alarm whose metric came back to normal is marked recovered, judged
against the baseline it first fired on (a moving baseline would call a regression that stays "recovered" as
soon as the bad build becomes the baseline). Only a person, or `auto_resolve_after_recovered_runs`, resolves it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any

from sqlalchemy import func, select

from modelci import checks
from modelci.alarms import changes
from modelci.errors import UserError
from modelci.records import Result
from modelci.store.alarms_schema import AlarmEventRow, AlarmRow
from modelci.store.schema import ResultRow, RunRow, utcnow

#: events of the alarm log that record a bisect's outcome: a culprit found, or why none was
BISECT_EVENTS = ("bisected", "bisect-failed")
#: alarm kinds, by what fired
KINDS = ("regression", "status", "change", "disappeared", "empty-suite", "stale")
#: the pairwise checks, whose alarms keep the baseline they first fired on (recovery is judged against it)
PAIRWISE_CHECKS = ("precision", "curve", "timing", "memory", "metric")


@dataclass
class Observation:
    """What one run says about one alarm key (runner, workload, check, metric): it fires, or it is normal."""

    runner: str
    workload: str
    check: str
    metric: str
    firing: bool
    kind: str = "regression"
    message: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)
    #: the baseline the finding was judged against; recovery is judged against the alarm's first one
    baseline_result_id: int | None = None
    #: the result behind a "normal" observation, to judge it against the alarm's own baseline
    result: Result | None = None

    @property
    def key(self) -> str:
        """The identity of the finding: one live alarm per key."""
        return alarm_key(self.runner, self.workload, self.check, self.metric)


def alarm_key(runner: str, workload: str, check: str, metric: str) -> str:
    """The identity of a finding across runs."""
    return f"{runner}|{workload}|{check}|{metric}"


@dataclass
class Alarm:
    """An alarm as read from the store."""

    id: int
    runner: str
    workload: str
    check: str
    metric: str
    kind: str
    state: str
    recovered: bool
    count: int
    message: str
    numbers: dict[str, Any]
    target: str
    last_target: str
    opened_at: datetime
    last_seen_at: datetime
    silenced_until: date | None
    acknowledged_by: str
    resolved_by: str
    note: str
    recovered_runs: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    #: what the last bisect of this alarm found (`run --bisect-on-alarm`): "first bad: <sha> <subject> ...", or
    #: why it found nothing; "" when the alarm was never bisected
    culprit: str = ""
    #: while recovered: what the run that recovered it said ("status ok") and that run's id
    recovery: str = ""
    recovery_run_id: int | None = None
    #: the result the alarm first fired against (recovery is judged against it), and the run it last fired in
    baseline_result_id: int | None = None
    last_run_id: int | None = None

    @property
    def status(self) -> str:
        """The state as one phrase: "open", "acknowledged, recovered", "silenced until 2025-07-01", …"""
        text = f"silenced until {self.silenced_until.isoformat()}" if self.state == "silenced" else self.state
        return f"{text}, recovered" if self.recovered and self.state != "resolved" else text

    @property
    def group(self) -> str:
        """Alarms first seen on the same target (and runner) form one group."""
        return f"{self.target or '(no target)'} on {self.runner}"


@dataclass
class AlarmEvent:
    """A change worth telling people about: an alarm opened (or fired again after recovering), recovered, or was
    bisected to the change that caused it."""

    event: str  # "open" | "recovered" | "bisected"
    alarm: Alarm
    reopened: bool = False
    #: what this run said of the alarm's key: for a recovery, the message of the observation that recovered it
    detail: str = ""
    #: news of an earlier run whose delivery failed, sent again (`claim_undelivered`): said so, since it is not new
    resent: bool = False


def to_alarm(row: AlarmRow, events: bool = False, today: date | None = None) -> Alarm:
    """A row as an Alarm (with its event log when asked). Given `today`, a silence that lapsed before it shows as
    the state it goes back to, though the row still says silenced (only writers record the lapse)."""
    state, until = row.state, row.silenced_until
    if today is not None and _lapsed(row, today):
        state, until = _after_silence(row), None
    alarm = Alarm(
        id=row.id, runner=row.runner, workload=row.workload, check=row.check, metric=row.metric, kind=row.kind,
        state=state, recovered=row.recovered_at is not None, count=row.count, message=row.message,
        numbers=dict(row.numbers or {}), target=row.target_label, last_target=row.last_target_label,
        opened_at=_aware(row.opened_at), last_seen_at=_aware(row.last_seen_at), silenced_until=until,
        acknowledged_by=row.acknowledged_by, resolved_by=row.resolved_by, note=row.note,
        recovered_runs=row.recovered_runs,
        culprit=next((e.detail for e in reversed(row.events) if e.event in BISECT_EVENTS), ""),
        baseline_result_id=row.baseline_result_id, last_run_id=row.last_run_id,
    )
    if alarm.recovered:
        recovered = next((e for e in reversed(row.events) if e.event == "recovered"), None)
        if recovered is not None:
            alarm.recovery, alarm.recovery_run_id = recovered.detail, recovered.run_id
    if events:
        alarm.events = [{"at": _aware(e.at), "event": e.event, "run_id": e.run_id, "by": e.by, "detail": e.detail}
                        for e in row.events]
    return alarm


def apply(store: Any, config: Any, observations: Iterable[Observation], *, run_id: int | None = None,
          target_id: int | None = None, target_label: str = "", today: date | None = None) -> list[AlarmEvent]:
    """Fold a run's observations into the alarms, in one transaction; returns the events to notify about."""
    today = today or date.today()
    now = utcnow()
    auto = int(config.alarms.get("auto_resolve_after_recovered_runs", 0)) if config.alarms else 0
    events: list[AlarmEvent] = []
    # under the history's write lock: two runners folding the same finding in at once would otherwise both see
    # no live alarm and both open one, or both count from the same `count`
    with store.write() as session:
        _lapse_silences(session, today, run_id)
        for obs in observations:
            row = session.scalars(select(AlarmRow).where(AlarmRow.key == obs.key, AlarmRow.state != "resolved")).first()
            # a "normal" finding may only mean the baseline moved: judge it against the alarm's own baseline
            rejudged = _still_firing(store, config, row, obs) if row is not None and not obs.firing else None
            firing = obs.firing or rejudged is not None
            if firing and row is None:
                row = AlarmRow(key=obs.key, runner=obs.runner, workload=obs.workload, check=obs.check,
                               metric=obs.metric, kind=obs.kind, state="open", target_id=target_id,
                               target_label=target_label, last_target_label=target_label, first_run_id=run_id,
                               last_run_id=run_id, baseline_result_id=obs.baseline_result_id, count=1,
                               message=obs.message, numbers=obs.numbers, first_numbers=obs.numbers, opened_at=now,
                               last_seen_at=now)
                session.add(row)
                session.flush()
                _event(session, row, "opened", run_id, detail=obs.message)
                events.append(AlarmEvent("open", to_alarm(row)))
            elif firing:
                reopened = row.recovered_at is not None
                row.count += 1
                row.last_seen_at, row.last_run_id, row.recovered_at, row.recovered_runs = now, run_id, None, 0
                row.last_target_label = target_label or row.last_target_label
                if rejudged is not None:
                    row.message = f"{rejudged.message} (against the alarm's baseline, result {row.baseline_result_id})"
                    row.numbers = rejudged.numbers
                else:
                    row.message, row.numbers = obs.message, obs.numbers
                _event(session, row, "reopened" if reopened else "seen", run_id, detail=row.message)
                if reopened and row.state != "silenced":
                    events.append(AlarmEvent("open", to_alarm(row), reopened=True))
            elif row is not None:
                row.recovered_runs += 1
                if row.recovered_at is None:
                    row.recovered_at = now
                    _event(session, row, "recovered", run_id, detail=obs.message)
                    if row.state != "silenced":
                        events.append(AlarmEvent("recovered", to_alarm(row), detail=obs.message))
                if auto and row.recovered_runs >= auto:
                    rule = f"config: auto_resolve_after_recovered_runs = {auto}"
                    row.state, row.resolved_at, row.resolved_by = "resolved", now, rule
                    _event(session, row, "resolved", run_id, by=rule)
    return events


def _still_firing(store: Any, config: Any, row: AlarmRow, obs: Observation) -> checks.Finding | None:
    """Judge a "normal" result against the baseline the alarm first fired on: the finding when it is still a
    regression there, else None."""
    if row.check not in PAIRWISE_CHECKS or row.baseline_result_id is None:
        return None
    current = obs.result
    if current is None or current.status != "ok":
        return None
    with store.read() as session:
        original = session.get(ResultRow, row.baseline_result_id)
        baseline = store.to_result(original) if original is not None else None
    if baseline is None or baseline.status != "ok":
        return None
    findings = checks.evaluate(current, baseline, changes.calibrated(config, store)(row.runner, row.workload))
    return next((f for f in findings if f.check == row.check and f.metric == row.metric and f.verdict == "regression"),
                None)


def judge_fixes(store: Any, runner: str, current: Result, baseline: Result | None, findings: list[checks.Finding],
                policy: Any) -> None:
    """Turn into an improvement each gating regression of `current` that fixes a live alarm: one on the same
    metric, not recovered, whose first baseline is not `baseline` and against which `current` passes.

    A check with no direction (an output, a curve) calls any difference a regression. Once the build that broke
    an output is the moving baseline, the build that puts it back differs from it, and was judged a new
    regression while the alarm it fixes went on counting; the recovery was credited to the build after it.
    Judged against the baseline the alarm first fired on (as recovery is, docs/alarms.md), it is the fix."""
    wanted = {(f.check, f.metric): f for f in findings
              if f.verdict == "regression" and f.gating and f.check in PAIRWISE_CHECKS}
    if not wanted or current.status != "ok" or not _has_alarms(store):
        return
    keys = [alarm_key(runner, current.workload, check, metric) for check, metric in wanted]
    firsts: dict[int, tuple[Result, str]] = {}
    with store.read() as session:
        stmt = select(AlarmRow).where(AlarmRow.key.in_(keys), AlarmRow.state != "resolved",
                                      AlarmRow.recovered_at.is_(None), AlarmRow.baseline_result_id.is_not(None))
        rows = [row for row in session.scalars(stmt)
                if baseline is None or row.baseline_result_id != baseline.id]
        alarms = [(row.id, row.check, row.metric, row.baseline_result_id) for row in rows]
        moving = session.get(ResultRow, baseline.id) if baseline is not None and baseline.id is not None else None
        now_against = f"this run's baseline {moving.run.target.label}" if moving is not None else "this run's baseline"
        for number in {row.baseline_result_id for row in rows}:
            original = session.get(ResultRow, number)
            if original is not None and original.status == "ok":
                firsts[number] = (store.to_result(original), original.run.target.label)
    for alarm_id, check, metric, first_id in alarms:
        if first_id not in firsts:
            continue
        first, label = firsts[first_id]
        again = next((f for f in checks.evaluate(current, first, policy) if (f.check, f.metric) == (check, metric)),
                     None)
        # "new": nothing was compared there (the first baseline lacks it, or its array cannot be read)
        if again is None or again.verdict in ("regression", "new") or "unreadable" in (again.numbers or {}):
            continue
        finding = wanted[check, metric]
        before = f"against {now_against}: {finding.message}"
        finding.verdict = "improvement"
        finding.numbers = {**finding.numbers, "fixes_alarm": alarm_id, "alarm_baseline": label,
                           "alarm_baseline_result_id": first_id,
                           "reason": f"back to {label}, the baseline alarm #{alarm_id} first fired on"}
        finding.message = (f"fixes alarm #{alarm_id}: {metric} is back to {label}, the baseline the alarm first "
                           f"fired on ({before})")


def _lapse_silences(session: Any, today: date, run_id: int | None) -> None:
    """A silence ends after its date: the alarm goes back to the state it would have had."""
    stmt = select(AlarmRow).where(AlarmRow.state == "silenced", AlarmRow.silenced_until < today)
    for row in session.scalars(stmt):
        row.state = _after_silence(row)
        _event(session, row, "unsilenced", run_id, detail=f"silence until {row.silenced_until} lapsed")
        row.silenced_until = None


def _lapsed(row: AlarmRow, today: date) -> bool:
    """Whether the alarm is silenced until a date before `today`."""
    return row.state == "silenced" and row.silenced_until is not None and row.silenced_until < today


def _after_silence(row: AlarmRow) -> str:
    """The state a silenced alarm goes back to: acknowledged when someone had acknowledged it, else open."""
    return "acknowledged" if row.acknowledged_at is not None else "open"


def _has_alarms(store: Any) -> bool:
    """Whether the history holds the alarm tables (a read-only history made before them does not)."""
    return store.has_table(AlarmRow.__tablename__)


#: the most characters an alarm event's detail keeps (a notifier's error, a person's note)
EVENT_DETAIL_MAX = 2000


def log_event(store: Any, alarm_ids: Iterable[int], event: str, run_id: int | None = None, detail: str = "") -> None:
    """Append one event to each of some alarms (e.g. "notified", "notify-failed"), in one transaction."""
    with store.write() as session:
        session.add_all(AlarmEventRow(alarm_id=i, event=event, run_id=run_id, detail=detail[:EVENT_DETAIL_MAX])
                        for i in alarm_ids)


#: the alarm log's records of a delivery: delivered, failed, or claimed to be sent again (claim_undelivered)
NOTIFY_EVENTS = ("notified", "notify-failed", "notify-resend")
#: a claim this old with no outcome after it died with its process (a delivery holds a run 600 s at most)
RESEND_CLAIM_SECONDS = 1200
#: the alarm log's events that a notification tells of, as the event notified
TOLD_EVENTS = {"opened": "open", "reopened": "open", "recovered": "recovered", "bisected": "bisected",
               "bisect-failed": "bisected"}


def claim_undelivered(store: Any, names: Iterable[str], run_id: int | None = None,
                      now: datetime | None = None) -> dict[str, list[AlarmEvent]]:
    """Notifier name (notify.describe) -> the events of live alarms whose delivery to it failed, and that are
    still news (an opening while the alarm has not recovered since, a recovery while it still is, a bisect).

    A failed delivery used to be recorded and forgotten: the alarm went on being seen, and the people it was
    for never heard of it. Each is claimed with a `notify-resend` event in one transaction under the history's
    write lock, so that of two runners at once only one sends it again; the delivery's outcome (`notified` or
    `notify-failed`) follows, and a failure is claimed again by a later run."""
    names = list(names)
    if not names or not _has_alarms(store):
        return {}
    now = now or utcnow()
    claimed: dict[str, list[AlarmEvent]] = {}
    with store.write() as session:
        failed = select(AlarmEventRow.alarm_id).where(AlarmEventRow.event == "notify-failed")
        stmt = select(AlarmRow).where(AlarmRow.id.in_(failed), AlarmRow.state.in_(("open", "acknowledged")))
        for row in session.scalars(stmt.order_by(AlarmRow.id)):
            for name in names:
                event = _undelivered(row, name, now)
                if event is not None:
                    _event(session, row, "notify-resend", run_id, detail=name)
                    claimed.setdefault(name, []).append(event)
    return claimed


def _undelivered(row: AlarmRow, name: str, now: datetime) -> AlarmEvent | None:
    """The event of `row` whose delivery to the notifier `name` failed last and is still news, or None."""
    log = list(row.events)
    # a notify-failed detail is the delivery's error, which starts with the notifier's name
    mine = [i for i, e in enumerate(log) if e.event in NOTIFY_EVENTS and (e.detail == name
                                                                           or e.detail.startswith(f"{name}: "))]
    if not mine or log[mine[-1]].event == "notified":
        return None
    last = log[mine[-1]]
    if last.event == "notify-resend" and now - _aware(last.at) < timedelta(seconds=RESEND_CLAIM_SECONDS):
        return None  # another process is sending it now
    told = next((e for e in reversed(log[:mine[-1]]) if e.event in TOLD_EVENTS), None)
    if told is None:
        return None
    event = TOLD_EVENTS[told.event]
    recovered = row.recovered_at is not None
    if (event == "open" and recovered) or (event == "recovered" and not recovered):
        return None  # since then it recovered (or fired again): that is the news, told in its own right
    return AlarmEvent(event, to_alarm(row), reopened=told.event == "reopened", resent=True)


def _event(session: Any, row: AlarmRow, event: str, run_id: int | None = None, by: str = "", detail: str = "") -> None:
    session.add(AlarmEventRow(alarm_id=row.id, event=event, run_id=run_id, by=by, detail=detail[:EVENT_DETAIL_MAX]))


# -- people ------------------------------------------------------------------------------------------------------


def list_alarms(store: Any, *, states: Iterable[str] | None = None, runner: str | None = None,
                today: date | None = None) -> list[Alarm]:
    """Alarms, grouped by the target they first fired on (newest group first); by default the live ones.

    It only reads: the dashboard lists alarms from a history it may not write. A silence that has lapsed shows
    as lapsed; the next run, `modelci alarms check` or an action on the alarm records the lapse.
    """
    if not _has_alarms(store):
        return []
    today = today or date.today()
    wanted = set(states) if states else {"open", "acknowledged", "silenced"}
    # a stored "silenced" may read as open or acknowledged once its date has passed
    stored = (wanted | {"silenced"}) if wanted & {"open", "acknowledged"} else wanted
    with store.read() as session:
        stmt = select(AlarmRow).where(AlarmRow.state.in_(sorted(stored))).order_by(AlarmRow.id)
        if runner:
            stmt = stmt.where(AlarmRow.runner == runner)
        alarms = [alarm for alarm in (to_alarm(row, today=today) for row in session.scalars(stmt))
                  if alarm.state in wanted]
    newest = {}
    for alarm in alarms:
        newest[alarm.group] = max(newest.get(alarm.group, 0), alarm.id)
    return sorted(alarms, key=lambda a: (-newest[a.group], a.group, a.id))


def get_alarm(store: Any, alarm_id: int, today: date | None = None) -> Alarm:
    """One alarm with its event log (a lapsed silence shown as lapsed, as list_alarms does); an unknown id is a
    UserError. It only reads."""
    if not _has_alarms(store):
        raise UserError(f"no alarm {alarm_id}: this history holds no alarms yet")
    with store.read() as session:
        return to_alarm(_row(session, alarm_id), events=True, today=today or date.today())


def acknowledge(store: Any, ids: Iterable[int], by: str, note: str = "", today: date | None = None) -> list[Alarm]:
    """Someone is on it: open (or silenced) alarms become acknowledged; they stay until resolved."""
    return _act(store, ids, "acknowledged", by, note, today=today)


def resolve(store: Any, ids: Iterable[int], by: str, note: str = "", today: date | None = None) -> list[Alarm]:
    """Close alarms; the same finding later opens a new alarm."""
    return _act(store, ids, "resolved", by, note, today=today)


def silence(store: Any, ids: Iterable[int], until: date, by: str, note: str = "",
            today: date | None = None) -> list[Alarm]:
    """Mute alarms until a date (inclusive): they keep counting but notify nobody; afterwards they come back."""
    if until < (today or date.today()):
        raise UserError(f"--until {until.isoformat()} is in the past; give a date from today on")
    return _act(store, ids, "silenced", by, note, until=until, today=today)


def _act(store: Any, ids: Iterable[int], state: str, by: str, note: str, until: date | None = None,
         today: date | None = None) -> list[Alarm]:
    """A person's action on some alarms, all or none (one transaction), after recording the silences that
    lapsed (reads leave that to writers)."""
    now = utcnow()
    done = []
    with store.write() as session:
        _lapse_silences(session, today or date.today(), None)
        for alarm_id in dict.fromkeys(ids):  # an id given twice is one action, not two events
            row = _row(session, alarm_id)
            if row.state == "resolved":
                raise UserError(f"alarm {alarm_id} is already resolved (by {row.resolved_by or 'someone'}); "
                                "a new occurrence opens a new alarm")
            if state == "acknowledged":
                row.acknowledged_at, row.acknowledged_by = now, by
                if row.state != "silenced":
                    row.state = state
            elif state == "resolved":
                row.state, row.resolved_at, row.resolved_by = state, now, by
            else:
                row.state, row.silenced_until = state, until
            if note:
                row.note = note
            detail = f"until {until.isoformat()}" + (f": {note}" if note else "") if until else note
            _event(session, row, state if state != "silenced" else "silenced", by=by, detail=detail)
            session.flush()
            done.append(to_alarm(row))
    return done


def _row(session: Any, alarm_id: int) -> AlarmRow:
    from modelci.store import row_id

    number = row_id(alarm_id)
    row = session.get(AlarmRow, number) if number is not None else None
    if row is None:
        raise UserError(f"no alarm {alarm_id}; `modelci alarms list --all` shows every alarm")
    return row


# -- nothing silent ----------------------------------------------------------------------------------------------


def stale_observations(store: Any, days: int, now: datetime | None = None) -> list[Observation]:
    """One observation per runner in the history: firing when its last successful run (a complete run with an ok
    result) is more than `days` days old, or it never had one and started that long ago; 0 days turns it off."""
    if days <= 0:
        return []
    now = now or utcnow()
    with store.read() as session:
        first = dict(session.execute(select(RunRow.runner, func.min(RunRow.started_at)).group_by(RunRow.runner)).all())
        good = select(RunRow.runner, func.max(RunRow.started_at)).join(ResultRow, ResultRow.run_id == RunRow.id)
        good = good.where(RunRow.status == "complete", ResultRow.status == "ok").group_by(RunRow.runner)
        last = dict(session.execute(good).all())
    observations = []
    for runner, started in sorted(first.items()):
        since = _aware(last.get(runner) or started)
        age = now - since
        firing = age > timedelta(days=days)
        what = "last successful run" if runner in last else "no successful run since the first run"
        message = (f"runner {runner!r}: {what} {since:%Y-%m-%d %H:%M} UTC, {age.days} days ago "
                   f"(stale_after_days = {days})")
        observations.append(Observation(runner, "(runner)", "stale", "successful-run", firing, kind="stale",
                                        message=message, numbers={"last_success": since.isoformat(),
                                                                  "age_days": round(age.total_seconds() / 86400, 2),
                                                                  "stale_after_days": days}))
    return observations


def _aware(value: datetime | None) -> datetime | None:
    """SQLite gives back naive datetimes; everything modelci stores is UTC."""
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value
