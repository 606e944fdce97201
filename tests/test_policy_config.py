"""Per-metric policy ([[policy]], Paddle CE KPI objects), the allowlist ([[allow]]), [[notify]] and [alarms]
tables: parsing, the errors that name the key, and the checks honouring direction, threshold, tolerance and
skip_head."""

from __future__ import annotations

from datetime import date

import numpy as np
import pytest
from alarm_history import History, timed

from modelci import checks, cli
from modelci import config as config_module
from modelci.alarms import lifecycle
from modelci.checks.curve import check_curve
from modelci.checks.policy import Policy
from modelci.checks.timing import check_memory, check_timing, check_user_metric
from modelci.errors import UserError
from modelci.records import Metric, Result

SLOW = "suite/Slow"


def load(tmp_path, toml: str, today: date | None = None) -> config_module.Config:
    (tmp_path / "modelci.toml").write_text(toml)
    return config_module.load(cwd=tmp_path, environ={}, today=today)


def samples(level: float, n: int = 9, noise: float = 0.005, seed: int = 0) -> list[float]:
    return list(level * (1 + noise * np.random.default_rng(seed).standard_normal(n)))


def test_policy_entries_apply_after_checks_and_overrides_in_order(tmp_path):
    cfg = load(tmp_path, """
[checks]
timing_factor = 1.2
[[overrides]]
workload = "suite/*"
metric = "time.*"
timing_factor = 1.3
[[policy]]
metric = "time.infer"
direction = "lower"
threshold = 0.05
tolerance = 0.002
skip_head = 2
[[policy]]
workload = "suite/Acc*"
metric = "accuracy"
direction = "higher"
active = true
""")
    policy = cfg.policy_for("suite/Slow")
    infer = policy("time.infer")
    assert (infer.timing_factor, infer.threshold, infer.tolerance, infer.skip_head, infer.direction) == (
        1.3, 0.05, 0.002, 2, "lower")
    assert infer.factor(infer.timing_factor) == pytest.approx(1.05)
    assert policy("time.train").threshold is None and policy("time.train").timing_factor == 1.3
    accuracy = cfg.policy_for("suite/AccModel")("accuracy")
    # `active` on a user metric decides whether it gates (user metrics are report-only by default)
    assert accuracy.higher_better("accuracy") and accuracy.gate_user_metrics
    assert not cfg.policy_for("suite/Other")("accuracy").gate_user_metrics


@pytest.mark.parametrize("toml, message", [
    ('[[policy]]\nmetric = "time.trian"\n',
     "[[policy]] entry 1: key 'metric' names an unknown metric 'time.trian'; the harness records status, loss"),
    # an [[overrides]] or [[allow]] entry with such a name judged nothing, silently
    ('[[overrides]]\nmetric = "time.infr"\ntiming_factor = 1.5\n',
     "[[overrides]] entry 1: key 'metric' names an unknown metric 'time.infr'; the harness records status, loss"),
    ('[[allow]]\nmetric = "mem.peak"\nreason = "known"\nexpires = 2099-01-01\n',
     "[[allow]] entry 1: key 'metric' names an unknown metric 'mem.peak'; the harness records status, loss"),
    ('[[policy]]\nthreshold = 0.1\n', "[[policy]] entry 1 needs key 'metric'"),
    ('[[policy]]\nmetric = "loss"\n[[policy]]\nmetric = "loss"\ndirection = "up"\n',
     "[[policy]] entry 2: key 'direction' must be \"lower\" or \"higher\" (which is better), got 'up'"),
    ('[[policy]]\nmetric = "time.*"\nthreshold = -0.1\n', "key 'threshold' must not be negative"),
    ('[[policy]]\nmetric = "time.*"\nnoise_cv = 0.02\nnoise_cv_runs = 1\n',
     "key 'noise_cv_runs' is how many runs noise_cv was measured from, 2 or more"),
    ('[[policy]]\nmetric = "loss"\nthresold = 0.1\n', "[[policy]] entry 1: unknown key 'thresold'"),
    ('[[policy]]\nmetric = "loss"\nskip_head = 1.5\n', "key 'skip_head' must be int, got 1.5"),
    ('[[policy]]\nmetric = "mem.peak_rss"\nworkload = 3\n', "key 'workload' must be a workload id or glob"),
    ('policy = 3\n', "'policy' must be an array of tables ([[policy]])"),
    ('[[allow]]\nworkload = "suite/*"\nreason = 5\nexpires = 2099-01-01\n',
     "[[allow]] entry 1: key 'reason' must be text saying why the difference is known and accepted, got 5"),
    ('[[allow]]\nworkload = "suite/*"\nmetric = "time.infer"\nreason = "known"\nexpires = 2020-01-01\n',
     "[[allow]] entry 1 (workload='suite/*', metric='time.infer', reason 'known') expired on 2020-01-01: it no longer "
     "silences anything"),
    ('[[allow]]\nmetric = "loss"\nreason = "known"\nexpires = "soon"\n',
     "[[allow]] entry 1: key 'expires' must be a date such as 2025-06-30, got 'soon'"),
    ('[[allow]]\nmetric = "loss"\nreason = "known"\n', "key 'expires' is required"),
    ('[[allow]]\nmetric = "loss"\nexpires = 2999-01-01\n', "[[allow]] entry 1: key 'reason' is required"),
    ('[[allow]]\nreason = "all"\nexpires = 2999-01-01\n', "needs a 'workload' or 'metric' pattern"),
    ('[[allow]]\nmetric = "loss"\nreason = "x"\nexpires = 2999-01-01\nuntil = 2999-01-01\n', "unknown key 'until'"),
    ('[[notify]]\nkind = "webhook"\nurl = "https://hooks.example.com/T0/B0/token"\n',
     "[[notify]] entry 1: key 'url' would keep a secret in the config file; put it in an environment variable and "
     "name that variable with 'url_env'"),
    ('[[notify]]\nkind = "email"\nhost = "smtp"\nto = ["a@b.c"]\npassword = "hunter2"\n',
     "key 'password' would keep a secret in the config file"),
    ('[[notify]]\nkind = "slack"\n', "key 'kind' must be one of webhook, email, markdown, junit, got 'slack'"),
    ('[[notify]]\nkind = "webhook"\n', "kind 'webhook' needs key 'url_env'"),
    ('[[notify]]\nkind = "webhook"\nurl_env = "https://x"\n', "key 'url_env' must name an environment variable"),
    ('[[notify]]\nkind = "webhook"\nurl_env = "HOOK"\non = ["every-run"]\n', "key 'on' lists 'every-run'"),
    ('[[notify]]\nkind = "email"\nhost = "smtp"\nto = []\n', "key 'to' must list at least one address"),
    ('[[notify]]\nkind = "email"\nhost = "smtp"\nto = ["a@b.c"]\nport = "25"\n', "key 'port' must be an integer"),
    ('[[notify]]\nkind = "email"\nhost = "smtp"\nto = ["a@b.c"]\nport = 99999\n',
     "key 'port' must be a TCP port from 1 to 65535, got 99999"),
    # the run waits for its notifications: an endless (or NaN) wait held the job, or failed in time.sleep
    ('[[notify]]\nkind = "webhook"\nurl_env = "HOOK"\nbackoff = inf\n', "key 'backoff' must be a number of seconds"),
    ('[[notify]]\nkind = "webhook"\nurl_env = "HOOK"\nbackoff = nan\n', "key 'backoff' must be a number of seconds"),
    ('[[notify]]\nkind = "webhook"\nurl_env = "HOOK"\nretries = 30\n',
     "retries = 30, timeout = 10 and backoff = 1 can hold the run 1.07e+09 s"),
    # no waits between attempts, but each to its timeout
    ('[[notify]]\nkind = "webhook"\nurl_env = "HOOK"\nretries = 1000\nbackoff = 0\n',
     "retries = 1000, timeout = 10 and backoff = 0 can hold the run 1e+04 s"),
    ('[[notify]]\nkind = "email"\nhost = "smtp"\nto = ["a@b.c"]\ntimeout = 1e9\n',
     "can hold the run 3e+09 s (every attempt to its timeout, and the waits between them, which double); the run "
     "waits for its notifications, so keep it within 600 s"),
    # 3 x 1e308 seconds is no number: "can hold the run inf s"
    ('[[notify]]\nkind = "webhook"\nurl_env = "HOOK"\ntimeout = 1e308\n', "can hold the run without end (every"),
    ('[[notify]]\nkind = "markdown"\n', "kind 'markdown' needs key 'path' or 'path_env'"),
    ('[alarms]\nstale_after_days = -1\n', "[alarms]: key 'stale_after_days' must not be negative"),
    ('[alarms]\nstale_days = 3\n', "[alarms]: unknown key 'stale_days'"),
    # past what a timedelta holds, the stale check failed after the run was stored, with a traceback
    ('[alarms]\nstale_after_days = 1000000000\n',
     "[alarms]: key 'stale_after_days' must be 36,500 or less (0 means never), got 1000000000"),
    ('[alarms]\nauto_resolve_after_recovered_runs = 9223372036854775808\n',
     "key 'auto_resolve_after_recovered_runs' must be 1,000,000 or less"),
])
def test_bad_tables_are_user_errors_naming_the_file_entry_and_key(tmp_path, toml, message):
    with pytest.raises(UserError) as error:
        load(tmp_path, toml)
    assert message in str(error.value)
    assert str(tmp_path / "modelci.toml") in str(error.value)


def test_defaults_and_valid_notify_entries(tmp_path):
    cfg = load(tmp_path, '[[notify]]\nkind = "webhook"\nurl_env = "SLACK_WEBHOOK_URL"\n'
                         '[[notify]]\nkind = "email"\nhost = "smtp.example.com"\nto = ["a@b.c"]\n'
                         'password_env = "SMTP_PASSWORD"\nusername = "ci"\non = ["open"]\n')
    webhook, email = cfg.notify
    assert (webhook["retries"], webhook["backoff"], webhook["on"]) == (2, 1.0, ["open", "recovered", "bisected"])
    assert (email["port"], email["on"], email["password_env"]) == (25, ["open"], "SMTP_PASSWORD")
    assert cfg.alarms == {"stale_after_days": 7, "auto_resolve_after_recovered_runs": 0, "changes": True,
                          "dashboard_url": ""}


def test_an_allow_entry_silences_until_its_date_and_then_is_an_error(tmp_path):
    toml = ('[[allow]]\nworkload = "suite/Slow"\nmetric = "time.infer"\nreason = "new kernel, accepted by its team"\n'
            'expires = 2030-06-30\n')
    history = History(tmp_path / "p", toml, today=date(2030, 6, 30))  # the last day still counts
    history.run("1.0", [timed(SLOW, 0.10)])
    outcome = history.run("1.1", [timed(SLOW, 0.13, seed=1)])
    finding = next(f for f in outcome.comparisons[0].findings if f.metric == "time.infer")
    assert finding.verdict == "regression" and not finding.gating  # reported, not gating, no alarm
    assert lifecycle.list_alarms(history.store) == []
    # the same regression on another metric is not covered
    assert history.config.policy_for("suite/Slow")("time.train").active
    with pytest.raises(UserError, match="expired on 2030-06-30"):
        config_module.load(cwd=history.root, environ={}, today=date(2030, 7, 1))


def test_a_policy_naming_a_metric_no_workload_records_is_an_error_once_the_history_says_so(tmp_path, capsys,
                                                                                             monkeypatch):
    history = History(tmp_path / "p", '[[policy]]\nmetric = "acuracy"\nactive = true\n')
    outcome = history.run("1.0", [timed(SLOW, 0.1, extra={"accuracy": [0.9, 0.91, 0.9]})])
    (text,) = outcome.config_errors  # said after the run's report, not instead of it
    assert "[[policy]] entry 1: key 'metric' names 'acuracy'" in text
    assert "run 1 is judged and reported without it" in text
    assert "known metrics: status, loss" in text and "accuracy" in text
    assert history.store.run(1).row.status == "complete"
    monkeypatch.chdir(history.root)
    assert cli.main(["history", "--changes"]) == 2
    assert "names 'acuracy'" in capsys.readouterr().err
    # the right name, and an output name, are fine
    fixed = History(tmp_path / "q", '[[policy]]\nmetric = "accuracy"\nactive = true\n'
                                    '[[policy]]\nmetric = "output:logits"\nrtol = 1e-3\n')
    out = timed(SLOW, 0.1, extra={"accuracy": [0.9, 0.91, 0.9]})
    out.outputs = {"logits": np.ones((2, 2), dtype=np.float32)}
    fixed.run("1.0", [out])


def test_an_entry_whose_workload_pattern_matches_nothing_in_the_history_is_warned_of(tmp_path, caplog):
    # a typo (or "[", which fnmatch reads as itself) silently judged nothing: the looser tolerance or the allowed
    # difference applied to no workload, and the alarms it was written for still came
    history = History(tmp_path / "p", '[[overrides]]\nworkload = "suite/Slwo"\nrtol = 1e-3\n'
                                      '[[overrides]]\nworkload = "suite/Sl*"\nrtol = 1e-3\n'
                                      '[[policy]]\nworkload = "["\nmetric = "time.infer"\nactive = false\n'
                                      '[[allow]]\nworkload = "suite/*"\nreason = "known"\nexpires = "2999-01-01"\n')
    with caplog.at_level("WARNING", logger="modelci.alarms"):
        history.run("1.0", [timed(SLOW, 0.1)])
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2, warned
    assert "[[overrides]] entry 1: workload = 'suite/Slwo' matches no workload in the history" in warned[0]
    assert "[[policy]] entry 1: workload = '[' matches no workload" in warned[1]
    assert history.store.run(1).row.status == "complete"  # a warning: the run is stored and judged


def test_an_allow_entry_for_a_workload_is_no_unmatched_metric_in_a_run_that_recorded_none(tmp_path, caplog):
    # [[allow]] with a workload only allows every metric ("*"); a first run whose workloads all failed records none
    history = History(tmp_path / "p", '[[allow]]\nworkload = "suite/*"\nreason = "known"\nexpires = "2999-01-01"\n')
    with caplog.at_level("WARNING", logger="modelci.alarms"):
        history.run("1.0", [timed(SLOW, status="error", reason="import failed")])
    assert [r.getMessage() for r in caplog.records] == []


def test_active_decides_gating_for_builtin_and_user_metrics(tmp_path):
    cfg = load(tmp_path, '[[policy]]\nmetric = "time.infer"\nactive = false\n'
                         '[[policy]]\nmetric = "accuracy"\ndirection = "higher"\nactive = true\n')
    base = Result("w", "ok", metrics={"time.infer": Metric("time.infer", "samples", samples(0.1)),
                                      "accuracy": Metric("accuracy", "samples", samples(0.90))})
    cur = Result("w", "ok", metrics={"time.infer": Metric("time.infer", "samples", samples(0.2, seed=1)),
                                     "accuracy": Metric("accuracy", "samples", samples(0.70, seed=1))})
    findings = {f.metric: f for f in checks.evaluate(cur, base, cfg.policy_for("w"))}
    assert findings["time.infer"].verdict == "regression" and not findings["time.infer"].gating
    assert findings["accuracy"].verdict == "regression" and findings["accuracy"].gating


# -- the checks honour the new policy fields ----------------------------------------------------------------------


def test_timing_threshold_and_tolerance():
    base, cur = samples(0.1), samples(0.105, seed=1)  # 5% slower
    assert check_timing("time.infer", base, cur, Policy()).verdict == "ok"
    assert check_timing("time.infer", base, cur, Policy(threshold=0.03)).verdict == "regression"
    slower = samples(0.13, seed=2)
    assert check_timing("time.infer", base, slower, Policy()).verdict == "regression"
    # tolerance: an absolute difference that never counts (here 50 ms)
    assert check_timing("time.infer", base, slower, Policy(tolerance=0.05)).verdict == "ok"


def test_timing_skip_head_drops_warm_up_samples():
    # the current build warms up (lazy compilation) for 8 samples, then runs at the same speed as before
    base = samples(0.1, n=13, seed=5)
    cur = samples(0.3, n=8, seed=6) + samples(0.1, n=5, seed=3)
    assert check_timing("time.infer", base, cur, Policy()).verdict == "regression"
    finding = check_timing("time.infer", base, cur, Policy(skip_head=8))
    assert finding.verdict == "ok" and finding.numbers["skipped"] == [8, 8]
    # never more than all but one sample: one sample a side is still something to compare
    assert check_timing("time.setup", [0.1], [0.1], Policy(skip_head=5)).numbers["skipped"] == [0, 0]


def test_direction_turns_a_metric_around():
    base, lower = samples(100.0), samples(80.0, seed=1)
    # "throughput" does not say which way is better: lower is assumed, so 20% less reads as an improvement
    assert check_user_metric("throughput", base, lower, Policy()).verdict == "improvement"
    assert check_user_metric("throughput", base, lower, Policy(direction="higher")).verdict == "regression"
    # direction wins over the older higher_is_better
    assert check_user_metric("throughput", base, lower, Policy(direction="lower", higher_is_better=True)).verdict == \
        "improvement"
    assert check_user_metric("throughput", base, lower, Policy(direction="higher", tolerance=25.0)).verdict == "ok"


def test_memory_tolerance_replaces_the_floor():
    mib = 2**20
    assert check_memory("mem.peak_rss", [100 * mib], [112 * mib], Policy()).verdict == "regression"
    assert check_memory("mem.peak_rss", [100 * mib], [112 * mib], Policy(tolerance=16 * mib)).verdict == "ok"
    assert check_memory("mem.peak_rss", [100 * mib], [104 * mib], Policy(tolerance=1 * mib, threshold=0.02)).verdict \
        == "regression"


def test_curve_skip_head_threshold_tolerance_and_direction():
    base = [1.0 / (s + 1) for s in range(10)]
    warm = [9.0, 9.0] + base[2:]
    assert check_curve("loss", base, warm, Policy()).numbers["first_diverging_step"] == 0
    assert check_curve("loss", base, warm, Policy(skip_head=2)).verdict == "ok"
    late = [9.0, 9.0] + base[2:5] + [0.5] + base[6:]
    finding = check_curve("loss", base, late, Policy(skip_head=2))
    assert finding.numbers["first_diverging_step"] == 5 and "from step 5" in finding.message
    assert finding.numbers["length_baseline"] == 10
    off = [v * 1.01 for v in base]
    assert check_curve("loss", base, off, Policy()).verdict == "regression"
    assert check_curve("loss", base, off, Policy(threshold=0.02)).verdict == "ok"
    assert check_curve("loss", base, [v + 0.005 for v in base], Policy(tolerance=0.01)).verdict == "ok"
    better = [v * 0.9 for v in base]
    assert check_curve("loss", base, better, Policy()).verdict == "regression"  # no direction: any move is suspect
    assert check_curve("loss", base, better, Policy(direction="lower")).verdict == "improvement"
    assert check_curve("loss", base, better, Policy(direction="higher")).verdict == "regression"
    assert check_curve("loss", base, [float("nan")] + base[1:], Policy(direction="lower")).verdict == "regression"


def test_an_expired_allow_entry_stops_the_commands_that_judge_and_not_those_that_triage(tmp_path):
    """An expired [[allow]] entry made every command refuse the config, `alarms list` and `ack` included: the team
    could not look at the alarms of the very difference the entry had silenced. The commands that judge still
    refuse; the others say it and go on."""
    import subprocess
    import sys

    (tmp_path / "modelci.toml").write_text('[[allow]]\nworkload = "suite/*"\nmetric = "time.infer"\n'
                                           'reason = "known"\nexpires = 2020-01-01\n')

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "modelci.cli", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)

    said = "[[allow]] entry 1 (workload='suite/*', metric='time.infer', reason 'known') expired on 2020-01-01"
    for args in (["db", "upgrade"], ["alarms", "list"], ["config"]):
        done = cli(*args)
        assert done.returncode == 0, (args, done.stderr)
        assert "note:" in done.stderr and said in " ".join(done.stderr.split()), (args, done.stderr)
    refused = cli("run", "--target", "current", "--suite", "zoo:numpy")
    assert refused.returncode == 2 and said in " ".join(refused.stderr.split()), refused.stderr
    assert "Traceback" not in refused.stderr


def test_a_mistyped_policy_metric_does_not_swallow_the_verdicts_of_the_run_that_finds_it(fake_project, capsys):
    # the entry's error used to replace the run's report: the run that regressed printed that line alone (exit 2),
    # wrote no --json file and opened no alarm, and as a stored complete run it became the next run's baseline,
    # so its regression was never alarmed at all
    import json

    from modelci.store import Store

    with open(fake_project.root / "modelci.toml", "a") as toml:
        toml.write('[[policy]]\nmetric = "acuracy"\nthreshold = 0.01\n')
    base = ["run", "--suite", str(fake_project.suite), "-k", "Slow"]
    assert cli.main([*base, "--target", str(fake_project.v10)]) == 2  # nothing regressed: the entry fails CI alone
    assert "[[policy]] entry 1: key 'metric' names 'acuracy'" in capsys.readouterr().err
    report = fake_project.root / "report.json"
    assert cli.main([*base, "--target", str(fake_project.v11), "--json", str(report)]) == 1  # the regression first
    out, err = capsys.readouterr()
    assert "1 regression" in out and "fakesuite/Slow" in out
    assert "[[policy]] entry 1: key 'metric' names 'acuracy'" in err and "run 2 is judged and reported" in err
    data = json.loads(report.read_text())
    assert data["regressed"] is True and "names 'acuracy'" in data["config_errors"][0]
    assert [(a["event"], a["metric"]) for a in data["alarms"]] == [("open", "time.infer")]
    store = Store.from_config(config_module.load())
    assert [(a.workload, a.metric) for a in lifecycle.list_alarms(store)] == [("fakesuite/Slow", "time.infer")]
