"""Plain records passed between the steps of the pipeline (docs/design.md, "Flow of modelci run").

They hold data only; the store turns them into rows and the checks compare them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: result statuses (docs/design.md, "Conventions")
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
    #: the stored run it belongs to, when loaded from the history
    run_id: int | None = None
    #: True when taken from the history instead of executed again
    reused: bool = False


def clean_text(text: str) -> str:
    """`text` as any database can store it: a lone surrogate (what `os.fsdecode` makes of a file name that is
    not UTF-8, `data-\\udcff.bin`) and a NUL (PostgreSQL's text refuses it) become visible escapes; the rest is
    kept. A workload's message must never make the run that holds it impossible to store."""
    if text.isascii() and "\x00" not in text:
        return text
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")


def clean(value: Any) -> Any:
    """`clean_text` applied to every string inside `value` (dicts, lists, tuples), keys included."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(clean(v) for v in value)
    return value


def clean_result(result: Result) -> Result:
    """Make every string a Result holds storable (`clean_text`), in place; returns it."""
    for name in ("workload", "status", "reason", "traceback", "stderr_tail", "code_hash", "framework", "domain"):
        setattr(result, name, clean_text(getattr(result, name)))
    result.info = clean(result.info)
    for metric in result.metrics.values():
        metric.name, metric.unit = clean_text(metric.name), clean_text(metric.unit)
    result.metrics = {metric.name: metric for metric in result.metrics.values()}
    return result
