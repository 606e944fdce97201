"""The history check: change points over one series across targets (DESIGN.md, "Comparisons": history).

A series is one metric of one workload on one runner, one value per target in version/commit order. The
segmentation is ruptures' PELT with an l2 cost (``KernelCPD`` with the linear kernel, which is the same cost
solved in C). Its penalty comes from the noise, not a constant: the calibrated ``noise_sd`` / ``noise_cv`` when
given, or else a robust estimate from the series itself, inflated for lag-1 autocorrelation. Every change point
must then pass a Mann-Whitney U test between its two segments and a minimum magnitude.

The check after each run (``detect_latest``) uses that segmentation to find where the current level began, then
tests whether the last few points start a new one, in the direction that is a regression: a one-sided z by
least squares under AR(1) noise, against a threshold set from the same noise. The method and the figures that
set its constants are in docs/detection.md (made by benchmarks/detection.py).
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
#: detect_latest: a change in the last MAX_TAIL points needs a one-sided z**2 >= LATEST_PENALTY against the points
#: before it (z from least squares under AR(1) noise). Calibrated on A/A series of another seed than the one
#: reported (benchmarks/detection.py --constant, docs/detection.md) for <= 1 false alarm per 1,000 runs.
LATEST_PENALTY = 9.0
#: a change seen in fewer points must clear SHORT_TAIL more z**2 per missing point: 3 points of a 10% step
#: still clear it, and the false alarms saved there buy a lower LATEST_PENALTY for 5% steps at 6 points
SHORT_TAIL = 3.0
#: a check that reports changes both ways tests twice as many excursions: this much more z**2 keeps its false
#: alarms (either way) about those of a one-sided check
BOTH_WAYS = 2.5
#: and this much more z**2 per unit of phi: autocorrelated noise wanders in longer excursions, each of which
#: crosses the threshold at more starting points, and phi and the sd are looser estimates there (with phi = 0.5
#: and the noise known, the same threshold gives 1.2-1.7 times the false alarms of iid noise)
PHI_PENALTY = 6.0
#: detect_latest: PELT finds the older change points of the window with penalty sd**2 * long-run AR(1) variance
#: factor * SEGMENT_PENALTY; the tail is tested against the points since the last of them
SEGMENT_PENALTY = 7.0
#: detect_latest also fits a change starting up to this many points before the tail: if one fits better, the
#: tail only continues an older change and nothing is reported
LOOKBACK = 2
#: a change found within this many points of one found in the last runs is that change, at its first index
RELOCATE = 2
#: the longest tail detect_latest tests: a change found within 5 runs of its first point has 6 points
MAX_TAIL = 6
#: the directions a change can be worse in
WORSE = ("up", "down", "both")
#: Mann-Whitney U level a change point must pass between its adjacent segments (two-sided, or one-sided the
#: worse way in detect_latest)
ALPHA = 0.01
#: a point further than this many noise sds from its local median is a spike and is replaced by that median:
#: 2% of runs 30-50% slow must not open 3-point segments, while a 10% step at 3% noise (3.3 sd) moves the
#: local median with it and is kept (clipping at 2-3 sd instead still let spikes through, docs/detection.md)
SPIKE = 4.0
#: the residuals of a normal sample truncated at +-3 sd have this variance (to undo the trimming)
_TRIMMED_VAR_3SD = 0.97334
#: detect_changes: an sd estimated from n points is padded by (1 + SD_PADDING / sqrt(n_eff)) against its own
#: uncertainty, n_eff = n (1 - phi) / (1 + phi) being what AR(1) noise is worth in independent points
SD_PADDING = 0.25
#: detect_latest: an estimated sd (and innovations' sd) is padded by (1 + LATEST_SD_PADDING / n), about what a
#: Student t quantile adds to a normal one at these levels; a padding in 1 / sqrt(n) cost 5% steps on long
#: histories and still let short ones over-alarm (docs/detection.md)
LATEST_SD_PADDING = 2.0
#: detect_changes: a clearly positive phi estimated from n points is padded by PHI_PADDING / sqrt(n) (its sd is
#: about 1/sqrt(n)); a larger phi only raises its penalty. Not in detect_latest: its least squares under AR(1)
#: gets less conservative with a phi too large as with one too small
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
    p_value: float  # Mann-Whitney U between the two segments (one-sided the worse way in detect_latest)
    evidence: str  # one human line, e.g. "time.train +10.3% from torch==2.14.1 (mean 1.02±0.03 → ...)"


@dataclass(frozen=True)
class Noise:
    """The noise of one point of a series: its marginal sd and its lag-1 autocorrelation."""

    sd: float
    phi: float = 0.0
    #: the sd of the AR(1) innovations (what is left once phi times the point before is taken out), when it was
    #: estimated from them; else sd * sqrt(1 - phi**2)
    innovation_sd: float | None = None

    @property
    def innovations(self) -> float:
        """The sd of the AR(1) innovations."""
        if self.innovation_sd is not None:
            return self.innovation_sd
        return self.sd * math.sqrt(1 - self.phi**2)

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
    phi = min(max(phi, 0.0), MAX_PHI)
    # the innovations' sd straight from them: an AR(1) series holds about as many innovations as points, while
    # its marginal sd is worth only n (1 - phi**2) / (1 + phi**2) points, and an error in phi partly cancels
    innovations = residuals[1:] - phi * residuals[:-1]
    innovation_sd = math.sqrt(_robust_var(innovations) * n / max(n - len(ends), 1)) if n > 3 else None
    return Noise(sd, phi, innovation_sd)


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
    tail: int = MAX_TAIL,
    window: int = 60,
    worse: str = "both",
) -> ChangePoint | None:
    """Say whether the last ``tail`` (at most 6) points begin a new segment: the check that runs after each run.

    ``worse`` is the direction that is a regression: "up" (timings, memory), "down" (accuracy) or "both". A
    one-sided check ignores changes the other way and, at the same false-alarm rate, sees smaller ones. Only the
    last ``window`` points are segmented, but the noise is estimated from the MIN_POINTS_FOR_ESTIMATE to
    NOISE_WINDOW points before the tail, so pass the history, not just the window.
    """
    if not min_size <= tail <= MAX_TAIL:
        raise ValueError(f"tail must be between min_size ({min_size}) and {MAX_TAIL}, not {tail}")
    if worse not in WORSE:
        raise ValueError(f"worse must be one of {', '.join(WORSE)}, not {worse!r}")
    x = _as_series(values)
    labels = _as_labels(labels, len(x))
    settings = _Latest(noise_sd, noise_cv, min_size, tail, window, worse)
    found = _tail_candidate(x, settings)
    if found is None:
        return None
    start, begin, cut, cleaned = found
    # a change keeps the index it was first seen at: the location of a small step is uncertain by a point or
    # two, and the same change must not read as a new one each time its best location moves. Walk back over the
    # last runs while they saw a change within RELOCATE points of this one
    first = cut
    for back in range(1, tail + RELOCATE + 1):
        earlier = _tail_candidate(x[:-back], settings)
        if earlier is not None and 0 < abs(earlier[2] - first) <= RELOCATE:
            first = earlier[2]
    if first < len(x) - tail or first - begin < min_size:
        return None  # seen when it was in the tail, and older than the tail now
    alternative = {"up": "less", "down": "greater", "both": "two-sided"}[worse]
    change = _compare(x[start:], cleaned, begin - start, first - start, len(x) - start, labels[start:], start, metric,
                      unit, alternative)
    if change.p_value >= alpha or abs(change.magnitude) < min_magnitude:
        return None
    return change


@dataclass(frozen=True)
class _Latest:
    """The settings of one detect_latest call, shared with the look-back over the runs before."""

    noise_sd: float | None
    noise_cv: float | None
    min_size: int
    tail: int
    window: int
    worse: str


def _tail_candidate(x: np.ndarray, settings: _Latest) -> tuple[int, int, int, np.ndarray] | None:
    """A change of ``x`` in the ``worse`` direction that starts in the tail and clears its threshold: (start of
    the window, begin of the segment it is tested against, its first point, the window without its spikes).
    None when there is none (most runs)."""
    tail, min_size = settings.tail, settings.min_size
    # even with a calibrated sd, phi comes from the history: on fewer points AR(1) wander passes for a change
    # (it was where most false alarms on AR(1) series came from)
    if len(x) - tail < MIN_POINTS_FOR_ESTIMATE:
        return None
    # the noise is a property of the history: the tail under test would inflate it by the very step it holds
    noise = _noise_for(x[:-tail][-NOISE_WINDOW:], settings.noise_sd, settings.noise_cv, min_size, latest=True)
    if noise.sd == 0.0:
        return None
    start = max(0, len(x) - settings.window)
    cleaned = _drop_spikes(x[start:], noise.sd, min_size)
    n = len(cleaned)
    # PELT finds where the current level began: the tail is tested against the points since the last change
    # point before it (an older change was reported while it was in the tail)
    ends = _segment(cleaned, noise.sd**2 * noise.variance_factor() * SEGMENT_PENALTY, min_size)
    begin = max([0, *(end for end in ends[:-1] if end < n - tail)])
    tails = np.arange(min_size, min(tail + LOOKBACK, n - begin - min_size) + 1)
    if not len(tails):
        return None
    z = _shift_z(cleaned[begin:], tails, noise)
    z = {"up": z, "down": -z, "both": np.abs(z)}[settings.worse]
    # a change seen in fewer points must be larger: the false alarms saved there pay for a lower threshold at
    # the full tail, where the small steps are found
    threshold = (
        LATEST_PENALTY + PHI_PENALTY * noise.phi + SHORT_TAIL * (tail - tails)
        + (BOTH_WAYS if settings.worse == "both" else 0.0)
    )
    margin = np.where(z > 0, z**2, 0.0) - threshold
    inside = tails <= tail
    if not np.any(margin[inside] >= 0):
        return None
    # the change must look as if it began in the tail: when a start just before it fits better, it is an older
    # change (reported when it was new, or too small then) that the tail merely continues
    if np.any(~inside) and z[~inside].max() > z[inside].max():
        return None
    # the change starts where it fits best (its largest z), not where it clears its threshold by the most: a
    # longer tail has the lower threshold, and would start a clear 4-point step 2 points early at half its size
    best = int(tails[inside][np.argmax(z[inside])])
    return start, start + begin, start + n - best, cleaned


def _shift_z(segment: np.ndarray, tails: np.ndarray, noise: Noise) -> np.ndarray:
    """The z of a shift of the last k points of ``segment``, for each k in ``tails``: generalised least squares
    under AR(1) noise.

    After the Prais-Winsten transform (each point less phi times the one before) the noise is white, and the
    first point after a step carries the whole step while each later one carries (1 - phi) of it: least squares
    weighs them so. For phi = 0 this is the difference of the two means over its sd. At phi = 0.5, 6 points
    carry 3 (delta/sd)**2 this way, where their plain mean carries 2.6 (delta/sd)**2.
    """
    m, phi = len(segment), noise.phi
    white = np.empty(m)
    white[0] = math.sqrt(1 - phi**2) * segment[0]
    white[1:] = segment[1:] - phi * segment[:-1]
    # the whitened columns: the level, and the step of the last k points (1 at its first point, 1 - phi after)
    level_level = (1 - phi**2) + (m - 1) * (1 - phi) ** 2
    level_y = math.sqrt(1 - phi**2) * white[0] + (1 - phi) * float(white[1:].sum())
    after = np.concatenate([np.cumsum(white[::-1])[::-1], [0.0]])  # after[j] = white[j:].sum()
    first = m - tails
    step_step = 1 + (tails - 1) * (1 - phi) ** 2
    step_level = (1 - phi) + (tails - 1) * (1 - phi) ** 2
    step_y = white[first] + (1 - phi) * after[first + 1]
    determinant = level_level * step_step - step_level**2
    shift = (level_level * step_y - step_level * level_y) / determinant
    # the whitened noise is the innovations
    sd = noise.innovations * np.sqrt(level_level / determinant)
    return shift / sd


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
    alternative: str = "two-sided",
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
    p_value = _mann_whitney(x[start:cut], x[cut:end], alternative)
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


def _mann_whitney(before: np.ndarray, after: np.ndarray, alternative: str = "two-sided") -> float:
    """Mann-Whitney U p-value (``alternative`` as scipy's, "less": before < after); 1.0 when every value is equal
    (scipy would divide by zero)."""
    if np.all(before == before[0]) and np.all(after == before[0]):
        return 1.0
    from scipy import stats

    return float(stats.mannwhitneyu(before, after, alternative=alternative).pvalue)


def _noise_for(
    x: np.ndarray, noise_sd: float | None, noise_cv: float | None, min_size: int, latest: bool = False
) -> Noise:
    """The noise that sets the penalty: the calibrated one when given (phi still comes from the series).

    ``latest``: for detect_latest's test, which whitens the tail with phi (see the padding constants).
    """
    if len(x) < 3:
        return Noise(0.0, 0.0)
    estimate = estimate_noise(x, min_size=min_size)
    phi = estimate.phi if len(x) >= MIN_POINTS_FOR_ESTIMATE else 0.0
    if not latest and phi > 1 / math.sqrt(len(x)):
        # clearly autocorrelated: pad phi against its own uncertainty, as the sd below; a phi that may be 0 is
        # left alone so that iid noise does not pay for it in power
        phi = min(phi + PHI_PADDING / math.sqrt(len(x)), MAX_PHI)
    floor = 1e-9 * max(abs(float(np.median(x))), 1e-12)  # an exactly repeatable metric (bytes) has sd 0
    if noise_sd is not None:
        return Noise(max(float(noise_sd), floor), phi)
    if noise_cv is not None:
        return Noise(max(float(noise_cv) * abs(float(np.median(x))), floor), phi)
    if len(x) < MIN_POINTS_FOR_ESTIMATE:
        return Noise(0.0, 0.0)  # too few points to know the noise: report nothing rather than guess
    # an estimated sd is itself uncertain, the more so on short or autocorrelated histories: pad it so that
    # those do not over-alarm (most AR(1) false alarms came from the first 50 points without it)
    if latest:
        padding = 1 + LATEST_SD_PADDING / len(x)
        innovations = estimate.innovation_sd * padding if estimate.innovation_sd is not None else None
        return Noise(max(estimate.sd * padding, floor), phi, innovations)
    effective_points = len(x) * (1 - phi) / (1 + phi)
    return Noise(max(estimate.sd * (1 + SD_PADDING / math.sqrt(effective_points)), floor), phi)


def _segment(x: np.ndarray, penalty: float, min_size: int) -> list[int]:
    """PELT with the l2 cost; returns the end of each segment, the last one being len(x)."""
    # KernelCPD with the linear kernel is PELT on the l2 cost written in C: ~100x faster than rpt.Pelt
    import ruptures

    algo = ruptures.KernelCPD(kernel="linear", min_size=min_size, jump=1).fit(x.reshape(-1, 1))
    return [int(end) for end in algo.predict(pen=penalty)]


def _drop_spikes(x: np.ndarray, sd: float, min_size: int) -> np.ndarray:
    """Replace each spike (beyond SPIKE sds of the median of its 2 min_size + 1 neighbours) by that median."""
    from scipy import ndimage

    size = 2 * min_size + 1
    # mirrored at the start, so that a first point's window holds it once and a spike there is still replaced
    local = ndimage.median_filter(x, size=size, mode="mirror")
    if len(x) >= size:
        # the last min_size points take the median of the last 2 min_size + 1 points: mirrored, two spikes just
        # before the last point would count twice, make the median and survive (a fifth of the false alarms on
        # the outlier series); a step beyond SPIKE sds in the last 3 points waits a run, until it holds 4 of 7
        local[-min_size:] = np.median(x[-size:])
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
