"""The alarm lifecycle over a real SQLite history: runs ingested through Store.ingest and judged as `modelci run`
judges them, plus one end-to-end pass through workflow.run on the fakefw wheels."""

from __future__ import annotations

import json
import os
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pytest
from alarm_history import History, timed
from fakefw.framework import source
from fakewheels import build_fake_wheel

from modelci import calibrate, cli, workflow
from modelci import config as config_module
from modelci.alarms import changes, hooks, lifecycle, notify
from modelci.errors import UserError
from modelci.records import Result
from modelci.store import Store
from modelci.store.schema import utcnow

SLOW = "suite/Slow"


def events(outcome) -> list[tuple[str, str, str]]:
    return [(e.event, e.alarm.workload, e.alarm.metric) for e in outcome.alarms.events]


@pytest.fixture
def history(tmp_path) -> History:
    return History(tmp_path / "project")


def test_regression_opens_one_alarm_that_updates_then_recovers_against_its_first_baseline(history):
    assert events(history.run("1.0", [timed(SLOW, 0.10)])) == []
    opened = history.run("1.1", [timed(SLOW, 0.13, seed=1)])
    assert events(opened) == [("open", SLOW, "time.infer")]
    # 1.2 is as slow as 1.1: against the moving baseline (1.1) it is fine, against 1.0 it is not
    again = history.run("1.2", [timed(SLOW, 0.13, seed=2)])
    assert events(again) == []
    (alarm,) = lifecycle.list_alarms(history.store)
    assert (alarm.state, alarm.recovered, alarm.count, alarm.kind) == ("open", False, 2, "regression")
    assert alarm.target == "fw==1.1" and alarm.last_target == "fw==1.2"
    assert alarm.numbers["ratio"] > 1.2

    fixed = history.run("1.3", [timed(SLOW, 0.10, seed=3)])
    assert events(fixed) == [("recovered", SLOW, "time.infer")]
    (alarm,) = lifecycle.list_alarms(history.store)
    assert alarm.status == "open, recovered" and alarm.count == 2
    # recovered is not closed: only a person or a config rule closes it
    history.run("1.4", [timed(SLOW, 0.10, seed=4)])
    assert lifecycle.list_alarms(history.store)[0].state == "open"
    log = [e["event"] for e in lifecycle.get_alarm(history.store, alarm.id).events]
    assert log == ["opened", "seen", "recovered"]


def test_a_recovered_alarm_that_fires_again_reopens_instead_of_opening_another(history):
    history.run("1.0", [timed(SLOW, 0.10)])
    history.run("1.1", [timed(SLOW, 0.13, seed=1)])
    history.run("1.2", [timed(SLOW, 0.10, seed=2)])
    again = history.run("1.3", [timed(SLOW, 0.14, seed=3)])
    assert [(e.event, e.reopened) for e in again.alarms.events] == [("open", True)]
    (alarm,) = lifecycle.list_alarms(history.store)
    assert not alarm.recovered and alarm.count == 2


def test_config_rule_resolves_after_n_recovered_runs_and_a_new_occurrence_opens_a_new_alarm(tmp_path):
    history = History(tmp_path / "p", "[alarms]\nauto_resolve_after_recovered_runs = 2\n")
    history.run("1.0", [timed(SLOW, 0.10)])
    history.run("1.1", [timed(SLOW, 0.13, seed=1)])
    history.run("1.2", [timed(SLOW, 0.10, seed=2)])
    assert lifecycle.list_alarms(history.store)[0].recovered
    history.run("1.3", [timed(SLOW, 0.10, seed=3)])
    assert lifecycle.list_alarms(history.store) == []
    (closed,) = lifecycle.list_alarms(history.store, states=["resolved"])
    assert closed.resolved_by == "config: auto_resolve_after_recovered_runs = 2"
    history.run("1.4", [timed(SLOW, 0.14, seed=4)])
    (new,) = lifecycle.list_alarms(history.store)
    assert new.id != closed.id and new.state == "open"


def test_people_acknowledge_silence_and_resolve(history):
    history.run("1.0", [timed(SLOW, 0.10)])
    history.run("1.1", [timed(SLOW, 0.13, seed=1)])
    (alarm,) = lifecycle.list_alarms(history.store)
    lifecycle.acknowledge(history.store, [alarm.id], "alice", "looking at the new kernel")
    today = date.today()
    lifecycle.silence(history.store, [alarm.id], today + timedelta(days=3), "alice")
    assert lifecycle.list_alarms(history.store)[0].status == f"silenced until {today + timedelta(days=3)}"
    # a silenced alarm keeps counting but tells nobody, not even that it recovered
    quiet = history.run("1.2", [timed(SLOW, 0.10, seed=2)])
    assert quiet.alarms.events == []
    assert lifecycle.list_alarms(history.store)[0].recovered
    # after the date the silence lapses: back to acknowledged (someone had acknowledged it)
    later = lifecycle.list_alarms(history.store, today=today + timedelta(days=4))
    assert later[0].status == "acknowledged, recovered" and later[0].acknowledged_by == "alice"
    lifecycle.resolve(history.store, [alarm.id], "bob", "fixed in 1.2", today=today + timedelta(days=4))
    assert lifecycle.list_alarms(history.store) == []
    shown = lifecycle.get_alarm(history.store, alarm.id)
    assert [e["event"] for e in shown.events] == ["opened", "acknowledged", "silenced", "recovered", "unsilenced",
                                                  "resolved"]
    assert shown.resolved_by == "bob" and shown.note == "fixed in 1.2"
    with pytest.raises(UserError, match=f"alarm {alarm.id} is already resolved"):
        lifecycle.acknowledge(history.store, [alarm.id], "carol")
    with pytest.raises(UserError, match="no alarm 999"):
        lifecycle.resolve(history.store, [999], "carol")
    with pytest.raises(UserError, match="in the past"):
        lifecycle.silence(history.store, [alarm.id], today - timedelta(days=1), "carol")


def test_alarms_on_one_target_are_grouped_in_the_list_and_in_one_notification(history):
    history.run("1.0", [timed("suite/A", 0.10), timed("suite/B", 0.20, seed=5), timed("suite/C", 0.1, seed=6)])
    history.run("1.1", [timed("suite/A", 0.10, seed=1), timed("suite/B", 0.20, seed=2), timed("suite/C", 0.1, seed=3)])
    outcome = history.run("1.2", [timed("suite/A", 0.14, seed=7), timed("suite/B", 0.28, seed=8),
                                  timed("suite/C", 0.1, seed=9)])
    alarms = lifecycle.list_alarms(history.store)
    assert [(a.workload, a.group) for a in alarms] == [("suite/A", "fw==1.2 on ci"), ("suite/B", "fw==1.2 on ci")]
    message = notify.compose(outcome.alarms.events, outcome, outcome.run_id)
    assert message.title == "modelci: 2 alarms opened on fw==1.2 (runner ci)"
    assert message.text.count("*fw==1.2 on ci*") == 1


def test_a_runner_with_no_recent_successful_run_opens_a_stale_alarm(history):
    old = utcnow() - timedelta(days=10)
    history.run("1.0", [timed(SLOW, 0.10)], runner="gpu-box", started_at=old, alarms=False)
    history.run("1.0", [timed(SLOW, 0.10)], runner="gpu-box", started_at=old + timedelta(hours=1), alarms=False)
    outcome = history.run("1.0", [timed(SLOW, 0.10, seed=1)])  # another runner notices
    assert ("open", "(runner)", "successful-run") in events(outcome)
    (stale,) = [a for a in lifecycle.list_alarms(history.store) if a.kind == "stale"]
    assert stale.runner == "gpu-box" and "9 days ago" in stale.message and "stale_after_days = 7" in stale.message
    # `modelci alarms check` between runs sees the same alarm: it updates, it does not open a second one
    assert hooks.check_now(history.config, history.store).events == []
    assert lifecycle.get_alarm(history.store, stale.id).count == 2
    back = history.run("1.0", [timed(SLOW, 0.10, seed=2)], runner="gpu-box")
    assert ("recovered", "(runner)", "successful-run") in events(back)


def test_stale_check_can_be_turned_off(tmp_path):
    history = History(tmp_path / "p", "[alarms]\nstale_after_days = 0\n")
    history.run("1.0", [timed(SLOW, 0.10)], runner="gpu-box", started_at=utcnow() - timedelta(days=30), alarms=False)
    assert hooks.check_now(history.config, history.store).events == []


def test_a_suite_that_yields_no_workloads_alarms_until_it_yields_again(history):
    empty = Result(workload="zoo/(suite)", status="error", reason="suite 'zoo' (/x/zoo) yields no workloads; ...")
    outcome = history.run("1.0", [empty])
    (alarm,) = lifecycle.list_alarms(history.store)
    assert alarm.kind == "empty-suite" and "yields no workloads" in alarm.message
    assert events(outcome) == [("open", "zoo/(suite)", "status")]
    fixed = history.run("1.0", [timed("zoo/Model", 0.1)])
    assert events(fixed) == [("recovered", "zoo/(suite)", "status")]


def test_a_failed_workload_alarms_even_without_a_baseline_and_recovers_when_ok(history):
    outcome = history.run("1.0", [timed("suite/Raises", status="failed", reason="RuntimeError: boom")])
    assert events(outcome) == [("open", "suite/Raises", "status")]
    assert lifecycle.list_alarms(history.store)[0].message == "status failed: RuntimeError: boom"
    assert events(history.run("1.1", [timed("suite/Raises", 0.1)])) == [("recovered", "suite/Raises", "status")]


def test_a_metric_that_disappears_opens_an_alarm(history):
    history.run("1.0", [timed(SLOW, 0.1, extra={"mem.peak_device": [2.0**30]})])
    outcome = history.run("1.1", [timed(SLOW, 0.1, seed=1)])
    assert events(outcome) == [("open", SLOW, "mem.peak_device")]
    (alarm,) = lifecycle.list_alarms(history.store)
    assert alarm.kind == "disappeared" and "metric disappeared" in alarm.message
    back = history.run("1.2", [timed(SLOW, 0.1, seed=2, extra={"mem.peak_device": [2.0**30]})])
    assert events(back) == [("recovered", SLOW, "mem.peak_device")]


def drift(history: History, values: list[float], start: int = 0) -> list:
    """One run per target fw==1.0.<i>, time.infer at each value (0.5% sample noise); every outcome."""
    return [history.run(f"1.0.{i}", [timed(SLOW, value, seed=i, noise=0.005)]) for i, value in enumerate(values, start)]


def levels(n: int, step_at: int, step: float, seed: int = 7) -> list[float]:
    """n points at 0.1 s with 1% run-to-run noise, raised by `step` (relative) from index `step_at` on."""
    rng = np.random.default_rng(seed)
    return [0.1 * (1 + 0.01 * rng.standard_normal()) * (1 + step if i >= step_at else 1) for i in range(n)]


def test_a_step_too_small_for_the_pairwise_check_opens_a_change_alarm_naming_the_first_target(history):
    # 26 points before the step: the detector estimates the noise itself once it has 20 points before the tail
    outcome = drift(history, levels(30, 26, 0.06))[-1]
    (alarm,) = lifecycle.list_alarms(history.store)
    assert (alarm.check, alarm.kind, alarm.metric) == ("history", "change", "time.infer")
    assert alarm.numbers["first_target"] == "fw==1.0.26"
    assert 0.04 < alarm.numbers["magnitude"] < 0.08
    assert "from fw==1.0.26" in alarm.message
    # no pairwise timing alarm: 6% is inside the 1.10 factor; the change finding is stored with the run, non-gating
    finding = next(f for f in outcome.comparisons[0].findings if f.check == "history")
    assert finding.verdict == "regression" and not finding.gating
    assert not workflow.failed(outcome)
    stored = history.store.run(outcome.run_id).results[0].info["findings"]
    assert any(f["check"] == "history" for f in stored)
    # back to the old level: the change alarm recovers
    back = drift(history, levels(3, 99, 0.0, seed=8), start=30)
    # the mean of the last 3 points is nearer the old level from the second point back on
    assert [events(o) for o in back] == [[], [("recovered", SLOW, "time.infer")], []]


def test_an_infinite_value_in_the_history_is_no_point_and_the_alarm_step_still_runs(history):
    # an overflowed metric once reached the change-point detector, which refuses non-finite values: the alarm step
    # raised, and the run lost its alarms (PostgreSQL keeps NaN too, where SQLite stores NULL)
    values = levels(30, 26, 0.06)
    outcomes = [history.run(f"1.0.{i}", [timed(SLOW, value, seed=i, noise=0.005,
                                                extra={"overflow": [float("inf") if i == 12 else 1.0]})])
                for i, value in enumerate(values)]
    assert all(o.alarms is not None for o in outcomes)
    (series,) = changes.load_series(history.store, metric="overflow")
    assert len(series.values) == 29 and "fw==1.0.12" not in series.labels
    (alarm,) = [a for a in lifecycle.list_alarms(history.store) if a.check == "history"]
    assert (alarm.metric, alarm.numbers["first_target"]) == ("time.infer", "fw==1.0.26")


def test_a_value_too_large_for_the_detector_is_no_point_and_warns_of_nothing(history):
    # 1e300 (an overflowed counter): the detector's sums of squares overflowed, numpy's RuntimeWarnings reached
    # the console, and the verdict on the series was NaN's
    import warnings

    from modelci.checks import history as detector

    values = [1e300 if i % 3 else 1.0 for i in range(14)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i, value in enumerate(values):
            history.run(f"1.0.{i}", [timed(SLOW, 0.1, seed=i, extra={"counter": [value]})])
        (series,) = changes.load_series(history.store, metric="counter")
        assert series.values == [1.0] * 5
        with pytest.raises(ValueError, match="at most 1e\\+150 in magnitude"):
            detector.detect_changes([1.0, 1e300] * 10)


def test_the_online_check_looks_for_a_step_the_bad_way_only(history):
    from modelci.checks.history import detect_latest

    # one-sided: 6% faster is no regression, so it is not even found (the two-sided check does find it)
    drift(history, levels(30, 24, -0.06))
    series = changes.load_series(history.store, metric="time.infer")
    assert changes.latest_changes(series, changes.calibrated(history.config, history.store)) == []
    assert detect_latest(series[0].values, series[0].labels, worse="both").label == "fw==1.0.24"



def test_the_online_check_pools_the_noise_of_a_runners_workloads(history):
    # 8 workloads on one runner, their timings with the same 1% noise: each series' noise is pooled with the
    # others', and the alarm's rule says so. The step is in one workload only
    workloads = [f"suite/W{i}" for i in range(8)]
    series = {w: levels(30, 26, 0.06 if w == workloads[0] else 0.0, seed=i) for i, w in enumerate(workloads)}
    outcomes = [history.run(f"1.0.{i}", [timed(w, series[w][i], seed=i, noise=0.005) for w in workloads])
                for i in range(30)]
    (alarm,) = lifecycle.list_alarms(history.store)
    assert (alarm.workload, alarm.numbers["first_target"]) == (workloads[0], "fw==1.0.26")
    (finding,) = [f for o in outcomes for c in o.comparisons for f in c.findings if f.check == "history"]
    assert "pooled with the 8 series of this metric on this runner" in finding.reason
    loaded = changes.load_series(history.store)
    assert set(changes.noise_pools(loaded)) == {("ci", "time.infer")}  # the other metrics do not vary
    # a runner with fewer series of a metric than history.POOL_MIN_SERIES keeps each series' own noise
    assert changes.noise_pools([s for s in loaded if s.workload in workloads[:7]]) == {}

def test_a_run_of_a_few_workloads_pools_their_noise_with_the_runners_others(history):
    # 8 workloads ran 26 builds together; then only one runs (`run -k`), and steps up. Its noise is still pooled
    # with the 7 it did not run beside this time, as in a run of all of them
    workloads = [f"suite/W{i}" for i in range(8)]
    series = {w: levels(30, 26, 0.06 if w == workloads[0] else 0.0, seed=i) for i, w in enumerate(workloads)}
    for i in range(30):
        ran = workloads if i < 26 else workloads[:1]
        history.run(f"1.0.{i}", [timed(w, series[w][i], seed=i, noise=0.005) for w in ran])
    (alarm,) = lifecycle.list_alarms(history.store)
    assert (alarm.workload, alarm.numbers["first_target"]) == (workloads[0], "fw==1.0.26")
    assert "pooled with the 8 series of this metric on this runner" in alarm.message


def test_a_new_workload_on_a_pooled_runner_alarms_on_a_step_its_own_few_points_cannot_show(history):
    # 8 workloads have run 24 builds; a ninth joins and steps up by 2.5% (about 2.5 sigma) in its 15th point.
    # Its own 14 points before the step say little of its noise, and a t test on them misses this step; the
    # runner's pool says the noise is 1%, and the alarm step finds it (of 8 such seeds, 6 found pooled, 4 alone)
    workloads = [f"suite/W{i}" for i in range(8)]
    new = "suite/NEW"
    series = {w: levels(44, 99, 0.0, seed=i) for i, w in enumerate(workloads)}
    fresh = levels(20, 14, 0.025, seed=41)
    for i in range(44):
        results = [timed(w, series[w][i], seed=i, noise=0.005) for w in workloads]
        if i >= 24:
            results.append(timed(new, fresh[i - 24], seed=100 + i, noise=0.005))
        history.run(f"1.0.{i}", results)
    (alarm,) = lifecycle.list_alarms(history.store)
    assert (alarm.workload, alarm.check, alarm.numbers["first_target"]) == (new, "history", "fw==1.0.38")
    assert "pooled with the noise of the 8 series of this metric on this runner" in alarm.message
    # the same points judged on their own raise nothing
    loaded = [s for s in changes.load_series(history.store, metric="time.infer")]
    (alone,) = [s for s in loaded if s.workload == new]
    assert len(alone.values) == 20
    policy = changes.calibrated(history.config, history.store)
    assert changes.latest_changes([alone], policy) == []
    assert [c.series.workload for c in changes.latest_changes(loaded, policy)] == [new]


def test_the_online_check_tests_each_metric_the_way_it_gets_worse():
    from modelci.checks.policy import Policy

    def series(metric: str, kind: str) -> changes.Series:
        return changes.Series("ci", "suite/W", metric, kind, "")

    assert changes.worse_way(series("time.infer", "timing"), Policy()) == "up"
    assert changes.worse_way(series("top1_acc", "metric"), Policy()) == "down"
    assert changes.worse_way(series("loss", "curve"), Policy()) == "both"
    assert changes.worse_way(series("loss", "curve"), Policy(direction="lower")) == "up"
    assert changes.worse_way(series("throughput", "metric"), Policy(direction="higher")) == "down"


@pytest.mark.parametrize("source", ["policy", "calibrate"])
@pytest.mark.parametrize("noise_cv, alarms", [(0.01, 1), (0.05, 0)])
def test_the_calibrated_noise_sets_the_penalty(tmp_path, noise_cv, alarms, source):
    # the calibrated noise sets the penalty: a noisier calibration hides the same 6% step (the online check
    # waits for 20 points of history before the tail, calibrated or not)
    toml = f'[[policy]]\nmetric = "time.*"\nnoise_cv = {noise_cv}\n' if source == "policy" else ""
    history = History(tmp_path / "p", toml)
    values = levels(28, 24, 0.06)
    first = drift(history, values[:1])[0]
    if source == "calibrate":  # a profile as `modelci calibrate` stores it: the run-to-run CV of the medians
        entry = calibrate.NoiseEntry(SLOW, "time.infer", "timing", runs=5, cv=noise_cv)
        calibrate.save(history.store, calibrate.CalibrationOutcome(first.target, first.environment, "ci", [],
                                                                   entries=[entry]))
    drift(history, values[1:], start=1)
    found = [a for a in lifecycle.list_alarms(history.store) if a.check == "history"]
    assert len(found) == alarms
    if found:
        assert found[0].numbers["first_target"] == "fw==1.0.24"


def test_a_step_the_pairwise_check_already_alarmed_on_opens_no_second_alarm(tmp_path):
    history = History(tmp_path / "p", '[[policy]]\nmetric = "time.*"\nnoise_cv = 0.01\n')
    outcomes = drift(history, levels(28, 24, 0.3))
    assert any(f.check == "history" for f in outcomes[-1].comparisons[0].findings)  # the change point is reported
    assert [(a.check, a.target) for a in lifecycle.list_alarms(history.store)] == [("timing", "fw==1.0.24")]


def test_series_follow_version_order_not_run_order(history):
    for version in ("1.10.0", "1.9.0", "1.2.0", "2.0.0rc1", "2.0.0"):
        history.run(version, [timed(SLOW, 0.1)])
    (series,) = changes.load_series(history.store, metric="time.infer")
    assert series.labels == ["fw==1.2.0", "fw==1.9.0", "fw==1.10.0", "fw==2.0.0rc1", "fw==2.0.0"]


def test_history_changes_and_alarms_commands(history, capsys, monkeypatch):
    drift(history, levels(24, 12, 0.3, seed=3))
    monkeypatch.chdir(history.root)
    assert cli.main(["history", "--changes", "--metric", "time.infer"]) == 0
    out = capsys.readouterr().out
    assert "fw==1.0.12" in out and "worse" in out
    assert cli.main(["alarms"]) == 0
    listing = capsys.readouterr().out
    assert "fw==1.0.12 on ci" in listing and "time.infer" in listing
    alarm_id = lifecycle.list_alarms(history.store)[0].id
    # MODELCI_USER stands for --by, and is held to its rules: one line of UTF-8 text (a newline was stored, and
    # a byte that is no UTF-8 was a traceback)
    for bad, says in (("a\nb", "MODELCI_USER 'a\\nb': give who acts"), ("u\udcff", "is not UTF-8 text")):
        monkeypatch.setenv("MODELCI_USER", bad)
        assert cli.main(["alarms", "ack", str(alarm_id)]) == 2
        assert says in capsys.readouterr().err
    monkeypatch.delenv("MODELCI_USER")
    assert lifecycle.get_alarm(history.store, alarm_id).state == "open"  # refused: nothing was acknowledged
    assert cli.main(["alarms", "ack", str(alarm_id), "--note", "x" * 5000]) == 2  # it was cut to 2,000, unsaid
    assert "--note is 5000 characters long; the most is 1900" in capsys.readouterr().err
    assert cli.main(["alarms", "ack", str(alarm_id), "--by", "dana"]) == 0
    assert cli.main(["alarms", "silence", str(alarm_id), "--until", "2999-01-01"]) == 0
    assert cli.main(["alarms", "show", str(alarm_id)]) == 0
    shown = capsys.readouterr().out
    assert "silenced until 2999-01-01" in shown and "dana" in shown
    assert cli.main(["alarms", "silence", str(alarm_id), "--until", "soon"]) == 2
    assert "--until must be a date" in capsys.readouterr().err
    assert cli.main(["alarms", "resolve", str(alarm_id)]) == 0
    assert cli.main(["alarms", "list", "--all"]) == 0
    assert "resolved" in capsys.readouterr().out
    assert cli.main(["alarms", "list", "--all", "--state", "open"]) == 2  # --state was dropped without a word
    assert "give --state (repeatable) or --all, not both" in capsys.readouterr().err


def test_alarms_through_workflow_run_on_fakefw(fake_project):
    cfg = config_module.load()
    suite = [str(fake_project.suite)]
    first = workflow.run(cfg, str(fake_project.v10), suite, "Slow")
    assert first.alarms.events == []
    slow = workflow.run(cfg, str(fake_project.v11), suite, "Slow")
    assert [(e.event, e.alarm.check, e.alarm.metric) for e in slow.alarms.events] == [("open", "timing", "time.infer")]
    assert slow.alarms.events[0].alarm.target == "fakefw==1.1 (wheel " + slow.target.wheel_sha256[:8] + ")"
    # re-running the old release fixes nothing: it is judged against what came before it (nothing), not 1.1
    older = workflow.run(cfg, str(fake_project.v10), suite, "Slow")
    assert older.alarms.events == [] and older.comparisons[0].baseline is None
    assert lifecycle.list_alarms(Store.from_config(cfg))[0].recovered is False
    # a newer release as fast as 1.0 is the fix

    v12 = build_fake_wheel(fake_project.wheels, "fakefw", "1.2", {"fakefw/__init__.py": source("1.2")})
    fixed = workflow.run(cfg, str(v12), suite, "Slow")
    assert [e.event for e in fixed.alarms.events] == ["recovered"]


PRELOAD_PROBE = """
import json, sys
from modelci import config as config_module, workflow
from modelci.store import Store

config = config_module.load()
thread = workflow._preload_checks(config, Store.from_config(config), alarms=True)
if thread is not None:
    thread.join()
print(json.dumps({"thread": thread is not None,
                  "imported": sorted(m for m in ("scipy.stats", "ruptures") if m in sys.modules)}))
"""


def preloaded(root) -> dict:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", PRELOAD_PROBE], cwd=root, capture_output=True, text=True,
                          timeout=120, env={k: v for k, v in os.environ.items() if not k.startswith("MODELCI_")})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_run_imports_what_its_checks_will_need_beside_the_worker(tmp_path):
    """scipy.stats (the rank tests) once the runner has a history, ruptures once its series can be segmented,
    imported in a thread while the worker imports the framework; a first run imports neither."""
    history = History(tmp_path / "project")
    assert preloaded(history.root) == {"thread": False, "imported": []}
    history.run("1.0", [timed("s/w")], alarms=False)
    assert preloaded(history.root) == {"thread": True, "imported": ["scipy.stats"]}
    for minor in range(1, 19):
        history.run(f"1.{minor}", [timed("s/w", seed=minor)], alarms=False)
    assert preloaded(history.root) == {"thread": True, "imported": ["ruptures", "scipy.stats"]}


def test_an_output_whose_stored_baseline_cannot_be_read_neither_fires_nor_recovers(history):
    """A baseline array whose artifact rotted is said in the finding and judged as nothing: it used to stop the
    run before its reports, and an output judged "new" for it would have recovered the alarm open on it."""
    def with_output(seed: int, value: float) -> Result:
        result = timed(SLOW, 0.10, seed=seed)
        result.outputs = {"y": np.array([1.0, value])}
        return result

    history.run("1.0", [with_output(0, 2.0)])
    assert events(history.run("1.1", [with_output(1, 3.0)])) == [("open", SLOW, "output:y")]
    for blob in Path(history.config.artifacts).rglob("*"):
        if blob.is_file():
            blob.write_bytes(b"bit rot")
    outcome = history.run("1.2", [with_output(2, 2.0)])  # back to 1.0's value, but the baseline cannot say so
    (finding,) = [f for c in outcome.comparisons for f in c.findings if f.metric == "output:y"]
    assert finding.verdict == "new" and "the baseline's stored array cannot be read (artifact" in finding.message
    assert events(outcome) == []
    (alarm,) = lifecycle.list_alarms(history.store)
    assert (alarm.metric, alarm.recovered) == ("output:y", False)


def test_the_build_that_puts_an_output_back_fixes_its_alarm_and_is_no_regression(fake_project, capsys):
    """1.1 changes an output (alarm #1), 1.2 keeps the change, 1.3 puts it back as 1.0 had it. Against its moving
    baseline (1.2) 1.3 differs, and was judged a regression of its own: exit 1, the alarm seen a third time with
    the fix as its message, and the recovery credited to the build after it. Against the baseline the alarm first
    fired on (1.0), as recovery is judged, it is the fix."""
    broken = source("1.2").replace('_V11 = __version__ == "1.1"', '_V11 = __version__ in ("1.1", "1.2")')
    v12 = build_fake_wheel(fake_project.wheels, "fakefw", "1.2", {"fakefw/__init__.py": broken})
    v13 = build_fake_wheel(fake_project.wheels, "fakefw", "1.3", {"fakefw/__init__.py": source("1.3")})
    report = fake_project.root / "report.json"
    base = ["run", "--suite", str(fake_project.suite), "-k", "Precision", "--json", str(report), "--target"]
    assert [cli.main([*base, str(wheel)]) for wheel in (fake_project.v10, fake_project.v11, v12)] == [0, 1, 0]
    (alarm,) = lifecycle.list_alarms(Store.from_config(config_module.load()))
    assert (alarm.metric, alarm.count, alarm.recovered) == ("output:scaled", 2, False)
    capsys.readouterr()
    assert cli.main([*base, str(v13)]) == 0
    out = capsys.readouterr().out
    assert f"fixes alarm #{alarm.id}" in out and "recovered" in out
    data = json.loads(report.read_text())
    (fixed,) = [f for r in data["results"] for f in r["findings"] if f["metric"] == "output:scaled"]
    assert fixed["verdict"] == "improvement" and fixed["numbers"]["fixes_alarm"] == alarm.id
    assert data["regressed"] is False
    assert [(a["event"], a["id"]) for a in data["alarms"]] == [("recovered", alarm.id)]
    (alarm,) = lifecycle.list_alarms(Store.from_config(config_module.load()))
    assert (alarm.count, alarm.recovered) == (2, True)
