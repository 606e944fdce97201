"""One metric of one workload across the stored runs, as `modelci history WORKLOAD --metric NAME` shows it.

`history` must answer over 10,000 stored runs in under 50 ms. Building 10,000 dicts of 14 fields cost more
than the query itself, so the points are kept as columns (one transpose of the fetched rows), and a point is
built only when it is read: the history table shows the last few (docs/overhead.md, "Store speed").
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import itemgetter
from typing import Any, NamedTuple, overload

from sqlalchemy import String, select, type_coerce
from sqlalchemy.engine import Connection

from modelci.store.schema import MetricRow, ResultRow, RunLinkRow, RunRow, TargetRow
from modelci.targets import label as target_label

#: the columns of a series, in the order of RunPoint's run fields
_RUN_COLUMNS = ("run_id", "started_at", "runner", "target_id", "status", "median", "minimum", "maximum", "final", "n")


class SeriesTarget(NamedTuple):
    """The identity of the target a point ran against (the columns of `targets` that name a build)."""

    kind: str
    name: str
    version: str
    commit: str
    wheel_sha256: str
    spec: str

    @property
    def label(self) -> str:
        """The target's short name (targets.label)."""
        return target_label(self.kind, self.name, self.version, self.commit, self.wheel_sha256, self.spec)


class RunPoint(NamedTuple):
    """One run's value of the metric: when and where it ran, against which target, and the summaries."""

    run_id: int
    started_at: datetime
    runner: str
    target: SeriesTarget
    status: str
    median: float | None
    minimum: float | None
    maximum: float | None
    final: float | None
    n: int


@dataclass(frozen=True, eq=False)
class RunSeries(Sequence[RunPoint]):
    """One metric of one workload, one point per stored run, oldest first, held as columns.

    `series[i]` and iteration give RunPoint tuples, built on access; the columns (`median`, `started_at`, ...)
    are there for whoever wants all the values of one field at once.
    """

    workload: str
    metric: str
    run_id: tuple[int, ...]
    started_at: tuple[datetime, ...]
    runner: tuple[str, ...]
    target_id: tuple[int, ...]
    status: tuple[str, ...]
    median: tuple[float | None, ...]
    minimum: tuple[float | None, ...]
    maximum: tuple[float | None, ...]
    final: tuple[float | None, ...]
    n: tuple[int, ...]
    #: target id -> its identity, once per target rather than once per point
    targets: dict[int, SeriesTarget]

    def __len__(self) -> int:
        return len(self.run_id)

    @overload
    def __getitem__(self, index: int) -> RunPoint: ...

    @overload
    def __getitem__(self, index: slice) -> list[RunPoint]: ...

    def __getitem__(self, index: int | slice) -> RunPoint | list[RunPoint]:
        if isinstance(index, slice):
            return [self._point(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"point {index} of a series of {len(self)}")
        return self._point(index)

    def __iter__(self) -> Iterator[RunPoint]:
        return (self._point(i) for i in range(len(self)))

    def _point(self, i: int) -> RunPoint:
        return RunPoint(self.run_id[i], self.started_at[i], self.runner[i], self.targets[self.target_id[i]],
                        self.status[i], self.median[i], self.minimum[i], self.maximum[i], self.final[i], self.n[i])


def load_series(connection: Connection, workload: str, metric: str, runner: str | None = None) -> RunSeries:
    """One metric of one workload across the history, oldest run first (by start time, then run id)."""
    sqlite = connection.dialect.name == "sqlite"
    # SQLAlchemy's SQLite datetime parser cost as much as the query: SQLite hands over the text it stored (fixed
    # width, so it sorts as the times do) and datetime.fromisoformat reads it to the same naive datetime
    started = type_coerce(RunRow.started_at, String) if sqlite else RunRow.started_at
    # Ordered by run id, SQLite walks the workload's results in ix_results_workload_run, which holds the run id
    # and status, and looks up one metric each in ix_metrics_name_result_summary: no table row of either is read
    # and nothing is sorted. Ordered by start time, it walked every metric of that name (all workloads) and
    # sorted them: 38 ms against 21 ms over 10,000 runs (docs/overhead.md). Runs start in id order but for
    # imports and clock skew, so the sort by start time below passes over nearly sorted rows.
    stmt = (
        select(RunRow.id, started, RunRow.runner, RunRow.target_id, ResultRow.status, MetricRow.median,
               MetricRow.minimum, MetricRow.maximum, MetricRow.final, MetricRow.n)
        .select_from(ResultRow).join(MetricRow, MetricRow.result_id == ResultRow.id)
        .join(RunRow, ResultRow.run_id == RunRow.id)
        .where(ResultRow.workload == workload, MetricRow.name == metric,
               RunRow.id.not_in(select(RunLinkRow.run_id)))  # a confirmation run is part of the run it confirms
        .order_by(ResultRow.run_id)
    )
    if runner:
        stmt = stmt.where(RunRow.runner == runner)
    rows = connection.execute(stmt).all()
    rows.sort(key=itemgetter(1))  # stable: runs that started at the same time stay in run id order
    columns: list[tuple[Any, ...]] = list(zip(*rows)) if rows else [()] * len(_RUN_COLUMNS)
    if sqlite:
        columns[1] = tuple(map(datetime.fromisoformat, columns[1]))
        # SQLite stores a NaN as NULL: a summary that is NULL though the metric has values was a NaN (a loss that
        # diverged), and showed as "-", as if nothing had been measured. PostgreSQL keeps the NaN itself
        counts = columns[9]
        for column in range(5, 9):
            if None in columns[column]:
                columns[column] = tuple(math.nan if value is None and n else value
                                        for value, n in zip(columns[column], counts))
    return RunSeries(workload, metric, *columns, targets=_targets(connection, set(columns[3])))


def _targets(connection: Connection, ids: set[int]) -> dict[int, SeriesTarget]:
    """The identities of some targets, read once each."""
    wanted = sorted(ids)
    found = {}
    for start in range(0, len(wanted), 500):  # stay below the bound-parameter limit of older SQLite
        query = select(TargetRow.id, TargetRow.kind, TargetRow.name, TargetRow.version, TargetRow.commit,
                       TargetRow.wheel_sha256, TargetRow.spec).where(TargetRow.id.in_(wanted[start:start + 500]))
        found.update((row[0], SeriesTarget(*row[1:])) for row in connection.execute(query))
    return found
