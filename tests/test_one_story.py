"""One story across compare, history, alarms and the dashboard, on the fakefw wheels: an alarm opens only for what
the run itself judged a gating regression, confirmation runs belong to the run they confirm, memory gates on
evidence that survives noise, and baselines and the latest status follow the order of the targets."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_notify import WEBHOOK, Receiver

from modelci import baselines, cli
from modelci import config as config_module
from modelci.alarms import lifecycle
from modelci.checks import Policy
from modelci.checks.timing import check_memory
from modelci.report.site import generate_site
from modelci.store import Store

MiB = 2**20

#: slow in the first process that runs it against fakefw 1.1 only: the first B run of a compare, not the
#: confirmation's B run (a marker file beside the suite says it happened)
TRANSIENT = """
import pathlib, time
import fakefw
import modelci

MARK = pathlib.Path(__file__).with_name("slowed-once")


class Transient(modelci.Workload):
    framework = "python"
    requires = ["fakefw"]
    steps = 5
    repeats = 7
    warmup = 1

    def setup(self, ctx):
        self.slow = fakefw.__version__ == "1.1" and not MARK.exists()
        if self.slow:
            MARK.write_text("slowed")

    def train_step(self, ctx, step):
        return 1.0 / (step + 1)

    def infer(self, ctx):
        time.sleep(0.05 if self.slow else 0.01)
        return {"y": [1.0]}
"""

#: slow in the first two processes that run it against fakefw 1.0: the A side of the first pass and of the first
#: confirmation pair (B A), not of the second pair (A B), as if something slowed A for the first part of a
#: compare and then stopped (a count of 1.0 processes beside the suite says which one this is)
SLOW_START = """
import pathlib, time
import fakefw
import modelci

COUNT = pathlib.Path(__file__).with_name("a-runs")


class SlowStart(modelci.Workload):
    framework = "python"
    requires = ["fakefw"]
    steps = 5
    repeats = 7
    warmup = 1

    def setup(self, ctx):
        self.slow = False
        if fakefw.__version__ == "1.0":
            runs = COUNT.stat().st_size if COUNT.exists() else 0
            with COUNT.open("a") as handle:
                handle.write("x")
            self.slow = runs < 2

    def train_step(self, ctx, step):
        return 1.0 / (step + 1)

    def infer(self, ctx):
        time.sleep(0.05 if self.slow else 0.01)
        return {"y": [1.0]}
"""

#: 1.1 holds 96 MiB more at its peak: in the first 1.1 process only (TRANSIENT_MEMORY) or in every one
MEMORY = """
import pathlib
import fakefw
import modelci

MARK = pathlib.Path(__file__).with_name("grew-once")
ONCE = {once}


class Grows(modelci.Workload):
    framework = "python"
    requires = ["fakefw"]
    steps = 3
    repeats = 3

    def setup(self, ctx):
        grow = fakefw.__version__ == "1.1" and not (ONCE and MARK.exists())
        if grow and ONCE:
            MARK.write_text("grew")
        self.held = b"x" * (96 * 2**20) if grow else b""

    def train_step(self, ctx, step):
        return 1.0 / (step + 1)

    def infer(self, ctx):
        return {{"y": [1.0]}}
"""


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


def _suite(root: Path, name: str, text: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / f"{name}.py").write_text(text)
    return folder


def _with_webhook(project, receiver, monkeypatch) -> None:
    monkeypatch.setenv("TEST_HOOK_URL", receiver.url)
    toml = project.root / "modelci.toml"
    toml.write_text(toml.read_text() + WEBHOOK)


def _compare(project, capsys, *args: str) -> tuple[int, str, dict]:
    capsys.readouterr()
    report = project.root / "compare.json"
    code = cli.main(["compare", str(project.v10), str(project.v11), *args, "--json", str(report)])
    return code, capsys.readouterr().out, json.loads(report.read_text())


def _verdict(console: str, metric: str) -> str:
    """The verdict cell of the compare table's row for `metric`."""
    lines = console.splitlines()
    header = [cell.strip() for cell in re.split("[│┃]", next(line for line in lines if "verdict" in line))]
    row = next(line for line in lines if f" {metric} " in line)
    return [cell.strip() for cell in re.split("[│┃]", row)][header.index("verdict")]


def test_a_timing_difference_the_confirmation_rejects_opens_no_alarm_and_says_ok(fake_project, receiver,
                                                                                   monkeypatch, capsys):
    _with_webhook(fake_project, receiver, monkeypatch)
    suite = _suite(fake_project.root, "transient", TRANSIENT)
    code, console, report = _compare(fake_project, capsys, "--suite", str(suite), "--rerun")

    assert (suite / "slowed-once").exists()  # the first B run was slow ...
    (entry,) = report["results"]
    infer = next(f for f in entry["findings"] if f["metric"] == "time.infer")
    # ... the second was not
    assert infer["numbers"]["ratio"] > 2 and infer["numbers"]["confirmation"]["confirmed"] is False
    # one verdict everywhere: console, exit code, JSON, stored findings, alarms, notifications
    assert code == 0 and not report["regressed"] and infer["verdict"] == "ok"
    assert _verdict(console, "time.infer") == "ok"
    store = Store.from_config(config_module.load())
    stored = store.run(report["run"]["id"]).results[0].info["findings"]
    assert [f["verdict"] for f in stored if f["metric"] == "time.infer"] == ["ok"]
    assert report["alarms"] == [] and lifecycle.list_alarms(store, states=lifecycle_states()) == []
    assert receiver.posts == []
    # the confirmation's two runs are stored as part of B's run, not as runs of their own
    parts = store.parts_of()
    assert sorted(parent for parent, _ in parts.values()) == [report["run"]["id"]] * 2
    assert {run.id for run in store.runs()} == {report["run"]["id"], report["baseline_run"]["id"]}
    site = fake_project.root / "site"
    generate_site(store, site)
    index = (site / "index.html").read_text()
    recent = index[index.index('id="runs"'):]
    assert len(re.findall(r'<tr>\s*<td><a href="runs/\d+.html">', recent)) == 2
    assert "confirmed by" in recent and 'data-state="ok"' in index and "No open alarms" in index
    (page,) = [path.read_text() for path in (site / "w").glob("*.html")]
    b_run = report["run"]["id"]
    assert page.count(f'confirmation of <a href="../runs/{b_run}.html">run {b_run}</a>') == 2


def test_a_difference_one_confirmation_pair_shares_but_the_next_in_the_other_order_does_not_is_not_counted(
        fake_project, receiver, monkeypatch, capsys):
    _with_webhook(fake_project, receiver, monkeypatch)
    suite = _suite(fake_project.root, "slowstart", SLOW_START)
    code, console, report = _compare(fake_project, capsys, "--suite", str(suite), "--rerun")

    (entry,) = report["results"]
    infer = next(f for f in entry["findings"] if f["metric"] == "time.infer")
    confirmation = infer["numbers"]["confirmation"]
    # the first pass (A B) and the first confirmation pair (B A) both saw B 5x faster ...
    assert infer["numbers"]["ratio"] < 0.5 and confirmation["ratio"] < 0.5
    # ... the second pair, A first this time, did not: the difference is not counted
    assert [p["order"] for p in confirmation["passes"]] == ["BA", "AB"]
    assert [p["verdict"] for p in confirmation["passes"]] == ["improvement", "ok"]
    assert confirmation["confirmed"] is False and infer["verdict"] == "ok" and code == 0
    assert "not confirmed by a third run of both, AB this time" in infer["message"]
    assert _verdict(console, "time.infer") == "ok"
    assert (suite / "a-runs").read_text() == "xxx", "A ran three times: the first pass and both pairs"
    assert sorted(parent for parent, _ in Store.from_config(config_module.load()).parts_of().values()) == [
        report["run"]["id"]] * 4
    assert report["alarms"] == [] and receiver.posts == []


def lifecycle_states() -> list[str]:
    return ["open", "acknowledged", "silenced", "resolved"]


def test_a_confirmed_timing_regression_opens_one_alarm_with_both_passes_in_its_evidence(fake_project, receiver,
                                                                                         monkeypatch, capsys):
    _with_webhook(fake_project, receiver, monkeypatch)
    code, console, report = _compare(fake_project, capsys, "--suite", str(fake_project.suite), "-k", "Slow")
    assert code == 1 and report["regressed"]
    assert _verdict(console, "time.infer") == "regression"
    (alarm,) = lifecycle.list_alarms(Store.from_config(config_module.load()), states=lifecycle_states())
    assert (alarm.workload, alarm.check, alarm.metric) == ("fakesuite/Slow", "timing", "time.infer")
    first, second = alarm.numbers, alarm.numbers["confirmation"]
    assert first["ratio"] > 1.5 and second["confirmed"] and second["ratio"] > 1.5
    assert set(second["result_ids"]) == {"a", "b"} and all(second["result_ids"].values())
    assert [a["id"] for a in report["alarms"]] == [alarm.id]
    (post,) = receiver.posts
    assert "`fakesuite/Slow` `timing:time.infer`" in post["text"]


@pytest.mark.parametrize("once, verdict", [(True, "ok"), (False, "regression")])
def test_a_memory_difference_gates_only_once_a_second_run_confirms_it(fake_project, capsys, once, verdict):
    suite = _suite(fake_project.root, "grows", MEMORY.format(once=once))
    code, console, report = _compare(fake_project, capsys, "--suite", str(suite), "--rerun")
    (entry,) = report["results"]
    peak = next(f for f in entry["findings"] if f["metric"] == "mem.peak_rss")
    assert peak["numbers"]["difference_bytes"] > 64 * MiB  # the first pass saw B hold more either way
    assert peak["numbers"]["confirmation"]["confirmed"] is (not once)
    assert (peak["verdict"], peak["gating"], code) == (verdict, not once, 0 if once else 1)
    alarms = lifecycle.list_alarms(Store.from_config(config_module.load()))
    assert [(a.check, a.metric) for a in alarms] == ([] if once else [("memory", "mem.peak_rss")])


def test_baselines_and_latest_status_follow_target_order(fake_project, capsys):
    args = ["--suite", str(fake_project.suite), "-k", "[SP][tr]*"]  # Stable and Precision
    assert cli.main(["compare", str(fake_project.v10), str(fake_project.v11), *args]) == 1  # Precision regressed
    capsys.readouterr()
    again_b = fake_project.root / "b.json"
    markdown = fake_project.root / "b.md"
    assert cli.main(["run", "--target", str(fake_project.v11), *args, "--json", str(again_b),
                     "--markdown", str(markdown)]) == 1
    assert "baseline (2 workloads): nearest earlier version with a good result: fakefw==1.0" in capsys.readouterr().out
    assert "- baseline of 2 workloads: nearest earlier version with a good result: fakefw==1.0" in markdown.read_text()
    again_a = fake_project.root / "a.json"
    assert cli.main(["run", "--target", str(fake_project.v10), *args, "--json", str(again_a)]) == 0
    b, a = json.loads(again_b.read_text()), json.loads(again_a.read_text())

    # B again: judged against 1.0, the version before it, and still regressed on Precision (it did regress)
    by_workload = {e["workload"]: e for e in b["results"]}
    precision = by_workload["fakesuite/Precision"]
    assert "version order" in precision["baseline_rule"] and "fakefw==1.0" in precision["baseline_rule"]
    assert any(f["metric"] == "output:scaled" and f["verdict"] == "regression" for f in precision["findings"])
    # A again: nothing came before 1.0, so nothing to regress against (by run time, 1.1 would have been its base)
    for entry in a["results"]:
        assert entry["baseline_result_id"] is None and "no earlier version" in entry["baseline_rule"]
        assert not any(f["verdict"] == "regression" for f in entry["findings"])
    store = Store.from_config(config_module.load())
    latest = {w["workload"]: w for w in store.workloads()}
    assert {w["id"] for w in latest.values()} == {b["run"]["id"]}  # the newest target's latest run, not A's
    site = fake_project.root / "site"
    generate_site(store, site)
    index = (site / "index.html").read_text()
    cells = dict(re.findall(r'<a href="w/[^"]+">(fakesuite/\w+)</a></th>\s*<td class="status \w+" data-state="([^"]+)"',
                            index))
    assert cells == {"fakesuite/Precision": "open alarm", "fakesuite/Stable": "ok"}
    (alarm,) = lifecycle.list_alarms(store)
    assert alarm.target == "fakefw==1.1 (wheel " + alarm.target.split("(wheel ")[1]
    assert f"alarm #{alarm.id}" in index and index.count("fakefw==1.1") >= 2


def test_memory_on_one_sample_a_side_gates_only_with_a_calibrated_noise_floor():
    base, grown = [300.0 * MiB], [333.0 * MiB]  # 1.11x, +33 MiB: paddle's run-to-run drift (docs/zoo.md)
    alone = check_memory("mem.peak_rss", base, grown, Policy())
    assert (alone.verdict, alone.gating, alone.numbers["needs_confirmation"]) == ("regression", False, True)
    noisy = check_memory("mem.peak_rss", base, grown, Policy(noise_cv=0.05))  # calibrated: moves 5% a run
    assert (noisy.verdict, noisy.gating) == ("ok", True) and "calibrated noise" in noisy.message
    quiet = check_memory("mem.peak_rss", base, grown, Policy(noise_cv=0.01))
    assert (quiet.verdict, quiet.gating) == ("regression", True)
    repeated = check_memory("mem.peak_rss", base * 5, grown * 5, Policy())  # repeated samples: the rank test
    assert (repeated.verdict, repeated.gating) == ("regression", True)
    assert "needs_confirmation" not in repeated.numbers


def _candidate(result_id: int, version: str, *, kind: str = "wheel", name: str = "fakefw", commit: str = "",
               age_h: int = 0) -> baselines.Candidate:
    started = datetime(2026, 1, 1, tzinfo=timezone.utc) - timedelta(hours=age_h)
    return baselines.Candidate(result_id, started, kind, name, version, commit, "", f"{name}=={version}")


def test_the_baseline_is_the_nearest_earlier_version_and_the_rule_is_said():
    target = SimpleNamespace(kind="requirement", name="fakefw", version="1.1", commit=None, spec="fakefw==1.1",
                             label="fakefw==1.1")
    newest_first = [_candidate(3, "1.2"), _candidate(2, "1.0", age_h=1), _candidate(1, "0.9", age_h=2)]
    chosen, rule = baselines.Chooser(target).choose(newest_first)
    assert chosen.result_id == 2 and "nearest earlier version" in rule and "fakefw==1.0" in rule
    chosen, rule = baselines.Chooser(target).choose([_candidate(3, "1.2")])
    assert chosen is None and "no earlier version of fakefw than 1.1" in rule
    rebuilt = [_candidate(4, "1.1", age_h=1), _candidate(5, "1.1", age_h=3)]  # other builds of the same version
    chosen, rule = baselines.Chooser(target).choose(rebuilt)
    assert chosen.result_id == 4 and "no order is known between builds" in rule
    current = SimpleNamespace(kind="current", name="current", version=None, commit=None, spec="current",
                              label="current")
    chosen, rule = baselines.Chooser(current).choose(newest_first)
    assert chosen.result_id == 3 and "no order is known for current" in rule and "by run time" in rule


def test_the_baseline_of_a_commit_is_its_nearest_ancestor_with_a_good_result(tmp_path):
    from modelci.gitrepo import GitRepo

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    shas = []
    for n in range(4):
        (repo / "f.txt").write_text(str(n))
        subprocess.run([*git, "add", "f.txt"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", f"c{n}"], check=True)
        shas.append(subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip())
    mirror = GitRepo(str(repo), tmp_path / "cache")
    mirror.resolve("HEAD")
    target = SimpleNamespace(kind="git", name="proj", version="0.1", commit=shas[2], spec="git+...", label="c2",
                             repo=mirror.url)
    # run order says c3 (newest run) and c0; the graph says c1 is the nearest earlier commit
    found = [_candidate(9, "0.1", kind="git", name="proj", commit=shas[3]),
             _candidate(1, "0.1", kind="git", name="proj", commit=shas[0], age_h=2),
             _candidate(5, "0.1", kind="git", name="proj", commit=shas[1], age_h=1)]
    chosen, rule = baselines.Chooser(target, tmp_path / "cache").choose(found)
    assert chosen.result_id == 5 and "1 commit before" in rule and "commit graph" in rule
    chosen, rule = baselines.Chooser(target, tmp_path / "cache").choose(found[:1])
    assert chosen is None and "no earlier commit" in rule


@pytest.mark.parametrize("noise_cv, opened", [(None, False), (0.03, True), (0.10, False)])
def test_a_runs_one_sample_memory_difference_alarms_only_past_a_calibrated_noise_floor(tmp_path, noise_cv, opened):
    from alarm_history import History, timed

    from modelci import calibrate

    history = History(tmp_path / "project")
    first = history.run("1.0", [timed("suite/Grows", 0.1)])  # peak 100 MiB
    if noise_cv is not None:
        entry = calibrate.NoiseEntry("suite/Grows", "mem.peak_rss", "memory", runs=5, cv=noise_cv)
        calibrate.save(history.store, calibrate.CalibrationOutcome(first.target, first.environment, "ci", [],
                                                                   entries=[entry]))
    grown = timed("suite/Grows", 0.1, seed=1, extra={"mem.peak_rss": [125.0 * MiB]})  # 1.25x, +25 MiB
    outcome = history.run("1.1", [grown])
    (peak,) = [f for f in outcome.comparisons[0].findings if f.metric == "mem.peak_rss"]
    # 3 x 3% = 9% < 25%: past the floor; 3 x 10% = 30%: within it; uncalibrated: waits for a confirmation
    assert (peak.verdict == "regression" and peak.gating) is opened
    assert [(e.event, e.alarm.metric) for e in outcome.alarms.events] == ([("open", "mem.peak_rss")] if opened else [])


def test_two_passes_confirm_each_other_only_when_their_ratios_agree_within_the_factor():
    from modelci.checks import Finding
    from modelci.workflow import passes_apart

    def faster(ratio: float) -> Finding:
        return Finding("timing", "time.train", "improvement", {"ratio": ratio, "factor": 1.1})

    assert passes_apart(faster(0.83), faster(0.87)) is None  # the same difference, measured twice
    why = passes_apart(faster(0.84), faster(0.38))  # as a loaded runner measured DCGANMini's train step
    assert why is not None and "2.21x apart" in why and "factor 1.1" in why
