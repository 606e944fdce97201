"""The run and compare workflows on fakefw 1.0 / 1.1: real uv environments, real subprocesses, real SQLite."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from modelci import config as config_module
from modelci import workflow
from modelci.errors import UserError
from modelci.store import Store

EXPECTED = {
    # workload -> the (check, metric, verdict) findings that must appear, and nothing else gating
    "fakesuite/Stable": set(),
    "fakesuite/Precision": {("precision", "output:scaled", "regression")},
    "fakesuite/Slow": {("timing", "time.infer", "regression")},
    "fakesuite/Raises": {("status", "status", "regression")},
    "fakesuite/Aborts": {("status", "status", "regression")},
    "fakesuite/Hangs": {("status", "status", "regression")},
}


def regressions(comparison) -> set[tuple[str, str, str]]:
    return {(f.check, f.metric, f.verdict) for f in comparison.findings if f.verdict == "regression" and f.gating}


@pytest.fixture
def cfg(fake_project):
    return config_module.load()


def test_compare_flags_exactly_the_changes_of_fakefw_1_1(fake_project, cfg):
    outcome = workflow.compare(cfg, str(fake_project.v10), str(fake_project.v11), [str(fake_project.suite)])

    assert outcome.regressed
    by_workload = {c.result.workload: c for c in outcome.comparisons}
    assert set(by_workload) == set(EXPECTED)
    for workload, expected in EXPECTED.items():
        assert regressions(by_workload[workload]) == expected, workload
    statuses = {c.result.workload: c.result.status for c in outcome.comparisons}
    assert statuses == {"fakesuite/Stable": "ok", "fakesuite/Precision": "ok", "fakesuite/Slow": "ok",
                        "fakesuite/Raises": "failed", "fakesuite/Aborts": "crashed", "fakesuite/Hangs": "timeout"}
    raises = by_workload["fakesuite/Raises"].result
    assert "validate() rejects a valid input" in raises.reason and "Traceback" in raises.traceback
    aborts = by_workload["fakesuite/Aborts"].result
    assert "SIGABRT" in aborts.reason and "fused_update" in aborts.stderr_tail
    precision = next(f for f in by_workload["fakesuite/Precision"].findings if f.metric == "output:scaled")
    assert precision.numbers["max_rel"] == pytest.approx(1e-3, rel=0.01)
    slow = next(f for f in by_workload["fakesuite/Slow"].findings if f.metric == "time.infer")
    assert slow.numbers["ratio"] > 1.5 and slow.numbers["p_value"] < 0.05
    assert slow.numbers["confirmation"]["confirmed"] and slow.numbers["confirmation"]["ratio"] > 1.5
    assert "confirmed by a second run of both" in slow.message


FIRST_PASS_SLOW = """
import pathlib, time
import modelci

CALLS = pathlib.Path(__file__).with_name("calls.txt")


class FirstPassSlow(modelci.Workload):
    \"\"\"Slow for the first run's inferences only, as if a load spike hit the A side of a compare.\"\"\"
    framework = "python"
    steps = 10
    repeats = 7
    warmup = 1

    def train_step(self, ctx, step):
        return 1.0 / (step + 1)

    def infer(self, ctx):
        calls = CALLS.stat().st_size if CALLS.exists() else 0
        with CALLS.open("a") as handle:
            handle.write("x")
        time.sleep(0.04 if calls < 8 else 0.01)
        return {"y": [1.0]}
"""


def test_compare_drops_a_timing_verdict_that_a_second_pass_does_not_confirm(fake_project, cfg, tmp_path):
    suite = tmp_path / "spike"
    suite.mkdir()
    (suite / "spike.py").write_text(FIRST_PASS_SLOW)
    spec = str(fake_project.v10)
    outcome = workflow.compare(cfg, spec, spec, [str(suite)], rerun=True)
    infer = next(f for f in outcome.comparisons[0].findings if f.metric == "time.infer")
    assert infer.verdict == "ok" and not outcome.regressed
    assert infer.numbers["ratio"] < 0.5  # the first pass saw B 4x faster ...
    assert infer.numbers["confirmation"]["confirmed"] is False  # ... the second did not
    assert "not confirmed" in infer.message
    # without confirmation the spike is taken at its word
    (suite / "calls.txt").unlink()
    single = workflow.compare(cfg, spec, spec, [str(suite)], rerun=True, confirm=False)
    assert next(f for f in single.comparisons[0].findings if f.metric == "time.infer").verdict == "improvement"


def test_a_a_comparison_flags_nothing(fake_project, cfg):
    first = workflow.compare(cfg, str(fake_project.v10), str(fake_project.v10), [str(fake_project.suite)],
                             rerun=True)
    assert not first.regressed
    for comparison in first.comparisons:
        assert comparison.result.status == "ok"
        assert regressions(comparison) == set(), comparison.result.workload
        # A/A: the outputs are compared and bit-identical
        assert any(f.check == "precision" and f.numbers.get("max_abs") == 0 for f in comparison.findings)


def test_first_run_has_no_baseline_and_passes_then_second_run_compares(fake_project, cfg):
    first = workflow.run(cfg, str(fake_project.v10), [str(fake_project.suite)], "Stable")
    assert [c.baseline for c in first.comparisons] == [None]
    assert {f.verdict for f in first.comparisons[0].findings} == {"new"}
    assert not workflow.failed(first)

    second = workflow.run(cfg, str(fake_project.v11), [str(fake_project.suite)], "Stable")
    assert second.comparisons[0].baseline.id == first.comparisons[0].result.id
    assert not workflow.failed(second)


def test_run_fails_when_a_workload_fails_even_without_baseline(fake_project, cfg):
    outcome = workflow.run(cfg, str(fake_project.v11), [str(fake_project.suite)], "Raises")
    assert outcome.comparisons[0].result.status == "failed"
    assert workflow.failed(outcome)


def test_second_run_reuses_the_cached_environment(fake_project, cfg):
    first = workflow.run(cfg, str(fake_project.v10), [str(fake_project.suite)], "Stable")
    marker = first.environment.path / "modelci-env.json"
    built_at = marker.stat().st_mtime_ns
    second = workflow.run(cfg, str(fake_project.v10), [str(fake_project.suite)], "Stable")
    assert second.environment.id == first.environment.id
    assert marker.stat().st_mtime_ns == built_at
    assert second.run_id != first.run_id


def test_a_compare_where_b_gives_no_result_is_no_pass(fake_project, capsys, tmp_path):
    # both sides fail: the status check says "still not ok" (no new regression), and the compare exited 0
    from modelci import cli

    spec = str(fake_project.v11)
    code = cli.main(["compare", spec, spec, "--suite", str(fake_project.suite), "-k", "Raises", "--json",
                     str(tmp_path / "c.json"), "--markdown", str(tmp_path / "c.md")])
    assert code == 1
    assert ("B gave no result for fakesuite/Raises: nothing of it was compared, so this is no pass"
            in capsys.readouterr().err)
    report = json.loads((tmp_path / "c.json").read_text())
    assert report["regressed"] is False and report["unmeasured"] == ["fakesuite/Raises"]
    assert "B gave no result for 1 workload: not compared" in (tmp_path / "c.md").read_text()


def test_compare_reuses_stored_results(fake_project, cfg):
    first = workflow.compare(cfg, str(fake_project.v10), str(fake_project.v10), [str(fake_project.suite)], "Stable")
    again = workflow.compare(cfg, str(fake_project.v10), str(fake_project.v10), [str(fake_project.suite)], "Stable")
    assert again.b.reused == 1 and again.b.run_id is None
    assert again.comparisons[0].result.id == first.b.results[0].id


def test_reuse_needs_the_same_seed_threads_and_repeats(fake_project, cfg):
    spec, suites = str(fake_project.v10), [str(fake_project.suite)]
    first = workflow.run(cfg, spec, suites, "Stable")
    assert first.results[0].info["settings"] == {"seed": 0, "threads": 1, "repeats": 0}
    assert workflow.run(cfg, spec, suites, "Stable", reuse=True).reused == 1
    for changed in ({"threads": 2}, {"seed": 7}, {"repeats": 3}):
        other = workflow.run(config_module.load(cli=changed), spec, suites, "Stable", reuse=True)
        assert other.reused == 0, f"a result measured with other settings was reused for {changed}"
        assert other.results[0].info["settings"] == first.results[0].info["settings"] | changed
    again = workflow.run(config_module.load(cli={"threads": 2}), spec, suites, "Stable", reuse=True)
    assert again.reused == 1


def test_a_timeout_is_never_reused(fake_project, cfg):
    # it says as much about the timeout it ran under as about the target: a run with a tiny timeout made every
    # later --reuse run (and the bisects that reuse probes) a timeout
    spec, suites = str(fake_project.v10), [str(fake_project.suite)]
    hurried = workflow.run(config_module.load(cli={"timeout": 0.001}), spec, suites, "Stable")
    assert hurried.results[0].status == "timeout"
    again = workflow.run(cfg, spec, suites, "Stable", reuse=True)
    assert again.reused == 0 and again.results[0].status == "ok"


def test_child_imports_the_targets_packages_not_the_harness(fake_project, cfg):
    outcome = workflow.run(cfg, str(fake_project.v11), [str(fake_project.suite)], "Stable")
    env_path = str(outcome.environment.path)
    result = outcome.comparisons[0].result
    # the harness has numpy; an environment built from a fakefw wheel alone must not see it
    assert "numpy" not in result.info["modules"]
    assert outcome.target.version == "1.1"
    lock = outcome.environment.lock
    assert "fakefw==1.1" in lock and "sqlalchemy" not in lock.lower() and "numpy" not in lock
    assert env_path in str(outcome.environment.python)


def test_suite_file_that_fails_to_import_is_an_error_result_and_others_still_run(fake_project, cfg):
    (fake_project.suite / "broken.py").write_text("import modelci\n\nx = 1\nraise ValueError('broken on purpose')\n")
    outcome = workflow.run(cfg, str(fake_project.v10), [str(fake_project.suite)])
    by_workload = {c.result.workload: c.result for c in outcome.comparisons}
    broken = by_workload["fakesuite/broken.py"]
    assert broken.status == "error"
    assert "broken.py, line 4" in broken.reason and "broken on purpose" in broken.reason
    assert by_workload["fakesuite/Stable"].status == "ok"
    assert workflow.failed(outcome)


def test_empty_suite_is_an_error_not_a_pass(fake_project, cfg, tmp_path):
    empty = tmp_path / "emptysuite"
    empty.mkdir()
    (empty / "nothing.py").write_text("import modelci\n")
    outcome = workflow.run(cfg, str(fake_project.v10), [str(empty)])
    assert [c.result.status for c in outcome.comparisons] == ["error"]
    assert "yields no workloads" in outcome.comparisons[0].result.reason
    assert workflow.failed(outcome)


@pytest.mark.parametrize(
    "target, suites, pattern, message",
    [
        ("fakefw==0.0.42", None, None, "fakefw==0.0.42"),
        (None, ["no/such/folder"], None, "does not exist"),
        (None, None, "NoSuchWorkload", "matches no workload"),
        ("not a requirement !!", None, None, "is not a requirement"),
        (None, ["zoo:nosuchzoo"], None, "unknown built-in suite"),
    ],
)
def test_bad_input_is_a_user_error_naming_it(fake_project, cfg, target, suites, pattern, message):
    assert not Path(cfg.db).exists()
    with pytest.raises(UserError, match=message):
        workflow.run(cfg, target or str(fake_project.v10), suites or [str(fake_project.suite)], pattern)
    # a first run that was refused leaves no empty history behind, which `modelci history` would then show as
    # "no runs" where it says that there is no history at that path
    assert not Path(cfg.db).exists()


def test_bad_config_names_the_key(fake_project):
    toml = fake_project.root / "modelci.toml"
    toml.write_text(toml.read_text() + "tiemout = 3\n")
    with pytest.raises(UserError, match="unknown key 'tiemout'"):
        config_module.load()
    toml.write_text('timeout = "soon"\n')
    with pytest.raises(UserError, match="'timeout' must be a number"):
        config_module.load()
    toml.write_text("[checks]\ntiming_factor = \n")
    with pytest.raises(UserError, match="not valid TOML"):
        config_module.load()


def test_stored_run_reads_back_with_verified_outputs(fake_project, cfg):
    outcome = workflow.run(cfg, str(fake_project.v10), [str(fake_project.suite)], "Precision")
    store = Store(cfg.db, cfg.artifacts)
    stored = store.run(outcome.run_id)
    assert stored.row.status == "complete"
    result = stored.results[0]
    assert result.outputs["scaled"].shape == (16, 3)
    assert result.metrics["loss"].kind == "curve" and len(result.metrics["loss"].values) == 12
    assert {f["check"] for f in result.info["findings"]} >= {"status"}
    with sqlite3.connect(Path(cfg.db)) as db:
        assert db.execute("pragma integrity_check").fetchone() == ("ok",)
        assert db.execute("select version from schema_info").fetchone() == (1,)
    with pytest.raises(UserError, match="no run '9999'"):
        store.run("9999")


def test_json_report_schema(fake_project, cfg, tmp_path):
    from modelci.report import json_report

    outcome = workflow.compare(cfg, str(fake_project.v10), str(fake_project.v11), [str(fake_project.suite)],
                               "Precision")
    path = tmp_path / "report.json"
    json_report.write(path, json_report.compare_report(outcome))
    report = json.loads(path.read_text())
    assert report["schema"] == "modelci.report/1" and report["regressed"] is True
    assert report["run"]["target"]["version"] == "1.1" and report["run"]["environment"] == outcome.b.environment.id
    assert report["baseline_run"]["target"]["version"] == "1.0"
    (entry,) = report["results"]
    assert entry["workload"] == "fakesuite/Precision" and entry["status"] == "ok"
    verdicts = {(f["check"], f["metric"]): f["verdict"] for f in entry["findings"]}
    assert verdicts[("precision", "output:scaled")] == "regression"
    assert verdicts[("precision", "output:prediction")] == "ok"
