"""The precision check on real arrays: tolerances, ULP distance, NaN, shapes and dtypes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from modelci.checks import Policy
from modelci.checks.precision import check_output, default_tolerance, ulp_distance

FLOATS = [np.float16, np.float32, np.float64]


@pytest.mark.parametrize("dtype", FLOATS)
def test_adjacent_floats_are_one_ulp_apart(dtype):
    values = np.array([1.0, -1.0, 1e-3, 123.5, np.finfo(dtype).tiny, 0.0], dtype=dtype)
    up = np.nextafter(values, dtype(np.inf))
    assert ulp_distance(values, up).tolist() == [1] * len(values)
    assert ulp_distance(up, values).tolist() == [1] * len(values)


@pytest.mark.parametrize("dtype", FLOATS)
def test_ulp_distance_is_ordered_across_zero_and_to_infinity(dtype):
    smallest = np.nextafter(dtype(0), dtype(1))
    assert ulp_distance(np.array([-smallest], dtype=dtype), np.array([smallest], dtype=dtype)).tolist() == [2]
    assert ulp_distance(np.array([-0.0], dtype=dtype), np.array([0.0], dtype=dtype)).tolist() == [0]
    biggest = np.finfo(dtype).max
    assert ulp_distance(np.array([biggest], dtype=dtype), np.array([np.inf], dtype=dtype)).tolist() == [1]


def test_ulp_distance_of_float64_extremes_does_not_overflow():
    biggest = np.finfo(np.float64).max
    distance = ulp_distance(np.array([-biggest]), np.array([biggest]))
    assert int(distance[0]) == 2 * (0x7FEFFFFFFFFFFFFF)


def test_ulp_distance_counts_in_the_baseline_dtype():
    base = np.array([1.0], dtype=np.float32)
    # 1 + 2**-23 is the next float32; as float64 it is 2**29 float64 steps away, but precision is the baseline's
    assert ulp_distance(base, np.array([1.0 + 2.0**-23])).tolist() == [1]


def test_ulp_distance_of_complex_is_per_component():
    base = np.array([1 + 1j], dtype=np.complex64)
    cur = np.array([1 + np.nextafter(np.float32(1), np.float32(2)) * 1j], dtype=np.complex64)
    assert ulp_distance(base, cur).tolist() == [[0, 1]]


def test_ulp_distance_refuses_integers():
    with pytest.raises(TypeError, match="int64"):
        ulp_distance(np.arange(3), np.arange(3))


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [(np.float16, (1e-2, 1e-3)), (np.float32, (1e-4, 1e-6)), (np.float64, (1e-7, 1e-10)),
     (np.complex64, (1e-4, 1e-6)), (np.int32, (0.0, 0.0)), (np.bool_, (0.0, 0.0))],
)
def test_default_tolerance_follows_the_dtype(dtype, expected):
    assert default_tolerance(np.dtype(dtype)) == expected


@pytest.mark.parametrize("dtype", FLOATS)
def test_bit_identical_is_ok_and_says_identical(dtype):
    values = np.random.default_rng(1).standard_normal((5, 7)).astype(dtype)
    finding = check_output("y", values, values.copy(), Policy())
    assert finding.verdict == "ok"
    assert finding.numbers["max_ulp"] == 0 and finding.numbers["max_abs"] == 0.0
    assert finding.numbers["cosine"] == pytest.approx(1.0)
    assert "identical" in finding.message


@pytest.mark.parametrize(("dtype", "relative", "verdict"), [
    (np.float16, 5e-3, "ok"), (np.float16, 5e-2, "regression"),
    (np.float32, 1e-5, "ok"), (np.float32, 1e-3, "regression"),
    (np.float64, 1e-8, "ok"), (np.float64, 1e-6, "regression"),
])
def test_dtype_aware_tolerance_decides(dtype, relative, verdict):
    base = np.linspace(1, 2, 50).astype(dtype)
    cur = (base.astype(np.float64) * (1 + relative)).astype(dtype)
    assert check_output("y", base, cur, Policy()).verdict == verdict


def test_noise_floor_loosens_but_never_tightens():
    base = np.linspace(1, 2, 50).astype(np.float32)
    cur = base * np.float32(1.001)
    assert check_output("y", base, cur, Policy(noise_rtol=1e-2)).verdict == "ok"
    # an explicit rtol tighter than the measured noise is raised to the noise
    assert check_output("y", base, cur, Policy(rtol=1e-6, noise_rtol=1e-2)).numbers["rtol"] == 1e-2
    assert check_output("y", base, cur, Policy(noise_rtol=1e-6)).verdict == "regression"


def test_nan_in_the_same_places_is_equal_elsewhere_a_regression():
    base = np.array([1.0, np.nan, 3.0], dtype=np.float32)
    same = check_output("y", base, base.copy(), Policy())
    assert same.verdict == "ok" and same.numbers["nan_mismatch"] == 0
    moved = check_output("y", base, np.array([np.nan, 2.0, 3.0], dtype=np.float32), Policy())
    assert moved.verdict == "regression"
    assert moved.numbers["nan_mismatch"] == 2 and moved.numbers["mismatches"] == 2
    assert "NaN" in moved.message


def test_an_output_that_becomes_infinite_or_nan_is_said_with_its_values_not_as_zero_difference():
    """1 -> inf read "1 -> None, max_rel 0.00e+00, max_abs 0.00e+00, max_ulp 4611686018427387904": the maxima are
    over the elements finite on both sides, and the value that moved was shown as None."""
    one = check_output("y", np.array([1.0]), np.array([np.inf]), Policy())
    assert one.verdict == "regression"
    assert "1 -> inf" in one.message and "None" not in one.message and "1 inf mismatch(es)" in one.message
    assert "max_abs 0" not in one.message and "max_ulp" not in one.message
    assert one.numbers["current_value"] == "inf"
    many = check_output("y", np.array([1.0, 2.0, 3.0]), np.array([1.5, np.nan, np.nan]), Policy())
    assert "2 NaN mismatch(es)" in many.message
    assert "max_abs 5.00e-01 over the elements finite on both sides" in many.message, many.message
    json.dumps(one.numbers, allow_nan=False)  # the report stays strict JSON


def test_zero_baseline_does_not_warn_and_still_fails():
    """filterwarnings=error turns a divide-by-zero RuntimeWarning into a failure here."""
    finding = check_output("y", np.zeros(4, np.float32), np.ones(4, np.float32), Policy())
    assert finding.verdict == "regression"
    assert finding.numbers["max_abs"] == 1.0 and finding.numbers["max_rel"] == 0.0
    assert finding.numbers["cosine"] is None


def test_shape_change_is_a_regression():
    finding = check_output("y", np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32), Policy())
    assert finding.verdict == "regression" and "shape" in finding.message
    assert finding.numbers["baseline_shape"] == [2, 3] and finding.numbers["current_shape"] == [3, 2]


def test_dtype_family_change_is_a_regression_width_change_is_compared():
    base = np.arange(4, dtype=np.float32)
    assert check_output("y", base, np.arange(4, dtype=np.int64), Policy()).verdict == "regression"
    widened = check_output("y", base, base.astype(np.float64), Policy())
    assert widened.verdict == "ok" and "float32 -> float64" in widened.message
    assert check_output("y", np.arange(4, dtype=np.uint8), np.arange(4, dtype=np.int64), Policy()).verdict == "ok"


def test_integers_and_bools_compare_exactly():
    labels = np.array([2**62, 1, 2], dtype=np.int64)
    # 2**62 + 1 rounds to 2**62 in float64; an exact compare must still see it
    assert check_output("y", labels, labels + np.array([1, 0, 0]), Policy()).verdict == "regression"
    assert check_output("y", labels, labels.copy(), Policy()).verdict == "ok"
    mask = np.array([True, False, True])
    flipped = check_output("y", mask, ~mask, Policy())
    assert flipped.verdict == "regression" and flipped.numbers["mismatches"] == 3


def test_strings_compare_by_equality():
    base = np.array(["cat", "dog"])
    assert check_output("y", base, base.copy(), Policy()).verdict == "ok"
    changed = check_output("y", base, np.array(["cat", "cow"]), Policy())
    assert changed.verdict == "regression" and changed.numbers["first_mismatch_index"] == [1]


def test_scalar_and_empty_outputs():
    assert check_output("y", np.float32(1.0), np.float32(1.0), Policy()).verdict == "ok"
    scalar = check_output("y", np.float32(1.0), np.float32(1.01), Policy())
    assert scalar.verdict == "regression" and scalar.numbers["first_mismatch_index"] == []
    empty = check_output("y", np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32), Policy())
    assert empty.verdict == "ok" and empty.numbers["mismatch_fraction"] == 0.0


def test_complex_outputs():
    base = np.array([1 + 2j, 3 - 1j], dtype=np.complex64)
    assert check_output("y", base, base.copy(), Policy()).verdict == "ok"
    off = check_output("y", base, base * np.complex64(1 + 1e-3j), Policy())
    assert off.verdict == "regression" and off.numbers["max_ulp"] > 0
    assert isinstance(off.numbers["baseline_at_max_abs"], str)


def test_ulp_distance_reads_non_native_byte_order():
    base = np.array([1.0, 2.0], dtype=">f4" if np.little_endian else "<f4")
    assert ulp_distance(base, np.nextafter(base.astype(np.float32), np.float32(3))).tolist() == [1, 1]
