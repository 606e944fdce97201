"""The rank test the checks share: the Mann-Whitney U test of scipy, with the case it cannot answer answered.

Used by the timing check (a result's samples against its baseline's) and by the change points (the points of a
series before a change against those after it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def mann_whitney(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
                 alternative: str = "two-sided") -> float:
    """The p-value of the Mann-Whitney U test of `a` against `b` (`alternative` as scipy's: "less" means a tends
    to be less than b). When every value of both is the same there is no difference to find, and scipy would
    divide by zero: the answer is 1.0."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size and np.all(a == a[0]) and np.all(b == a[0]):
        return 1.0
    from scipy import stats  # seconds to import: only a comparison that reaches the test pays for it

    return float(stats.mannwhitneyu(a, b, alternative=alternative).pvalue)
