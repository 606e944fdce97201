"""The history check: change points over one series across targets (docs/design.md, "Comparisons": history).

A series is one metric of one workload on one runner, one value per target in version/commit order. A whole
history (``detect_changes``) is cut into segments that are each flat or a straight trend, by an exact penalised
least-squares partition (PELT) whose penalty comes from the noise: the calibrated ``noise_sd`` / ``noise_cv``
when given, or else a robust estimate from the residuals within the segments, inflated for lag-1
autocorrelation. A drift is then one trend segment, not a staircase; every change point must also fit better
than one smooth curve (a quadratic or cubic) over its two segments, against the noise or the misfit there,
whichever is larger, so that a smooth curve with next to no noise is not cut either.

The check after each run (``detect_latest``) uses the same kind of segmentation (flat or straight segments) over
its window to find where the current level began, then tests whether the last few points start a new one, in
the direction that is a regression: a one-sided z by least squares under AR(1) noise, on a flat level or on the
trend before the tail (a drift that goes on is no change; a step on top of it is), against a threshold set from
the same noise. With 20 points before the tail the noise comes from those points; on a shorter history (from 8
points) from the residuals about the history's own segments, where a step is a segment and not noise, with a
threshold that covers the autocorrelation it cannot estimate. The series of one metric on one runner may pool
their noise (``pool_noise``): each one's estimate is shrunk toward their mean as far as they are alike, and a
new one's short history takes the pool's noise as a prior. The method and the figures that set its constants
are in docs/detection.md (made by benchmarks/detection.py).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from modelci.checks.stats import mann_whitney

# ruptures and scipy are imported where they are used: together they take over a second to import, and the
# check after every run needs ruptures only once a series has MIN_POINTS_FOR_ESTIMATE points before its tail

#: detect_changes: penalty = sd**2 * long-run AR(1) variance factor * (2 ln n + PENALTY_OFFSET) per segment. The
#: 2 ln n term keeps the false change points per series flat as the series grows (BIC-like)
PENALTY_OFFSET = 2.0
#: detect_changes: and never below this: on short series the noise estimate itself is loose
MIN_PENALTY = 9.0
#: detect_changes: a segment's slope costs sd**2 * variance factor * SLOPE_PENALTY * ln n more (one more parameter,
#: BIC): a flat segment is the cheaper explanation unless the trend is clear
SLOPE_PENALTY = 2.0
#: detect_changes: the smooth curve a change point must beat costs this times ln n per degree: a quadratic is as
#: cheap as one straight segment, so a smooth curve is not cut into two lines
DEGREE_PENALTY = 1.0
#: detect_changes: a change point must fit better than one polynomial of this degree over its two segments, when
#: they hold at least this many points (a cubic over fewer points passes for a step: a step in 20 points is
#: three-quarters explained by a straight line already). From 60 points for the cubic, a logistic population
#: curve of 60-65 points was cut at both bends (each bend's two segments span about 55 points); from 50 it is
#: whole, and the benchmark's steps are found as often as before
SMOOTH_MIN_POINTS = {2: 30, 3: 50}
#: detect_changes: fewer points than this and nothing is reported (a step needs a few points on either side)
MIN_POINTS_OFFLINE = 8
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
PHI_PENALTY = 5.0
#: in place of PHI_PENALTY when the sd and phi are pooled over the runner's series (``pool_noise``): part of
#: PHI_PENALTY pays for the errors of one series' own sd and phi, which are larger the larger phi is, and a pool
#: of 20 series knows them within 2-4% and 0.02-0.05. Calibrated as LATEST_PENALTY is, for <= 1 false alarm per
#: 1,000 runs on every noise kind and on runners whose series differ in their noise (another seed than the one
#: reported; benchmarks/detection_noise_cost.py, docs/detection.md)
POOLED_PHI_PENALTY = 3.0
#: detect_latest: PELT over flat and straight segments finds the older change points of the window with penalty
#: sd**2 * long-run AR(1) variance factor * SEGMENT_PENALTY; the tail is tested against the points since the
#: last of them
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
#: the shares of values tied at the median between which they are quantized noise (_robust_var): below,
#: continuous; above, noise-free values with a few jumps (a deterministic loss, steps between builds). Residuals
#: about a segmentation tie more than differences do (a value at the mode makes no difference to its neighbour at
#: the mode, but every value at the mode is a residual of 0), and those of a noise-free series all tie
TIES = (0.1, 0.75)
RESIDUAL_TIES = (0.1, 0.95)
#: the robust variance keeps the values within TRIM MAD-sds of the median. 5 and not 3: what lies between 3 and
#: 5 sds is the long tail of a skewed or heavy-tailed noise (timings, t-like noise), not outliers, and trimming
#: it took the sd of exponential noise for 0.72 of its own, which made 0.29 false change points per 200-point
#: series and 3.0 false alarms per 1,000 points (docs/detection.md); outliers of 8 sds and more stay out.
#: The first sd from differences keeps 3 (DIFFERENCE_TRIM): there a step's few large differences must stay out
TRIM = 5.0
DIFFERENCE_TRIM = 3.0
#: detect_changes: an sd estimated from n points is padded by (1 + SD_PADDING / sqrt(n_eff)) against its own
#: uncertainty, n_eff = n (1 - phi) / (1 + phi) being what AR(1) noise is worth in independent points
SD_PADDING = 0.25
#: detect_changes: below MIN_POINTS_FOR_ESTIMATE points an estimated sd is padded by (1 + SHORT_SD_PADDING /
#: sqrt(n)), about what a t quantile adds to a normal one with so few residuals
SHORT_SD_PADDING = 1.0
#: detect_latest: an estimated sd (and innovations' sd) is padded by (1 + LATEST_SD_PADDING / n), about what a
#: Student t quantile adds to a normal one at these levels; a padding in 1 / sqrt(n) cost 5% steps on long
#: histories and still let short ones over-alarm (docs/detection.md)
LATEST_SD_PADDING = 2.0
#: detect_changes: a clearly positive phi estimated from n points is padded by PHI_PADDING / sqrt(n) (its sd is
#: about 1/sqrt(n)); a larger phi only raises its penalty. Not in detect_latest: its least squares under AR(1)
#: gets less conservative with a phi too large as with one too small
PHI_PADDING = 1.0
#: fewer points than this and the noise estimate is too loose to set a penalty from it, and phi is unknown even
#: when the sd is given: AR(1) wander over a dozen points passes for a change (docs/detection.md). detect_latest
#: uses its long-history test once this many points precede the tail, and its short-history test before
MIN_POINTS_FOR_ESTIMATE = 20
#: detect_latest: fewer points than this and nothing is reported (3 changed points and 5 before them)
MIN_POINTS_ONLINE = 8
#: detect_latest on a short history (fewer than MIN_POINTS_FOR_ESTIMATE points before the tail): the z**2 a
#: change needs in place of LATEST_PENALTY + PHI_PENALTY phi. phi is unknown there (0 is assumed), so the
#: threshold must cover AR(1) noise with phi = 0.5, which inflates the variance of a 6-point shift about 2.5
#: times. Calibrated on seed 999 (docs/detection.md): 16 gave 0.07 alarms per AR(1) series in its first 26
#: points, 20 and 25 gave 0.015; 20 finds 63% of 10% steps there within 5 points, 25 finds 34%
SHORT_PENALTY = 20.0
#: detect_latest: the level before the tail is a trend when a straight line fits the points before the tail
#: better by SLOPE_PENALTY ln n noise variances (as in detect_changes), and they are at least this many
TREND_MIN_POINTS = 8
#: the noise of the online check is estimated from at most this many recent points
NOISE_WINDOW = 200
#: lag-1 autocorrelation above this is treated as this (the inflation factor explodes as phi -> 1)
MAX_PHI = 0.9
#: detect_latest: the skewness of the noise is measured on the residuals within SKEW_TRIM sds (outliers beyond
#: it are spikes, cleaned before the test, and must not pass for a long tail) and shrunk toward 0 by SKEW_SHRINK
#: of its standard error sqrt(6 / n), so that a symmetric noise is not charged for the scatter of its estimate
SKEW_TRIM = 6.0
SKEW_SHRINK = 1.0
#: detect_latest with a noise pool (``pool_noise``): a runner's series of one metric pool their noise only when
#: at least this many have MIN_POINTS_FOR_ESTIMATE points before their tails; fewer say too little about how far
#: apart the series' noises are, and a spread taken too small would set one noisier series' threshold too low
POOL_MIN_SERIES = 8
#: the pool weighs a series' log sd of the innovations as a sample sd's from n - POOL_POINTS_LOSS points, and its
#: phi with variance (1 - phi**2) / (n - POOL_POINTS_LOSS): what the estimates of 300 A/A AR(1) series of the
#: benchmark scattered by at 20 to 200 points (within 10% at 30 points and more, docs/detection.md)
POOL_POINTS_LOSS = 5
#: a series whose own log sd (or phi) lies more than this many sds from the pool's mean (its own error, the
#: series' spread and the mean's error together) is not one of the pool's, and keeps its own noise: one workload
#: 2.5 times as noisy as the runner's other 19 was shrunk to 1.2 times their noise and alarmed 5 times as often
#: as on its own; one 1.5 times as noisy, which its first 20-50 points cannot tell apart, still twice as often
#: (docs/detection.md). About 1 series in 185 that is one of the pool's keeps its own (two tests, 1 in 370 each)
POOL_MISFIT = 3.0


@dataclass(frozen=True)
class ChangePoint:
    """A change of the mean of a series: where it starts, how large it is, and the evidence for it."""

    index: int  # index of the first point after the change
    label: str  # the label (target name) of that point
    #: relative change, (after - before) / |before|: its sign is the way the metric went, also below zero
    magnitude: float
    before_mean: float  # the level just before the change (a segment's mean, or its trend's last fitted value)
    before_sd: float
    after_mean: float  # the level just after it
    after_sd: float
    p_value: float  # detect_changes: of the fit's improvement; detect_latest: Mann-Whitney U the worse way
    evidence: str  # one human line, e.g. "time.train +10.3% from torch==2.14.1 (mean 1.02±0.03 → ...)"
    #: after_mean - before_mean, in the metric's unit: the direction of the change, whatever the sign of the level
    shift: float = 0.0
    #: the noise sd of one point the change was judged against
    noise_sd: float = 0.0
    #: the rule that decided it, with its numbers (the "why" of a history finding)
    rule: str = ""


@dataclass(frozen=True)
class Noise:
    """The noise of one point of a series: its marginal sd and its lag-1 autocorrelation."""

    sd: float
    phi: float = 0.0
    #: the sd of the AR(1) innovations (what is left once phi times the point before is taken out), when it was
    #: estimated from them; else sd * sqrt(1 - phi**2)
    innovation_sd: float | None = None
    #: the skewness of the AR(1) innovations (positive: a long tail of high values, as timings have), shrunk
    #: toward 0 by its own uncertainty; 0 when it was not estimated
    skew: float = 0.0
    #: how many series of the runner's metric the sd and phi were pooled with (``NoisePool``); 0: this one's own
    pooled: int = 0

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
    the segment medians (the trim leaves spikes out), phi their lag-1 autocorrelation after clipping spikes,
    bias-corrected, and the innovations' sd and skewness come from r_t - phi r_(t-1).
    """
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 3:
        return Noise(0.0, 0.0)
    # lag-5 differences: a step touches only 5 of them, a spike 2, and for AR(1) with phi <= 0.5 their
    # variance is within 3% of twice the marginal one (first differences would see only 2 sd**2 (1 - phi))
    lag = min(5, n - 1)
    sd0 = math.sqrt(_robust_var(x[lag:] - x[:-lag], trim=DIFFERENCE_TRIM) / 2)
    if sd0 == 0.0:
        return Noise(0.0, 0.0)
    # coarse on purpose: it assumes phi = 0.5 (variance x3), so AR(1) wander is left in the residuals for phi
    # to see, while a 10% step at 3% noise with 20 points on either side is still taken out
    penalty = 3 * sd0**2 * (2 * math.log(n) + 4)
    ends = _segment(x, penalty, min_size) if n >= 2 * min_size else [n]
    unclipped = np.concatenate([seg - np.median(seg) for seg in np.split(x, ends[:-1])])
    # the sds from the residuals as they are (the trim leaves the spikes out, and keeps a long tail in: clipped
    # at 3 sds, each spike would count as a point of 3 sds), phi from them clipped: spikes must not make the
    # noise look autocorrelated
    residuals = np.clip(unclipped, -3 * sd0, 3 * sd0)
    sd = math.sqrt(_robust_var(unclipped, RESIDUAL_TIES) * n / max(n - len(ends), 1))
    centred = residuals - residuals.mean()
    denominator = float(np.sum(centred**2))
    phi = float(np.sum(centred[1:] * centred[:-1]) / denominator) if denominator > 0 else 0.0
    # the lag-1 sample autocorrelation is biased low: by (1 + 3 phi) / n (Kendall 1954), put back here, and by phi / n
    # more ((1 + 3 phi) / n is the least-squares slope's bias; 20,000 AR(1) series each of 20, 40 and 100 points
    # give n times the sample autocorrelation's as -1.0, -2.0, -3.0 and -4.2 at phi 0, .25, .5 and .75). That phi / n
    # is small beside one series' own error (0.2 from 25 points), and the online check's PHI_PENALTY was set on the
    # benchmark with it left; the noise pool, where it adds up over the series, puts it back (_pool_terms)
    phi = (n * phi + 1) / (n - 3) if n > 3 else phi
    phi = min(max(phi, 0.0), MAX_PHI)
    # the innovations' sd straight from them: an AR(1) series holds about as many innovations as points, while
    # its marginal sd is worth only n (1 - phi**2) / (1 + phi**2) points, and an error in phi partly cancels
    innovations = unclipped[1:] - phi * unclipped[:-1]
    innovation_sd = math.sqrt(_robust_var(innovations) * n / max(n - len(ends), 1)) if n > 3 else None
    return Noise(sd, phi, innovation_sd, _skewness(innovations, sd))


def _skewness(innovations: np.ndarray, sd: float) -> float:
    """The sample skewness of ``innovations`` within SKEW_TRIM sds of their median, shrunk toward 0 by SKEW_SHRINK
    standard errors (0 when it is within them).

    Timings are skewed: most runs are near the fastest and a few are slower by more than the rest are faster. A
    mean of 6 such points has a long right tail too, and a one-sided tail test calibrated on normal noise alarmed
    on it 3 to 6 times as often as it should (gamma noise of skewness 1: 3.1 false alarms per 1,000 points)."""
    d = innovations - np.median(innovations)
    kept = d[np.abs(d) < SKEW_TRIM * sd] if sd > 0 else d
    n = len(kept)
    if n < MIN_POINTS_FOR_ESTIMATE:
        return 0.0
    centred = kept - kept.mean()
    largest = float(np.max(np.abs(centred)))
    if largest == 0.0:
        return 0.0
    unit = centred / largest  # cubes of values near MAX_LEVEL overflow; the skewness does not depend on the scale
    skew = float(np.mean(unit**3)) / float(np.mean(unit**2)) ** 1.5
    margin = SKEW_SHRINK * math.sqrt(6 / n)
    return math.copysign(max(abs(skew) - margin, 0.0), skew)


@dataclass(frozen=True)
class NoisePool:
    """What a runner's series of one metric say about the noise they share (``pool_noise``): the mean over the
    series of log(innovations' sd / level) and of phi, each with the variance of that mean (``*_error``) and the
    spread of the series' true values about it (``*_spread``, tau**2 of a random-effects model).

    One series' noise, estimated from its own 20 to 200 points, is loose: with it the online check finds 70% of
    what the known-noise bound finds of 5% steps under AR(1) noise, and with the noise known 97%
    (docs/detection.md). Series of one metric on one runner (each workload's training time, say) often share
    their noise: the machine's drift moves them together. ``own`` moves a series' own estimate toward the
    mean by how far the series are apart: when they are alike it takes the mean, whose error is that of all
    their points; when they are far apart (a 10 ms inference beside a 10 s training), it keeps its own."""

    log_cv: float
    log_cv_error: float
    log_cv_spread: float
    phi: float
    phi_error: float
    phi_spread: float
    series: int
    #: the terms of the series the pool was built from, by their points: detect_latest looks a series' own up
    #: here rather than estimate it again (the estimate is most of the alarm step's time)
    known: Mapping[tuple[bytes, int], _PoolTerms] = field(default_factory=dict, compare=False, repr=False)
    #: the keys in ``known`` of the series left out of the pool as misfits: they keep their own noise, decided
    #: once where the pool was built (judged against the others), not again against a pool without them, where
    #: a borderline one could pass
    misfits: frozenset[tuple[bytes, int]] = field(default_factory=frozenset, compare=False, repr=False)

    def own(self, x: np.ndarray, min_size: int
            ) -> tuple[_PoolTerms | None, tuple[float, float, float, float] | None]:
        """The pool's terms of the points ``x`` before a tail (``_pool_terms``; estimated only when the pool was
        not built from them) and the series' noise shrunk toward the pool's (``_shrink``; None when the series
        does not fit the pool, as decided where the pool was built or by ``_takes``, and keeps its own)."""
        key = (x[-NOISE_WINDOW:].tobytes(), min_size)
        if key in self.known:
            terms = self.known[key]
            return terms, None if key in self.misfits else self._shrink(terms)
        terms = _pool_terms(x, min_size)
        return terms, self._shrink(terms) if terms is not None and self._takes(terms) else None

    def prior(self, x: np.ndarray, sd: float, freedom: float) -> tuple[float, float] | None:
        """What the pool says of the noise of a series too short to be in it (``x``: its points before the tail;
        ``sd``: its own rough sd, worth ``freedom`` degrees of freedom): the variance of one point at its level,
        and the degrees of freedom of a sample variance as uncertain (the spread of the series' log sds about the
        pool's, and the error of the pool's own). None without a level to scale the pool's CV by, or when the
        series' own sd does not fit the pool (a new workload far noisier than the runner's others)."""
        level = abs(float(np.median(x))) if len(x) else 0.0
        if level == 0.0:
            return None
        phi = min(max(self.phi, 0.0), MAX_PHI)
        innovations = level * math.exp(self.log_cv)
        own = math.log(sd * math.sqrt(1 - phi**2) / level) if sd > 0.0 else -math.inf
        if not _fits(own, 1 / (2 * max(freedom, 1.0)), self.log_cv, self.log_cv_error, self.log_cv_spread):
            return None
        return innovations**2 / (1 - phi**2), 1 / (2 * (self.log_cv_spread + self.log_cv_error))

    def _takes(self, terms: _PoolTerms) -> bool:
        """Whether a series the pool was not built from, whose own estimates are ``terms``, may be one of its
        series (``_fits``, for its log cv and for its phi); one that may not keeps its own noise."""
        return (_fits(terms.log_cv, terms.log_cv_variance, self.log_cv, self.log_cv_error, self.log_cv_spread)
                and _fits(terms.phi, terms.phi_variance(self.phi), self.phi, self.phi_error, self.phi_spread))

    def _shrink(self, terms: _PoolTerms) -> tuple[float, float, float, float]:
        """(log cv, its variance, phi, its variance) of a series whose own estimates are ``terms``, shrunk toward
        the pool's means."""
        log_cv, cv_variance = _shrink(terms.log_cv, terms.log_cv_variance, self.log_cv, self.log_cv_error,
                                      self.log_cv_spread)
        phi, phi_variance = _shrink(terms.phi, terms.phi_variance(self.phi), self.phi, self.phi_error,
                                    self.phi_spread)
        return log_cv, cv_variance, phi, phi_variance


@dataclass(frozen=True)
class _PoolTerms:
    """One series' own noise estimate on the pool's scale, with the sampling variance of each part."""

    level: float
    log_cv: float
    log_cv_variance: float
    phi: float
    #: the degrees of freedom of the phi estimate (``phi_variance``)
    freedom: float
    estimate: Noise

    def phi_variance(self, phi: float) -> float:
        """The sampling variance of the series' phi estimate where the true phi is ``phi`` (the pool's).

        It is (1 - phi**2) / f of the true phi, not of the series' own estimate: that one, from 20 to 40 points,
        is off by 0.15 to 0.2, and with it in the variance the series whose phi came out high weighed the most in
        the pool's mean. (Meta-analyses of correlations take the mean correlation there for the same reason.)"""
        return max(1 - phi**2, 0.1) / self.freedom


def _pool_terms(x: np.ndarray, min_size: int) -> _PoolTerms | None:
    """The pool's terms of the points before a tail (the last NOISE_WINDOW of them); None when they are too few or
    have no scale (a level of 0, or no noise at all)."""
    x = x[-NOISE_WINDOW:]
    n = len(x)
    if n < MIN_POINTS_FOR_ESTIMATE:
        return None
    level = abs(float(np.median(x)))
    estimate = estimate_noise(x, min_size=min_size)
    if level == 0.0 or not estimate.innovations > 0.0:
        return None
    # the log of a sample sd with f degrees of freedom has variance about 1 / (2 f), phi's estimate (1 - phi**2) / f
    # (kept off 0 near phi = 1). The log sd is also biased low by about 1 / n (the coarse segmentation takes some
    # of the wander out): put back, since in the pool's mean the bias of every series adds up while their errors
    # cancel
    freedom = max(n - POOL_POINTS_LOSS, min_size)
    # phi is biased low by phi / n more than estimate_noise puts back (the sample autocorrelation's bias is
    # (1 + 4 phi) / n): put back too, for the same reason. Over 20 series of 25 points, the pool's phi came out
    # 0.035 low on the benchmark's AR(1) series without it
    phi = min(estimate.phi * (n - 3) / (n - 4), MAX_PHI)
    return _PoolTerms(level, math.log(estimate.innovations / level) + 1 / n, 1 / (2 * freedom), phi, freedom,
                      estimate)


def pool_noise(histories: Sequence[Sequence[float]], *, tail: int = MAX_TAIL, min_size: int = 3
               ) -> NoisePool | None:
    """The noise pool of a runner's series of one metric, from the points before each one's last ``tail``
    (as detect_latest estimates a series' own noise); None when fewer than POOL_MIN_SERIES have
    MIN_POINTS_FOR_ESTIMATE such points and a scale. Pass it to detect_latest as ``noise_pool`` for each of them.

    The series' spread is estimated by DerSimonian and Laird's moment estimator: what the series scatter about
    their mean beyond what their own estimates' errors explain. Series with the same points before their tail
    (one result stored under two workloads' names) count once: they are one estimate of the noise, and counted
    twice they would make the pool surer than it is."""
    known: dict[tuple[bytes, int], _PoolTerms] = {}
    for history in histories:
        if len(history) > tail:
            x = _as_series(history)[:-tail][-NOISE_WINDOW:]
            found = _pool_terms(x, min_size)
            if found is not None:
                known[(x.tobytes(), min_size)] = found
    if len(known) < POOL_MIN_SERIES:
        return None
    # a series that does not fit the others (POOL_MISFIT) is left out of the pool: judged with itself in, a much
    # noisier one widens the spread by enough to pass
    terms = list(known.values())
    fits = (_fits_the_others([t.log_cv for t in terms], [t.log_cv_variance for t in terms])
            & _fits_the_others([t.phi for t in terms], _phi_variances(terms)))
    kept = [t for t, fit in zip(terms, fits) if fit]
    if len(kept) < POOL_MIN_SERIES:
        return None
    log_cv = _random_effects([t.log_cv for t in kept], [t.log_cv_variance for t in kept])
    phi = _random_effects([t.phi for t in kept], _phi_variances(kept))
    misfits = frozenset(key for key, fit in zip(known, fits) if not fit)
    return NoisePool(*log_cv, *phi, len(kept), known, misfits)


def _phi_variances(terms: Sequence[_PoolTerms]) -> list[float]:
    """The sampling variances of the series' phi estimates at their mean phi, weighted by their degrees of freedom
    (``_PoolTerms.phi_variance``). The pool's own phi, the random-effects mean, is what a series the pool was not
    built from is judged with (``NoisePool._takes``); it is not known yet where these variances go into it."""
    mean = sum(t.phi * t.freedom for t in terms) / sum(t.freedom for t in terms)
    return [t.phi_variance(mean) for t in terms]


def _fits_the_others(values: Sequence[float], variances: Sequence[float]) -> np.ndarray:
    """Whether each estimate fits the random-effects mean of all the others (``_fits`` against
    ``_random_effects`` of the rest), for all of them at once: the sums of the fixed-effect fit are taken once and
    each series' own part taken out, so that a pool of N series costs N**2 additions rather than N fits."""
    x, v = np.asarray(values, dtype=float), np.asarray(variances, dtype=float)
    w = 1 / v
    x = x - float(np.sum(w * x) / np.sum(w))  # centred, so that the sums of squares below do not cancel
    sum_w, sum_wx, sum_wxx, sum_ww = (float(np.sum(t)) - t for t in (w, w * x, w * x * x, w * w))
    q = sum_wxx - sum_wx**2 / sum_w
    scale = sum_w - sum_ww / sum_w
    others = len(x) - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        spread = np.where(scale > 0, np.maximum(0.0, (q - (others - 1)) / scale), 0.0)
    weights = 1 / (v[None, :] + spread[:, None])
    np.fill_diagonal(weights, 0.0)
    total = weights.sum(axis=1)
    mean, error = weights @ x / total, 1 / total
    return np.abs(x - mean) <= POOL_MISFIT * np.sqrt(v + spread + error)


def _fits(own: float, variance: float, mean: float, error: float, spread: float) -> bool:
    """Whether a series' own estimate (of a log cv or a phi, with that sampling variance) may be one of a pool's
    whose mean has that error and whose series that spread: within POOL_MISFIT sds of the mean."""
    return abs(own - mean) <= POOL_MISFIT * math.sqrt(variance + spread + error)


def _random_effects(values: Sequence[float], variances: Sequence[float]) -> tuple[float, float, float]:
    """(mean, its variance, tau**2) of estimates ``values`` of true values that scatter with variance tau**2,
    each estimate off its own by its sampling variance (DerSimonian-Laird)."""
    x, w = np.asarray(values, dtype=float), 1 / np.asarray(variances, dtype=float)
    fixed = float(np.sum(w * x) / np.sum(w))
    q = float(np.sum(w * (x - fixed) ** 2))
    scale = float(np.sum(w) - np.sum(w**2) / np.sum(w))
    spread = max(0.0, (q - (len(x) - 1)) / scale) if scale > 0 else 0.0
    weights = 1 / (1 / w + spread)
    return float(np.sum(weights * x) / np.sum(weights)), float(1 / np.sum(weights)), spread


def _shrink(own: float, variance: float, mean: float, error: float, spread: float) -> tuple[float, float]:
    """A series' estimate moved toward the pool's mean by the weight spread / (spread + variance), and the
    variance of the result about the series' true value (its own part's, and the mean's error)."""
    weight = spread / (spread + variance)
    return weight * own + (1 - weight) * mean, weight * variance + (1 - weight) ** 2 * error


def detect_changes(
    values: Sequence[float],
    labels: Sequence[str] | None = None,
    *,
    noise_sd: float | None = None,
    noise_cv: float | None = None,
    noise_runs: int | None = None,
    min_size: int = 3,
    min_magnitude: float = 0.0,
    metric: str = "",
    unit: str = "",
    alpha: float = ALPHA,
) -> list[ChangePoint]:
    """Find the change points of a whole series, oldest first, both ways.

    Each segment is flat or a straight trend. The noise is ``noise_sd``, else ``noise_cv`` times the series'
    median magnitude, else estimated from the residuals within the segments (from MIN_POINTS_OFFLINE points on).
    ``noise_runs``: the given noise was measured from this many runs (`modelci calibrate`), so it is a sample sd
    with noise_runs - 1 degrees of freedom and is pooled with the series' own estimate; None: it is exact.
    ``metric`` and ``unit`` only dress the evidence line.
    """
    x = _as_series(values)
    labels = _as_labels(labels, len(x))
    n = len(x)
    _check_runs(noise_runs)
    if n < max(2 * min_size, MIN_POINTS_OFFLINE):
        return []
    noise, source = _trend_noise_for(x, noise_sd, noise_cv, min_size, noise_runs)
    # segments here are long, so autocorrelated noise counts with its long-run variance
    variance = noise.sd**2 * noise.variance_factor()
    beta = max(2 * math.log(n) + PENALTY_OFFSET, MIN_PENALTY)
    slope_penalty = variance * SLOPE_PENALTY * math.log(n)
    cleaned = _drop_trend_spikes(x, noise.sd, min_size)
    ends = _segment_trends(cleaned, variance * beta, slope_penalty, min_size)
    judge = _TrendJudge(cleaned, variance, slope_penalty, variance * DEGREE_PENALTY * math.log(n))
    bounds = [0, *ends]  # change point i sits between the segments [bounds[i], bounds[i+1]) and the next one
    stats = [judge.statistic(*bounds[i:i + 3]) for i in range(len(bounds) - 2)]
    # drop the weakest change point that fits no better than one smooth curve, and re-test its two neighbours only
    # (their segments grew); every other change point keeps its segments and its statistic
    while stats:
        failing = [i for i, stat in enumerate(stats) if stat < beta]
        if not failing:
            break
        worst = min(failing, key=stats.__getitem__)
        del bounds[worst + 1], stats[worst]
        for i in (worst - 1, worst):
            if 0 <= i < len(stats):
                stats[i] = judge.statistic(*bounds[i:i + 3])
    changes = []
    for i, stat in enumerate(stats):
        p_value = math.erfc(math.sqrt(max(stat, 0.0) / 2))  # chi-squared with 1 degree of freedom, upper tail
        change = judge.describe(*bounds[i:i + 3], labels, noise, source, stat, beta, p_value, alpha, metric, unit)
        if p_value < alpha and abs(change.magnitude) >= min_magnitude:
            changes.append(change)
    return changes


def detect_latest(
    values: Sequence[float],
    labels: Sequence[str] | None = None,
    *,
    noise_sd: float | None = None,
    noise_cv: float | None = None,
    noise_runs: int | None = None,
    min_size: int = 3,
    min_magnitude: float = 0.0,
    metric: str = "",
    unit: str = "",
    alpha: float = ALPHA,
    tail: int = MAX_TAIL,
    window: int = 60,
    worse: str = "both",
    noise_pool: NoisePool | None = None,
) -> ChangePoint | None:
    """Say whether the last ``tail`` (at most 6) points begin a new segment: the check that runs after each run.

    ``worse`` is the direction that is a regression: "up" (timings, memory), "down" (accuracy) or "both". A
    one-sided check ignores changes the other way and, at the same false-alarm rate, sees smaller ones. Only the
    last ``window`` points are segmented, but the noise is estimated from the MIN_POINTS_FOR_ESTIMATE to
    NOISE_WINDOW points before the tail, and a change found against a flat level is judged again over those
    points, where a slow drift shows (``_tail_candidate``): pass the history, not just the window. A shorter
    history (from MIN_POINTS_ONLINE points) is tested against a stricter threshold (SHORT_PENALTY). On a trend
    the levels of the change are the trend's fitted value at it and that plus the shift. ``noise_runs``: as in
    detect_changes.
    ``noise_pool`` (``pool_noise`` of the runner's series of this metric, this one included): the sd and phi
    estimated from the points before the tail are shrunk toward the pool's, as far as the series are alike; on a
    short history the pool's noise at the series' level is a prior sample of its noise. A series that does not
    fit the pool (POOL_MISFIT) keeps its own.
    """
    _check_runs(noise_runs)
    if not min_size <= tail <= MAX_TAIL:
        raise ValueError(f"tail must be between min_size ({min_size}) and {MAX_TAIL}, not {tail}")
    if worse not in WORSE:
        raise ValueError(f"worse must be one of {', '.join(WORSE)}, not {worse!r}")
    x = _as_series(values)
    labels = _as_labels(labels, len(x))
    settings = _Latest(noise_sd, noise_cv, noise_runs, min_size, tail, window, worse, noise_pool)
    found = _tail_candidate(x, settings)
    if found is None:
        return None
    # a change keeps the index it was first seen at: the location of a small step is uncertain by a point or
    # two, and the same change must not read as a new one each time its best location moves. Walk back over the
    # last runs while they saw a change within RELOCATE points of this one
    first = found.cut
    for back in range(1, tail + RELOCATE + 1):
        earlier = _tail_candidate(x[:-back], settings)
        if earlier is not None and 0 < abs(earlier.cut - first) <= RELOCATE:
            first = earlier.cut
    if first < len(x) - tail or first - found.begin < min_size:
        return None  # seen when it was in the tail, and older than the tail now
    alternative = {"up": "less", "down": "greater", "both": "two-sided"}[worse]
    start = found.start
    # on a trend the rank test compares the points with the trend taken out, and the levels are the trend's
    # value at the change and that plus the shift
    detrend = found.slope * np.arange(len(x) - start)
    levels = (found.before, found.before + found.shift) if found.slope else None
    change = _compare(x[start:] - detrend, found.cleaned - detrend, found.begin - start, first - start,
                      len(x) - start, labels[start:], start, metric, unit, alternative, found.noise, found.rule,
                      levels=levels)
    if not _rank_test_passes(change.p_value, first - found.begin, len(x) - first, alpha, alternative) \
            or abs(change.magnitude) < min_magnitude:
        return None
    return change


def _rank_test_passes(p_value: float, before: int, after: int, alpha: float, alternative: str) -> bool:
    """Whether the Mann-Whitney p-value passes ``alpha``; when the samples are too small for any ordering to reach
    it (3 points against 5: 1/56 one-sided), the most extreme ordering passes (every point of the tail beyond
    every point before it), so that a short history can alarm at all."""
    smallest = (1 if alternative != "two-sided" else 2) / math.comb(before + after, after)
    return p_value < alpha or p_value <= smallest * (1 + 1e-9)


@dataclass(frozen=True)
class _Latest:
    """The settings of one detect_latest call, shared with the look-back over the runs before."""

    noise_sd: float | None
    noise_cv: float | None
    noise_runs: int | None
    min_size: int
    tail: int
    window: int
    worse: str
    pool: NoisePool | None = None


@dataclass(frozen=True)
class _Candidate:
    """A change in the tail that cleared its threshold, as _tail_candidate found it."""

    start: int  # the start of the window in the series
    begin: int  # the first point of the segment the tail is tested against, in the series
    cut: int  # the first point of the change, in the series
    cleaned: np.ndarray  # the window without its spikes
    noise: Noise
    rule: str
    slope: float  # the slope of the level before the change per point (0 when it is flat)
    before: float  # the level just before the change (a trend's fitted value at ``cut``)
    shift: float  # the size of the change, in the metric's unit


def _tail_candidate(x: np.ndarray, settings: _Latest) -> _Candidate | None:
    """A change of ``x`` in the ``worse`` direction that starts in the tail and clears its threshold, or None when
    there is none (most runs): ``_window_candidate`` over the last ``window`` points, unless the level before the
    tail there is flat and the longer history says it is a trend the tail does not leave.

    A slow drift cannot be told from a flat level in the window: at 0.03 noise sds a run it rises 1.6 sds over
    the 54 points before the tail, a slope that passes its penalty about half the time. When it does not, the
    tail stands above the window's mean and the check alarmed 2.25 times per 1,000 points against 0.80 on flat
    series (100 series of 200 points). Over the NOISE_WINDOW points the noise is estimated from, the drift is
    clear: the tail is judged again there (only when the window's check found a change, so the alarm step pays
    for it rarely), and a tail that stays on that trend is no change. That takes half of those alarms and none
    of the 5% steps the benchmark finds (docs/detection.md)."""
    found, trend = _window_candidate(x, settings)
    longer = NOISE_WINDOW + settings.tail
    if found is None or trend or len(x) <= settings.window or settings.window >= longer:
        return found
    again, long_trend = _window_candidate(x, replace(settings, window=longer))
    return None if again is None and long_trend else found


def _window_candidate(x: np.ndarray, settings: _Latest) -> tuple[_Candidate | None, bool]:
    """A change of ``x`` in the ``worse`` direction that starts in the tail and clears its threshold, or None when
    there is none, over the last ``settings.window`` points; and whether the level before the tail is a trend.

    With MIN_POINTS_FOR_ESTIMATE points before the tail, the noise (sd and phi) comes from those points, given
    or estimated: the tail under test would otherwise inflate it by the very step it holds. On a shorter history
    (from MIN_POINTS_ONLINE points) the sd comes from the residuals of the whole history about its own flat and
    straight segments, where a step in the tail is a segment of its own and not noise; phi is unknown there, so
    the threshold is SHORT_PENALTY. The level before the tail may be flat or a trend: a drift that goes on is no
    change, a step on top of it is.
    """
    tail, min_size = settings.tail, settings.min_size
    n_all = len(x)
    if n_all < max(MIN_POINTS_ONLINE, 2 * min_size):
        return None, False
    short = n_all - tail < MIN_POINTS_FOR_ESTIMATE
    given = settings.noise_sd is not None or settings.noise_cv is not None
    # a given noise measured from a few runs is a sample sd (runs - 1 degrees of freedom), pooled with the
    # series' own estimate: trusted as exact, one calibrated a third low (5 runs: 1 in 6) alarmed 27 times per
    # 1,000 points on the benchmark's AR(1) series (docs/detection.md)
    measured = given and settings.noise_runs is not None
    if short:
        noise = _short_noise(x, settings.noise_sd, settings.noise_cv, min_size, settings.noise_runs)
    else:
        noise = _noise_for(x[:-tail][-NOISE_WINDOW:], settings.noise_sd, settings.noise_cv, min_size,
                           settings.noise_runs, settings.pool)
    if noise.sd == 0.0:
        return None, False
    start = max(0, n_all - settings.window)
    cleaned = _drop_spikes(x[start:], noise.sd, min_size)
    n = len(cleaned)
    # PELT over flat and straight segments finds where the current level began: the tail is tested against the
    # points since the last change point before it (an older change was reported while it was in the tail), and
    # a drift is one segment rather than a staircase whose last step the tail would always stand above
    variance = noise.sd**2 * noise.variance_factor()
    slope_penalty = variance * SLOPE_PENALTY * math.log(n)
    ends = _segment_trends(cleaned, variance * SEGMENT_PENALTY, slope_penalty, min_size)
    begin = max([0, *(end for end in ends[:-1] if end < n - tail)])
    tails = np.arange(min_size, min(tail + LOOKBACK, n - begin - min_size) + 1)
    if not len(tails):
        return None, False
    # the level before the tail is a trend when a line fits the points before the whole tail clearly better
    # (judged without the tail: a step there would pass for a slope)
    trend = (n - tail - begin >= TREND_MIN_POINTS
             and _TrendJudge(cleaned, variance, slope_penalty).fit(begin, n - tail)[1] == 2)
    # on a short history with no noise given, each shift is judged against the residuals of its own fit (a t
    # test, turned into the normal z of the same p-value): the step is in the model, so it cannot inflate them.
    # A noise measured from a few runs joins those residuals as a prior sample of the same noise
    prior: tuple[float, float] | None = None
    if short and measured:
        prior = ((_given_sd(x, settings.noise_sd, settings.noise_cv) or 0.0) ** 2, settings.noise_runs - 1)
    elif short and not given and settings.pool is not None:
        # a new workload on a runner whose series pool their noise: the pool's CV at this series' level is a
        # prior sample of its noise, worth as many degrees of freedom as the series' spread about it allows
        # (many when they are alike, a few when they are far apart)
        prior = settings.pool.prior(x[:-tail], noise.sd, n_all - 2 * min_size)
    z, beta, shape = _shift_fit(cleaned[begin:], tails, noise, trend, studentise=short and (not given or measured),
                                prior=prior)
    z = {"up": z, "down": -z, "both": np.abs(z)}[settings.worse]
    # a noise pooled over the runner's series is known better than one series' own estimate, and its phi needs
    # less of the margin for errors; a given exact sd with only phi pooled keeps the margin it was tuned with
    both_pooled = noise.pooled > 0 and not (given and not measured)
    # a change seen in fewer points must be larger: the false alarms saved there pay for a lower threshold at
    # the full tail, where the small steps are found
    threshold = (
        (SHORT_PENALTY if short else LATEST_PENALTY) + (POOLED_PHI_PENALTY if both_pooled else PHI_PENALTY) * noise.phi
        + SHORT_TAIL * (tail - tails)
        + (BOTH_WAYS if settings.worse == "both" else 0.0)
    )
    threshold = _skewed(threshold, noise.skew * shape, settings.worse)
    margin = np.where(z > 0, z**2, 0.0) - threshold
    inside = tails <= tail
    if not np.any(margin[inside] >= 0):
        return None, trend
    # the change must look as if it began in the tail: when a start just before it fits better, it is an older
    # change (reported when it was new, or too small then) that the tail merely continues
    if np.any(~inside) and z[~inside].max() > z[inside].max():
        return None, trend
    # the change starts where it fits best (its largest z), not where it clears its threshold by the most: a
    # longer tail has the lower threshold, and would start a clear 4-point step 2 points early at half its size
    k = int(np.argmax(np.where(inside, z, -np.inf)))
    best = int(tails[k])
    m = n - begin
    level, slope, shift = (float(v) for v in beta[k])
    # the fitted level of the points before the change, at the change: a trend's value there, extrapolated
    before = level + slope * (m - best - (m - 1) / 2) / m
    way = {"up": "up", "down": "down", "both": "either way"}[settings.worse]
    against = "the trend of" if trend else "the"
    before_tail = min(n_all - tail, NOISE_WINDOW)
    if short and not given and prior is not None and settings.pool is not None:
        source = (f"a short history: z from a t test on the residuals of this fit over {m} points pooled with the "
                  f"noise of the {settings.pool.series} series of this metric on this runner")
    elif short and not given:
        source = f"a short history: z from a t test on the residuals of this fit over {m} points"
    elif short and measured:
        source = (f"a short history: z from a t test on the residuals of this fit over {m} points pooled with the "
                  f"sd measured from {settings.noise_runs} runs")
    elif short:
        source = "a short history: sd given, phi unknown"
    elif measured:
        source = (f"sd measured from {settings.noise_runs} runs pooled with the estimate from the {before_tail} "
                  f"points before the tail, phi from them")
    else:
        source = f"sd {'given' if given else 'estimated'}, phi from the {before_tail} points before the tail"
    if noise.pooled:  # a given exact sd is kept: only phi is pooled then
        pooled = "both" if both_pooled else "phi"
        source += f", {pooled} pooled with the {noise.pooled} series of this metric on this runner"
    skew = f", skewness {noise.skew:.2f}" if noise.skew else ""
    sd = f"noise sd {noise.sd:.3g}, phi {noise.phi:.2f}{skew}; " if not (short and (not given or measured)) else ""
    rule = (f"the last {best} points shifted {way} by z={z[k]:.1f} against {against} {m - best} before them "
            f"(needs {math.sqrt(threshold[k]):.1f}; {sd}{source})")
    return _Candidate(start, start + begin, start + n - best, cleaned, noise, rule, slope / m, before, shift), trend


def _skewed(threshold: np.ndarray, skew: np.ndarray, worse: str) -> np.ndarray:
    """The z**2 thresholds raised for a shift estimate of skewness ``skew`` (positive: a long tail up), so that
    its tail beyond them is as rare as a normal one's beyond ``threshold``: the Cornish-Fisher expansion, z + skew
    (z**2 - 1) / 6. Only raised: a tail shorter than the normal one's keeps the normal threshold, since the
    skewness is itself an estimate."""
    towards = {"up": skew, "down": -skew, "both": np.abs(skew)}[worse]
    z = np.sqrt(threshold)
    return (z + np.maximum(towards, 0.0) * (z**2 - 1) / 6) ** 2


def _short_noise(x: np.ndarray, noise_sd: float | None, noise_cv: float | None, min_size: int,
                 noise_runs: int | None = None) -> Noise:
    """The noise of a history too short to estimate phi (0 here: SHORT_PENALTY pays for it): the sd given, or the
    sd of the residuals of the whole history about its own flat and straight segments, or (``noise_runs``) the
    two pooled. It only clips spikes and sets the segmentation's penalty (a given sd measured too low must not
    clip the noise itself); the test uses the residuals of each shift's own fit, unless the sd is exact."""
    floor = 1e-9 * max(abs(float(np.median(x))), 1e-12)  # an exactly repeatable metric (bytes) has sd 0
    given = _given_sd(x, noise_sd, noise_cv)
    if given is not None and noise_runs is None:
        return Noise(max(given, floor), 0.0)
    sd = estimate_trend_noise(x, min_size=min_size).sd
    if given is not None and noise_runs is not None:
        sd = _pooled(given, noise_runs, sd, len(x))
    return Noise(max(sd, floor), 0.0)


def _shift_z(segment: np.ndarray, tails: np.ndarray, noise: Noise) -> np.ndarray:
    """The z of a shift of the last k points of ``segment`` against a flat level, for each k in ``tails``."""
    return _shift_fit(segment, tails, noise, trend=False)[0]


def _shift_fit(segment: np.ndarray, tails: np.ndarray, noise: Noise, trend: bool,
               studentise: bool = False, prior: tuple[float, float] | None = None,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The z of a shift of the last k points of ``segment``, for each k in ``tails``, the fitted (level at the
    middle, slope per unit of scaled time, shift) of each, and the skewness of each shift's estimate per unit of
    the innovations' skewness: generalised least squares under AR(1) noise, on a flat
    level or (``trend``) on a straight one. ``studentise``: the sd is not the noise's but that of the residuals
    of each fit, and the z is the normal one of the same p-value as the Student t this gives; with ``prior``
    (a variance and its degrees of freedom, measured elsewhere) the residuals are pooled with it.

    After the Prais-Winsten transform (each point less phi times the one before) the noise is white, and the
    first point after a step carries the whole step while each later one carries (1 - phi) of it: least squares
    weighs them so. For phi = 0 and a flat level this is the difference of the two means over its sd. At
    phi = 0.5, 6 points carry 3 (delta/sd)**2 this way, where their plain mean carries 2.6 (delta/sd)**2. The
    time is scaled to [-0.5, 0.5] so that the normal equations stay well conditioned.
    """
    m, phi = len(segment), noise.phi
    root = math.sqrt(1 - phi**2)

    def whiten(v: np.ndarray) -> np.ndarray:
        out = np.empty(len(v))
        out[0] = root * v[0]
        out[1:] = v[1:] - phi * v[:-1]
        return out

    t = (np.arange(m) - (m - 1) / 2) / m
    columns = np.column_stack([whiten(np.ones(m)), whiten(t)] if trend else [whiten(np.ones(m))])
    y = whiten(np.asarray(segment, dtype=float))
    # the whitened step of the last k points: 1 at its first point, 1 - phi after
    steps = np.zeros((m, len(tails)))
    for j, k in enumerate(tails):
        steps[m - k, j] = 1.0
        steps[m - k + 1:, j] = 1 - phi
    p = columns.shape[1]
    normal = np.empty((len(tails), p + 1, p + 1))
    normal[:, :p, :p] = columns.T @ columns
    cross = (columns.T @ steps).T
    normal[:, :p, p] = cross
    normal[:, p, :p] = cross
    normal[:, p, p] = np.einsum("ij,ij->j", steps, steps)
    right = np.empty((len(tails), p + 1))
    right[:, :p] = columns.T @ y
    right[:, p] = steps.T @ y
    inverse = np.linalg.inv(normal)
    beta = np.einsum("kij,kj->ki", inverse, right)
    # the weights of the shift's estimate on the whitened points, for its skewness: their squares sum to
    # inverse[p, p], and their cubes (a few large ones on the tail, many small ones before it) carry the skewness
    # of the noise into the estimate
    weights = np.einsum("ki,mi->km", inverse[:, p, :p], columns) + inverse[:, p, p][:, None] * steps.T
    shape = np.sum(weights**3, axis=1) / inverse[:, p, p] ** 1.5
    if studentise:
        from scipy import stats

        freedom = m - p - 1
        residual = np.maximum(float(y @ y) - np.einsum("ki,ki->k", beta, right), 0.0)
        if prior is not None:
            residual = residual + prior[1] * prior[0]
            freedom += prior[1]
        sd = np.sqrt(residual / freedom)
        floor = 1e-9 * max(abs(float(np.median(segment))), 1e-12)
        t_values = beta[:, p] / (np.maximum(sd, floor) * np.sqrt(inverse[:, p, p]))
        z = np.sign(t_values) * stats.norm.isf(stats.t.sf(np.abs(t_values), freedom))
    else:
        # the whitened noise is the innovations
        z = beta[:, p] / (noise.innovations * np.sqrt(inverse[:, p, p]))
    if not trend:
        beta = np.column_stack([beta[:, 0], np.zeros(len(tails)), beta[:, 1]])
    return z, beta, shape


class _TrendCosts:
    """The residual sums of squares of a flat and of a straight-line fit of any slice of a series, in O(1) each from
    prefix sums (the times scaled to [-0.5, 0.5] and the values to [-1, 1], so that the sums stay exact enough)."""

    def __init__(self, x: np.ndarray):
        n = len(x)
        t = (np.arange(n) - (n - 1) / 2) / max(n, 1)
        centre = float(np.median(x))
        scale = float(np.max(np.abs(x - centre))) if n else 0.0
        scale = scale or 1.0
        y = (x - centre) / scale
        self.scale2 = scale * scale

        def prefix(v: np.ndarray) -> np.ndarray:
            return np.concatenate([[0.0], np.cumsum(v)])

        self.t, self.tt, self.y, self.ty, self.yy = prefix(t), prefix(t * t), prefix(y), prefix(t * y), prefix(y * y)

    def rss(self, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(flat, linear) residual sums of squares of the slices [start, end), elementwise."""
        m = (end - start).astype(float)
        st, stt = self.t[end] - self.t[start], self.tt[end] - self.tt[start]
        sy, sty, syy = self.y[end] - self.y[start], self.ty[end] - self.ty[start], self.yy[end] - self.yy[start]
        flat = syy - sy * sy / m
        sxx = stt - st * st / m
        sxy = sty - st * sy / m
        with np.errstate(divide="ignore", invalid="ignore"):
            explained = np.where(sxx > 0, sxy * sxy / np.where(sxx > 0, sxx, 1.0), 0.0)
        return np.maximum(flat, 0.0) * self.scale2, np.maximum(flat - explained, 0.0) * self.scale2


def _segment_trends(x: np.ndarray, penalty: float, slope_penalty: float, min_size: int) -> list[int]:
    """PELT over segments that are each flat or a straight line (the line costing ``slope_penalty`` more); returns
    the end of each segment, the last one being len(x).

    ruptures has the costs (``CostL2``, ``CostLinear``) but solves a least-squares fit per candidate segment in
    Python, and cannot take the cheaper of two models per segment; with prefix sums each candidate costs O(1), and
    one vectorised step per point keeps 500 points to about 0.1 s.
    """
    n = len(x)
    costs = _TrendCosts(x)
    if n <= SMALL_PARTITION:
        return _partition_trends(costs, n, penalty, slope_penalty, min_size)
    best = np.full(n + 1, np.inf)
    best[0] = -penalty
    previous = np.zeros(n + 1, dtype=int)
    candidates = np.array([0])
    for end in range(min_size, n + 1):
        usable = candidates[candidates <= end - min_size]
        flat, linear = costs.rss(usable, np.full(len(usable), end))
        total = best[usable] + np.minimum(flat, linear + slope_penalty) + penalty
        k = int(np.argmin(total))
        best[end], previous[end] = total[k], usable[k]
        # PELT's pruning (its constant is 0 here): a start that cannot beat the best now never will
        waiting = candidates[candidates > end - min_size]
        candidates = np.concatenate([usable[total - penalty <= best[end]], waiting, [end - min_size + 1]])
    ends = []
    end = n
    while end > 0:
        ends.append(end)
        end = int(previous[end])
    return ends[::-1]


#: up to this many points _segment_trends computes the cost of every segment at once and partitions exactly
#: without PELT's pruning: ten times faster on the online check's window of 60 points, the same partition
SMALL_PARTITION = 200


def _partition_trends(costs: _TrendCosts, n: int, penalty: float, slope_penalty: float, min_size: int) -> list[int]:
    """The optimal partition of _segment_trends from the costs of all segments at once (O(n**2) memory)."""
    starts, ends = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    valid = ends - starts >= min_size
    flat, linear = costs.rss(np.where(valid, starts, 0), np.where(valid, ends, min_size))
    cost = np.where(valid, np.minimum(flat, linear + slope_penalty), np.inf)
    best = np.full(n + 1, np.inf)
    best[0] = -penalty
    previous = np.zeros(n + 1, dtype=int)
    for end in range(min_size, n + 1):
        total = best[: end - min_size + 1] + cost[: end - min_size + 1, end]
        k = int(np.argmin(total))
        best[end], previous[end] = total[k] + penalty, k
    result = []
    end = n
    while end > 0:
        result.append(end)
        end = int(previous[end])
    return result[::-1]


class _TrendJudge:
    """Fits and tests the segments of one series for detect_changes."""

    def __init__(self, x: np.ndarray, variance: float, slope_penalty: float, degree_penalty: float = 0.0):
        self.x, self.variance, self.slope_penalty, self.degree_penalty = x, variance, slope_penalty, degree_penalty
        self.costs = _TrendCosts(x)

    def fit(self, start: int, end: int) -> tuple[float, int]:
        """The penalised residual sum of squares of [start, end), flat or a line, and its parameter count."""
        flat, linear = (float(v[0]) for v in self.costs.rss(np.array([start]), np.array([end])))
        return (flat, 1) if flat <= linear + self.slope_penalty else (linear + self.slope_penalty, 2)

    def smooth(self, start: int, end: int) -> float:
        """The penalised residual sum of squares of one polynomial (a quadratic, a cubic) over [start, end)."""
        m = end - start
        best = math.inf
        t = np.linspace(-1.0, 1.0, m)
        for degree, points in SMOOTH_MIN_POINTS.items():
            if m >= points:
                design = np.vander(t, degree + 1)
                coef, *_ = np.linalg.lstsq(design, self.x[start:end], rcond=None)
                residuals = self.x[start:end] - design @ coef
                best = min(best, float(residuals @ residuals) + degree * self.degree_penalty)
        return best

    def statistic(self, start: int, cut: int, end: int) -> float:
        """How much better two segments fit [start, end) than one flat, straight or smooth curve does, in units of
        the noise variance, or of the two segments' own misfit when that is larger (a smooth curve with next to no
        noise is cut into lines by any penalty from its noise; its misfit is what it must beat then)."""
        (before, p1), (after, p2) = self.fit(start, cut), self.fit(cut, end)
        two = before + after
        one = min(self.fit(start, end)[0], self.smooth(start, end))
        misfit = two / max(end - start - p1 - p2, 1)
        return (one - two) / max(self.variance, misfit)

    def level(self, start: int, end: int, at: int) -> tuple[float, float, bool]:
        """The fitted level of [start, end) at index ``at``, the sd about the fit, and whether it is a trend."""
        segment = self.x[start:end]
        (_, params) = self.fit(start, end)
        if params == 1 or len(segment) < 3:
            return float(segment.mean()), float(segment.std(ddof=1)) if len(segment) > 1 else 0.0, False
        t = np.arange(start, end, dtype=float)
        slope, intercept = np.polyfit(t, segment, 1)
        residuals = segment - (slope * t + intercept)
        return float(slope * at + intercept), float(np.sqrt(residuals @ residuals / (len(segment) - 2))), True

    def describe(self, start: int, cut: int, end: int, labels: Sequence[str], noise: Noise, source: str,
                 stat: float, beta: float, p_value: float, alpha: float, metric: str, unit: str) -> ChangePoint:
        """The change at ``cut`` between [start, cut) and [cut, end), with its evidence and its rule."""
        before, before_sd, before_trend = self.level(start, cut, cut - 1)
        after, after_sd, after_trend = self.level(cut, end, cut)
        shift = after - before
        magnitude = _relative(before, after)
        word = "level" if before_trend or after_trend else "mean"
        shapes = f"{'trend' if before_trend else 'flat'} → {'trend' if after_trend else 'flat'}"
        one = ('flat, straight or smooth curve' if end - start >= min(SMOOTH_MIN_POINTS.values())
               else 'flat or straight segment')
        rule = (
            f"{shapes} at point {cut} fits {stat:.1f} noise variances better than one {one}"
            f" over points {start}-{end - 1} (needs {beta:.1f}: 2 ln {len(self.x)} + {PENALTY_OFFSET:g}), "
            f"p={p_value:.1g} < "
            f"{alpha:g}; noise sd {noise.sd:.3g} ({source}), phi {noise.phi:.2f}; a shift of {shift / noise.sd:+.1f} sd"
            if noise.sd > 0 else f"{shapes} at point {cut}: the series has no noise"
        )
        return ChangePoint(
            index=cut, label=labels[cut], magnitude=magnitude, before_mean=before, before_sd=before_sd,
            after_mean=after, after_sd=after_sd, p_value=p_value,
            evidence=_evidence(metric, unit, labels[cut], word, before, before_sd, after, after_sd, shift, noise.sd,
                               p_value),
            shift=shift, noise_sd=noise.sd, rule=rule,
        )


def _relative(before: float, after: float) -> float:
    """(after - before) / |before|: signed the way the value went, also for negative levels; ±inf from 0."""
    if before != 0.0:
        return (after - before) / abs(before)
    return 0.0 if after == 0.0 else math.copysign(math.inf, after)


def _evidence(metric: str, unit: str, label: str, word: str, before: float, before_sd: float, after: float,
              after_sd: float, shift: float, sd: float, p_value: float) -> str:
    """One human line: the change in % of the level, or in the metric's unit when the level is near zero (within
    3 noise sds of it, where a percentage means nothing), then the levels and the p-value."""
    name = metric or "value"
    unit_text = f" {unit}" if unit else ""
    if abs(before) > 3 * sd and before != 0.0:
        size = f"{_relative(before, after):+.1%}"
    else:
        size = f"{shift:+.3g}{unit_text}"
    return (f"{name} {size} from {label} ({word} {before:.3g}±{before_sd:.2g} → {after:.3g}±{after_sd:.2g}{unit_text}, "
            f"p={p_value:.1g})")


def _trend_noise_for(x: np.ndarray, noise_sd: float | None, noise_cv: float | None,
                     min_size: int, noise_runs: int | None = None) -> tuple[Noise, str]:
    """detect_changes' noise and where it came from: the calibrated one when given (phi still from the series once
    it has MIN_POINTS_FOR_ESTIMATE points), else estimated from the residuals within segments, padded; one
    measured from ``noise_runs`` runs is pooled with that estimate and padded as it would be with its points.

    The floor keeps the penalty above the rounding of the fits on a noise-free series: a millionth of its range."""
    n = len(x)
    spread = float(np.max(x) - np.min(x))
    floor = max(1e-9 * abs(float(np.median(x))), 1e-6 * spread, 1e-300)
    estimate = estimate_trend_noise(x, min_size=min_size)
    phi = estimate.phi
    if phi > 1 / math.sqrt(n):
        # clearly autocorrelated: pad phi against its own uncertainty, as the sd below; a phi that may be 0 is
        # left alone so that iid noise does not pay for it in power
        phi = min(phi + PHI_PADDING / math.sqrt(n), MAX_PHI)
    given = _given_sd(x, noise_sd, noise_cv)
    if given is not None and noise_runs is None:
        return Noise(max(given, floor), phi), "given" if noise_sd is not None else "given as a CV"
    # an estimated sd is itself uncertain, the more so on short or autocorrelated histories: pad it
    effective_points = n * (1 - phi) / (1 + phi) if n >= MIN_POINTS_FOR_ESTIMATE else float(n)
    sd, source = estimate.sd, "estimated"
    if given is not None and noise_runs is not None:
        # the marginal sd of AR(1) noise from n points is worth n (1 - phi**2) / (1 + phi**2) independent ones
        sd = _pooled(given, noise_runs, sd, n * (1 - phi**2) / (1 + phi**2))
        effective_points += noise_runs - 1
        source = f"measured from {noise_runs} runs, pooled with the estimate"
    padding = 1 + (SHORT_SD_PADDING / math.sqrt(effective_points) if n < MIN_POINTS_FOR_ESTIMATE
                   else SD_PADDING / math.sqrt(effective_points))
    return Noise(max(sd * padding, floor), phi), source


def estimate_trend_noise(values: Sequence[float], *, min_size: int = 3) -> Noise:
    """The noise of a series that may hold trends and steps: the sd and phi of the residuals about a coarse
    segmentation into flat and straight segments, so that neither a drift nor the step itself inflates them.

    The first sd comes from first differences about their median (a trend shifts them all alike, a step touches
    one), and from 50 points on also from lag-5 ones (AR(1) noise hides in first differences). Below
    MIN_POINTS_FOR_ESTIMATE points phi is 0: a dozen points cannot tell it from a step."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 4:
        return Noise(0.0, 0.0)
    sd0 = math.sqrt(_robust_var(np.diff(x), trim=DIFFERENCE_TRIM) / 2)
    if n >= 50:
        sd0 = max(sd0, math.sqrt(_robust_var(x[5:] - x[:-5], trim=DIFFERENCE_TRIM) / 2))
    if sd0 == 0.0:
        return Noise(0.0, 0.0)
    # coarse on long series (it assumes phi = 0.5, variance x3) so that AR(1) wander stays in the residuals for phi
    # to see; plain on short ones, where a clear step must come out of the residuals
    coarse = 3.0 if n >= 50 else 1.0
    penalty = coarse * sd0**2 * (2 * math.log(n) + 4)
    slope_penalty = sd0**2 * math.log(n)
    ends = _segment_trends(x, penalty, slope_penalty, max(min_size, 4))
    judge = _TrendJudge(x, 0.0, slope_penalty)
    residuals, params = [], 0
    for start, end in zip([0, *ends[:-1]], ends):
        segment = x[start:end]
        if judge.fit(start, end)[1] == 1:
            residuals.append(segment - np.median(segment))
            params += 1
        else:
            t = np.arange(len(segment), dtype=float)
            residuals.append(segment - np.polyval(np.polyfit(t, segment, 1), t))
            params += 2
    unclipped = np.concatenate(residuals)
    # the sd from the residuals as they are, phi from them clipped (as in estimate_noise)
    r = np.clip(unclipped, -3 * sd0, 3 * sd0)
    sd = math.sqrt(_robust_var(unclipped, RESIDUAL_TIES) * n / max(n - params, 1))
    if n < MIN_POINTS_FOR_ESTIMATE:
        return Noise(sd, 0.0)
    centred = r - r.mean()
    denominator = float(centred @ centred)
    phi = float(centred[1:] @ centred[:-1] / denominator) if denominator > 0 else 0.0
    phi = (n * phi + 1) / (n - 3)  # the lag-1 sample autocorrelation is biased low by about (1 + 3 phi) / n
    return Noise(sd, min(max(phi, 0.0), MAX_PHI))


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
    noise: Noise | None = None,
    rule: str = "",
    levels: tuple[float, float] | None = None,
) -> ChangePoint:
    """Describe the change at ``cut`` between the segments [start, cut) and [cut, end); ``levels``: the levels
    just before and after it when they are not the segments' means (a trend's, fitted)."""
    noise_sd = noise.sd if noise is not None else 0.0
    before, after = cleaned[start:cut], cleaned[cut:end]
    # means and sds without the spikes: one must not make a 10% change read as 25%
    before_mean, after_mean = levels or (float(before.mean()), float(after.mean()))
    before_sd, after_sd = float(before.std(ddof=1)), float(after.std(ddof=1))
    magnitude = _relative(before_mean, after_mean)
    p_value = mann_whitney(x[start:cut], x[cut:end], alternative)
    label = labels[cut]
    evidence = _evidence(metric, unit, label, "level" if levels else "mean", before_mean, before_sd, after_mean,
                         after_sd, after_mean - before_mean, noise_sd, p_value)
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
        shift=after_mean - before_mean,
        noise_sd=noise_sd,
        rule=f"{rule}, Mann-Whitney p={p_value:.1g}" if rule else "",
    )


def _noise_for(x: np.ndarray, noise_sd: float | None, noise_cv: float | None, min_size: int,
               noise_runs: int | None = None, pool: NoisePool | None = None) -> Noise:
    """detect_latest's noise from the points before the tail (at least MIN_POINTS_FOR_ESTIMATE): the given one
    when exact (phi still comes from the series); else estimated, or the given one measured from ``noise_runs``
    runs pooled with the estimate, padded against its own uncertainty (LATEST_SD_PADDING). With a ``pool`` the
    series' own sd and phi are first shrunk toward the pool's (``NoisePool``), and are worth as many points as
    the shrunk estimate's variance says."""
    if len(x) < 3:
        return Noise(0.0, 0.0)
    terms, shrunk = pool.own(x, min_size) if pool is not None else (None, None)
    estimate = terms.estimate if terms is not None else estimate_noise(x, min_size=min_size)
    phi = estimate.phi if len(x) >= MIN_POINTS_FOR_ESTIMATE else 0.0
    floor = 1e-9 * max(abs(float(np.median(x))), 1e-12)  # an exactly repeatable metric (bytes) has sd 0
    given = _given_sd(x, noise_sd, noise_cv)
    skew = estimate.skew if len(x) >= MIN_POINTS_FOR_ESTIMATE else 0.0
    pooled = 0
    n = len(x)
    sd, innovations, points = estimate.sd, estimate.innovation_sd, float(n)
    # the marginal sd of AR(1) noise from n points is worth n (1 - phi**2) / (1 + phi**2) independent ones; its
    # innovations about n
    sd_points = n * (1 - phi**2) / (1 + phi**2)
    if terms is not None and pool is not None and shrunk is not None:
        log_cv, cv_variance, phi, _ = shrunk
        phi = min(max(phi, 0.0), MAX_PHI)
        innovations = terms.level * math.exp(log_cv)
        sd = innovations / math.sqrt(1 - phi**2)
        points = sd_points = 1 / (2 * cv_variance)  # the sample sd that is as uncertain
        pooled = pool.series
    if given is not None and noise_runs is None:
        return Noise(max(given, floor), phi, skew=skew, pooled=pooled)
    if len(x) < MIN_POINTS_FOR_ESTIMATE:
        return Noise(0.0, 0.0)  # too few points to know the noise: report nothing rather than guess
    if given is not None and noise_runs is not None:
        sd = _pooled(given, noise_runs, sd, sd_points)
        if innovations is not None:
            innovations = _pooled(given * math.sqrt(1 - phi**2), noise_runs, innovations, points)
        points += noise_runs - 1
    # an estimated sd is itself uncertain, the more so on short or autocorrelated histories: pad it so that
    # those do not over-alarm (most AR(1) false alarms came from the first 50 points without it)
    padding = 1 + LATEST_SD_PADDING / points
    # innovations of 0 (residuals that all tie: a run of equal values before the tail) divided every z by 0: the
    # innovations then follow from the sd, as when they are not estimated
    return Noise(max(sd * padding, floor), phi, innovations * padding if innovations else None, skew, pooled)


def _given_sd(x: np.ndarray, noise_sd: float | None, noise_cv: float | None) -> float | None:
    """The noise sd given: ``noise_sd``, or ``noise_cv`` times the series' median magnitude; None when neither."""
    if noise_sd is not None:
        return float(noise_sd)
    if noise_cv is not None:
        return float(noise_cv) * abs(float(np.median(x)))
    return None


def _pooled(given: float, runs: int, estimate: float, freedom: float) -> float:
    """An sd measured from ``runs`` runs (runs - 1 degrees of freedom) and one estimated with ``freedom``, pooled as
    two sample variances of the same noise."""
    prior = runs - 1
    return math.sqrt((prior * given**2 + freedom * estimate**2) / (prior + freedom))


def _check_runs(noise_runs: int | None) -> None:
    whole = isinstance(noise_runs, numbers.Integral) and not isinstance(noise_runs, bool)
    if noise_runs is not None and not (whole and noise_runs >= 2):
        raise ValueError("noise_runs must be the whole number of runs (2 or more) the noise given was measured "
                         f"from, or None when it is exact, not {noise_runs!r}")


def _segment(x: np.ndarray, penalty: float, min_size: int) -> list[int]:
    """PELT with the l2 cost; returns the end of each segment, the last one being len(x)."""
    # KernelCPD with the linear kernel is PELT on the l2 cost written in C: ~100x faster than rpt.Pelt
    import ruptures

    algo = ruptures.KernelCPD(kernel="linear", min_size=min_size, jump=1).fit(x.reshape(-1, 1))
    return [int(end) for end in algo.predict(pen=penalty)]


def _drop_trend_spikes(x: np.ndarray, sd: float, min_size: int) -> np.ndarray:
    """_drop_spikes for series with trends: in the first and last ``min_size`` points a spike must also stand
    SPIKE sds off the line through its two neighbours (extrapolated at the ends). There the local median lags a
    steep trend and would flatten the last points of a drift into a step of their own; inside, the centred median
    follows a straight trend exactly."""
    if len(x) < 2 * min_size + 1:
        return x
    cleaned = _drop_spikes(x, sd, min_size)
    line = np.empty_like(x)
    line[1:-1] = (x[:-2] + x[2:]) / 2
    line[0], line[-1] = 2 * x[1] - x[2], 2 * x[-2] - x[-3]
    # inside, the centred median follows a straight trend exactly; only the ends need the line
    off = np.abs(x - line) > SPIKE * sd
    off[min_size:-min_size] = True
    return np.where(off, cleaned, x)


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


def _robust_var(d: np.ndarray, ties: tuple[float, float] = TIES, trim: float | None = None) -> float:
    """Variance of ``d`` about its median, ignoring points beyond TRIM MAD-sds (corrected for the trimming).

    Quantized values (peak memory in pages, counts, rounded numbers) tie: when between ``ties`` of ``d`` sit
    exactly at its median, the MAD is 0 or far below the spread, and the noise taken from it made every page of
    memory a change point (6 in a 120-run series that only moved by a page either way, 14 on average in counts
    of mean 0.5). Their variance is then the plain one, untrimmed: a step of two quanta is noise there, not a
    spike. Continuous values never tie, so their estimate is the MAD's as before; nor do the differences of a
    noise-free series with a few steps (a deterministic loss across builds), whose steps must not be taken for
    its noise."""
    d = d - np.median(d)
    size = np.abs(d)
    if ties[0] * len(d) < np.count_nonzero(size == 0.0) <= ties[1] * len(d):
        return float(np.mean(d**2))  # not trimmed either: a few steps of the quantum are noise, not spikes
    scale = 1.4826 * float(np.median(size))
    if scale == 0.0:
        return 0.0
    trim = TRIM if trim is None else trim
    kept = d[size < trim * scale]
    return float(np.mean(kept**2)) / _trimmed_normal_var(trim)


def _trimmed_normal_var(c: float) -> float:
    """The variance of a standard normal truncated at +-c: what the trimmed variance of normal noise comes out as."""
    density = math.exp(-c * c / 2) / math.sqrt(2 * math.pi)
    return 1 - 2 * c * density / math.erf(c / math.sqrt(2))


#: the largest magnitude a series may hold: the sums of squares the detector takes overflow past about 1e154
MAX_LEVEL = 1e150


def _as_series(values: Sequence[float]) -> np.ndarray:
    """The values as a float array; a NaN, an infinity or a value past MAX_LEVEL is a bug upstream, not noise."""
    x = np.asarray(values, dtype=float).ravel()
    if not np.all(np.isfinite(x)) or (len(x) and float(np.max(np.abs(x))) > MAX_LEVEL):
        raise ValueError(f"a history series must hold only finite values of at most {MAX_LEVEL:g} in magnitude")
    return x


def _as_labels(labels: Sequence[str] | None, n: int) -> list[str]:
    """The labels, or the indexes as text when none are given."""
    if labels is None:
        return [str(i) for i in range(n)]
    if len(labels) != n:
        raise ValueError(f"{len(labels)} labels for {n} values")
    return [str(label) for label in labels]
