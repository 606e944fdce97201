"""The history schema. One schema for SQLite and PostgreSQL; each change of it is an Alembic revision in
store/migrations/versions (store/migrate.py, docs/store.md): a table or column added here without one is
caught by tests/test_store_fleet.py, which compares what the revisions make with these classes.

Nothing stored is rewritten: rows are only inserted, except a run's status and end time, and
findings that are added after the checks ran.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, Text, UniqueConstraint
from sqlalchemy import String as _String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from modelci.records import fit
from modelci.targets import label as target_label

#: the version of the hand-written schema code before Alembic revisions; kept in `schema_info` for the
#: modelci versions of that time, which refuse any other (the revisions since only add)
SCHEMA_VERSION = 1


class String(TypeDecorator):
    """A VARCHAR(length) that takes any string: one longer than the column is cut, ending with a digest of the
    whole (`records.fit`). PostgreSQL refuses a value too long for its column, and would refuse the whole run
    that holds it after every workload has run; SQLite stores it whole, so the same run would read back
    differently from the two. The limits a user can reach are checked where the value is given, with a
    message; this is the last guard, in the one type every text column of the history has. A query's value
    is cut the same way, so a cut value is still found."""

    impl = _String
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        length = self.impl_instance.length
        return fit(value, length) if isinstance(value, str) and length else value


def utcnow() -> datetime:
    """Timezone-aware now, so that histories from several machines sort correctly."""
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    """Declarative base of every table."""


class SchemaInfo(Base):
    """One row: the schema version of this database, as modelci before schema revisions reads it."""

    __tablename__ = "schema_info"
    id: Mapped[int] = mapped_column(primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class TargetRow(Base):
    """A framework build: what got installed, not what was asked for."""

    __tablename__ = "targets"
    __table_args__ = (UniqueConstraint("kind", "name", "version", "commit", "wheel_sha256", name="uq_target"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    spec: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(200))
    version: Mapped[str] = mapped_column(String(100), default="")
    commit: Mapped[str] = mapped_column(String(64), default="")
    wheel_sha256: Mapped[str] = mapped_column(String(64), default="")
    commit_date: Mapped[str] = mapped_column(String(40), default="")
    subject: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    @property
    def label(self) -> str:
        """The target's short name (targets.label), as every report names it."""
        return target_label(self.kind, self.name, self.version, self.commit, self.wheel_sha256, self.spec)


class EnvironmentRow(Base):
    """An environment, identified by the hash of its spec, with its lock and fingerprint."""

    __tablename__ = "environments"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    python: Mapped[str] = mapped_column(Text, default="")
    isolated: Mapped[bool] = mapped_column(Boolean, default=True)
    lock: Mapped[str] = mapped_column(Text, default="")
    fingerprint: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RunRow(Base):
    """One execution of a selection of workloads against one target in one environment on one runner."""

    __tablename__ = "runs"
    __table_args__ = (
        # each runner's first and latest start (the stale-runner check, every run) from the index alone
        Index("ix_runs_runner_started", "runner", "started_at"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id"), index=True)
    environment_id: Mapped[str] = mapped_column(ForeignKey("environments.id"))
    runner: Mapped[str] = mapped_column(String(200), index=True)
    status: Mapped[str] = mapped_column(String(16))  # "complete" | "interrupted" | "incomplete" (store.INCOMPLETE)
    suites: Mapped[list] = mapped_column(JSON, default=list)
    selection: Mapped[str] = mapped_column(Text, default="")
    command: Mapped[str] = mapped_column(Text, default="")
    modelci_version: Mapped[str] = mapped_column(String(40), default="")
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    target: Mapped[TargetRow] = relationship(lazy="joined")
    environment: Mapped[EnvironmentRow] = relationship(lazy="select")
    results: Mapped[list["ResultRow"]] = relationship(back_populates="run", order_by="ResultRow.id")


class RunFingerprintRow(Base):
    """The fingerprint of the machine a run ran on, where it differs from its environment's.

    An environment's id comes from its packages, interpreter and platform, so two runners sharing one history
    (or one runner after a kernel or BLAS change) run the same environment on different machines. The
    environment row keeps the fingerprint it was first stored with; a run whose machine says otherwise keeps its
    own here, so "what was this measured on" has the right answer per run (`Store.run(...).fingerprint`).
    """

    __tablename__ = "run_fingerprints"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    fingerprint: Mapped[dict] = mapped_column(JSON, default=dict)


class RunLinkRow(Base):
    """What a run is for, when it is part of another run: `compare` re-runs a workload on both sides to confirm a
    verdict, and those confirmation runs belong to the run they confirm.

    They are stored (a result is never lost) but are not runs of their own: the history's "latest status" and
    "recent runs", the baselines and the change-point series leave them out, and they are not judged. An
    additive table, as `run_fingerprints` is, so a history made before it gains it empty.
    """

    __tablename__ = "run_links"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    #: the run whose verdict this one confirms
    parent_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"), nullable=True, index=True)
    purpose: Mapped[str] = mapped_column(String(32), default="confirmation")


class HistoryRow(Base):
    """The identity of the history: one row, a random id made with the history's tables.

    What a run keeps outside the history refers to it by this id: a killed run's journal (modelci.journal),
    which the next run on the same history stores. A digest of the database URL named it before, and two
    machines sharing a cache folder, each with its own SQLite history at the same path, took each other's.
    """

    __tablename__ = "history_identity"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)


class RunJournalRow(Base):
    """The journal a run's results were kept in while it ran (modelci.journal), by the journal's name.

    A run killed outright leaves its journal for the next run to store. The journal is removed just after the
    run's transaction commits, so a SIGKILL in those few milliseconds left a journal whose run was stored
    already, and the next run stored its results a second time: a duplicate run in every series. Written in the
    same transaction as the run, this row lets the recovery see that the run is stored and only remove the
    journal. Its primary key also stops two recoveries of one journal from both storing it.

    A run kept in no journal (a build that failed, a confirmation run) is stored under a random name of the same
    form: `Store.ingest` asks for the name before it tries again after a lost connection, so a commit whose
    answer was lost is not stored twice, whichever way the run came.
    """

    __tablename__ = "run_journals"
    journal: Mapped[str] = mapped_column(String(32), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)


class ResultRow(Base):
    """One workload's outcome in a run."""

    __tablename__ = "results"
    __table_args__ = (
        Index("ix_results_workload_status", "workload", "status"),
        # `Store.series` walks one workload's results in run order from this index alone
        Index("ix_results_workload_run", "workload", "run_id", "status"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    workload: Mapped[str] = mapped_column(String(300))
    code_hash: Mapped[str] = mapped_column(String(64), default="")
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    traceback: Mapped[str] = mapped_column(Text, default="")
    stderr_tail: Mapped[str] = mapped_column(Text, default="")
    framework: Mapped[str] = mapped_column(String(40), default="")
    domain: Mapped[str] = mapped_column(String(40), default="")
    duration: Mapped[float] = mapped_column(Float, default=0.0)
    info: Mapped[dict] = mapped_column(JSON, default=dict)
    run: Mapped[RunRow] = relationship(back_populates="results")
    metrics: Mapped[list["MetricRow"]] = relationship(order_by="MetricRow.id", lazy="selectin")
    outputs: Mapped[list["OutputRow"]] = relationship(order_by="OutputRow.id", lazy="selectin")
    findings: Mapped[list["FindingRow"]] = relationship(
        order_by="FindingRow.id", lazy="selectin", foreign_keys="FindingRow.result_id"
    )


class MetricRow(Base):
    """A metric series with summary columns for fast history queries."""

    __tablename__ = "metrics"
    __table_args__ = (
        Index("ix_metrics_name_result", "name", "result_id"),
        # covers the history queries (Store.series, alarms): one metric of one result, or all of one name, is
        # read from the index alone, never from the row with its raw values (docs/overhead.md)
        Index("ix_metrics_name_result_summary", "name", "result_id", "kind", "unit", "median", "minimum", "maximum",
              "final", "n"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    result_id: Mapped[int] = mapped_column(ForeignKey("results.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16))
    unit: Mapped[str] = mapped_column(String(16), default="")
    values: Mapped[list] = mapped_column(JSON)
    n: Mapped[int] = mapped_column(Integer)
    median: Mapped[float | None] = mapped_column(Float, nullable=True)
    minimum: Mapped[float | None] = mapped_column(Float, nullable=True)
    maximum: Mapped[float | None] = mapped_column(Float, nullable=True)
    final: Mapped[float | None] = mapped_column(Float, nullable=True)


class ArtifactRow(Base):
    """A content-addressed blob in the artifact store."""

    __tablename__ = "artifacts"
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class OutputRow(Base):
    """A named inference output, kept as an `.npy` artifact."""

    __tablename__ = "outputs"
    id: Mapped[int] = mapped_column(primary_key=True)
    result_id: Mapped[int] = mapped_column(ForeignKey("results.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"))
    dtype: Mapped[str] = mapped_column(String(40))
    shape: Mapped[list] = mapped_column(JSON)


class FindingRow(Base):
    """One check's verdict for a result against its baseline."""

    __tablename__ = "findings"
    id: Mapped[int] = mapped_column(primary_key=True)
    result_id: Mapped[int] = mapped_column(ForeignKey("results.id"), index=True)
    baseline_result_id: Mapped[int | None] = mapped_column(ForeignKey("results.id"), nullable=True)
    check: Mapped[str] = mapped_column(String(32))
    metric: Mapped[str] = mapped_column(String(200))
    verdict: Mapped[str] = mapped_column(String(16))
    gating: Mapped[bool] = mapped_column(Boolean, default=True)
    numbers: Mapped[dict] = mapped_column(JSON, default=dict)
    message: Mapped[str] = mapped_column(Text, default="")
