"""How well the history check finds steps, against a pairwise timing check (docs/detection.md).

    .venv/bin/python benchmarks/detection.py                  # 200 series per noise kind, writes docs/detection.md
    .venv/bin/python benchmarks/detection.py --noise-cv 0.03  # the noise given as calibrate measures it (5 runs)
    .venv/bin/python benchmarks/detection.py --quick          # 30 series per noise kind, prints only
    .venv/bin/python benchmarks/detection.py --quick --seed 999 --checks history --constant LATEST_PENALTY=9.5
    .venv/bin/python benchmarks/detection.py --real           # real-looking series with annotated changes (F1)

Each series has 200 points (one per target). A point is one run: its 5 raw samples are
``level * (1 + step) * (1 + e_i) * (1 + 0.01 z_ij)``, where ``e_i`` is the run-to-run effect drawn from the noise
kind (3% CV) and ``z_ij`` is the within-run sample noise; the point's value is the median of its 5 samples.
Steps of 5% and 10% start at a random index in [20, 180).

- history: online, as in production: after each new point, ``detect_latest`` on the series so far (it
  segments the last 60 points), one-sided (``worse="up"``), as a timing alarm is. An alarm about the same change
  index as the series' previous alarm is the same alarm (alarms persist until resolved), so it is counted once;
  one whose index moved counts again.
- history-both: the same with ``worse="both"``, which reports changes either way (curves with no direction).
- pairwise: the pairwise timing check between consecutive points: point i against point i-1 is an alarm when
  median_i / median_{i-1} > 1.10 and a one-sided Mann-Whitney U on the 5 vs 5 raw samples gives p < 0.05.
- offline: ``detect_changes`` on each whole series.
- bound: the best one-sided tail test there is, with the noise known (see bound_alarms).

--real scores ``detect_changes`` (what ``modelci history --changes`` runs) on series that look like real ones, with
their changes annotated: linear and curved trends with and without a step, seasonal series, 10-30 point histories
with one step, series around and below zero, AR(1) and outlier noise, a change of slope, and quantized values:
counts and peak memory in pages (see REAL_KINDS). The
score is the F1 of the TCPD benchmark (van den Burg & Williams, 2020): a change point counts when it lies within
5 points of an annotated one (each annotated one counts once), and the start of the series counts as a change
point on both sides, so a series with no change scores 1 when nothing is reported.

A step is found when an alarm saying "slower" is raised at a point t with step <= t <= step + 5; the delay is
t - step of the first such alarm. False alarms per 1,000 points: every alarm on the A/A series, and on the step
series every alarm outside [step, step + 5] (per point outside that span); "late" counts those of them in the
10 points after that span, which are mostly the step itself, found late or re-located by more than 2 points.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import re
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import stats

from modelci.checks import history

NOISE_KINDS = ("iid", "outliers", "ar1", "bimodal", "skewed")
STEPS = (0.05, 0.10)
POINTS = 200
SAMPLES = 5
CV = 0.03
WITHIN_RUN_CV = 0.01
EDGE = 20  # no step within the first or last EDGE points
FOUND_WITHIN = 5
LOCATED_WITHIN = 2  # offline: a change point this close to the step locates it
LATE = 10  # a false alarm this many points after the span where a step counts as found is "late"
WINDOW = 60
PAIRWISE_FACTOR = 1.10
PAIRWISE_ALPHA = 0.05
SEED = 20240601
DOC = Path(__file__).resolve().parent.parent / "docs" / "detection.md"


def run_effects(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Relative run-to-run effects e_i with a 3% marginal CV, of one noise kind."""
    if kind == "iid":
        return CV * rng.standard_normal(n)
    if kind == "outliers":
        # 2% of the runs are 30-50% slow (a noisy neighbour, a cold cache): all of their samples
        e = CV * rng.standard_normal(n)
        spikes = rng.random(n) < 0.02
        e[spikes] += rng.uniform(0.30, 0.50, int(spikes.sum()))
        return e
    if kind == "ar1":
        phi = 0.5
        e = np.empty(n)
        e[0] = CV * rng.standard_normal()
        innovations = CV * np.sqrt(1 - phi**2) * rng.standard_normal(n)  # marginal sd stays CV
        for i in range(1, n):
            e[i] = phi * e[i - 1] + innovations[i]
        return e
    if kind == "bimodal":
        # two hosts picked at random per run, their means 5% apart; the rest of the 3% is each host's own noise
        half_gap = 0.025
        host = np.where(rng.random(n) < 0.5, half_gap, -half_gap)
        return host + np.sqrt(CV**2 - half_gap**2) * rng.standard_normal(n)
    if kind == "skewed":
        # timings: most runs near the fastest, a few slower by more than the rest are faster (gamma, skewness 1)
        return CV * (rng.gamma(4.0, 1.0, n) - 4.0) / 2.0
    raise ValueError(kind)


def make_series(kind: str, step: float, step_at: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Raw samples (points x 5) and the point values (their medians) of one series."""
    level = 1.0 + run_effects(kind, POINTS, rng)
    level[step_at:] *= 1 + step
    samples = level[:, None] * (1 + WITHIN_RUN_CV * rng.standard_normal((POINTS, SAMPLES)))
    return samples, np.median(samples, axis=1)


def history_alarms(values: np.ndarray, noise_cv: float | None, worse: str,
                   noise_runs: int | None = None) -> list[tuple[int, bool]]:
    """(point, slower?) of each alarm the online history check raises over the series."""
    alarms: list[tuple[int, bool]] = []
    last_index = -1
    for t in range(len(values)):
        change = history.detect_latest(values[: t + 1], noise_cv=noise_cv, noise_runs=noise_runs, window=WINDOW,
                                       worse=worse)
        if change is not None and change.index != last_index:
            alarms.append((t, change.magnitude > 0))
            last_index = change.index
    return alarms


def pairwise_alarms(samples: np.ndarray) -> list[tuple[int, bool]]:
    """(point, slower?) of each alarm the pairwise timing check raises between consecutive points."""
    medians = np.median(samples, axis=1)
    alarms = []
    for t in range(1, len(medians)):
        if medians[t] / medians[t - 1] > PAIRWISE_FACTOR:
            p = stats.mannwhitneyu(samples[t], samples[t - 1], alternative="greater").pvalue
            if p < PAIRWISE_ALPHA:
                alarms.append((t, True))
    return alarms


@dataclass
class Tally:
    """Counts of one detector on one noise kind; false alarms both as "slower" only and in either direction."""

    aa_slower: int = 0
    aa_either: int = 0
    aa_points: int = 0
    step_slower: int = 0
    step_either: int = 0
    step_late: int = 0
    step_points: int = 0
    found: dict[float, int] = field(default_factory=lambda: dict.fromkeys(STEPS, 0))
    steps: dict[float, int] = field(default_factory=lambda: dict.fromkeys(STEPS, 0))
    delays: dict[float, list[int]] = field(default_factory=lambda: {s: [] for s in STEPS})
    # offline: detect_changes on each whole series
    aa_series_changed: int = 0
    located: dict[float, int] = field(default_factory=lambda: dict.fromkeys(STEPS, 0))
    other_changes: int = 0

    def count(self, alarms: list[tuple[int, bool]], step: float, step_at: int, before_only: bool = False) -> None:
        """Count the alarms on one series: all false on an A/A series (step 0); on a step series, the step is found
        by a "slower" alarm in [step_at, step_at + FOUND_WITHIN] and every alarm outside that span is false
        (``before_only``: the series was only checked up to the end of that span)."""
        if not step:
            self.aa_slower += sum(slower for _, slower in alarms)
            self.aa_either += len(alarms)
            self.aa_points += POINTS
            return
        inside = [t for t, slower in alarms if slower and step_at <= t <= step_at + FOUND_WITHIN]
        self.steps[step] += 1
        if inside:
            self.found[step] += 1
            self.delays[step].append(min(inside) - step_at)
        if not before_only:
            outside = [slower for t, slower in alarms if not step_at <= t <= step_at + FOUND_WITHIN]
            self.step_slower += sum(outside)
            self.step_either += len(outside)
            self.step_late += sum(step_at + FOUND_WITHIN < t <= step_at + FOUND_WITHIN + LATE for t, _ in alarms)
            self.step_points += POINTS - (FOUND_WITHIN + 1)

    def add(self, other: Tally) -> None:
        """Fold another tally into this one."""
        for name in (
            "aa_slower", "aa_either", "aa_points", "step_slower", "step_either", "step_late", "step_points",
            "aa_series_changed", "other_changes",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for s in STEPS:
            self.found[s] += other.found[s]
            self.steps[s] += other.steps[s]
            self.delays[s] += other.delays[s]
            self.located[s] += other.located[s]


#: the checks a run can measure (--checks): the online history check alarming on "slower" only, as a timing alarm
#: does, the same check reporting changes both ways, the pairwise timing check, detect_changes on whole series,
#: and the best tail test there is (the noise and phi known, no outliers; see bound_alarms)
CHECKS = ("history", "history-both", "pairwise", "offline", "bound")
ONLINE = {"history": "up", "history-both": "both"}

Job = tuple[str, np.random.SeedSequence, float | None, int, dict[str, float | int], tuple[str, ...], float]

#: the runs `modelci calibrate` measures a CV from by default (its --runs)
CALIBRATION_RUNS = 5


def measured_cv(cv: float, runs: int, rng: np.random.Generator) -> float:
    """The CV ``cv`` as a calibration from ``runs`` runs measures it: a sample sd with runs - 1 degrees of
    freedom (the runs taken as independent draws of the run-to-run noise; 0 runs: ``cv`` itself, exact)."""
    if not runs:
        return cv
    return cv * math.sqrt(rng.chisquare(runs - 1) / (runs - 1))


def calibration_rng(seed: np.random.SeedSequence) -> np.random.Generator:
    """The generator of a series' calibration: apart from its series' own, so that the series stay the same."""
    return np.random.default_rng(np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, 1 << 20)))


def bound_start() -> int:
    """The first point the bound tests: it needs MIN_POINTS_FOR_ESTIMATE points before a full tail. (The history
    check starts at MIN_POINTS_ONLINE with its short-history test, so comparisons of false alarms between the two
    count the points from here on only: detection_noise_cost.py.)"""
    return history.MIN_POINTS_FOR_ESTIMATE + history.MAX_TAIL


def bound_alarms(values: np.ndarray, kind: str, stop: int, penalty: float) -> list[tuple[int, bool]]:
    """(point, slower?) of each alarm of the best one-sided tail test, up to point ``stop``: the noise sd and phi
    are the true ones, there are no outliers to clean, and the whole window before the tail is the baseline.

    It tests the last 3 to 6 points with detect_latest's own z (least squares under AR(1)) against ``penalty``
    plus SHORT_TAIL per missing point, so it shows what the noise itself allows at about the same false alarms,
    with nothing lost to estimating the noise.
    """
    # the sd of one point: the run-to-run 3% and the median of 5 samples at 1% (its variance is 0.287 sd**2)
    noise = history.Noise(math.sqrt(CV**2 + 0.287 * WITHIN_RUN_CV**2), 0.5 if kind == "ar1" else 0.0)
    alarms: list[tuple[int, bool]] = []
    last_index = -1
    for t in range(bound_start(), stop):
        recent = values[max(0, t + 1 - WINDOW): t + 1]
        for k in range(history.MAX_TAIL, 2, -1):
            z = float(history._shift_z(recent, np.array([k]), noise)[0])
            if z > 0 and z**2 >= penalty + history.SHORT_TAIL * (history.MAX_TAIL - k):
                if t + 1 - k != last_index:
                    alarms.append((t, True))
                    last_index = t + 1 - k
                break
    return alarms


def evaluate_one(job: Job) -> tuple[str, dict[str, Tally]]:
    """Run the checks on one A/A series and one series per step size, all from one seed."""
    kind, seed, noise_cv, noise_runs, constants, checks, bound_penalty = job
    for name, value in constants.items():
        setattr(history, name, value)
    if noise_cv is not None:  # as calibrate measured it for this series' workload
        noise_cv = measured_cv(noise_cv, noise_runs, calibration_rng(seed))
    runs = noise_runs or None
    rng = np.random.default_rng(seed)
    tallies = {name: Tally() for name in checks}
    for step in (0.0, *STEPS):
        step_at = int(rng.integers(EDGE, POINTS - EDGE)) if step else POINTS
        samples, values = make_series(kind, step, step_at, rng)
        for name in checks:
            if name == "offline":
                changes = history.detect_changes(values, noise_cv=noise_cv, noise_runs=runs)
                if step:
                    tallies[name].steps[step] += 1
                    located = any(abs(c.index - step_at) <= LOCATED_WITHIN for c in changes)
                    tallies[name].located[step] += located
                    tallies[name].other_changes += len(changes) - located
                else:
                    tallies[name].aa_series_changed += bool(changes)
                continue
            if name == "bound":
                if kind in ("outliers", "skewed"):
                    continue  # its sd and normal threshold know nothing of outliers or of a long tail
                alarms = bound_alarms(values, kind, min(POINTS, step_at + FOUND_WITHIN + 1), bound_penalty)
            elif name == "pairwise":
                alarms = pairwise_alarms(samples)
            else:
                alarms = history_alarms(values, noise_cv, ONLINE[name], runs)
            tallies[name].count(alarms, step, step_at, before_only=name == "bound")
    return kind, tallies


def run(
    series: int, noise_cv: float | None, workers: int, constants: dict[str, float | int], seed: int,
    checks: tuple[str, ...], bound_penalty: float = 10.0, kinds: tuple[str, ...] = NOISE_KINDS,
    noise_runs: int = CALIBRATION_RUNS,
) -> dict[str, dict[str, Tally]]:
    """Evaluate ``series`` seeded series per noise kind (of `kinds`); returns kind -> check -> tally, and "all"
    pooled when there is more than one kind. A kind's series are the same whichever other kinds run beside it.
    With ``noise_cv``, each series' check is given that CV as a calibration from ``noise_runs`` runs measures it
    (0: exact), and told how many runs it came from."""
    seeds = np.random.SeedSequence(seed).spawn(len(NOISE_KINDS) * series)
    jobs = [
        (kind, seeds[k * series + i], noise_cv, noise_runs, constants, checks, bound_penalty)
        for k, kind in enumerate(NOISE_KINDS) if kind in kinds
        for i in range(series)
    ]
    pooled = ("all",) if len(kinds) > 1 else ()  # one kind alone: its rows are the pooled ones
    results = {kind: {name: Tally() for name in checks}
               for kind in (*NOISE_KINDS, *pooled) if kind in (*kinds, *pooled)}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for kind, tallies in pool.map(evaluate_one, jobs, chunksize=4):
            for name, tally in tallies.items():
                results[kind][name].add(tally)
                if pooled:
                    results["all"][name].add(tally)
    return results


def rate(count: int, points: int) -> str:
    """Alarms per 1,000 points, or a dash when there were no points."""
    return f"{1000 * count / points:.2f}" if points else "–"


def table(results: dict[str, dict[str, Tally]]) -> str:
    """The online figures as a markdown table."""
    lines = [
        "| noise | check | false alarms / 1,000 pts, A/A: slower (either way) "
        "| false alarms / 1,000 pts, step series: slower (either way), late "
        "| 5% steps found ≤5 pts | median delay | 10% steps found ≤5 pts | median delay |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, by_check in results.items():
        for name, t in by_check.items():
            if name == "offline" or not t.aa_points:
                continue
            cells = [
                kind,
                name,
                f"{rate(t.aa_slower, t.aa_points)} ({rate(t.aa_either, t.aa_points)})",
                f"{rate(t.step_slower, t.step_points)} ({rate(t.step_either, t.step_points)}), "
                f"{rate(t.step_late, t.step_points)}" if t.step_points else "–",
            ]
            for s in STEPS:
                cells.append(f"{100 * t.found[s] / t.steps[s]:.0f}%")
                cells.append(f"{np.median(t.delays[s]):.0f}" if t.delays[s] else "–")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def offline_table(results: dict[str, dict[str, Tally]]) -> str:
    """The figures of detect_changes on whole series as a markdown table."""
    lines = [
        "| noise | A/A series with a change point | 5% steps located ±2 pts | 10% steps located ±2 pts "
        "| other change points per step series |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, by_check in results.items():
        t = by_check["offline"]
        series = t.steps[STEPS[0]]
        cells = [kind, f"{100 * t.aa_series_changed / series:.1f}%"]
        cells += [f"{100 * t.located[s] / t.steps[s]:.0f}%" for s in STEPS]
        cells.append(f"{t.other_changes / sum(t.steps.values()):.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def drift_cost() -> str:
    """What detect_changes makes of a noise-free drift of 500 points, and how long it takes.

    Its sd is 0 (the floor): a detector with flat segments only cuts it into a staircase (83 change points before
    segments could be trends); it must be one trend segment, found in about the time of a noisy series.
    """
    started = time.perf_counter()
    changes = history.detect_changes(np.linspace(1.0, 1.5, 500))
    elapsed = time.perf_counter() - started
    return (
        f"A noise-free drift of 500 points from 1.0 to 1.5 (`detect_changes`): {len(changes)} change points, "
        f"{elapsed:.2f} s."
    )


#: --real: the kinds of series, each a function of (rng) -> (values, annotated change indexes); the noise has sd 1
REAL_KINDS = (
    "flat", "linear trend", "curved trend", "exponential growth", "s-curve", "smooth curve, tiny noise",
    "linear trend + step", "curved trend + step", "seasonal", "seasonal + step", "change of slope",
    "steps", "steps, AR(1) noise", "steps, outliers", "around zero", "below zero", "10-30 points, one step",
    "counts", "counts + step", "memory pages", "memory pages + step",
)
#: the kinds with no change: every change point on them is false
PURE_TRENDS = ("linear trend", "curved trend", "exponential growth", "s-curve", "smooth curve, tiny noise")
MARGIN = 5


def _noise(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Noise of sd 1: iid normal, AR(1) with phi 0.5, or normal with 2% outliers of 8-15 sd."""
    if kind == "ar1":
        e = np.empty(n)
        e[0] = rng.standard_normal()
        for i in range(1, n):
            e[i] = 0.5 * e[i - 1] + math.sqrt(0.75) * rng.standard_normal()
        return e
    e = rng.standard_normal(n)
    if kind == "outliers":
        spikes = rng.random(n) < 0.02
        e[spikes] += rng.uniform(8, 15, int(spikes.sum()))
    return e


def _room(count: int, gap: int = 15) -> int:
    """The fewest points that hold ``count`` changes as _steps places them."""
    return 2 * gap + (count - 1) * (gap + 1) + 1


def _steps(n: int, count: int, rng: np.random.Generator, gap: int = 15) -> list[int]:
    """``count`` change indexes more than ``gap`` points from each other and at least ``gap`` from the ends, drawn
    in one go (drawing until they fit never ends when they cannot: 3 changes in 60 points)."""
    span = n - _room(count, gap) + 1
    if span < 1:
        raise ValueError(f"{count} changes more than {gap} points apart do not fit in {n} points")
    offsets = np.sort(rng.integers(0, span, count))
    return [gap + int(offset) + i * (gap + 1) for i, offset in enumerate(offsets)]


def real_series(kind: str, rng: np.random.Generator) -> tuple[np.ndarray, list[int]]:
    """One series of a REAL_KINDS kind, 60-400 points (10-30 for the short ones), and its annotated changes.
    Steps are 3-6 noise sds, either way."""
    n = int(rng.integers(60, 400))
    t = np.arange(n, dtype=float)
    sign = float(rng.choice([-1.0, 1.0]))
    changes: list[int] = []
    if kind == "flat":
        y = 10 + _noise("iid", n, rng)
    elif kind == "linear trend":
        y = 5 + rng.uniform(-20, 20) * t / n + _noise("iid", n, rng)
    elif kind == "curved trend":
        y = sign * 30 * (t / n - rng.uniform(0.2, 0.8)) ** 2 + _noise("iid", n, rng)
    elif kind == "exponential growth":
        y = 5 * np.exp(3 * t / n) + _noise("iid", n, rng)
    elif kind == "s-curve":
        y = 20 / (1 + np.exp(-(t - n / 2) / (n / 10))) + _noise("iid", n, rng)
    elif kind == "smooth curve, tiny noise":  # a population curve: a million, and noise of one
        y = 1e6 + 1e6 / (1 + np.exp(-(t - n / 2) / (n / 6))) + _noise("iid", n, rng)
    elif kind in ("linear trend + step", "curved trend + step", "seasonal + step"):
        base = {"linear trend + step": 10 * t / n, "curved trend + step": 15 * (t / n - 0.5) ** 2,
                "seasonal + step": 3 * np.sin(2 * np.pi * t / int(rng.integers(7, 30)))}[kind]
        changes = _steps(n, 1, rng)
        y = base + _noise("iid", n, rng)
        y[changes[0]:] += sign * rng.uniform(3, 6)
    elif kind == "seasonal":
        y = 3 * np.sin(2 * np.pi * t / int(rng.integers(7, 30))) + _noise("iid", n, rng)
    elif kind == "change of slope":
        changes = _steps(n, 1, rng, gap=20)
        before, after = rng.uniform(-0.05, 0.05), sign * rng.uniform(0.1, 0.2)
        y = np.where(t < changes[0], before * t, before * changes[0] + after * (t - changes[0])) + _noise("iid", n, rng)
    elif kind in ("steps", "steps, AR(1) noise", "steps, outliers", "around zero", "below zero"):
        noise = {"steps, AR(1) noise": "ar1", "steps, outliers": "outliers"}.get(kind, "iid")
        level = {"around zero": 0.0, "below zero": -50.0}.get(kind, 20.0)
        count = int(rng.integers(1, 4))
        n = max(n, _room(count))
        changes = _steps(n, count, rng)
        y = level + _noise(noise, n, rng)
        for at in changes:
            y[at:] += float(rng.choice([-1.0, 1.0])) * rng.uniform(3, 6)
    elif kind == "10-30 points, one step":
        n = int(rng.integers(10, 31))
        changes = [int(rng.integers(4, n - 3))]
        y = 100 + _noise("iid", n, rng)
        y[changes[0]:] += sign * 3
    elif kind in ("counts", "counts + step"):  # a count per run (retries, NaN steps): Poisson, often 0
        rate = rng.uniform(0.3, 3.0)
        rates = np.full(n, rate)
        if kind == "counts + step":
            changes = _steps(n, 1, rng)
            # 3-6 sds of the counts before, up (a count cannot go far below 0)
            rates[changes[0]:] = rate + rng.uniform(3, 6) * math.sqrt(rate)
        y = rng.poisson(rates).astype(float)
    elif kind in ("memory pages", "memory pages + step"):  # peak memory: 100 MB, most runs the same page count
        pages = rng.choice([0, 0, 0, 0, 0, 0, 1, -1], size=n).astype(float)  # sd 0.5 pages
        if kind == "memory pages + step":
            changes = _steps(n, 1, rng)
            pages[changes[0]:] += sign * rng.uniform(1.5, 3.0)  # 3-6 sds, whole pages or not
            pages = np.round(pages)
        y = 1e8 + 4096 * pages
    else:
        raise ValueError(kind)
    return y, changes


def f1_score(annotated: list[int], found: list[int], margin: int = MARGIN) -> float:
    """The F1 of the TCPD benchmark for one annotation: the series start counts as a change point on both sides,
    a found one is a true positive when an annotated one not yet matched lies within ``margin`` points."""
    truth, predicted = sorted({0, *annotated}), sorted({0, *found})
    matched: set[int] = set()
    hits = 0
    for point in predicted:
        near = [t for t in truth if t not in matched and abs(t - point) <= margin]
        if near:
            matched.add(min(near, key=lambda t: abs(t - point)))
            hits += 1
    precision, recall = hits / len(predicted), hits / len(truth)
    return 2 * precision * recall / (precision + recall) if hits else 0.0


def evaluate_real(job: tuple[str, np.random.SeedSequence, dict[str, float | int],
                             bool]) -> tuple[str, dict[str, float]]:
    """detect_changes (and reporting nothing) on one real-looking series, and (``online``) detect_latest after
    each of its points."""
    kind, seed, constants, online = job
    for name, value in constants.items():
        setattr(history, name, value)
    rng = np.random.default_rng(seed)
    values, changes = real_series(kind, rng)
    started = time.perf_counter()
    found = [c.index for c in history.detect_changes(values)]
    elapsed = time.perf_counter() - started
    located = sum(any(abs(f - c) <= MARGIN for f in found) for c in changes)
    false = sum(not any(abs(f - c) <= MARGIN for c in changes) for f in found)
    row = {"f1": f1_score(changes, found), "f1_none": f1_score(changes, []), "found": len(found),
           "false": false, "changes": len(changes), "located": located, "seconds": elapsed}
    if online:
        alarms = online_alarms(values)
        row["online"] = len(alarms)
        row["online_false"] = sum(not any(c <= t <= c + FOUND_WITHIN for c in changes) for t, _ in alarms)
        row["online_found"] = sum(any(c <= t <= c + FOUND_WITHIN for t, _ in alarms) for c in changes)
    return kind, row


def online_alarms(values: np.ndarray, noise_cv: float | None = None, noise_runs: int | None = None,
                  pool: history.NoisePool | None = None) -> list[tuple[int, int]]:
    """(point, change index) of each alarm ``detect_latest`` raises both ways after each point of a series, an
    alarm about the index of the one before it counted once (alarms persist until resolved)."""
    alarms: list[tuple[int, int]] = []
    for t in range(len(values)):
        change = history.detect_latest(values[: t + 1], noise_cv=noise_cv, noise_runs=noise_runs, window=WINDOW,
                                       worse="both", noise_pool=pool)
        if change is not None and (not alarms or change.index != alarms[-1][1]):
            alarms.append((t, change.index))
    return alarms


#: online, a new workload's short history is also checked with the noise pool of this many other workloads
RUNNER_OTHERS = 20
#: offline, the 3-sigma step in 20 points is scored on this many series (6 s): 100 are good to about ±4 points
#: around the 80% of the target, 1,000 to about ±1.3
SHORT_OFFLINE_SERIES = 1000


def _short_step(rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """A 20-point series of noise of sd 1 with a 3-sigma step at points 5-15, either way, and its index."""
    values = 100 + rng.standard_normal(20)
    at = int(rng.integers(5, 16))
    values[at:] += 3 * rng.choice([-1.0, 1.0])
    return values, at


def short_steps(series: int, seed: int, online: bool = True) -> str:
    """A 3-sigma step in a 20-point series (at points 5-15, either way) and flat 20-point series, offline (on
    SHORT_OFFLINE_SERIES series); online (on ``series``), the same step found within 5 points, and the alarms on
    flat and AR(1) series of 26 points (the short-history test runs until 20 points precede the tail), with the
    noise estimated, with it calibrated from CALIBRATION_RUNS and from 4 times as many runs (the check told so),
    with it exact, and with it pooled over RUNNER_OTHERS other workloads of the same noise."""
    rng = np.random.default_rng(seed)
    found = false = 0
    for _ in range(SHORT_OFFLINE_SERIES):
        values, at = _short_step(rng)
        found += any(abs(c.index - at) <= LOCATED_WITHIN for c in history.detect_changes(values))
        false += bool(history.detect_changes(100 + rng.standard_normal(20)))
    text = (f"A 3-sigma step in a 20-point series (at points 5-15, either way; {SHORT_OFFLINE_SERIES} series): "
            f"found within ±{LOCATED_WITHIN} points in {100 * found / SHORT_OFFLINE_SERIES:.1f}%; flat 20-point "
            f"series with a change point: {100 * false / SHORT_OFFLINE_SERIES:.1f}%.")
    if not online:
        return text
    rng = np.random.default_rng([seed, 1])
    calibration = np.random.default_rng([seed, 2])  # apart, so that the series stay the same
    # the series are around 100 with noise of sd 1: noise_cv 0.01 is the CV a calibration measures, give or take
    # its own error (a sample sd from CALIBRATION_RUNS runs)
    more = 4 * CALIBRATION_RUNS
    runners = np.random.default_rng([seed, 3])  # the other workloads of the new one's runner, apart as well
    tallies = {"estimated": [0, 0, 0], "measured": [0, 0, 0], "more": [0, 0, 0], "exact": [0, 0, 0],
               "pooled": [0, 0, 0]}
    for _ in range(series):  # each tally: steps found, alarms on flat series, alarms on AR(1) series
        values, at = _short_step(rng)
        flat, autocorrelated = 100 + rng.standard_normal(26), 100 + _noise("ar1", 26, rng)
        measured = measured_cv(0.01, CALIBRATION_RUNS, calibration)
        measured_more = measured_cv(0.01, more, calibration)
        # a new workload on a runner whose RUNNER_OTHERS other workloads have 60 points each, of the same noise
        pools = [history.pool_noise([100 + _noise(kind, 60, runners) for _ in range(RUNNER_OTHERS)])
                 for kind in ("iid", "ar1")]
        for name, noise_cv, runs in (("estimated", None, None), ("measured", measured, CALIBRATION_RUNS),
                                     ("more", measured_more, more), ("exact", 0.01, None), ("pooled", None, None)):
            tally = tallies[name]
            iid, ar1 = pools if name == "pooled" else (None, None)
            tally[0] += any(at <= t <= at + FOUND_WITHIN and abs(index - at) <= LOCATED_WITHIN
                            for t, index in online_alarms(values, noise_cv, runs, iid))
            tally[1] += len(online_alarms(flat, noise_cv, runs, iid))
            tally[2] += len(online_alarms(autocorrelated, noise_cv, runs, ar1))

    def figures(tally: list[int]) -> str:
        found, flat, ar1 = tally
        return (f"the step found within {FOUND_WITHIN} points of it, at its index ±{LOCATED_WITHIN}, in "
                f"{100 * found / series:.0f}%; alarms per series over the first 26 points of flat series "
                f"{flat / series:.3f} ({1000 * flat / (series * 26):.2f} per 1,000 points), of AR(1) series "
                f"(φ = 0.5) {ar1 / series:.3f} ({1000 * ar1 / (series * 26):.2f})")

    return text + (f" Online (`detect_latest` both ways after each point, from {history.MIN_POINTS_ONLINE} "
                   f"points; {series} series), the noise estimated: {figures(tallies['estimated'])}. With the noise "
                   f"calibrated from {CALIBRATION_RUNS} runs (`noise_cv` 0.01, the sd of 1 at a level of 100, as "
                   f"{CALIBRATION_RUNS} runs measure it, `noise_runs` {CALIBRATION_RUNS}; φ unknown): "
                   f"{figures(tallies['measured'])}. From {more} runs (`modelci calibrate --runs {more}`): "
                   f"{figures(tallies['more'])}. Were the calibration exact (`noise_cv` 0.01 itself, no "
                   f"`noise_runs`): {figures(tallies['exact'])}. A new workload on a runner whose "
                   f"{RUNNER_OTHERS} other workloads have 60 points of the same noise (`noise_pool`, iid or AR(1) "
                   f"as the series): {figures(tallies['pooled'])}.")


def run_real(series: int, workers: int, constants: dict[str, float | int], seed: int, online: bool = True) -> str:
    """The --real table: per kind, the mean F1 of detect_changes and of reporting nothing, the change points per
    series (false ones: farther than MARGIN from every annotated change), the annotated changes located."""
    seeds = np.random.SeedSequence(seed).spawn(len(REAL_KINDS) * series)
    jobs = [(kind, seeds[k * series + i], constants, online) for k, kind in enumerate(REAL_KINDS)
            for i in range(series)]
    rows: dict[str, list[dict[str, float]]] = {kind: [] for kind in REAL_KINDS}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for kind, row in pool.map(evaluate_real, jobs, chunksize=4):
            rows[kind].append(row)
    lines = [
        "| series | F1 | F1 reporting nothing | change points per series | false ones per series "
        "| annotated changes located ±5 pts | online: alarms per series | false ones per series "
        "| annotated changes found ≤5 pts |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def row(name: str, r: list[dict[str, float]], bold: bool = False) -> str:
        changes = sum(x["changes"] for x in r)
        located = f"{100 * sum(x['located'] for x in r) / changes:.0f}%" if changes else "–"
        f1 = f"{np.mean([x['f1'] for x in r]):.3f}"
        cells = [f"**{name}**" if bold else name, f"**{f1}**" if bold else f1,
                 f"{np.mean([x['f1_none'] for x in r]):.3f}", f"{np.mean([x['found'] for x in r]):.2f}",
                 f"{np.mean([x['false'] for x in r]):.2f}", located]
        if online:
            found = f"{100 * sum(x['online_found'] for x in r) / changes:.0f}%" if changes else "–"
            cells += [f"{np.mean([x['online'] for x in r]):.2f}", f"{np.mean([x['online_false'] for x in r]):.2f}",
                      found]
        else:
            cells += ["–", "–", "–"]
        return "| " + " | ".join(cells) + " |"

    lines += [row(kind, rows[kind]) for kind in REAL_KINDS]
    every = [x for kind in REAL_KINDS for x in rows[kind]]
    lines.append(row("all", every, bold=True))
    trends = [x["false"] for kind in PURE_TRENDS for x in rows[kind]]
    seconds = sorted(x["seconds"] for x in every)
    lines += ["", f"False change points on a pure trend ({', '.join(PURE_TRENDS)}): {np.mean(trends):.2f} per series, "
              f"at most {max(trends)}; median time per series {1e3 * seconds[len(seconds) // 2]:.0f} ms, slowest "
              f"{1e3 * seconds[-1]:.0f} ms."]
    if online:
        alarms = [x["online_false"] for kind in PURE_TRENDS for x in rows[kind]]
        lines[-1] += (f" Online, false alarms on a pure trend: {np.mean(alarms):.2f} per series, at most "
                      f"{max(alarms)}.")
    lines += ["", short_steps(10 * series, seed, online)]
    return "\n".join(lines)


def write_doc(text: str, block: str) -> None:
    """Replace one figures block of docs/detection.md (the rest of the page is written by hand)."""
    begin, end = f"<!-- {block}:begin -->", f"<!-- {block}:end -->"
    doc = DOC.read_text(encoding="utf-8") if DOC.exists() else "# Change-point detection\n"
    if begin not in doc or end not in doc:
        doc += f"\n{begin}\n{end}\n"
    replaced = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: f"{begin}\n{text}\n{end}", doc, flags=re.S)
    DOC.write_text(replaced, encoding="utf-8")


#: the constants of modelci.checks.history that --constant may set, to calibrate them
TUNABLE = (
    "LATEST_PENALTY", "SHORT_TAIL", "BOTH_WAYS", "PHI_PENALTY", "SEGMENT_PENALTY", "LOOKBACK", "RELOCATE",
    "LATEST_SD_PADDING", "PENALTY_OFFSET", "SD_PADDING", "PHI_PADDING", "SLOPE_PENALTY", "DEGREE_PENALTY",
    "MIN_PENALTY", "SHORT_SD_PADDING", "SHORT_PENALTY", "MIN_POINTS_ONLINE", "TREND_MIN_POINTS",
)
#: the constants detect_changes uses (the --real header names them)
REAL_CONSTANTS = ("PENALTY_OFFSET", "SD_PADDING", "PHI_PADDING", "SLOPE_PENALTY", "DEGREE_PENALTY", "MIN_PENALTY",
                  "SHORT_SD_PADDING")


def constant(text: str) -> tuple[str, float | int]:
    """Parse NAME=VALUE for --constant."""
    name, _, value = text.partition("=")
    if name not in TUNABLE:
        raise argparse.ArgumentTypeError(f"{name!r} is not one of {', '.join(TUNABLE)}")
    try:
        return name, type(getattr(history, name))(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name} needs a number, as in {name}=10.0, not {value!r}") from None


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run the benchmark, print the table and (full runs) write it into the docs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="30 series per noise kind; print only")
    parser.add_argument("--series", type=int, help="series per noise kind (default 200, or 30 with --quick)")
    parser.add_argument("--noise-cv", type=float,
                        help="give each series' check this noise CV as a calibration measures it, instead of "
                             "estimating the noise")
    parser.add_argument("--noise-runs", type=int, default=CALIBRATION_RUNS,
                        help=f"the runs that calibration measures the CV from (default {CALIBRATION_RUNS}, as "
                             "`modelci calibrate`); 0: the CV is exact")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--write", action="store_true", help="write docs/detection.md even with --quick")
    parser.add_argument("--seed", type=int, default=SEED, help="calibrate on another seed than the one reported")
    parser.add_argument("--checks", default=",".join(CHECKS), help=f"comma-separated, of {', '.join(CHECKS)}")
    parser.add_argument("--kinds", default=",".join(NOISE_KINDS),
                        help=f"comma-separated noise kinds, of {', '.join(NOISE_KINDS)} (a subset writes a block of "
                             "its own with --write)")
    parser.add_argument("--bound-penalty", type=float, default=10.0,
                        help="the known-noise bound's z**2 threshold at 6 points (10: about the check's false alarms)")
    parser.add_argument("--real", action="store_true",
                        help="score detect_changes on real-looking annotated series (F1) instead; writes its own block")
    parser.add_argument("--offline-only", action="store_true",
                        help="with --real: score detect_changes only, not detect_latest after each point")
    parser.add_argument("--constant", type=constant, action="append", default=[], metavar="NAME=VALUE",
                        help=f"set a constant of the history check, to calibrate it ({', '.join(TUNABLE)})")
    args = parser.parse_args(argv)
    checks = tuple(name.strip() for name in args.checks.split(","))
    unknown = sorted(set(checks) - set(CHECKS))
    if unknown:
        parser.error(f"unknown check(s) {', '.join(unknown)}: pick from {', '.join(CHECKS)}")
    kinds = tuple(name.strip() for name in args.kinds.split(","))
    unknown = sorted(set(kinds) - set(NOISE_KINDS))
    if unknown:
        parser.error(f"unknown noise kind(s) {', '.join(unknown)}: pick from {', '.join(NOISE_KINDS)}")
    constants = {name: getattr(history, name) for name in TUNABLE} | dict(args.constant)
    if args.real:
        series = args.series or (10 if args.quick else 40)
        load = os.getloadavg()[0]
        started = time.perf_counter()
        table_text = run_real(series, args.workers, constants, args.seed, online=not args.offline_only)
        command = "python benchmarks/detection.py " + " ".join(sys.argv[1:] if argv is None else argv)
        text = (f"Measured {datetime.date.today().isoformat()} on {platform.machine()} {platform.system()} "
                f"({os.cpu_count()} cores, load average {load:.1f} at the start), {args.workers} worker processes: "
                f"{time.perf_counter() - started:.0f} s. `{command.strip()}` ({series} series per kind, seed "
                f"{args.seed}; " + ", ".join(f"{name} {value:g}" for name, value in constants.items()
                                             if name in REAL_CONSTANTS) + f").\n\n{table_text}")
        print(text)
        if not args.quick or args.write:
            write_doc(text, "figures-real")
        return 0
    series = args.series or (30 if args.quick else 200)
    load = os.getloadavg()[0]
    started = time.perf_counter()
    if args.noise_runs == 1 or args.noise_runs < 0:
        parser.error(f"--noise-runs {args.noise_runs}: give 2 or more runs, or 0 for an exact CV")
    results = run(series, args.noise_cv, args.workers, constants, args.seed, checks, args.bound_penalty, kinds,
                  args.noise_runs)
    elapsed = time.perf_counter() - started
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime + time.process_time()
    command = "python benchmarks/detection.py " + " ".join(sys.argv[1:] if argv is None else argv)
    noise = "noise estimated from each series"
    if args.noise_cv is not None:
        noise = (f"noise_cv={args.noise_cv} given exactly" if not args.noise_runs else
                 f"noise_cv={args.noise_cv} given as {args.noise_runs} runs measure it (a sample sd with "
                 f"{args.noise_runs - 1} degrees of freedom, drawn for each series) and noise_runs={args.noise_runs}")
    header = (
        f"Measured {datetime.date.today().isoformat()} on {platform.machine()} {platform.system()} "
        f"({os.cpu_count()} cores, load average {load:.1f} at the start), {args.workers} worker processes: "
        f"{elapsed:.0f} s, {cpu:.0f} s of CPU. `{command.strip()}` ({series} series of {POINTS} points per noise "
        f"kind and step size, {noise}, seed {args.seed}; "
        + ", ".join(f"{name} {value:g}" for name, value in constants.items())
        + (f"; bound at {args.bound_penalty:g}" if "bound" in checks else "")
        + ")."
    )
    text = f"{header}\n\nOnline (`detect_latest` after each point) against the pairwise check:\n\n{table(results)}"
    if "offline" in checks:
        text += f"\n\nOffline (`detect_changes` on each whole series of {POINTS} points):\n\n{offline_table(results)}"
        text += f"\n\n{drift_cost()}"
    print(text)
    if not args.quick or args.write:
        block = "figures" if args.noise_cv is None else "figures-noise-cv" if args.noise_runs else "figures-noise-exact"
        write_doc(text, block if set(kinds) == set(NOISE_KINDS) else f"{block}-{'-'.join(kinds)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
