"""`modelci run --bisect-on-alarm`: a run that opens an alarm bisects it, and the culprit reaches the alarm and the
notifiers. Real git repositories (tests/fakerepo.py) and a real webhook receiver."""

from __future__ import annotations

import json
import math

import pytest
from fakerepo import FakeRepo, broken_pyproject, offline_environment, write_project, write_suite
from test_notify import WEBHOOK, Receiver

from modelci import cli
from modelci import config as config_module
from modelci.alarms import lifecycle
from modelci.store import Store


@pytest.fixture
def project(tmp_path, monkeypatch):
    """c0 .. c5 on main: c3 scales the output layer (a precision regression), the rest change nothing."""
    repo = FakeRepo(tmp_path / "repo")
    shas = [repo.commit("Initial fakefw")]
    shas += [repo.commit(f"Refactor {k}", note=f"c{k}") for k in (1, 2)]
    shas.append(repo.commit("Scale the output layer (#31)", scale=1.5))
    shas += [repo.commit(f"Docs {k}", note=f"c{k}") for k in (4, 5)]
    suite = write_suite(tmp_path / "suite")
    config = write_project(tmp_path / "project", tmp_path / "cache", WEBHOOK)
    receiver = Receiver()
    monkeypatch.setenv("TEST_HOOK_URL", receiver.url)
    with offline_environment():
        yield {"repo": str(repo.path), "shas": shas, "suite": str(suite), "config": str(config),
               "receiver": receiver, "root": tmp_path, "fake": repo}
    receiver.close()


def run(project, ref, *extra):
    return cli.main(["--config", project["config"], "run", "--repo", project["repo"], "--ref", ref, "--build",
                     "pythonpath", "--suite", project["suite"], "-k", "Numeric", *extra])


def test_an_alarm_opened_by_a_run_is_bisected_to_its_commit_and_the_culprit_is_notified(project, capsys,
                                                                                         monkeypatch):
    shas, receiver = project["shas"], project["receiver"]
    assert run(project, shas[0]) == 0
    report = project["root"] / "run.json"
    opened = []
    from_config = Store.from_config.__func__
    monkeypatch.setattr(Store, "from_config", classmethod(lambda cls, *a, **k: opened.append(1) or
                                                          from_config(cls, *a, **k)))
    code = run(project, shas[5], "--bisect-on-alarm", "--good", shas[0], "--json", str(report))
    assert code == 1  # the run's own verdict: the precision regression
    # the run opens the history once and its bisects once: each bisect and its probes store into that one, none
    # pays the schema check and the statements' compilation again
    assert len(opened) == 2
    monkeypatch.undo()

    out = capsys.readouterr().out
    assert "bisected" in out and shas[3][:10] in out

    # the alarm carries the culprit, in its event log and as `culprit`
    store = Store.from_config(config_module.load(config_file=project["config"]))
    alarms = lifecycle.list_alarms(store)
    precision = [a for a in alarms if a.check == "precision"]
    assert precision and all(shas[3] in a.culprit and "PR #31" in a.culprit for a in precision)
    events = [e["event"] for e in lifecycle.get_alarm(store, precision[0].id).events]
    assert events.index("opened") < events.index("bisected")
    assert not any(a.recovered for a in alarms)  # the good probes did not touch the alarm being bisected

    # the notifiers heard twice: the alarm opening, then its culprit
    kinds = [[e["event"] for e in post["modelci"]["events"]] for post in receiver.posts]
    assert kinds[0] == ["open"] * len(kinds[0]) and kinds[-1] and set(kinds[-1]) == {"bisected"}
    assert len(receiver.posts) == 2
    last = receiver.posts[-1]
    assert "BISECTED" in last["text"] and shas[3] in last["text"]
    assert shas[3] in last["modelci"]["events"][0]["culprit"]

    # the JSON report holds the whole bisect, and its cost is within docs/bisect.md's bound (6 candidates, none broken)
    bisects = json.loads(report.read_text())["bisects"]
    assert len(bisects) == 1 and bisects[0]["workload"].endswith("Numeric") and bisects[0]["check"] == "precision"
    result = bisects[0]["result"]
    assert result["culprit"]["sha"] == shas[3] and result["last_good"]["sha"] == shas[2]
    assert result["builds"] <= math.ceil(math.log2(result["range_size"])) + 2


def test_a_bisect_that_cannot_start_is_recorded_in_the_alarm_and_the_run_keeps_its_verdict(project, capsys):
    shas = project["shas"]
    assert run(project, shas[0]) == 0
    # "good" is a commit that already has the regression: the bisect refuses, the alarm says why
    assert run(project, shas[5], "--bisect-on-alarm", "--good", shas[4]) == 1
    assert "bisect refused" in capsys.readouterr().out
    store = Store.from_config(config_module.load(config_file=project["config"]))
    [alarm] = [a for a in lifecycle.list_alarms(store) if a.check == "precision"]
    assert alarm.state == "open" and alarm.culprit.startswith("bisect refused: the bad end")
    assert [e["event"] for e in lifecycle.get_alarm(store, alarm.id).events].count("bisect-failed") == 1
    assert "BISECTED" in project["receiver"].posts[-1]["text"]


def test_no_alarm_no_bisect(project, capsys):
    shas = project["shas"]
    assert run(project, shas[0]) == 0
    assert run(project, shas[1], "--bisect-on-alarm", "--good", shas[0]) == 0
    assert "bisect" not in capsys.readouterr().out
    assert project["receiver"].posts == []


@pytest.mark.parametrize("args, message", [
    (["--bisect-on-alarm"], "--bisect-on-alarm needs --good REF"),
    (["--good", "HEAD"], "--good goes with --bisect-on-alarm"),
    (["--bisect-on-alarm", "--good", "HEAD", "--jobs", "0"], "argument --jobs: 0 is out of range"),
    (["--jobs", "0"], "argument --jobs: 0 is out of range"),  # checked without --bisect-on-alarm too
])
def test_bad_bisect_on_alarm_options_are_refused_before_anything_runs(project, capsys, args, message):
    try:
        code = run(project, project["shas"][0], *args)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    store = Store.from_config(config_module.load(config_file=project["config"]))
    assert store.runs() == []


def test_bisect_on_alarm_needs_a_git_target(project, capsys):
    code = cli.main(["--config", project["config"], "run", "--target", "current", "--suite", project["suite"],
                     "--bisect-on-alarm", "--good", "HEAD"])
    assert code == 2
    assert "needs a git target" in capsys.readouterr().err


def test_bisect_on_alarm_with_jobs_probes_two_commits_a_round_and_finds_the_same_culprit(project, capsys):
    shas = project["shas"]
    assert run(project, shas[0]) == 0
    report = project["root"] / "jobs.json"
    code = run(project, shas[5], "--bisect-on-alarm", "--good", shas[0], "--jobs", "2", "--json", str(report))
    assert code == 1
    [bisect] = json.loads(report.read_text())["bisects"]
    result = bisect["result"]
    assert result["culprit"]["sha"] == shas[3] and result["last_good"]["sha"] == shas[2]
    per_round: dict[int, int] = {}
    for probe in result["probes"]:
        per_round[probe["round"]] = per_round.get(probe["round"], 0) + 1
    assert max(per_round.values()) == 2  # two probes ran in one round
    assert result["rounds"] <= 2  # 5 candidates cut in three parts a round


def test_a_commit_that_does_not_build_opens_a_build_alarm_that_recovers_when_one_builds(project):
    shas, receiver, fake = project["shas"], project["receiver"], project["fake"]
    assert run(project, shas[5]) == 0
    broken = [fake.commit(f"Move the packaging, part {k}", pyproject=broken_pyproject()) for k in (1, 2)]
    store = Store.from_config(config_module.load(config_file=project["config"]))

    assert run(project, broken[0]) == 1
    alarms = lifecycle.list_alarms(store)
    assert [(a.check, a.kind, a.state) for a in alarms] == [("build", "build", "open")], \
        "one build alarm, not a status alarm per workload"
    build = alarms[0]
    assert build.workload == "(build)/repo [pythonpath]" and broken[0][:12] in build.message
    opened = receiver.posts[-1]["modelci"]["events"]
    assert [e["event"] for e in opened] == ["open"] and "did not build" in receiver.posts[-1]["text"]

    posts = len(receiver.posts)
    assert run(project, broken[1]) == 1  # still broken: the same alarm counts it, nobody is told twice
    again = lifecycle.get_alarm(store, build.id)
    assert again.count == 2 and not again.recovered and len(receiver.posts) == posts

    fixed = fake.commit("Fix the packaging", note="fixed")
    assert run(project, fixed) == 0
    assert lifecycle.get_alarm(store, build.id).recovered
    assert [e["event"] for e in receiver.posts[-1]["modelci"]["events"]] == ["recovered"]
