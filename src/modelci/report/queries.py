"""Read queries for the dashboard: the whole history in a few bulk queries, never one query per result.

The site of 50 workloads x 500 targets must build in seconds, so everything a page needs is read once
with SQLAlchemy Core selects of plain columns; only the pages that show raw values (loss curves, locks) read
those columns, and only for the rows they show.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from packaging.version import Version
from sqlalchemy import func, inspect, select
from sqlalchemy.exc import DBAPIError

from modelci.targets import label as target_label, order_key, parse_version
from modelci.store.schema import EnvironmentRow, FindingRow, MetricRow, ResultRow, RunLinkRow, RunRow, TargetRow

__all__ = ["History", "TargetInfo", "RunInfo", "ResultInfo", "Summary", "load_history", "run_details",
           "loss_curves", "run_signatures", "compat_table", "environments", "lock_diff", "environment_diff",
           "signature", "target_label", "target_order"]


@dataclass
class TargetInfo:
    """A target as the dashboard shows it: its identity, a unique label and its place in the order."""

    id: int
    kind: str
    name: str
    version: str
    commit: str
    wheel_sha256: str
    commit_date: str
    subject: str
    spec: str
    label: str = ""
    rank: int = 0  # position in version / commit order


@dataclass
class RunInfo:
    """A run's row without its results."""

    id: int
    target_id: int
    environment_id: str
    runner: str
    status: str
    started_at: datetime | None
    finished_at: datetime | None
    command: str
    modelci_version: str
    suites: list
    selection: str
    #: a run stored as part of another (compare's confirmation runs): the run it belongs to, and why
    parent_run_id: int | None = None
    purpose: str = ""


@dataclass(slots=True)
class Summary:
    """The summary columns of one metric of one result."""

    kind: str
    unit: str
    n: int
    median: float | None
    minimum: float | None
    maximum: float | None
    final: float | None


@dataclass
class ResultInfo:
    """One result with its metric summaries and what its findings say, without the raw values."""

    id: int
    run_id: int
    workload: str
    status: str
    reason: str
    framework: str
    domain: str
    duration: float
    metrics: dict[str, Summary]
    regressions: int = 0  # gating regression findings
    max_rel: float | None = None  # worst precision drift against the baseline, over all outputs
    max_abs: float | None = None


@dataclass
class History:
    """The whole history, bulk-loaded: targets, runs and results with their summaries."""

    targets: dict[int, TargetInfo]
    runs: dict[int, RunInfo]  # by id, ascending
    results: list[ResultInfo]  # by id, ascending

    def by_workload(self) -> dict[str, list[ResultInfo]]:
        """Results grouped by workload, in workload-name order."""
        groups: dict[str, list[ResultInfo]] = defaultdict(list)
        for result in self.results:
            groups[result.workload].append(result)
        return dict(sorted(groups.items()))

    def by_run(self) -> dict[int, list[ResultInfo]]:
        """Results grouped by run id."""
        groups: dict[int, list[ResultInfo]] = defaultdict(list)
        for result in self.results:
            groups[result.run_id].append(result)
        return groups

    def own_runs(self) -> list[RunInfo]:
        """The runs of their own, by id: a confirmation run is part of the run it confirms, not an entry."""
        return [run for run in self.runs.values() if not run.purpose]

    def parts(self) -> dict[int, list[RunInfo]]:
        """Run id -> the runs stored as part of it (its confirmation runs)."""
        groups: dict[int, list[RunInfo]] = defaultdict(list)
        for run in self.runs.values():
            if run.purpose and run.parent_run_id is not None:
                groups[run.parent_run_id].append(run)
        return groups

    def latest(self) -> dict[tuple[str, str], ResultInfo]:
        """(workload, runner) -> its latest result in target order: the newest target's latest result, from runs
        of their own. A release re-run after a newer one is history, not the latest status."""
        latest: dict[tuple[str, str], ResultInfo] = {}
        for result in self.results:  # ascending ids
            run = self.runs[result.run_id]
            if run.purpose:
                continue
            key = (result.workload, run.runner)
            held = latest.get(key)
            if held is None or (self.targets[run.target_id].rank >=
                                self.targets[self.runs[held.run_id].target_id].rank):
                latest[key] = result
        return latest

    def runners(self) -> list[str]:
        """The runner labels, sorted."""
        return sorted({run.runner for run in self.runs.values()})


def target_order(targets: list[TargetInfo], first_seen: dict[int, int]) -> list[TargetInfo]:
    """Targets in release order: the public version (so local `+git...` tags do not sort by hash), then the commit
    date, then the first run; no version sorts as 0. Sets each target's rank and a label unique among them.

    The one target order (targets.order_key), so the trends, the alarms and the history agree on "from".
    """
    ordered = sorted(targets, key=lambda t: order_key(t.version, t.commit_date, first_seen.get(t.id, 0), t.id))
    seen: dict[str, int] = {}
    for rank, target in enumerate(ordered):
        target.rank = rank
        label = target_label(target.kind, target.name, target.version, target.commit, target.wheel_sha256,
                             target.spec)
        # labels are the x categories of the trend plots, so two targets must never share one
        if label in seen:
            label = f"{label} #{target.id}"
        seen[label] = target.id
        target.label = label
    return ordered


def load_history(store: Any) -> History:
    """Read every target, run and result summary of the history in six queries."""
    # Core rows on a plain connection, unpacked as tuples: the ORM's row handling doubles the time at 125k rows
    with store.connect() as conn:
        targets = [TargetInfo(*row) for row in _rows(conn, 
            select(TargetRow.id, TargetRow.kind, TargetRow.name, TargetRow.version, TargetRow.commit,
                   TargetRow.wheel_sha256, TargetRow.commit_date, TargetRow.subject, TargetRow.spec))]
        for target in targets:  # NULLs from older rows read as empty text
            for name in ("version", "commit", "wheel_sha256", "commit_date", "subject", "spec"):
                setattr(target, name, getattr(target, name) or "")
        runs = {row[0]: RunInfo(*row) for row in _rows(conn, 
            select(RunRow.id, RunRow.target_id, RunRow.environment_id, RunRow.runner, RunRow.status,
                   RunRow.started_at, RunRow.finished_at, RunRow.command, RunRow.modelci_version, RunRow.suites,
                   RunRow.selection).order_by(RunRow.id))}
        if inspect(conn).has_table(RunLinkRow.__tablename__):  # a read-only history made before it lacks it
            for run_id, parent, purpose in _rows(conn, select(RunLinkRow.run_id, RunLinkRow.parent_run_id,
                                                              RunLinkRow.purpose)):
                if run_id in runs:
                    runs[run_id].parent_run_id, runs[run_id].purpose = parent, purpose or "confirmation"
        results = [ResultInfo(*row, {}) for row in _rows(conn, 
            select(ResultRow.id, ResultRow.run_id, ResultRow.workload, ResultRow.status, ResultRow.reason,
                   ResultRow.framework, ResultRow.domain, ResultRow.duration).order_by(ResultRow.id))]
        by_id = {r.id: r for r in results}
        for result_id, name, *summary in _rows(conn, 
                select(MetricRow.result_id, MetricRow.name, MetricRow.kind, MetricRow.unit, MetricRow.n,
                       MetricRow.median, MetricRow.minimum, MetricRow.maximum, MetricRow.final)):
            result = by_id.get(result_id)
            if result is not None:
                result.metrics[name] = Summary(*summary)
        for (result_id,) in _rows(conn, select(FindingRow.result_id).where(FindingRow.verdict == "regression",
                                                                            FindingRow.gating.is_(True))):
            by_id[result_id].regressions += 1
        # the worst drift over a result's outputs, extracted and aggregated by the database (JSON_EXTRACT on SQLite,
        # ->> on PostgreSQL): decoding 25k JSON documents in Python took longer than the rest of this query
        for result_id, max_rel, max_abs in _drift(conn):
            result = by_id[result_id]
            result.max_rel, result.max_abs = _finite(max_rel), _finite(max_abs)
    first_seen: dict[int, int] = {}
    for run in runs.values():
        first_seen.setdefault(run.target_id, run.id)
    ordered = target_order(targets, first_seen)
    return History(targets={t.id: t for t in ordered}, runs=runs, results=results)


def _rows(conn: Any, stmt: Any) -> list:
    """All rows at once: iterating a result fetches row by row, 3x slower at 200k rows."""
    return conn.execute(stmt).all()


def _drift(conn: Any) -> list[tuple[int, Any, Any]]:
    """(result id, worst max_rel, worst max_abs) over each result's precision findings."""
    precision = FindingRow.check == "precision"
    stmt = (select(FindingRow.result_id, func.max(FindingRow.numbers["max_rel"].as_float()),
                   func.max(FindingRow.numbers["max_abs"].as_float())).where(precision).group_by(FindingRow.result_id))
    try:
        with conn.begin_nested():
            return _rows(conn, stmt)
    except DBAPIError:
        # a document the database's JSON functions refuse (a writer that let NaN through): decode it here instead
        worst: dict[int, list] = {}
        for result_id, numbers in _rows(conn, select(FindingRow.result_id, FindingRow.numbers).where(precision)):
            pair = worst.setdefault(result_id, [None, None])
            for i, key in enumerate(("max_rel", "max_abs")):
                value = _finite((numbers or {}).get(key))
                if value is not None and (pair[i] is None or value > pair[i]):
                    pair[i] = value
        return [(result_id, rel, abs_) for result_id, (rel, abs_) in worst.items()]


def _finite(value: Any) -> float | None:
    """A number for a plot: None for absent, NaN or infinite (none of them is JSON)."""
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def run_details(store: Any, run_ids: list[int] | None = None) -> dict[int, dict[str, Any]]:
    """For each result id (of the given runs, or all): its error texts and all its findings (rows of result_id,
    check, metric, verdict, gating, message, baseline_result_id), in two queries."""
    with store.connect() as conn:
        stmt = select(ResultRow.id, ResultRow.traceback, ResultRow.stderr_tail, ResultRow.code_hash)
        if run_ids is not None:
            stmt = stmt.where(ResultRow.run_id.in_(run_ids))
        details = {rid: {"traceback": tb or "", "stderr_tail": err or "", "code_hash": code or "", "findings": []}
                   for rid, tb, err, code in _rows(conn, stmt)}
        # the numbers' JSON stays unread: the message says what they say, and decoding 175k of them costs seconds
        stmt = select(FindingRow.result_id, FindingRow.check, FindingRow.metric, FindingRow.verdict,
                      FindingRow.gating, FindingRow.message, FindingRow.baseline_result_id)
        if run_ids is not None:
            stmt = stmt.join(ResultRow, FindingRow.result_id == ResultRow.id).where(ResultRow.run_id.in_(run_ids))
        # rows stay SQLAlchemy rows (result_id, check, metric, verdict, gating, message, baseline_result_id):
        # 175k dataclasses would cost more than the page they fill
        for row in _rows(conn, stmt.order_by(FindingRow.id)):
            entry = details.get(row[0])
            if entry is not None:
                entry["findings"].append(row)
    return details


def run_signatures(store: Any) -> dict[int, tuple[int, int | None]]:
    """Run id -> (number of findings, newest finding id) of its results, in one grouped query."""
    with store.connect() as conn:
        stmt = (select(ResultRow.run_id, func.count(FindingRow.id), func.max(FindingRow.id))
                .select_from(ResultRow).outerjoin(FindingRow, FindingRow.result_id == ResultRow.id)
                .group_by(ResultRow.run_id))
        return {run_id: (count, newest) for run_id, count, newest in _rows(conn, stmt)}


def loss_curves(store: Any, result_ids: list[int], metric: str = "loss") -> dict[int, list[float]]:
    """The per-step values of one curve metric for the given results (only these rows' JSON is read)."""
    if not result_ids:
        return {}
    with store.read() as session:
        rows = session.execute(select(MetricRow.result_id, MetricRow.values)
                               .where(MetricRow.name == metric, MetricRow.result_id.in_(result_ids)))
        return {r.result_id: list(r.values or []) for r in rows}


def environments(store: Any, ids: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """Environment id -> python, isolated, lock and fingerprint."""
    with store.read() as session:
        stmt = select(EnvironmentRow.id, EnvironmentRow.python, EnvironmentRow.isolated, EnvironmentRow.lock,
                      EnvironmentRow.fingerprint)
        if ids is not None:
            stmt = stmt.where(EnvironmentRow.id.in_(sorted(ids)))
        return {r.id: r._asdict() for r in session.execute(stmt)}


def lock_diff(before: str, after: str) -> list[dict[str, str]]:
    """Packages added, removed or changed between two locks ("name==version" lines), by name."""
    from modelci.envs.diff import diff_locks

    return diff_locks(before, after)


def environment_diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list]:
    """Packages and fingerprint fields that differ between two environments (rows of `environments`)."""
    from modelci.envs.diff import diff

    found = diff(before.get("id", ""), before.get("lock") or "", before.get("fingerprint") or {},
                 after.get("id", ""), after.get("lock") or "", after.get("fingerprint") or {})
    return {"packages": [p.to_json() for p in found.packages],
            "fingerprint": [(f.field, _text(f.before), _text(f.after)) for f in found.fingerprint]}


def _text(value: Any) -> str:
    import json

    return "" if value is None else value if isinstance(value, str) else json.dumps(value)


def signature(store: Any) -> tuple:
    """Something that changes whenever the history does (Store.signature: one query, on SQLite and PostgreSQL)."""
    return store.signature()


#: a compat outcome as a status of the dashboard's colours (report/compat_report.py names the outcomes)
COMPAT_STATUS = {"ok": "ok", "missing": "skipped", "unsupported": "failed", "load_failed": "failed",
                 "outputs_differ": "regressed", "unreadable": "error", "not_checked": "error"}


def compat_table(store: Any) -> dict[str, Any] | None:
    """The latest outcome of each (workload, format, producer) x consumer of `modelci compat`, as a table for the
    compat page; None when none are stored (or the history is from before compat results were kept)."""
    from modelci.store.compat_schema import CompatResultRow

    if not store.has_table(CompatResultRow.__tablename__):
        return None
    c = CompatResultRow
    with store.connect() as conn:
        rows = _rows(conn, select(c.workload, c.format, c.producer_label, c.producer_version, c.consumer_label,
                                  c.consumer_version, c.outcome, c.error, c.unsafe).order_by(c.id))
    if not rows:
        return None
    latest = {(r.workload, r.format, r.producer_label, r.consumer_label): r for r in rows}  # later checks win
    consumers = sorted({(r.consumer_label, r.consumer_version) for r in latest.values()}, key=_by_version)
    producers = sorted({(r.workload, r.format, r.producer_label, r.producer_version) for r in latest.values()},
                       key=lambda p: (p[0], p[1], _by_version(p[2:])))
    table_rows = []
    for workload, fmt, producer, _ in producers:
        cells = []
        for consumer, _ in consumers:
            row = latest.get((workload, fmt, producer, consumer))
            if row is None:
                cells.append({"text": "", "status": "none"})
            else:
                text = row.outcome + (f": {row.error.splitlines()[0][:200]}" if row.error else "")
                cells.append({"text": text, "status": COMPAT_STATUS.get(row.outcome, "error")})
        unsafe = any(r.unsafe for k, r in latest.items() if k[:3] == (workload, fmt, producer))
        unsafe = " (executes code on load)" if unsafe else ""
        table_rows.append({"label": f"{workload} · {fmt}{unsafe} · saved by {producer}", "cells": cells})
    return {"title": "compat matrix", "columns": [label for label, _ in consumers], "rows": table_rows,
            "intro": "Models saved by one build (rows) loaded by another (columns): the latest check of each pair."}


def _by_version(pair: tuple[str, str]) -> tuple:
    return parse_version(pair[1]) or Version("0"), pair[0]
