"""Noise calibration: how much each workload's numbers move between runs of one target (measured by
`workflow.calibrate`, which runs it N times), stored, and read back as a floor for the checks.

The checks use the profile as a floor: a tolerance is never tighter than the measured run-to-run noise,
and a workload whose timing varies by more than `max_timing_cv` (5%) between runs is reported as too
noisy to gate on timing; it still gates on status and precision. This follows the stability gate that
Paddle's continuous evaluation applied before a model could join.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from modelci.records import Result
from modelci.store import Store
from modelci.store.noise_schema import NoiseProfileRow

#: the measured spread is a maximum over a few runs; the floor doubles it, because the maximum of five
#: draws underestimates what the next run may show
SPREAD_SAFETY = 2.0


@dataclass
class NoiseEntry:
    """The noise of one metric or output of one workload."""

    workload: str
    metric: str
    kind: str
    runs: int
    cv: float | None = None
    cv_within: float | None = None
    spread_rtol: float | None = None
    bit_identical: bool | None = None


@dataclass
class CalibrationOutcome:
    """What `calibrate` measured, with the runs it stored."""

    target: Any
    environment: Any
    runner: str
    run_ids: list[int]
    entries: list[NoiseEntry] = field(default_factory=list)
    failures: list[Result] = field(default_factory=list)
    #: cancelled: `run_ids` are the runs stored before the signal, and no noise was measured or stored
    interrupted: bool = False


def _cv(values: list[float]) -> float | None:
    array = np.asarray(values, dtype=np.float64)
    if array.size < 2 or not np.isfinite(array).all() or array.mean() == 0:
        return None
    return float(array.std(ddof=1) / abs(array.mean()))


def _spread(reference: np.ndarray, other: np.ndarray) -> tuple[float, bool]:
    """Largest relative deviation of `other` from `reference`, and whether the two are bit-identical."""
    if reference.shape != other.shape or reference.dtype != other.dtype:
        return float("inf"), False
    identical = reference.tobytes() == other.tobytes()
    if identical or reference.dtype.kind not in "fc":
        return (0.0 if identical else float("inf")), identical
    ref = reference.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.maximum(np.abs(ref), np.finfo(reference.dtype).tiny)
        rel = np.abs(other.astype(np.float64) - ref) / scale
    rel = rel[np.isfinite(rel)]
    return (float(rel.max()) if rel.size else 0.0), False


def measure(runs: list[dict[str, Result]]) -> list[NoiseEntry]:
    """Noise entries from N runs of the same workloads (each a mapping workload -> ok result)."""
    entries: list[NoiseEntry] = []
    workloads = sorted(set().union(*[set(r) for r in runs])) if runs else []
    for workload in workloads:
        results = [r[workload] for r in runs if workload in r and r[workload].status == "ok"]
        if len(results) < 2:
            continue
        first = results[0]
        for name, metric in sorted(first.metrics.items()):
            series = [r.metrics[name] for r in results if name in r.metrics and r.metrics[name].values]
            if len(series) < 2:
                continue
            if metric.kind == "curve":
                spreads = [_spread(np.asarray(series[0].values), np.asarray(s.values)) for s in series[1:]]
                entries.append(NoiseEntry(workload, name, "curve", len(series),
                                          spread_rtol=max(s for s, _ in spreads),
                                          bit_identical=all(same for _, same in spreads)))
                continue
            kind = "timing" if name.startswith("time.") else "memory" if name.startswith("mem.") else "metric"
            medians = [float(np.median(s.values)) for s in series]
            within = [c for c in (_cv(s.values) for s in series) if c is not None]
            entries.append(NoiseEntry(workload, name, kind, len(series), cv=_cv(medians),
                                      cv_within=float(np.median(within)) if within else None))
        for name in sorted(first.outputs):
            arrays = [np.asarray(r.outputs[name]) for r in results if name in r.outputs]
            spreads = [_spread(arrays[0], a) for a in arrays[1:]]
            entries.append(NoiseEntry(workload, f"output:{name}", "output", len(arrays),
                                      spread_rtol=max(s for s, _ in spreads),
                                      bit_identical=all(same for _, same in spreads)))
    return entries


def save(store: Store, outcome: CalibrationOutcome) -> None:
    """Store the profile; an older profile of the same workload stays as history and the newest wins."""
    target_id = store.target_id(outcome.target)
    store.add_noise_profiles([
        NoiseProfileRow(runner=outcome.runner, workload=e.workload, metric=e.metric, kind=e.kind,
                        target_id=target_id, environment_id=outcome.environment.id, runs=e.runs, cv=e.cv,
                        cv_within=e.cv_within, spread_rtol=e.spread_rtol, bit_identical=e.bit_identical)
        for e in outcome.entries
    ])


def profile(store: Store, runner: str, workload: str) -> dict[str, NoiseEntry]:
    """The newest noise entry per metric of one workload on one runner (empty when never calibrated)."""
    rows = store.noise_profiles(runner, workload)
    return {row.metric: NoiseEntry(row.workload, row.metric, row.kind, row.runs, row.cv, row.cv_within,
                                   row.spread_rtol, row.bit_identical) for row in rows}


def with_noise(policy: Callable[[str], Any], noise: dict[str, NoiseEntry]) -> Callable[[str], Any]:
    """Wrap a metric -> Policy function so each policy carries the measured noise as its floor."""
    if not noise:
        return policy

    def noisy(metric: str) -> Any:
        base = policy(metric)
        entry = noise.get(metric)
        if entry is None:
            return base
        changes: dict[str, Any] = {}
        if entry.kind in ("timing", "memory") and entry.cv is not None:
            changes["noise_cv"] = entry.cv
            changes["noise_cv_runs"] = entry.runs
        if entry.spread_rtol is not None and np.isfinite(entry.spread_rtol):
            changes["noise_rtol"] = max(base.noise_rtol, SPREAD_SAFETY * entry.spread_rtol)
        return dataclasses.replace(base, **changes) if changes else base

    return noisy
