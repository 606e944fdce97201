"""The alarm tables (docs/design.md, "Storage": alarms), on the same declarative base as the rest of the history.

An alarm is the one mutable thing in the history: its state changes as people and runs act on it. Every change
is also appended to `alarm_events`, so what happened to an alarm, and who did it, is never lost.
"""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import JSON, Date, DateTime, ForeignKey, Index, Integer, Text, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from modelci.store.schema import Base, String, utcnow

#: states a person sees; `recovered_at` marks separately that the metric came back to normal
STATES = ("open", "acknowledged", "silenced", "resolved")


class AlarmRow(Base):
    """A finding that persists until it is resolved, one per (runner, workload, check, metric) while not resolved."""

    __tablename__ = "alarms"
    __table_args__ = (
        # at most one live alarm per finding key: a second occurrence updates it (a partial unique index, which
        # SQLite and PostgreSQL both know)
        Index("uq_alarms_live_key", "key", unique=True, sqlite_where=text("state != 'resolved'"),
              postgresql_where=text("state != 'resolved'")),
        Index("ix_alarms_state", "state"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(800))
    runner: Mapped[str] = mapped_column(String(200), index=True)
    workload: Mapped[str] = mapped_column(String(300))
    check: Mapped[str] = mapped_column(String(32))
    metric: Mapped[str] = mapped_column(String(200))
    #: "regression" | "status" | "change" | "disappeared" | "empty-suite" | "stale"
    kind: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(16), default="open")
    #: set while the metric is back to normal; cleared when the finding comes back
    recovered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    #: runs in a row without the finding since it recovered (for auto_resolve_after_recovered_runs)
    recovered_runs: Mapped[int] = mapped_column(Integer, default=0)
    silenced_until: Mapped[date | None] = mapped_column(Date, nullable=True)
    #: the target where the alarm first fired: alarms on the same target form one group
    target_id: Mapped[int | None] = mapped_column(ForeignKey("targets.id"), nullable=True, index=True)
    target_label: Mapped[str] = mapped_column(String(300), default="")
    last_target_label: Mapped[str] = mapped_column(String(300), default="")
    first_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"), nullable=True)
    last_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"), nullable=True)
    #: what the first finding was judged against: recovery is judged against it too, not a moving baseline
    baseline_result_id: Mapped[int | None] = mapped_column(ForeignKey("results.id"), nullable=True)
    count: Mapped[int] = mapped_column(Integer, default=1)
    message: Mapped[str] = mapped_column(Text, default="")
    numbers: Mapped[dict] = mapped_column(JSON, default=dict)
    first_numbers: Mapped[dict] = mapped_column(JSON, default=dict)
    opened_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    acknowledged_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    acknowledged_by: Mapped[str] = mapped_column(String(200), default="")
    resolved_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    resolved_by: Mapped[str] = mapped_column(String(200), default="")
    note: Mapped[str] = mapped_column(Text, default="")
    events: Mapped[list[AlarmEventRow]] = relationship(order_by="AlarmEventRow.id", lazy="selectin",
                                                       back_populates="alarm")


class AlarmEventRow(Base):
    """One thing that happened to an alarm: opened, seen, recovered, reopened, acknowledged, silenced, resolved,
    notified or notify-failed."""

    __tablename__ = "alarm_events"
    id: Mapped[int] = mapped_column(primary_key=True)
    alarm_id: Mapped[int] = mapped_column(ForeignKey("alarms.id"), index=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    event: Mapped[str] = mapped_column(String(32))
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"), nullable=True)
    by: Mapped[str] = mapped_column(String(200), default="")
    detail: Mapped[str] = mapped_column(Text, default="")
    alarm: Mapped[AlarmRow] = relationship(back_populates="events")

