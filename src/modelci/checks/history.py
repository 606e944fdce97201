"""The history check: change points over one series across targets (DESIGN.md, "Comparisons": history).

A series is one metric of one workload on one runner, one value per target in version/commit order. The
segmentation is ruptures' PELT with an l2 cost (``KernelCPD`` with the linear kernel, which is the same cost
solved in C). Its penalty comes from the noise, not a constant: the calibrated ``noise_sd`` / ``noise_cv`` when
given, or else a robust estimate from the series itself, inflated for lag-1 autocorrelation. Every change point
must then pass a Mann-Whitney U test between its two segments and a minimum magnitude. The method and the
figures that set its constants are in docs/detection.md (made by benchmarks/detection.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# ruptures and scipy are imported where they are used: together they take over a second to import, and the
# check after every run needs neither until a series has MIN_POINTS_FOR_ESTIMATE points before its tail (issue 9)

#: detect_changes: penalty = sd**2 * long-run AR(1) variance factor * (2 ln n + PENALTY_OFFSET). The 2 ln n term
#: keeps the false change points per series flat as the series grows (BIC-like).
PENALTY_OFFSET = 0.5
#: detect_latest: penalty = sd**2 * 5-point AR(1) variance factor * LATEST_PENALTY, i.e. a change in the last 5
#: points needs z**2 >= LATEST_PENALTY against the segment before. Calibrated on A/A series with the noise given
#: (benchmarks/detection.py --latest-penalty, docs/detection.md) for <= 1 false alarm per 1,000 runs.
LATEST_PENALTY = 9.5
#: a change seen in fewer points must clear SHORT_TAIL more z**2 per missing point: 3 points of a 10% step
#: still clear it, and the false alarms saved there buy a lower LATEST_PENALTY for 5% steps at 5 points
SHORT_TAIL = 3.0
#: two-sided Mann-Whitney U level a change point must pass between its adjacent segments
ALPHA = 0.01
#: a point further than this many noise sds from its local median is a spike and is replaced by that median:
#: 2% of runs 30-50% slow must not open 3-point segments, while a 10% step at 3% noise (3.3 sd) moves the
#: local median with it and is kept (clipping at 2-3 sd instead still let spikes through, docs/detection.md)
SPIKE = 4.0
#: the residuals of a normal sample truncated at +-3 sd have this variance (to undo the trimming)
_TRIMMED_VAR_3SD = 0.97334
#: an sd estimated from n points is padded by (1 + SD_PADDING / sqrt(n_eff)) against its own uncertainty,
#: n_eff = n (1 - phi) / (1 + phi) being what AR(1) noise is worth in independent points. Set so that an
#: estimated noise gives about as many false alarms as a given one (1.0 gave a third fewer, and lost power)
SD_PADDING = 0.25
#: a clearly positive phi estimated from n points is padded by PHI_PADDING / sqrt(n) (its sd is about 1/sqrt(n))
PHI_PADDING = 1.0
#: fewer points than this and the noise estimate is too loose to set a penalty from it, and phi is unknown even
#: when the sd is given: AR(1) wander over a dozen points passes for a change (docs/detection.md)
MIN_POINTS_FOR_ESTIMATE = 20
#: the noise of the online check is estimated from at most this many recent points
NOISE_WINDOW = 200
#: lag-1 autocorrelation above this is treated as this (the inflation factor explodes as phi -> 1)
MAX_PHI = 0.9


@dataclass(frozen=True)
class ChangePoint:
    """A change of the mean of a series: where it starts, how large it is, and the evidence for it."""

    index: int  # index of the first point after the change
    label: str  # the label (target name) of that point
    magnitude: float  # relative change of the mean (after / before - 1)
    before_mean: float
    before_sd: float
    after_mean: float
    after_sd: float
    p_value: float  # two-sided Mann-Whitney U between the two segments
    evidence: str  # one human line, e.g. "time.train +10.3% from torch==2.14.1 (mean 1.02±0.03 → ...)"


@dataclass(frozen=True)
class Noise:
    """The noise of one point of a series: its marginal sd and its lag-1 autocorrelation."""

    sd: float
    phi: float = 0.0

    def variance_factor(self, points: int | None = None) -> float:
        """How much AR(1) noise inflates the variance of a mean of ``points`` consecutive points (None: many).

        For many points it is the long-run (1 + phi) / (1 - phi); for a few it is 1 + 2 sum (1 - j/k) phi**j,
        which is what a change in the last k <= 5 points is tested against.
        """
        if points is None:
            return (1 + self.phi) / (1 - self.phi)
        return 1 + 2 * sum((1 - j / points) * self.phi**j for j in range(1, points))


def estimate_noise(values: Sequence[float], *, min_size: int = 3) -> Noise:
    """Estimate the noise of a series robustly: steps, spikes and autocorrelation do not fool it.

    A first, deliberately coarse segmentation removes the steps; the sd is a trimmed sd of the residuals about
    the segment medians and phi their lag-1 autocorrelation (both after clipping spikes), bias-corrected.
    """
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 3:
        return Noise(0.0, 0.0)
    # lag-5 differences: a step touches only 5 of them, a spike 2, and for AR(1) with phi <= 0.5 their
    # variance is within 3% of twice the marginal one (first differences would see only 2 sd**2 (1 - phi))
    lag = min(5, n - 1)
    sd0 = math.sqrt(_robust_var(x[lag:] - x[:-lag]) / 2)
    if sd0 == 0.0:
        return Noise(0.0, 0.0)
    # coarse on purpose: it assumes phi = 0.5 (variance x3), so AR(1) wander is left in the residuals for phi
    # to see, while a 10% step at 3% noise with 20 points on either side is still taken out
    penalty = 3 * sd0**2 * (2 * math.log(n) + 4)
    ends = _segment(x, penalty, min_size) if n >= 2 * min_size else [n]
    residuals = np.concatenate([seg - np.median(seg) for seg in np.split(x, ends[:-1])])
    residuals = np.clip(residuals, -3 * sd0, 3 * sd0)  # spikes must not make the noise look autocorrelated
    sd = math.sqrt(_robust_var(residuals) * n / max(n - len(ends), 1))
    centred = residuals - residuals.mean()
    denominator = float(np.sum(centred**2))
    phi = float(np.sum(centred[1:] * centred[:-1]) / denominator) if denominator > 0 else 0.0
    # the lag-1 sample autocorrelation is biased low by about (1 + 3 phi) / n (Kendall 1954)
    phi = (n * phi + 1) / (n - 3) if n > 3 else phi
    return Noise(sd, min(max(phi, 0.0), MAX_PHI))


def detect_changes(
    values: Sequence[float],
    labels: Sequence[str] | None = None,
    *,
    noise_sd: float | None = None,
    noise_cv: float | None = None,
    min_size: int = 3,
    min_magnitude: float = 0.0,
    metric: str = "",
    unit: str = "",
    alpha: float = ALPHA,
) -> list[ChangePoint]:
    """Find the change points of a whole series, oldest first.

    The noise is ``noise_sd``, else ``noise_cv`` times the series median, else estimated from the series
    (which needs MIN_POINTS_FOR_ESTIMATE points); ``metric`` and ``unit`` only dress the evidence line.
    """
    x = _as_series(values)
    labels = _as_labels(labels, len(x))
    if len(x) < 2 * min_size:
        return []
    noise = _noise_for(x, noise_sd, noise_cv, min_size)
    # segments here are long, so autocorrelated noise counts with its long-run variance
    penalty = noise.sd**2 * noise.variance_factor() * (2 * math.log(len(x)) + PENALTY_OFFSET)
    cleaned = _drop_spikes(x, noise.sd, min_size)
    ends = _segment(cleaned, penalty, min_size) if noise.sd > 0 else [len(x)]
    return _confirm(x, cleaned, ends, labels, 0, min_magnitude, metric, unit, alpha)


def detect_latest(
    values: Sequence[float],
    labels: Sequence[str] | None = None,
    *,
    noise_sd: float | None = None,
    noise_cv: float | None = None,
    min_size: int = 3,
    min_magnitude: float = 0.0,
    metric: str = "",
    unit: str = "",
    alpha: float = ALPHA,
    tail: int = 5,
    window: int = 60,
) -> ChangePoint | None:
    """Say whether the last ``tail`` (at most 5) points begin a new segment: the check that runs after each run.

    Only the last ``window`` points are segmented, but the noise is estimated from the MIN_POINTS_FOR_ESTIMATE
    to NOISE_WINDOW points before the tail, so pass the history, not just the window. The change may go either way: a caller that
    alarms on regressions only looks at the sign of ``magnitude``.
    """
    if not min_size <= tail <= 5:
        raise ValueError(f"tail must be between min_size ({min_size}) and 5, not {tail}")
    x = _as_series(values)
    labels = _as_labels(labels, len(x))
    # even with a calibrated sd, phi comes from the history: on fewer points AR(1) wander passes for a change
    # (it was where most false alarms on AR(1) series came from)
    if len(x) - tail < MIN_POINTS_FOR_ESTIMATE:
        return None
    # the noise is a property of the history: the tail under test would inflate it by the very step it holds
    noise = _noise_for(x[:-tail][-NOISE_WINDOW:], noise_sd, noise_cv, min_size)
    if noise.sd == 0.0:
        return None
    start = max(0, len(x) - window)
    recent = x[start:]
    # the new segment is at most `tail` points long, so its mean carries the short-run AR(1) variance
    cleaned = _drop_spikes(recent, noise.sd, min_size)
    ends = _segment(cleaned, noise.sd**2 * noise.variance_factor(tail) * LATEST_PENALTY, min_size)
    # most runs end here: no candidate in the tail, so no test to run (this keeps the per-run check ~0.3 ms)
    if len(ends) < 2 or ends[-2] < len(recent) - tail:
        return None
    # the candidate's own z**2 (its l2 cost gain in units of its k-point variance) against its k's threshold
    cut, begin = ends[-2], (ends[-3] if len(ends) > 2 else 0)
    before, after = cleaned[begin:cut], cleaned[cut:]
    gain = len(before) * len(after) / (len(before) + len(after)) * (after.mean() - before.mean()) ** 2
    threshold = LATEST_PENALTY + SHORT_TAIL * (tail - len(after))
    if gain < noise.sd**2 * noise.variance_factor(len(after)) * threshold:
        return None
    changes = _confirm(recent, cleaned, ends, labels[start:], start, min_magnitude, metric, unit, alpha)
    if changes and changes[-1].index >= len(x) - tail:
        return changes[-1]
    return None


def _confirm(
    x: np.ndarray,
    cleaned: np.ndarray,
    ends: list[int],
    labels: Sequence[str],
    offset: int,
    min_magnitude: float,
    metric: str,
    unit: str,
    alpha: float,
) -> list[ChangePoint]:
    """Keep the change points whose adjacent segments differ significantly and by at least ``min_magnitude``."""
    bounds = [0, *ends]  # change point i sits between the segments [bounds[i], bounds[i+1]) and the next one
    tests = [
        _compare(x, cleaned, bounds[i], bounds[i + 1], bounds[i + 2], labels, offset, metric, unit)
        for i in range(len(bounds) - 2)
    ]
    # drop the weakest failing change point and re-test its two neighbours only: their segments grow, so they
    # may pass now, while every other change point keeps its segments and its test (re-testing them all made
    # a noise-free drift of 500 points, cut into ~160 segments, take 13,000 tests and tens of seconds)
    while tests:
        failing = [i for i, c in enumerate(tests) if c.p_value >= alpha or abs(c.magnitude) < min_magnitude]
        if not failing:
            return tests
        worst = max(failing, key=lambda i: (tests[i].p_value, -abs(tests[i].magnitude)))
        del bounds[worst + 1], tests[worst]
        for i in (worst - 1, worst):
            if 0 <= i < len(tests):
                tests[i] = _compare(x, cleaned, bounds[i], bounds[i + 1], bounds[i + 2], labels, offset, metric, unit)
    return []


def _compare(
    x: np.ndarray,
    cleaned: np.ndarray,
    start: int,
    cut: int,
    end: int,
    labels: Sequence[str],
    offset: int,
    metric: str,
    unit: str,
) -> ChangePoint:
    """Describe the change at ``cut`` between the segments [start, cut) and [cut, end)."""
    before, after = cleaned[start:cut], cleaned[cut:end]
    # means and sds without the spikes: one must not make a 10% change read as 25%
    before_mean, after_mean = float(before.mean()), float(after.mean())
    before_sd, after_sd = float(before.std(ddof=1)), float(after.std(ddof=1))
    if before_mean != 0.0:
        magnitude = after_mean / before_mean - 1
    else:
        magnitude = 0.0 if after_mean == 0.0 else math.copysign(math.inf, after_mean)
    p_value = _mann_whitney(x[start:cut], x[cut:end])
    label = labels[cut]
    name = metric or "value"
    unit_text = f" {unit}" if unit else ""
    evidence = (
        f"{name} {magnitude:+.1%} from {label} (mean {before_mean:.3g}±{before_sd:.2g} → "
        f"{after_mean:.3g}±{after_sd:.2g}{unit_text}, p={p_value:.1g})"
    )
    return ChangePoint(
        index=offset + cut,
        label=label,
        magnitude=magnitude,
        before_mean=before_mean,
        before_sd=before_sd,
        after_mean=after_mean,
        after_sd=after_sd,
        p_value=p_value,
        evidence=evidence,
    )


def _mann_whitney(before: np.ndarray, after: np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value; 1.0 when every value is equal (scipy would divide by zero)."""
    if np.all(before == before[0]) and np.all(after == before[0]):
        return 1.0
    from scipy import stats

    return float(stats.mannwhitneyu(before, after, alternative="two-sided").pvalue)


def _noise_for(x: np.ndarray, noise_sd: float | None, noise_cv: float | None, min_size: int) -> Noise:
    """The noise that sets the penalty: the calibrated one when given (phi still comes from the series)."""
    if len(x) < 3:
        return Noise(0.0, 0.0)
    estimate = estimate_noise(x, min_size=min_size)
    phi = estimate.phi if len(x) >= MIN_POINTS_FOR_ESTIMATE else 0.0
    if phi > 1 / math.sqrt(len(x)):
        # clearly autocorrelated: pad phi against its own uncertainty, as the sd below; a phi that may be 0 is
        # left alone so that iid noise does not pay for it in power
        phi = min(phi + PHI_PADDING / math.sqrt(len(x)), MAX_PHI)
    if noise_sd is not None:
        sd = float(noise_sd)
    elif noise_cv is not None:
        sd = float(noise_cv) * abs(float(np.median(x)))
    elif len(x) < MIN_POINTS_FOR_ESTIMATE:
        return Noise(0.0, 0.0)  # too few points to know the noise: report nothing rather than guess
    else:
        # an estimated sd is itself uncertain, the more so on short or autocorrelated histories: pad it so
        # that those do not over-alarm (most AR(1) false alarms came from the first 50 points without it)
        effective_points = len(x) * (1 - phi) / (1 + phi)
        sd = estimate.sd * (1 + SD_PADDING / math.sqrt(effective_points))
    # an exactly repeatable metric (bytes, counts) has sd 0: keep a floor so the penalty is never 0
    sd = max(sd, 1e-9 * max(abs(float(np.median(x))), 1e-12))
    return Noise(sd, phi)


def _segment(x: np.ndarray, penalty: float, min_size: int) -> list[int]:
    """PELT with the l2 cost; returns the end of each segment, the last one being len(x)."""
    # KernelCPD with the linear kernel is PELT on the l2 cost written in C: ~100x faster than rpt.Pelt
    import ruptures

    algo = ruptures.KernelCPD(kernel="linear", min_size=min_size, jump=1).fit(x.reshape(-1, 1))
    return [int(end) for end in algo.predict(pen=penalty)]


def _drop_spikes(x: np.ndarray, sd: float, min_size: int) -> np.ndarray:
    """Replace each spike (beyond SPIKE sds of the median of its 2 min_size + 1 neighbours) by that median."""
    # mode="mirror" so that the last point's window holds it once: a spike there is still replaced,
    # while a step in the last min_size points moves the median with it and is kept
    from scipy import ndimage

    local = ndimage.median_filter(x, size=2 * min_size + 1, mode="mirror")
    return np.where(np.abs(x - local) > SPIKE * sd, local, x)


def _robust_var(d: np.ndarray) -> float:
    """Variance of ``d`` about its median, ignoring points beyond 3 MAD-sds (corrected for the trimming)."""
    d = d - np.median(d)
    scale = 1.4826 * float(np.median(np.abs(d)))
    if scale == 0.0:
        return 0.0
    kept = d[np.abs(d) < 3 * scale]
    return float(np.mean(kept**2)) / _TRIMMED_VAR_3SD


def _as_series(values: Sequence[float]) -> np.ndarray:
    """The values as a float array; a NaN or infinity is a bug upstream, not noise."""
    x = np.asarray(values, dtype=float).ravel()
    if not np.all(np.isfinite(x)):
        raise ValueError("a history series must hold only finite values")
    return x


def _as_labels(labels: Sequence[str] | None, n: int) -> list[str]:
    """The labels, or the indexes as text when none are given."""
    if labels is None:
        return [str(i) for i in range(n)]
    if len(labels) != n:
        raise ValueError(f"{len(labels)} labels for {n} values")
    return [str(label) for label in labels]
