"""Noise calibration on fakefw: real runs, a stored profile, and the checks using it as a floor."""

from __future__ import annotations

import numpy as np

from modelci import calibrate, checks, workflow
from modelci.alarms import changes
from modelci.alarms.changes import Series
from modelci import config as config_module
from modelci.checks import Policy
from modelci.records import Metric, Result
from modelci.store import Store


def test_calibrate_stores_a_profile_that_the_next_run_uses(fake_project):
    cfg = config_module.load()
    outcome = workflow.calibrate(cfg, str(fake_project.v10), [str(fake_project.suite)], "Stable", runs=3)
    assert len(outcome.run_ids) == 3 and not outcome.failures
    by_metric = {e.metric: e for e in outcome.entries}
    # the fake workloads are pure Python and seeded: outputs and losses are bit-identical across runs
    assert by_metric["output:prediction"].bit_identical is True
    assert by_metric["output:prediction"].spread_rtol == 0.0
    assert by_metric["loss"].bit_identical is True
    assert by_metric["time.infer"].kind == "timing" and by_metric["time.infer"].cv is not None
    store = Store(cfg.db, cfg.artifacts)
    stored = calibrate.profile(store, cfg.runner, "fakesuite/Stable")
    assert set(stored) == set(by_metric)
    # the next run's checks get the CV with the 3 runs it came from (the history check pools it by them)
    policy = workflow.policy_for(cfg, store, "fakesuite/Stable")("time.infer")
    assert policy.noise_cv == by_metric["time.infer"].cv and policy.noise_cv_runs == 3


def test_measure_reports_spread_and_cv():
    def result(scale: float, times: list[float]) -> Result:
        return Result(workload="s/W", status="ok",
                      metrics={"time.infer": Metric("time.infer", "samples", times, "s"),
                               "loss": Metric("loss", "curve", [1.0, 0.5 * scale])},
                      outputs={"y": np.array([1.0, 2.0], dtype=np.float32) * np.float32(scale)})

    runs = [{"s/W": result(1.0, [0.10, 0.11])}, {"s/W": result(1.001, [0.20, 0.21])}]
    entries = {e.metric: e for e in calibrate.measure(runs)}
    assert entries["output:y"].bit_identical is False
    assert abs(entries["output:y"].spread_rtol - 1e-3) < 1e-6
    assert entries["time.infer"].cv > 0.3  # 0.105 vs 0.205 between runs
    assert entries["loss"].spread_rtol > 0


def test_noise_floors_the_policy_and_stops_timing_from_gating():
    noise = {
        "time.infer": calibrate.NoiseEntry("s/W", "time.infer", "timing", 5, cv=0.12),
        "output:y": calibrate.NoiseEntry("s/W", "output:y", "output", 5, spread_rtol=5e-4, bit_identical=False),
    }
    policy = calibrate.with_noise(lambda metric: Policy(), noise)
    assert policy("time.infer").noise_cv == 0.12
    # measured from 5 runs, and the history check is told so: it pools the CV with the series' own noise
    assert policy("time.infer").noise_cv_runs == 5
    series = Series("vm", "s/W", "time.infer", kind="samples", unit="s", labels=["a"], values=[0.1], target_ids=[1])
    assert changes.detection_settings(series, policy("time.infer"))["noise_runs"] == 5
    assert changes.detection_settings(series, Policy(noise_cv=0.12))["noise_runs"] is None  # set in config: exact
    assert policy("output:y").noise_rtol == 1e-3
    assert policy("loss").noise_rtol == 0.0

    base = Result(workload="s/W", status="ok", id=1,
                  metrics={"time.infer": Metric("time.infer", "samples", [0.010, 0.011, 0.010, 0.012, 0.011], "s")},
                  outputs={"y": np.array([1.0, 2.0], dtype=np.float32)})
    cur = Result(workload="s/W", status="ok",
                 metrics={"time.infer": Metric("time.infer", "samples", [0.030, 0.031, 0.030, 0.032, 0.031], "s")},
                 outputs={"y": np.array([1.0004, 2.0], dtype=np.float32)})
    findings = {f.metric: f for f in checks.evaluate(cur, base, policy)}
    # within the measured output noise: not a precision regression
    assert findings["output:y"].verdict == "ok"
    # 3x slower, but the workload is too noisy to gate on timing: reported, not gating
    assert findings["time.infer"].verdict == "regression" and not findings["time.infer"].gating
    without = {f.metric: f for f in checks.evaluate(cur, base, lambda metric: Policy())}
    assert without["output:y"].verdict == "regression" and without["time.infer"].gating
