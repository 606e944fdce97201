"""The curve check on real loss curves: first diverging step, growing tolerance, length, NaN."""

from __future__ import annotations

import numpy as np
import pytest

from modelci.checks import Policy
from modelci.checks.curve import check_curve, curve_tolerance


def loss_curve(steps: int = 20) -> list[float]:
    return list(2.3 * np.exp(-0.1 * np.arange(steps)) + 0.2)


def test_identical_curves_are_ok():
    finding = check_curve("loss", loss_curve(), loss_curve(), Policy())
    assert finding.verdict == "ok"
    assert finding.numbers["first_diverging_step"] is None
    assert finding.numbers["steps_compared"] == 20 and finding.numbers["max_rel_diff"] == 0.0


def test_curve_diverging_at_step_7_reports_step_7_and_the_final_loss():
    base = loss_curve()
    cur = base[:7] + [v * 1.01 for v in base[7:]]
    finding = check_curve("loss", base, cur, Policy())
    assert (finding.check, finding.verdict) == ("curve", "regression")
    assert finding.numbers["first_diverging_step"] == 7
    assert finding.numbers["max_rel_diff"] == pytest.approx(0.01)
    assert finding.numbers["final_current"] == pytest.approx(base[-1] * 1.01)
    assert finding.numbers["final_baseline"] == pytest.approx(base[-1])
    assert "step 7" in finding.message and f"{base[-1] * 1.01:.6g}" in finding.message


def test_tolerance_grows_with_the_step():
    base = loss_curve()
    # a drift of 1e-4 relative at the last step: beyond curve_rtol=1e-5, within it once it grows per step
    cur = base[:-1] + [base[-1] * (1 + 1e-4)]
    assert check_curve("loss", base, cur, Policy()).numbers["first_diverging_step"] == 19
    assert check_curve("loss", base, cur, Policy(curve_growth=1.0)).verdict == "ok"
    assert curve_tolerance(np.array([1.0, 1.0]), Policy(curve_growth=1.0))[1] == pytest.approx(2 * (1e-8 + 1e-5))


def test_noise_floor_applies_to_curves():
    base = loss_curve()
    cur = [v * (1 + 1e-3) for v in base]
    assert check_curve("loss", base, cur, Policy()).numbers["first_diverging_step"] == 0
    assert check_curve("loss", base, cur, Policy(noise_rtol=1e-2)).verdict == "ok"


def test_different_length_is_a_regression_even_when_the_common_part_matches():
    base = loss_curve(20)
    finding = check_curve("loss", base, base[:15], Policy())
    assert finding.verdict == "regression"
    assert finding.numbers["length_mismatch"] is True and finding.numbers["steps_compared"] == 15
    assert finding.numbers["first_diverging_step"] is None
    assert "15 steps, baseline 20" in finding.message


def test_nan_at_the_same_steps_is_equal_a_new_nan_diverges():
    base = loss_curve(5) + [float("nan")]
    assert check_curve("loss", base, list(base), Policy()).verdict == "ok"
    cur = loss_curve(3) + [float("nan")] * 3
    finding = check_curve("loss", base, cur, Policy())
    assert finding.numbers["first_diverging_step"] == 3
    assert finding.numbers["final_current"] is None  # NaN is not strict JSON
