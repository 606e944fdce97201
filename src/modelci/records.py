"""Plain records passed between the steps of the pipeline (DESIGN.md, "Flow of modelci run").

They hold data only; the store turns them into rows and the checks compare them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: result statuses (DESIGN.md, "Conventions")
STATUSES = ("ok", "failed", "crashed", "timeout", "skipped", "error")


@dataclass
class Metric:
    """A named series: raw samples (`time.*`, `mem.*`, user metrics) or a per-step curve (`loss`)."""

    name: str
    kind: str  # "samples" | "curve"
    values: list[float]
    unit: str = ""

    @property
    def median(self) -> float | None:
        """Median of the values, or None when empty."""
        if not self.values:
            return None
        ordered = sorted(self.values)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


@dataclass
class Result:
    """One workload's outcome in a run, as executed or as loaded from the store."""

    workload: str
    status: str
    reason: str = ""
    traceback: str = ""
    stderr_tail: str = ""
    code_hash: str = ""
    framework: str = ""
    domain: str = ""
    duration: float = 0.0
    metrics: dict[str, Metric] = field(default_factory=dict)
    #: output name -> numpy array (loaded lazily when the result comes from the store)
    outputs: Mapping[str, Any] = field(default_factory=dict)
    #: what the child saw: module versions and files, bit-reproducibility, saved-model entries
    info: dict[str, Any] = field(default_factory=dict)
    #: set once stored
    id: int | None = None
    #: True when taken from the history instead of executed again
    reused: bool = False
