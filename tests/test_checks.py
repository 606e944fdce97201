"""checks.evaluate end to end on real Results, plus status and policy (docs/design.md, "Comparisons")."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from modelci.checks import Finding, Policy, evaluate, policy_for, regressed
from modelci.errors import UserError
from modelci.records import Metric, Result

MiB = 2**20


def default(_metric: str) -> Policy:
    return Policy()


def make_result(status: str = "ok", seed: int = 0, **changes) -> Result:
    """A realistic result: two float32 outputs, an int output, timings, memory, a loss curve, accuracy."""
    rng = np.random.default_rng(seed)
    outputs = {
        "logits": rng.standard_normal((8, 10)).astype(np.float32),
        "embedding": rng.standard_normal((8, 16)).astype(np.float32),
        "labels": np.arange(8, dtype=np.int64),
    }
    metrics = {
        "time.train": Metric("time.train", "samples", [2.0], "s"),
        "time.infer": Metric("time.infer", "samples", list(0.1 + rng.normal(0, 0.001, 5)), "s"),
        "mem.peak_rss": Metric("mem.peak_rss", "samples", [300.0 * MiB], "B"),
        "loss": Metric("loss", "curve", list(np.linspace(2.3, 0.4, 20)), ""),
        "accuracy": Metric("accuracy", "samples", [0.91], ""),
    }
    result = Result(workload="lenet", status=status, metrics=metrics, outputs=outputs)
    for key, value in changes.items():
        setattr(result, key, value)
    return result


def by_metric(findings: list[Finding]) -> dict[str, Finding]:
    return {f.metric: f for f in findings}


def test_identical_results_are_all_ok():
    baseline = make_result()
    findings = evaluate(make_result(), baseline, default)
    assert sorted(f.metric for f in findings) == sorted(
        ["status", "output:logits", "output:embedding", "output:labels"]
        + ["time.train", "time.infer", "mem.peak_rss", "loss", "accuracy"]
    )
    assert {f.verdict for f in findings} == {"ok"}, [f.message for f in findings if f.verdict != "ok"]
    assert not regressed(findings)


def test_one_output_off_by_1e_3_relative_is_exactly_one_precision_regression():
    """The walking skeleton's change: one element of one float32 output moved by 1e-3 relative."""
    baseline = make_result()
    current = make_result()
    logits = current.outputs["logits"].copy()
    logits[3, 4] *= np.float32(1.001)
    current.outputs = dict(current.outputs, logits=logits)

    findings = evaluate(current, baseline, default)

    bad = [f for f in findings if f.verdict != "ok"]
    assert len(bad) == 1
    finding = bad[0]
    assert (finding.check, finding.metric, finding.verdict, finding.gating) == (
        "precision", "output:logits", "regression", True,
    )
    numbers = finding.numbers
    assert numbers["max_rel"] == pytest.approx(1e-3, rel=1e-3)
    assert numbers["mismatches"] == 1
    assert numbers["mismatch_fraction"] == pytest.approx(1 / 80)
    assert numbers["first_mismatch_index"] == [3, 4]
    assert numbers["max_abs_index"] == [3, 4]
    assert numbers["rtol"] == 1e-4 and numbers["atol"] == 1e-6
    assert numbers["max_ulp"] > 1000  # 1e-3 relative is about 2**13 float32 ULPs
    assert 0.99 < numbers["cosine"] < 1.0
    assert "output:logits" in finding.message and "[3, 4]" in finding.message
    assert regressed(findings)


def test_status_ok_to_crashed_is_a_regression_and_nothing_else_is_compared():
    current = make_result(status="crashed", reason="killed by signal 11 (SIGSEGV)\nmore", outputs={}, metrics={})
    findings = evaluate(current, make_result(), default)
    assert len(findings) == 1
    (finding,) = findings
    assert (finding.check, finding.verdict) == ("status", "regression")
    assert finding.numbers == {"baseline": "ok", "current": "crashed", "reason": finding.message}
    assert "SIGSEGV" in finding.message and "more" not in finding.message
    assert regressed(findings)


@pytest.mark.parametrize(
    ("before", "after", "verdict"),
    [
        ("failed", "ok", "improvement"),
        ("failed", "failed", "ok"),
        ("timeout", "crashed", "ok"),
        ("ok", "skipped", "regression"),
    ],
)
def test_status_transitions(before, after, verdict):
    findings = evaluate(make_result(status=after), make_result(status=before), default)
    assert [(f.check, f.verdict) for f in findings] == [("status", verdict)]


def test_no_baseline_gives_one_new_finding():
    findings = evaluate(make_result(), None, default)
    assert [(f.check, f.metric, f.verdict) for f in findings] == [("status", "status", "new")]
    assert findings[0].numbers["outputs"] == 3 and findings[0].numbers["metrics"] == 5
    assert not regressed(findings)


def test_missing_output_and_metric_are_regressions_new_ones_are_new():
    baseline = make_result()
    current = make_result()
    current.outputs = {k: v for k, v in current.outputs.items() if k != "embedding"}
    current.outputs["probs"] = np.ones(3, dtype=np.float32)
    current.metrics = {k: v for k, v in current.metrics.items() if k not in ("loss", "mem.peak_rss")}
    current.metrics["time.setup"] = Metric("time.setup", "samples", [0.5], "s")

    found = by_metric(evaluate(current, baseline, default))

    assert (found["output:embedding"].check, found["output:embedding"].verdict) == ("precision", "regression")
    assert "disappeared" in found["output:embedding"].message
    assert (found["output:probs"].verdict, found["output:probs"].check) == ("new", "precision")
    assert (found["loss"].check, found["loss"].verdict) == ("curve", "regression")
    assert (found["mem.peak_rss"].check, found["mem.peak_rss"].verdict) == ("memory", "regression")
    assert "metric disappeared" in found["loss"].message
    assert (found["time.setup"].check, found["time.setup"].verdict) == ("timing", "new")


def test_metric_with_no_values_counts_as_disappeared():
    current = make_result()
    current.metrics = dict(current.metrics, **{"time.train": Metric("time.train", "samples", [], "s")})
    found = by_metric(evaluate(current, make_result(), default))
    assert found["time.train"].verdict == "regression" and "disappeared" in found["time.train"].message


def test_inactive_policy_reports_without_gating():
    current = make_result(status="crashed")
    findings = evaluate(current, make_result(), lambda m: Policy(active=False))
    assert findings[0].verdict == "regression" and findings[0].gating is False
    assert not regressed(findings)


def test_findings_are_strict_json_even_with_nan_and_inf():
    baseline = make_result()
    current = make_result()
    logits = current.outputs["logits"].copy()
    logits[0, 0], logits[0, 1] = np.nan, np.inf
    current.outputs = dict(current.outputs, logits=logits)
    current.metrics = dict(current.metrics, loss=Metric("loss", "curve", [np.nan] * 20))
    findings = evaluate(current, baseline, default)
    json.dumps([dataclasses.asdict(f) for f in findings], allow_nan=False)  # raises on NaN or inf
    found = by_metric(findings)
    assert found["output:logits"].numbers["nan_mismatch"] == 1
    assert found["output:logits"].numbers["inf_mismatch"] == 1
    assert found["loss"].numbers["first_diverging_step"] == 0


def test_policy_for_applies_matching_patterns_in_order():
    lookup = policy_for(
        {"time.*": {"timing_factor": 1.5}, "time.infer": {"alpha": 0.01}, "output:*": {"rtol": 1e-3}}
    )
    assert lookup("time.infer").timing_factor == 1.5 and lookup("time.infer").alpha == 0.01
    assert lookup("time.train").alpha == 0.05
    assert lookup("output:logits").rtol == 1e-3 and lookup("loss").rtol is None
    assert lookup("mem.peak_rss") == Policy()


def test_policy_for_rejects_unknown_settings_at_once():
    with pytest.raises(UserError, match="time.*: unknown check setting.*timing_factr"):
        policy_for({"time.*": {"timing_factr": 1.5}})


def test_config_overrides_reach_the_checks():
    """An rtol from config loosens exactly the output it names."""
    current = make_result()
    logits = current.outputs["logits"].copy()
    logits *= np.float32(1.001)
    current.outputs = dict(current.outputs, logits=logits)
    strict = by_metric(evaluate(current, make_result(), default))
    loose = by_metric(evaluate(current, make_result(), policy_for({"output:logits": {"rtol": 1e-2}})))
    assert strict["output:logits"].verdict == "regression"
    assert loose["output:logits"].verdict == "ok"
