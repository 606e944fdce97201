"""What estimating the noise costs the online history check on 5% steps under AR(1) noise (docs/detection.md).

    .venv/bin/python benchmarks/detection_noise_cost.py            # 1000 series, writes docs/detection.md
    .venv/bin/python benchmarks/detection_noise_cost.py --quick    # 50 series, prints only

The target compares the history check with the benchmark's known-noise bound (detection.py's ``bound``). The
bound's fixed penalty puts its false alarms only roughly where the history check's are, and on AR(1) noise a
small difference in false alarms is a large one in power, so this measures both as curves on the same seeded
series of detection.py (its AR(1) kind, its seed):

- the bound at penalties 8 to 13, which gives its power as a function of its false alarms, and from that the
  bound "at the same false alarms" as each history row: on the straight line between the two penalties about
  the row's false alarms (what a test that takes one or the other at random achieves). Both are counted from
  the first point the bound tests (``detection.bound_start``, 26): the history check's short-history test
  runs from 8 points, where the bound cannot, and its false alarms there would otherwise be set against a bound
  that raised none;
- the history check with the noise estimated (as in production without calibration), with the sd given as
  ``calibrate`` measures it (``noise_cv`` from detection.CALIBRATION_RUNS runs, drawn for each series, and
  ``noise_runs``, as the alarm step passes them; phi still estimated), with the true sd
  and phi estimated, with the true phi and the sd estimated, and with both true. The known values are the
  benchmark's true ones, put in place of the estimate by replacing ``history._noise_for`` in the worker
  processes: a counterfactual that production cannot run (it never knows phi), which says where the gap to the
  bound comes from;
- the history check with its noise pooled over a runner's series (``history.pool_noise``, as the alarm step
  pools the series of one metric over a run's workloads): the series are taken RUNNER_SERIES at a time as the
  workloads of one runner, all with the same noise, and each point's check gets the pool of its runner's series
  as they stand at that point (the A/A series with the A/A series, the step series with the step series, each
  step at its own point);
- and, as false alarms only, runners whose series do not share their noise (MIXED: each series' CV and phi drawn
  apart), with and without the pool: what pooling costs when its premise fails; and pooled runners of each of
  detection.py's noise kinds (outliers, bimodal and skewed noise as well as AR(1)), since a pooled check has its
  own, lower threshold (history.POOLED_PHI_PENALTY).

Each row: the A/A false alarms per 1,000 points (one-sided, "slower") and the 5% steps found within 5 points.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import detection  # noqa: E402  (the benchmark next to this one: its series generator and bound)

from modelci.checks import history  # noqa: E402

KIND = "ar1"
STEP = 0.05
TRUE_PHI = 0.5 * detection.CV**2 / (detection.CV**2 + 0.287 * detection.WITHIN_RUN_CV**2)  # the points' own phi
TRUE_SD = math.sqrt(detection.CV**2 + 0.287 * detection.WITHIN_RUN_CV**2)
BOUND_PENALTIES = tuple(8.0 + 0.5 * i for i in range(11))  # 8 to 13
#: the history check's noise: estimated (production), or the true sd and/or phi put in place of the estimate
KNOWN = {"estimated": (), "calibrated": (), "sd known": ("sd",), "phi known": ("phi",),
         "sd and phi known": ("sd", "phi"), "pooled": ()}
#: the workloads of one runner in the pooled mode: a suite of 20 models, each with its training-time series
RUNNER_SERIES = 20
#: runners whose series' noise differs: each series' CV is 3% times e**u, u uniform in +-CV_SPREAD, and its phi
#: uniform in PHI_RANGE. "wide": a suite of small and large models on one runner; "mild": series nearly alike,
#: where the spread is the hardest to tell from none
MIXED = {"wide": (0.7, (0.0, 0.8)), "mild": (0.2, (0.35, 0.65))}
MIXED_RUNNERS = 10
#: runners of each of detection.py's noise kinds for the pooled check's false alarms (20 series of 200 points each)
KIND_RUNNERS = 20
#: what `modelci calibrate` measures and the alarm step passes: the sd given as a CV (from
#: detection.CALIBRATION_RUNS runs, so give or take a sample sd's error), phi still estimated
CALIBRATED_CV = detection.CV


def _know(known: tuple[str, ...]) -> None:
    """Put the true sd and/or phi in place of what detect_latest estimates, in this (worker) process."""
    estimate = history._noise_for

    def noise_for(*args, **kwargs):  # type: ignore[no-untyped-def]
        noise = estimate(*args, **kwargs)
        # the innovations' sd follows from the sd and phi (Noise.innovations) once either is the true one
        return history.Noise(TRUE_SD if "sd" in known else noise.sd, TRUE_PHI if "phi" in known else noise.phi)

    if known:
        history._noise_for = noise_for


def draw(i: int, series: int, seed: int) -> tuple[float, dict[float, tuple[int, np.ndarray, int]]]:
    """Series ``i`` of ``series`` of detection.py's AR(1) kind, seeded as a run of that many there: its
    calibrated CV, and for the A/A series and the 5% step series, where the step is, the values, and the point
    to stop at (5 points after the step). (The 10% step series that detection.py draws after them are not
    needed.)"""
    seeds = np.random.SeedSequence(seed).spawn(len(detection.NOISE_KINDS) * series)
    own = seeds[detection.NOISE_KINDS.index(KIND) * series + i]
    rng = np.random.default_rng(own)
    # the workload's calibration, as detection.py draws it for the same series
    noise_cv = detection.measured_cv(CALIBRATED_CV, detection.CALIBRATION_RUNS, detection.calibration_rng(own))
    drawn = {}
    for step in (0.0, STEP):
        at = int(rng.integers(detection.EDGE, detection.POINTS - detection.EDGE)) if step else detection.POINTS
        _, values = detection.make_series(KIND, step, at, rng)
        drawn[step] = (at, values, min(detection.POINTS, at + detection.FOUND_WITHIN + 1))
    return noise_cv, drawn


def one_series(job: tuple[int, int, int, str]) -> tuple[str, list[list[int]], int, list[list[int]]]:
    """Series ``i`` of ``series`` (``draw``): the points of the "slower" alarms on its A/A series, where its 5%
    step is, and the points of the alarms on that series up to 5 points after the step, for the history check
    (``mode``) or, with mode "bound", for each bound penalty (one list per penalty)."""
    i, series, seed, mode = job
    noise_cv, drawn = draw(i, series, seed)
    points: dict[float, list[list[int]]] = {}
    for step, (at, values, stop) in drawn.items():
        if mode == "bound":
            runs = [detection.bound_alarms(values, KIND, stop, p) for p in BOUND_PENALTIES]
        else:
            calibrated = mode == "calibrated"
            runs = [detection.history_alarms(values[:stop], noise_cv if calibrated else None, "up",
                                             detection.CALIBRATION_RUNS if calibrated else None)]
        points[step] = [[t for t, slower in alarms if slower] for alarms in runs]
    return mode, points[0.0], at, points[STEP]


def pooled_alarms(runner: list[np.ndarray], stops: list[int]) -> list[list[int]]:
    """The points of the "slower" alarms on each series of one runner, up to its stop, each point's check given
    the noise pool of the runner's series as they stand at that point (as the alarm step after a run pools the
    run's workloads)."""
    alarms: list[list[int]] = [[] for _ in runner]
    last = [-1] * len(runner)
    for t in range(max(stops)):
        pool = history.pool_noise([values[: t + 1] for values in runner])
        for j, values in enumerate(runner):
            if t >= stops[j]:
                continue
            change = history.detect_latest(values[: t + 1], window=detection.WINDOW, worse="up", noise_pool=pool)
            if change is not None and change.index != last[j]:
                last[j] = change.index
                if change.magnitude > 0:
                    alarms[j].append(t)
    return alarms


def one_runner(job: tuple[int, int, int]) -> list[tuple[str, list[list[int]], int, list[list[int]]]]:
    """one_series' results for the series of runner ``r`` (RUNNER_SERIES of them, the last runner fewer), their
    noise pooled."""
    r, series, seed = job
    drawn = [draw(i, series, seed)[1] for i in range(r * RUNNER_SERIES, min((r + 1) * RUNNER_SERIES, series))]
    found = {step: pooled_alarms([d[step][1] for d in drawn], [d[step][2] for d in drawn]) for step in (0.0, STEP)}
    return [("pooled", [found[0.0][j]], d[STEP][0], [found[STEP][j]]) for j, d in enumerate(drawn)]


def mixed_runner(job: tuple[int, str, bool, int]) -> int:
    """The "slower" false alarms on the A/A series of one MIXED runner (``r`` of its kind ``spread``), with or
    without the noise pool."""
    r, spread, pooled, seed = job
    rng = np.random.default_rng([seed, r, list(MIXED).index(spread)])
    cv_spread, (low, high) = MIXED[spread]
    runner = []
    for _ in range(RUNNER_SERIES):
        cv, phi = detection.CV * math.exp(rng.uniform(-cv_spread, cv_spread)), rng.uniform(low, high)
        effects = np.empty(detection.POINTS)
        effects[0] = cv * rng.standard_normal()
        innovations = cv * math.sqrt(1 - phi**2) * rng.standard_normal(detection.POINTS)
        for t in range(1, detection.POINTS):
            effects[t] = phi * effects[t - 1] + innovations[t]
        samples = (1 + effects)[:, None] * (
            1 + detection.WITHIN_RUN_CV * rng.standard_normal((detection.POINTS, detection.SAMPLES)))
        runner.append(np.median(samples, axis=1))
    if pooled:
        return sum(len(a) for a in pooled_alarms(runner, [detection.POINTS] * len(runner)))
    return sum(sum(slower for _, slower in detection.history_alarms(values, None, "up")) for values in runner)


def kind_runner(job: tuple[int, str, int]) -> int:
    """The "slower" false alarms on the A/A series of one runner of detection.py's noise kind ``kind``, their noise
    pooled: whether the pooled check's lower threshold (history.POOLED_PHI_PENALTY) keeps its false alarms down
    on outliers, bimodal and skewed noise as well as on AR(1)."""
    r, kind, seed = job
    rng = np.random.default_rng([seed, r, 100 + detection.NOISE_KINDS.index(kind)])
    runner = [detection.make_series(kind, 0.0, detection.POINTS, rng)[1] for _ in range(RUNNER_SERIES)]
    return sum(len(a) for a in pooled_alarms(runner, [detection.POINTS] * len(runner)))


def measure_kinds(kind: str, seed: int, workers: int, constants: dict[str, float | int] | None = None) -> float:
    """False alarms per 1,000 points over KIND_RUNNERS pooled runners of noise kind ``kind``, all points."""
    with ProcessPoolExecutor(max_workers=workers, initializer=_init, initargs=("pooled", constants or {})) as pool:
        counts = list(pool.map(kind_runner, [(r, kind, seed) for r in range(KIND_RUNNERS)]))
    return 1000 * sum(counts) / (KIND_RUNNERS * RUNNER_SERIES * detection.POINTS)


def measure_mixed(spread: str, pooled: bool, seed: int, workers: int,
                  constants: dict[str, float | int] | None = None) -> float:
    """False alarms per 1,000 points over MIXED_RUNNERS runners of kind ``spread``, all points; ``constants`` of
    modelci.checks.history set in the workers, as for the other history rows."""
    with ProcessPoolExecutor(max_workers=workers, initializer=_init, initargs=("pooled", constants or {})) as pool:
        counts = list(pool.map(mixed_runner, [(r, spread, pooled, seed) for r in range(MIXED_RUNNERS)]))
    return 1000 * sum(counts) / (MIXED_RUNNERS * RUNNER_SERIES * detection.POINTS)


def _init(mode: str, constants: dict[str, float | int]) -> None:
    for name, value in constants.items():
        setattr(history, name, value)
    if mode != "bound":
        _know(KNOWN[mode])


@dataclass(frozen=True)
class Measured:
    """One check's figures, one entry per bound penalty or one: false alarms per 1,000 A/A points over all the
    points the check looked at and over those the bound looks at too (from ``detection.bound_start``), and the
    5% steps found within 5 points by an alarm from there on."""

    alarms_all: np.ndarray
    alarms: np.ndarray
    found: np.ndarray


def measure(mode: str, series: int, seed: int, workers: int, constants: dict[str, float | int] | None = None
            ) -> Measured:
    """What the check (or the bound at each penalty) does on ``series`` A/A and step series.

    Both are counted on the same points: the bound starts at ``detection.bound_start()`` (it needs 20 points
    before a full tail), while the history check runs from 8 points with its short-history test. Counting the
    check's false alarms on those first points too would set it against the bound at fewer false alarms than it
    raises where the bound looks, and its steps found there would be ones the bound never had a chance at.
    """
    with ProcessPoolExecutor(max_workers=workers, initializer=_init, initargs=(mode, constants or {})) as pool:
        if mode == "pooled":
            runners = -(-series // RUNNER_SERIES)
            results = [r for chunk in pool.map(one_runner, [(r, series, seed) for r in range(runners)])
                       for r in chunk]
        else:
            results = list(pool.map(one_series, [(i, series, seed, mode) for i in range(series)], chunksize=4))
    return tally(results)


def tally(results: list[tuple[str, list[list[int]], int, list[list[int]]]]) -> Measured:
    """Measured from one_series' results: the false alarms and the steps found from detection.bound_start() on."""
    series = len(results)
    first = detection.bound_start()
    aa = [r[1] for r in results]
    alarms_all = np.sum([[len(run) for run in runs] for runs in aa], axis=0)
    alarms = np.sum([[sum(t >= first for t in run) for run in runs] for runs in aa], axis=0)
    found = np.mean([[any(t >= first and at <= t <= at + detection.FOUND_WITHIN for t in run) for run in runs]
                     for _, _, at, runs in results], axis=0)
    return Measured(1000 * alarms_all / (series * detection.POINTS),
                    1000 * alarms / (series * (detection.POINTS - first)), found)


def bound_at(bound: Measured, alarms: float) -> float | None:
    """The fraction of steps the bound finds at ``alarms`` false alarms per 1,000 points: between two penalties,
    on the straight line between them, which a test that takes one penalty or the other at random in the right
    proportion achieves (so it is a bound as well). None when the row has fewer false alarms than the bound at
    its highest penalty; the bound's most when it has more than the bound at its lowest."""
    levels = np.unique(bound.alarms)
    if alarms < levels[0]:
        return None
    # the most found at each level of false alarms, and at most that many (a test allowed more may alarm less)
    found = np.maximum.accumulate([bound.found[bound.alarms == level].max() for level in levels])
    return float(np.interp(alarms, levels, found))


def ceiling(penalty: float) -> float:
    """What any test that estimates the sd from the points before the tail can find of what the known sd finds, for
    one look at a 6-point tail of a 5% step, over the benchmark's step positions: the z of the step is the exact
    GLS one under the true AR(1) noise (the window of 60 points before it, as detect_latest sees), the known-sd
    test rejects at ``penalty``, and the best estimated-sd test is a Student t with as many degrees of freedom as
    the points before the tail (the most an sd from them can have), at the same false-alarm rate per look."""
    from scipy import stats

    noise = history.Noise(TRUE_SD, TRUE_PHI)
    threshold = math.sqrt(penalty)
    alpha = stats.norm.sf(threshold)
    known = estimated = 0.0
    for at in range(detection.EDGE, detection.POINTS - detection.EDGE):
        before = min(at, detection.WINDOW)
        step = np.zeros(before + 6)
        step[-6:] = STEP
        z = float(history._shift_z(step, np.array([6]), noise)[0])
        freedom = min(at, history.NOISE_WINDOW)
        known += stats.norm.sf(threshold - z)
        estimated += stats.nct.sf(stats.t.isf(alpha, freedom), freedom, z)
    return estimated / known


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="50 series; print only")
    # 1000: on 200 series a row's fraction of the bound moved by 10-25 points between runs (found ~30% of 200
    # steps has an sd of 3 points, on both sides of the ratio)
    parser.add_argument("--series", type=int, help="series (default 1000, or 50 with --quick)")
    parser.add_argument("--seed", type=int, default=detection.SEED)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--modes", default=",".join(KNOWN), help=f"comma-separated, of {', '.join(KNOWN)}")
    parser.add_argument("--constant", type=detection.constant, action="append", default=[], metavar="NAME=VALUE",
                        help="set a constant of modelci.checks.history for the history rows (prints only)")
    args = parser.parse_args(argv)
    modes = tuple(name.strip() for name in args.modes.split(","))
    unknown = sorted(set(modes) - set(KNOWN))
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(unknown)}: pick from {', '.join(KNOWN)}")
    constants = dict(args.constant)
    series = args.series or (50 if args.quick else 1000)
    if series < 1:
        parser.error(f"--series {series}: give 1 or more")
    load = os.getloadavg()[0]
    started = time.perf_counter()
    bound = measure("bound", series, args.seed, args.workers)
    first = detection.bound_start()
    lines = [f"| check | false alarms / 1,000 pts, A/A: all points (from point {first}) | 5% steps found ≤5 pts "
             "| the bound at the same false alarms | fraction of the bound |", "|---|---:|---:|---:|---:|"]
    for mode in modes:
        row = measure(mode, series, args.seed, args.workers, constants)
        name = {"calibrated": f"noise_cv={CALIBRATED_CV:g} as {detection.CALIBRATION_RUNS} runs measure it "
                              "(calibrated), phi estimated",
                "pooled": f"noise estimated and pooled over a runner's {RUNNER_SERIES} series"}.get(mode,
                                                                                                 f"noise {mode}")
        best = bound_at(bound, float(row.alarms[0]))
        against = "– | –" if best is None or best == 0 else f"{100 * best:.0f}% | {100 * row.found[0] / best:.0f}%"
        lines.append(f"| history, {name} | {row.alarms_all[0]:.2f} ({row.alarms[0]:.2f}) | "
                     f"{100 * row.found[0]:.0f}% | {against} |")
    lines += ["", "The bound (true sd and phi, no spikes to clean) at each penalty:", "",
              f"| penalty | false alarms / 1,000 pts from point {first}, A/A | 5% steps found ≤5 pts |",
              "|---:|---:|---:|"]
    lines += [f"| {p:g} | {a:.2f} | {100 * f:.0f}% |" for p, a, f in zip(BOUND_PENALTIES, bound.alarms, bound.found)]
    if "pooled" in modes:
        lines += ["", f"False alarms / 1,000 A/A points on runners whose {RUNNER_SERIES} series differ in their noise "
                  f"({MIXED_RUNNERS} runners each; CV 3% times e**u, u uniform in ±spread, phi uniform in the range):",
                  "", "| runner | CV spread | phi | own noise | pooled |", "|---|---:|---|---:|---:|"]
        for spread, (cv_spread, (low, high)) in MIXED.items():
            own, pooled = (measure_mixed(spread, p, args.seed, args.workers, constants) for p in (False, True))
            lines.append(f"| {spread} | ±{cv_spread:g} | {low:g}–{high:g} | {own:.2f} | {pooled:.2f} |")
        lines += ["", f"False alarms / 1,000 A/A points of the pooled check on each noise kind of detection.py "
                  f"({KIND_RUNNERS} runners of {RUNNER_SERIES} series each, all points, one-sided \"slower\"):", "",
                  "| " + " | ".join(detection.NOISE_KINDS) + " |", "|" + "---:|" * len(detection.NOISE_KINDS),
                  "| " + " | ".join(f"{measure_kinds(kind, args.seed, args.workers, constants):.2f}"
                                    for kind in detection.NOISE_KINDS) + " |"]
    lines += ["", "The ceiling of a test that estimates the sd (see ``ceiling``): one look at 6 points finds "
              + ", ".join(f"{100 * ceiling(p):.0f}% at penalty {p:g}" for p in (10.0, 10.5, 11.0))
              + " of what the same look finds with the sd known."]
    command = "python benchmarks/detection_noise_cost.py " + " ".join(sys.argv[1:] if argv is None else argv)
    text = (f"Measured {datetime.date.today().isoformat()} on {platform.machine()} {platform.system()} "
            f"({os.cpu_count()} cores, load average {load:.1f} at the start), {args.workers} worker processes: "
            f"{time.perf_counter() - started:.0f} s. `{command.strip()}` ({series} A/A and {series} 5% step series "
            f"of {detection.POINTS} points under AR(1) noise, seed {args.seed}; true sd {TRUE_SD:.4f}, phi "
            f"{TRUE_PHI:.3f}; " + "".join(f"{k} {v:g}; " for k, v in constants.items())
            + "the bound at the same false alarms, from point " + str(detection.bound_start())
            + ": between the two penalties about them, on the line from one to the other).\n\n" + "\n".join(lines))
    print(text)
    if not args.quick and not constants and modes == tuple(KNOWN):
        detection.write_doc(text, "figures-noise-cost")
    return 0


if __name__ == "__main__":
    sys.exit(main())
