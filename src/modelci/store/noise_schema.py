"""The noise profiles that `modelci calibrate` measures, on the shared declarative Base."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, DateTime, Float, ForeignKey, Index, Integer
from sqlalchemy.orm import Mapped, mapped_column

from modelci.store.schema import Base, String, utcnow


class NoiseProfileRow(Base):
    """Run-to-run noise of one metric or output of one workload on one runner, measured on one target."""

    __tablename__ = "noise_profiles"
    __table_args__ = (Index("ix_noise_runner_workload", "runner", "workload", "created_at"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    runner: Mapped[str] = mapped_column(String(200))
    workload: Mapped[str] = mapped_column(String(300))
    metric: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16))  # "timing" | "memory" | "output" | "curve" | "metric"
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id"))
    environment_id: Mapped[str] = mapped_column(String(64))
    runs: Mapped[int] = mapped_column(Integer)
    #: coefficient of variation of the per-run medians (timing, memory, user metrics)
    cv: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: median within-run coefficient of variation of the raw samples
    cv_within: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: largest relative deviation of any element from the first run (outputs, curves)
    spread_rtol: Mapped[float | None] = mapped_column(Float, nullable=True)
    bit_identical: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
