"""The precision check: each inference output against the baseline's (docs/design.md, "Comparisons").

An output passes when it is allclose to the baseline with a dtype-aware tolerance, never tighter than the
workload's measured run-to-run noise. The other numbers (max errors, ULP distance, cosine) are there to help a
person judge the size of a difference, not to decide it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from modelci.checks.policy import Finding, Policy, decided, json_number
from modelci.errors import CorruptArtifact

#: (rtol, atol) by the byte size of one real component: float16, float32, float64 (and wider)
_FLOAT_TOLERANCES = {2: (1e-2, 1e-3), 4: (1e-4, 1e-6), 8: (1e-7, 1e-10)}
#: signed integers of the same width as each float, to read its bit pattern
_BITS = {2: np.int16, 4: np.int32, 8: np.int64}


def dtype_family(dtype: np.dtype) -> str:
    """The family that must not change between baseline and current: float, complex, integer, bool or other."""
    kind = np.dtype(dtype).kind
    # signed and unsigned integers compare by value; a uint8 image becoming int64 is a dtype change, not a bug
    return {"f": "float", "c": "complex", "i": "integer", "u": "integer", "b": "bool"}.get(kind, f"other:{kind}")


def default_tolerance(dtype: np.dtype) -> tuple[float, float]:
    """The (rtol, atol) an output of this dtype is compared with when the policy does not say: exact for
    integers and bools, and loose enough for floats to absorb reordered reductions of that width."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return _FLOAT_TOLERANCES.get(dtype.itemsize, _FLOAT_TOLERANCES[8])
    if dtype.kind == "c":
        return _FLOAT_TOLERANCES.get(dtype.itemsize // 2, _FLOAT_TOLERANCES[8])
    return 0.0, 0.0


def ulp_distance(baseline: Any, current: Any) -> np.ndarray:
    """Elementwise number of representable floats between baseline and current, counted in the baseline's
    dtype (float16/32/64, or complex per component); NaN has no place in that order, so mask it first."""
    base = np.asarray(baseline)
    component = _component(base.dtype)
    if component is None:
        raise TypeError(f"ULP distance needs a float16/32/64 or complex dtype, got {base.dtype}")
    # reading bits through an integer view needs native byte order (a .npy written elsewhere may not have it)
    base = base.astype(base.dtype.newbyteorder("="), copy=False)
    with np.errstate(all="ignore"):  # a float64 current outside float16's range becomes inf, as intended
        cur = np.asarray(current).astype(base.dtype)
    a, b = (_ordered_bits(np.ravel(x).view(component), _BITS[component.itemsize]) for x in (base, cur))
    ua, ub = a.view(np.uint64), b.view(np.uint64)
    # the true distance of two float64 patterns can pass 2**63; unsigned subtraction in the right order is exact
    distance = np.where(a >= b, ua - ub, ub - ua)
    return distance.reshape(base.shape + ((2,) if base.dtype.kind == "c" else ()))


def _component(dtype: np.dtype) -> np.dtype | None:
    """The real dtype whose bits a float or complex element is made of; None when there is no integer as wide."""
    if dtype.kind not in "fc":
        return None
    size = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
    return np.dtype(f"f{size}") if size in _BITS else None


def _ordered_bits(floats: np.ndarray, bits: type) -> np.ndarray:
    """Map float bit patterns onto int64 so that adjacent floats are adjacent integers and -0.0 equals +0.0."""
    ints = floats.view(bits).astype(np.int64)
    # sign-magnitude to two's complement: a negative float's magnitude grows with its pattern, so flip it
    return np.where(ints < 0, np.int64(np.iinfo(bits).min) - ints, ints)


def compare_arrays(baseline: Any, current: Any, rtol: float, atol: float) -> dict[str, Any]:
    """The numbers of one output comparison (same shape and dtype family): mismatches against allclose with
    NaN equal to NaN, max abs/rel error, max ULP, cosine similarity. Every value is JSON-serialisable."""
    base, cur = np.asarray(baseline), np.asarray(current)
    family = dtype_family(base.dtype)
    numbers: dict[str, Any] = {"elements": int(base.size), "rtol": rtol, "atol": atol}
    if family.startswith("other"):
        # strings, objects, datetimes: only equality means anything
        close = np.asarray(cur == base, dtype=bool)
        numbers |= _mismatches(close)
        return numbers
    # errors are measured in float64 (complex128) so that the numbers of all widths read alike
    wide = np.complex128 if family == "complex" else np.float64
    a, b = base.astype(wide), cur.astype(wide)
    with np.errstate(all="ignore"):  # inf - inf, x / 0 and friends are masked below, not warned about
        if family in ("integer", "bool") and rtol == 0 and atol == 0:
            close = base == cur  # exact, without float64 rounding of large int64 values
        else:
            close = np.isclose(b, a, rtol=rtol, atol=atol, equal_nan=True)
        numbers |= _mismatches(close)
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        finite = np.isfinite(a) & np.isfinite(b)
        numbers["nan_mismatch"] = int(np.count_nonzero(nan_a != nan_b))
        numbers["inf_mismatch"] = int(np.count_nonzero(~nan_a & ~nan_b & ~finite & (a != b)))
        diff = np.where(finite, np.abs(a - b), 0.0)
        rel = np.where(finite & (a != 0), diff / np.abs(a), 0.0)
        numbers["max_abs"] = json_number(diff.max()) if diff.size else 0.0
        numbers["max_rel"] = json_number(rel.max()) if rel.size else 0.0
        if diff.size and diff.max() > 0:
            worst = int(np.argmax(diff))
            numbers["max_abs_index"] = _index(worst, base.shape)
            numbers["baseline_at_max_abs"] = _scalar(a.flat[worst])
            numbers["current_at_max_abs"] = _scalar(b.flat[worst])
        if base.size > 1:
            # the cosine of two vectors of one element is their signs' product: 1.0 for 0.5 -> 0.97, so say none
            numbers["cosine"] = _cosine(a[finite], b[finite])
        else:
            numbers["baseline_value"] = _scalar(a.flat[0]) if base.size else None
            numbers["current_value"] = _scalar(b.flat[0]) if base.size else None
    numbers["max_ulp"] = _max_ulp(base, cur, nan_a | nan_b)
    return numbers


def _mismatches(close: np.ndarray) -> dict[str, Any]:
    """Count, share and first position of the elements that failed the comparison."""
    failed = ~np.asarray(close, dtype=bool)
    count = int(np.count_nonzero(failed))
    numbers: dict[str, Any] = {
        "mismatches": count,
        "mismatch_fraction": count / failed.size if failed.size else 0.0,
    }
    if count:
        numbers["first_mismatch_index"] = _index(int(np.argmax(failed)), failed.shape)
    return numbers


def _max_ulp(base: np.ndarray, cur: np.ndarray, nan: np.ndarray) -> int | None:
    """Largest ULP distance over the elements that are not NaN on either side; None for non-float dtypes."""
    if _component(base.dtype) is None:
        return None  # integers compare exactly; long double has no integer of its width to read the bits through
    distance = ulp_distance(base, cur)
    if base.dtype.kind == "c":
        nan = np.broadcast_to(nan[..., None], distance.shape)  # a NaN in either component masks both
    kept = distance[~nan]
    return int(kept.max()) if kept.size else 0


def _cosine(a: np.ndarray, b: np.ndarray) -> float | None:
    """Cosine similarity of the two outputs seen as vectors; 1.0 for two zero vectors, None when undefined."""
    norm_a, norm_b = np.linalg.norm(a), np.linalg.norm(b)
    if norm_a == 0 and norm_b == 0:
        return 1.0
    if norm_a == 0 or norm_b == 0:
        return None
    return json_number(np.vdot(a / norm_a, b / norm_b).real)


def _index(flat: int, shape: tuple[int, ...]) -> list[int]:
    """A flat position as a JSON list of indices."""
    return [int(i) for i in np.unravel_index(flat, shape)] if shape else []


def _scalar(value: Any) -> Any:
    """One element for the numbers: a float, or a string for complex values (JSON has no complex) and for NaN and
    the infinities (JSON has none, and None read as "1 -> None" in the finding of an output that became inf)."""
    if np.iscomplexobj(value):
        return str(complex(value))
    if isinstance(value, (float, np.floating)) and not np.isfinite(value):
        return repr(float(value))  # 'nan', 'inf', '-inf'
    return json_number(value)


def check_output(name: str, baseline: Any | None, current: Any | None, policy: Policy) -> Finding:
    """Compare one output with the baseline's; an output that disappeared, or changed shape or dtype family, is
    a regression, and one that appeared is new. Precision has no improvement: closer to what is unknown."""
    metric = f"output:{name}"

    def finding(verdict: str, numbers: dict[str, Any], message: str, reason: str) -> Finding:
        return decided("precision", metric, verdict, numbers, f"{metric} {message}", reason, gating=policy.active)

    if baseline is None:
        current = np.asarray(current)
        return finding("new", _describe(current, "current"), f"is new {current.dtype}{list(current.shape)}",
                       "no baseline output to compare with")
    base = np.asarray(baseline)
    if current is None:
        return finding("regression", _describe(base, "baseline"), "disappeared",
                       f"the baseline had it ({base.dtype}{list(base.shape)}), this run has no such output")
    cur = np.asarray(current)
    described = _describe(base, "baseline") | _describe(cur, "current")
    dtype_note = f"dtype {base.dtype} -> {cur.dtype}" if base.dtype != cur.dtype else ""
    if base.shape != cur.shape:
        return finding("regression", described, f"shape changed {list(base.shape)} -> {list(cur.shape)}",
                       "an output's shape must not change" + (f"; {dtype_note} too" if dtype_note else ""))
    if dtype_family(base.dtype) != dtype_family(cur.dtype):
        return finding("regression", described, f"dtype changed {base.dtype} -> {cur.dtype}",
                       f"an output's dtype family must not change ({dtype_family(base.dtype)} -> "
                       f"{dtype_family(cur.dtype)})")
    rtol, atol = default_tolerance(base.dtype)
    source = f"the {base.dtype} default"
    if policy.rtol is not None or policy.atol is not None:
        source = "the policy's"
    rtol = policy.rtol if policy.rtol is not None else rtol
    atol = policy.atol if policy.atol is not None else atol
    # never tighter than the workload's own run-to-run noise (docs/design.md, "Comparisons": precision)
    if policy.noise_rtol > rtol:
        rtol, source = policy.noise_rtol, "rtol raised to the calibrated run-to-run noise"
    numbers = described | compare_arrays(base, cur, rtol, atol)
    summary = _summary(numbers)
    identical = summary == "identical"
    rule = f"rtol={rtol:g} atol={atol:g} ({source})"
    if numbers["elements"] == 1 and "baseline_value" in numbers:
        summary = f"{_value_text(numbers['baseline_value'])} -> {_value_text(numbers['current_value'])}, {summary}"
    if dtype_note:
        summary += f", {dtype_note}"
    if numbers["mismatches"]:
        where = numbers["first_mismatch_index"]
        message = (
            f"{numbers['mismatches']}/{numbers['elements']} elements differ beyond rtol={rtol:g} atol={atol:g}, "
            f"first at {where}: {summary}"
        )
        reason = f"{numbers['mismatches']}/{numbers['elements']} elements beyond {rule}"
        if numbers.get("baseline_at_max_abs") is not None:
            reason += (f"; the largest difference {_value_text(numbers['baseline_at_max_abs'])} -> "
                       f"{_value_text(numbers['current_at_max_abs'])} at {numbers.get('max_abs_index')}")
        if dtype_note:
            reason += f"; {dtype_note} (same family: compared by value)"
        return finding("regression", numbers, message, reason)
    if identical:
        reason = "identical" if numbers["elements"] == 1 else f"all {numbers['elements']} elements identical"
    else:
        reason = f"within {rule}" if numbers["elements"] == 1 else f"all {numbers['elements']} elements within {rule}"
        if numbers.get("max_ulp"):
            reason += f", though {numbers['max_ulp']} ULP apart at most"
    if dtype_note:
        reason += f"; {dtype_note}: same family, compared by value at the baseline's tolerance"
    return finding("ok", numbers, f"within rtol={rtol:g} atol={atol:g}: {summary}", reason)


def _value_text(value: Any) -> str:
    """One element for a message: floats in 6 significant digits."""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _describe(array: np.ndarray, side: str) -> dict[str, Any]:
    """Shape and dtype of one side, for the numbers of a finding."""
    return {f"{side}_dtype": str(array.dtype), f"{side}_shape": list(array.shape)}


def _summary(numbers: dict[str, Any]) -> str:
    """The error numbers in a few words: 'identical', or max_rel/max_abs/max_ulp/NaN counts."""
    if not numbers["mismatches"] and not numbers.get("max_abs") and numbers.get("max_ulp") in (0, None):
        return "identical"
    parts = []
    non_finite = bool(numbers.get("nan_mismatch") or numbers.get("inf_mismatch"))
    if numbers.get("nan_mismatch"):
        parts.append(f"{numbers['nan_mismatch']} NaN mismatch(es)")
    if numbers.get("inf_mismatch"):
        parts.append(f"{numbers['inf_mismatch']} inf mismatch(es)")
    if non_finite:
        # the maxima are over the elements finite on both sides; "max_abs 0" beside a value that became inf, and
        # the ULP distance to an infinity, read as if nothing had moved, or as noise
        if numbers.get("max_abs"):
            parts.append(f"max_rel {numbers.get('max_rel') or 0:.2e}, max_abs {numbers['max_abs']:.2e} over the "
                         "elements finite on both sides")
        return ", ".join(parts)
    for key, spelling in (("max_rel", "max_rel {:.2e}"), ("max_abs", "max_abs {:.2e}"), ("max_ulp", "max_ulp {}")):
        if numbers.get(key) is not None:
            parts.append(spelling.format(numbers[key]))
    return ", ".join(parts) or "values differ"


#: said once when a baseline's arrays are not where this run looks: on a history shared by several machines
#: (PostgreSQL) with each machine's own artifact folder (the default), every output of a baseline another machine
#: stored was "not compared", and the run passed with its outputs unchecked
MISSING_ARRAYS = ("a baseline's arrays are not in this run's artifact store: when several machines share the history, "
                  "they need one artifact store that all of them reach (`artifacts` or MODELCI_ARTIFACTS: "
                  "s3://BUCKET/PREFIX, a shared folder), or each checks its outputs only against its own runs")


def not_compared(findings: list[Finding]) -> list[Finding]:
    """The output findings whose stored array could not be read (`check_outputs`): nothing was checked."""
    return [f for f in findings if "unreadable" in (f.numbers or {})]


def missing_arrays(findings: list[Finding]) -> bool:
    """Whether some of `not_compared(findings)` are arrays absent from the store, rather than damaged ones."""
    return any("is missing from" in str(f.numbers["unreadable"]) for f in not_compared(findings))


def check_outputs(
    current: Mapping[str, Any], baseline: Mapping[str, Any], policy: Callable[[str], Policy]
) -> list[Finding]:
    """One precision finding per output present on either side, in name order. A stored output that cannot be read
    (its artifact corrupt or gone) is said in its finding, and the other outputs and checks go on: one damaged
    artifact of a baseline stopped every later run of the workload before its reports were written."""
    findings = []
    for name in sorted(set(current.keys()) | set(baseline.keys())):
        rules = policy(f"output:{name}")
        try:
            side = "the baseline's"
            base = baseline[name] if name in baseline else None
            side = "this run's"
            cur = current[name] if name in current else None
        except CorruptArtifact as exc:
            findings.append(decided("precision", f"output:{name}", "new", {"unreadable": str(exc)},
                                    f"output:{name} not compared", f"{side} stored array cannot be read ({exc})",
                                    gating=rules.active))
            continue
        findings.append(check_output(name, base, cur, rules))
    return findings
