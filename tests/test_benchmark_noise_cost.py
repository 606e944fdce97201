"""The noise-cost benchmark compares the history check with the known-noise bound: its accounting must be fair."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import detection  # noqa: E402
import detection_noise_cost as cost  # noqa: E402


def test_false_alarms_and_steps_count_only_where_the_bound_looks():
    first = detection.bound_start()
    assert first == 26
    # series 1: an A/A alarm at point 10 (only the history check's short test runs there) and one at 40; its
    # step at 22 found at 24, before the bound could look; series 2: its step at 100 found at 103
    results = [("history", [[10, 40]], 22, [[24]]), ("history", [[]], 100, [[99, 103]])]
    measured = cost.tally(results)
    assert measured.alarms_all[0] == pytest.approx(1000 * 2 / (2 * detection.POINTS))
    assert measured.alarms[0] == pytest.approx(1000 * 1 / (2 * (detection.POINTS - first)))
    assert measured.found[0] == pytest.approx(0.5)


def test_a_step_alarm_later_than_five_points_is_not_found():
    measured = cost.tally([("history", [[]], 50, [[56]])])
    assert measured.found[0] == 0.0


def test_the_bound_is_interpolated_between_penalties():
    bound = cost.Measured(np.array([2.0, 1.0, 0.5]), np.array([2.0, 1.0, 0.5]), np.array([0.5, 0.4, 0.3]))
    assert cost.bound_at(bound, 0.75) == pytest.approx(0.35)
    assert cost.bound_at(bound, 1.0) == pytest.approx(0.4)
    assert cost.bound_at(bound, 3.0) == pytest.approx(0.5)  # more false alarms than the lowest penalty has
    assert cost.bound_at(bound, 0.4) is None  # fewer than the highest penalty has: no bound to compare with


def test_the_bound_takes_the_most_found_at_a_level_of_false_alarms():
    # two penalties with the same false alarms, and one with more alarms finding less (noise in the counts)
    bound = cost.Measured(np.array([1.5, 1.0, 1.0]), np.array([1.5, 1.0, 1.0]), np.array([0.3, 0.35, 0.4]))
    assert cost.bound_at(bound, 1.0) == pytest.approx(0.4)
    assert cost.bound_at(bound, 1.5) == pytest.approx(0.4)


def test_the_pooled_rows_draw_the_same_series_and_pool_each_point_over_the_runner():
    # the pooled mode must judge the very series the other rows judge (same step points), and give each point's
    # check the pool of its runner's series at that point: a runner of 8 alike series, one with a step at 40
    rng = np.random.default_rng(5)
    runner = [1 + 0.01 * rng.standard_normal(46) for _ in range(8)]
    runner[3][40:] += 0.1
    alarms = cost.pooled_alarms(runner, [46] * 8)
    assert [bool(a) for a in alarms] == [j == 3 for j in range(8)]
    assert 40 <= alarms[3][0] <= 45
    # a runner too small to pool (2 series) is judged exactly as the "estimated" rows judge the same 2 series: the
    # pooled rows draw the very series, in the order, that the others do
    alone = [cost.one_series((i, 2, detection.SEED, "estimated")) for i in range(2)]
    assert [r[1:] for r in cost.one_runner((0, 2, detection.SEED))] == [r[1:] for r in alone]


@pytest.mark.parametrize("table", ["mixed", "kinds"])
def test_the_false_alarm_tables_take_the_constants_given(monkeypatch, table):
    # `--constant NAME=VALUE` must reach the workers of the mixed-runner and noise-kind tables too, as it does the
    # history rows': a MAX_TAIL below the tail the check is asked for is refused there, so the constant arrived
    monkeypatch.setattr(cost, "MIXED_RUNNERS", 1)
    monkeypatch.setattr(cost, "KIND_RUNNERS", 1)
    monkeypatch.setattr(cost, "RUNNER_SERIES", 1)
    with pytest.raises(ValueError, match="tail must be between"):
        if table == "mixed":
            cost.measure_mixed("wide", False, detection.SEED, 1, {"MAX_TAIL": 2})
        else:
            cost.measure_kinds("outliers", detection.SEED, 1, {"MAX_TAIL": 2})


def test_the_noise_kind_runners_are_the_kinds_series_pooled(monkeypatch):
    # each runner's series are drawn as detection.py draws that kind (outliers here: their 30-50% slow runs), and
    # judged together by pooled_alarms (tested above), whose alarms are counted
    judged = []
    monkeypatch.setattr(cost, "pooled_alarms", lambda runner, stops: judged.append((runner, stops)) or [[7], [], [9]])
    assert cost.kind_runner((2, "outliers", 3)) == 2
    rng = np.random.default_rng([3, 2, 100 + detection.NOISE_KINDS.index("outliers")])
    expected = [detection.make_series("outliers", 0.0, detection.POINTS, rng)[1] for _ in range(cost.RUNNER_SERIES)]
    (runner, stops), = judged
    assert len(runner) == cost.RUNNER_SERIES and stops == [detection.POINTS] * cost.RUNNER_SERIES
    assert all(np.array_equal(a, b) for a, b in zip(runner, expected))
    assert max(float(np.max(v)) for v in runner) > 1.25  # the kind's outliers are there
