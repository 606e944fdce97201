"""`modelci run --no-alarms`: the run is judged and stored, but the alarms are left as they are and nobody is
notified (what a pull request's job does: its build is not the main line's history)."""

from __future__ import annotations

from modelci import cli
from modelci import config as config_module
from modelci.alarms import lifecycle
from modelci.store import Store


def test_no_alarms_judges_and_stores_but_opens_nothing_while_a_plain_run_opens_one(fake_project, capsys):
    base = ["run", "--suite", str(fake_project.suite), "-k", "Slow"]
    assert cli.main([*base, "--target", str(fake_project.v10)]) == 0
    store = Store.from_config(config_module.load())
    assert cli.main([*base, "--target", str(fake_project.v11), "--no-alarms"]) == 1  # the regression still gates
    assert lifecycle.list_alarms(store) == []
    stored = store.run("latest")
    assert stored.row.target.version == "1.1" and stored.results[0].info["findings"]
    capsys.readouterr()
    assert cli.main([*base, "--target", str(fake_project.v11)]) == 1
    assert [(a.workload, a.metric) for a in lifecycle.list_alarms(store)] == [("fakesuite/Slow", "time.infer")]


def test_no_alarms_with_bisect_on_alarm_is_a_user_error(fake_project, capsys):
    code = cli.main(["run", "--repo", str(fake_project.root), "--ref", "HEAD", "--suite", "fakesuite",
                     "--bisect-on-alarm", "--good", "HEAD~1", "--no-alarms"])
    assert code == 2
    assert "--no-alarms opens none" in capsys.readouterr().err


def test_no_alarms_still_checks_the_entries_that_judged_the_run(fake_project, capsys, caplog):
    # --no-alarms skipped the [[policy]] metric check and the unmatched-pattern warnings with the alarm step, so a
    # pull request's build was judged by a mistyped entry and nobody was told
    with open(fake_project.root / "modelci.toml", "a") as toml:
        toml.write('[[overrides]]\nworkload = "fakesuite/Slwo"\ntiming_factor = 3.0\n'
                   '[[overrides]]\nmetric = "acuracy"\nthreshold = 0.1\n')
    base = ["run", "--suite", str(fake_project.suite), "-k", "Slow", "--target", str(fake_project.v10)]
    with caplog.at_level("WARNING", logger="modelci.alarms"):
        assert cli.main([*base, "--no-alarms"]) == 0
    warned = sorted(r.getMessage() for r in caplog.records)
    assert len(warned) == 2, warned
    assert "[[overrides]] entry 1: workload = 'fakesuite/Slwo' matches no workload in the history" in warned[0]
    assert ("[[overrides]] entry 2: metric = 'acuracy' matches no metric or output that a workload in the history "
            "records") in warned[1]
    with open(fake_project.root / "modelci.toml", "a") as toml:
        toml.write('[[policy]]\nmetric = "acuracy"\nthreshold = 0.1\n')
    capsys.readouterr()
    assert cli.main([*base, "--no-alarms"]) == 2
    assert "run 2 is judged and reported without it" in capsys.readouterr().err
