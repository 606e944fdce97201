"""Tests for the history check (src/modelci/checks/history.py) on seeded synthetic series."""

from __future__ import annotations

import numpy as np
import pytest

from modelci.checks.history import ChangePoint, Noise, detect_changes, detect_latest, estimate_noise

LABELS = [f"torch==2.{i // 10}.{i % 10}" for i in range(200)]


def noisy(n: int, seed: int, cv: float = 0.03, level: float = 1.0) -> np.ndarray:
    """A flat series with iid normal noise at ``cv``."""
    return level * (1 + cv * np.random.default_rng(seed).standard_normal(n))


def test_clean_step_is_found_at_its_index_with_its_label_and_sign():
    values = noisy(80, seed=1)
    values[50:] *= 1.10
    changes = detect_changes(values, LABELS[:80], metric="time.train", unit="s")
    assert len(changes) == 1
    change = changes[0]
    assert abs(change.index - 50) <= 1
    assert change.label == LABELS[change.index]
    assert 0.05 < change.magnitude < 0.15
    assert change.after_mean > change.before_mean
    assert change.p_value < 0.01
    assert change.evidence.startswith("time.train +") and f"from {change.label}" in change.evidence
    assert " s, p=" in change.evidence


def test_step_down_has_a_negative_magnitude():
    values = noisy(80, seed=2)
    values[40:] *= 0.90
    (change,) = detect_changes(values)
    assert abs(change.index - 40) <= 1
    assert change.magnitude < 0


@pytest.mark.parametrize("seed", range(5))
def test_flat_noise_gives_no_change_point(seed):
    assert detect_changes(noisy(200, seed=100 + seed)) == []


def test_an_outlier_spike_does_not_make_a_change_point():
    values = noisy(100, seed=3)
    values[60] *= 1.40
    values[61] *= 1.35  # two slow runs in a row
    assert detect_changes(values) == []


def test_a_spike_in_the_last_point_does_not_fire_the_online_check():
    values = noisy(60, seed=4)
    values[-1] *= 1.45
    assert detect_latest(values) is None


def test_detect_latest_fires_when_the_last_four_points_are_up_ten_percent():
    values = noisy(60, seed=5)
    values[-4:] *= 1.10
    change = detect_latest(values, LABELS[:60])
    assert isinstance(change, ChangePoint)
    assert abs(change.index - 56) <= 1
    assert change.label == LABELS[change.index]
    assert change.magnitude > 0.05


@pytest.mark.parametrize("seed", range(5))
def test_detect_latest_stays_quiet_on_a_a(seed):
    values = noisy(200, seed=200 + seed)
    assert all(detect_latest(values[: t + 1]) is None for t in range(150, 200))


def test_detect_latest_ignores_a_change_older_than_the_tail():
    values = noisy(60, seed=6)
    values[40:] *= 1.10
    assert detect_latest(values) is None
    assert detect_changes(values)[-1].index in (39, 40, 41)


def test_a_given_noise_cv_sets_the_penalty():
    # 0.5% noise and a 2% step: seen against a calibrated 0.5% CV, buried under a calibrated 5% CV
    values = noisy(60, seed=7, cv=0.005)
    values[30:] *= 1.02
    assert [c.index for c in detect_changes(values, noise_cv=0.005)] == [30]
    assert detect_changes(values, noise_cv=0.05) == []
    assert detect_changes(values, noise_sd=0.05) == []


def test_min_magnitude_drops_small_changes():
    values = noisy(60, seed=7, cv=0.005)
    values[30:] *= 1.02
    assert detect_changes(values, min_magnitude=0.05) == []


@pytest.mark.parametrize("n", [0, 1, 5])
def test_short_series_give_nothing(n):
    assert detect_changes(noisy(n, seed=8)) == []
    assert detect_latest(noisy(n, seed=8)) is None


def test_a_repeatable_metric_with_a_step_is_found():
    # bytes of memory: no noise at all, so the sd estimate is 0 and only the floor keeps the penalty positive
    values = [1000.0] * 20 + [1100.0] * 10
    (change,) = detect_changes(values)
    assert change.index == 20
    assert change.magnitude == pytest.approx(0.10)
    assert detect_changes([1000.0] * 30) == []


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="finite"):
        detect_changes([1.0, float("nan")] * 10)
    with pytest.raises(ValueError, match="labels"):
        detect_changes([1.0] * 10, ["a"])
    with pytest.raises(ValueError, match="tail"):
        detect_latest([1.0] * 10, tail=6)


def test_estimate_noise_sees_through_a_step_and_finds_ar1():
    rng = np.random.default_rng(9)
    stepped = 1 + 0.03 * rng.standard_normal(200)
    stepped[100:] += 0.2  # a step of almost 7 sd must not be taken for noise
    estimate = estimate_noise(stepped)
    assert 0.025 < estimate.sd < 0.035
    assert estimate.phi < 0.15

    ar = np.empty(400)
    ar[0] = 0.0
    for i in range(1, 400):
        ar[i] = 0.5 * ar[i - 1] + 0.03 * np.sqrt(1 - 0.25) * rng.standard_normal()
    estimate = estimate_noise(1 + ar)
    assert 0.35 < estimate.phi < 0.65
    assert 0.025 < estimate.sd < 0.035


def test_variance_factor_of_ar1_noise():
    assert Noise(0.03, 0.0).variance_factor() == 1.0
    assert Noise(0.03, 0.0).variance_factor(5) == 1.0
    assert Noise(0.03, 0.5).variance_factor() == pytest.approx(3.0)
    # the mean of 5 AR(1) points with phi = 0.5: 1 + 2 (0.8 * 0.5 + 0.6 * 0.25 + 0.4 * 0.125 + 0.2 * 0.0625)
    assert Noise(0.03, 0.5).variance_factor(5) == pytest.approx(2.225)


def test_confirming_a_drift_cut_into_many_segments_tests_each_change_point_a_bounded_number_of_times(monkeypatch):
    # a noise-free drift has an sd of 0 (the floor), so PELT cuts it every few points and nearly every cut fails
    # its test: dropping one must re-test only its neighbours (re-testing all of them took 13,000 Mann-Whitney
    # tests and tens of seconds on these 500 points)
    from modelci.checks import history

    calls = []
    real = history._mann_whitney
    monkeypatch.setattr(history, "_mann_whitney", lambda *args, **kw: calls.append(1) or real(*args, **kw))
    values = np.linspace(1.0, 1.5, 500)
    changes = detect_changes(values)
    assert changes and all(c.magnitude > 0 for c in changes)
    # one test per first cut (at most 500 / min_size of them) plus two per cut dropped
    assert len(calls) <= 3 * 500 // 3
