"""The bisects' outcomes, on the shared declarative Base: what each `modelci bisect` (or `run --bisect-on-alarm`)
found, kept as history so that the dashboard can show it next to the runs its probes stored."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Text
from sqlalchemy.orm import Mapped, mapped_column

from modelci.store.schema import Base, String, utcnow


class BisectRow(Base):
    """One bisect: its workload, check and direction, how it ended, the culprit's commit sha or release spec (""
    when none), and the whole outcome as `BisectResult.to_json` gives it (with its own `bisect_schema`)."""

    __tablename__ = "bisects"
    id: Mapped[int] = mapped_column(primary_key=True)
    runner: Mapped[str] = mapped_column(String(200))
    workload: Mapped[str] = mapped_column(String(300))
    check: Mapped[str] = mapped_column(String(32))
    direction: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    culprit: Mapped[str] = mapped_column(String(300), default="")
    result: Mapped[dict[str, Any]] = mapped_column(JSON)
    command: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
