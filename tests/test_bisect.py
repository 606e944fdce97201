"""Bisect over real git repositories holding the pure-Python fakefw.

One history serves the tests that search it (its builds and environments are shared, as on a user's machine):

    c0 ─ c1✗ ─ c2 ─ c3 ─ c4✗ ─ c5 ─ c6 ─ c7 ───────────── c8 ─ c9✗ ─ c10 ─ c11 ─ c12
                    │                  └─ f1 ─ f2 ─────┘ (Merge pull request #42)
                    numeric            slow     crash              format 2 (#57)

✗ = the commit does not build (a syntax error in pyproject.toml). Each test asserts the culprit and the number of
builds, which the search fixes: ends included, at most ceil(log2 N) + 2 + the skipped probes.
"""

from __future__ import annotations

import http.server
import json
import math
import os
import signal
import subprocess
import sys
import threading

import pytest
from fakerepo import FakeRepo, broken_pyproject, fakefw_source, offline_environment, write_project, write_suite
from fakewheels import build_fake_wheel

from modelci import config as config_module
from modelci import envs, workflow
from modelci.bisect import BisectRefused, bisect, releases
from modelci.bisect.search import Search
from modelci.errors import UserError
from modelci.store import Store


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """The repository above, a suite, and a project (history + cache) around them."""
    root = tmp_path_factory.mktemp("bisect")
    repo = FakeRepo(root / "repo")
    c = {"c0": repo.commit("Initial fakefw")}
    c["c1"] = repo.commit("Start moving the packaging", pyproject=broken_pyproject(), note="c1")
    c["c2"] = repo.commit("Finish moving the packaging", note="c2")
    c["c3"] = repo.commit("Scale the output layer", scale=1.5)
    c["c4"] = repo.commit("Packaging, take two", pyproject=broken_pyproject(), note="c4")
    c["c5"] = repo.commit("Packaging fixed", note="c5")
    c["c6"] = repo.commit("Rewrite the kernel", delay=0.04)
    c["c7"] = repo.commit("Docs", note="c7")
    repo.git("checkout", "-q", "-b", "fused")
    c["f1"] = repo.commit("Add a fused step", note="f1")
    c["f2"] = repo.commit("Make the fused step in-place", crash=True)
    repo.git("checkout", "-q", "main")
    repo.git("merge", "-q", "--no-ff", "fused", "-m", "Merge pull request #42 from ada/fused")
    c["c8"] = repo.git("rev-parse", "HEAD")
    c["c9"] = repo.commit("Packaging regressed", pyproject=broken_pyproject(), note="c9")
    c["c10"] = repo.commit("Packaging fixed again", note="c10")
    c["c11"] = repo.commit("Store models in format 2 (#57)", format=2)
    c["c12"] = repo.commit("More docs", note="c12")
    suite = write_suite(root / "suite")
    config_file = write_project(root / "project", root / "cache")
    with offline_environment():
        yield {"root": root, "repo": repo.path, "suite": suite, "c": c, "name": {v: k for k, v in c.items()},
               "cfg": config_module.load(config_file=config_file)}


def search_with_oracle(n, culprit, untestable=(), jobs=1):
    """Bisect commits 1..n (the bad end is n) where commit i is bad from `culprit` on: (search, builds, rounds)."""
    search = Search.linear([f"c{i}" for i in range(1, n + 1)])
    builds, rounds = 2, 1
    while not search.done:
        batch = search.next_probes(jobs)
        search.record({sha: "skip" if int(sha[1:]) in untestable else "bad" if int(sha[1:]) >= culprit else "good"
                       for sha in batch})
        builds, rounds = builds + len(batch), rounds + 1
    return search, builds, rounds


def test_search_meets_the_cost_targets():
    import random

    rng = random.Random(5)
    for n in (2, 7, 16, 33, 64):
        for culprit in range(1, n + 1):
            search, builds, _ = search_with_oracle(n, culprit)
            assert search.culprit == f"c{culprit}" and builds <= math.ceil(math.log2(n)) + 2
            for jobs in (2, 3):
                assert search_with_oracle(n, culprit, jobs=jobs)[2] <= math.ceil(math.log(n, jobs + 1) - 1e-9) + 1
    for _ in range(300):  # 20% untestable
        n, culprit = 64, rng.randrange(1, 65)
        untestable = {i for i in range(1, 64) if i != culprit and rng.random() < 0.2}
        search, builds, _ = search_with_oracle(n, culprit, untestable)
        assert builds - len(search.skipped) <= math.ceil(math.log2(n)) + 2
        assert search.culprit == f"c{culprit}" or f"c{culprit}" in search.remaining()
        if search.culprit is None:  # only skipped commits remain between the last good and the first bad
            assert all(sha in search.skipped for sha in search.remaining()[:-1])


def test_search_leaves_a_run_of_broken_commits_in_few_probes():
    broken = set(range(240, 280))  # 40 commits that do not build, around the midpoint of 512
    search, _, _ = search_with_oracle(512, 100, broken)
    assert search.culprit == "c100" and len(search.skipped) <= 12  # stepping one along would skip 20


def run_bisect(history, workload, **kwargs):
    kwargs.setdefault("build", "pythonpath")
    lines = []
    result = bisect(history["cfg"], [str(history["suite"])], workload, repo=str(history["repo"]),
                    good=kwargs.pop("good", history["c"]["c0"]), bad=kwargs.pop("bad", history["c"]["c12"]),
                    log=kwargs.pop("log", lines.append), **kwargs)
    result.lines = lines
    return result


def within_cost_target(result) -> bool:
    """Cost target: builds <= ceil(log2 N) + 2 + skipped probes."""
    return result.builds <= math.ceil(math.log2(result.range_size)) + 2 + result.skipped


def test_a_build_command_that_fails_everywhere_is_named_as_the_likely_cause(history):
    with pytest.raises(BisectRefused, match=r"is not good: suite/Numeric is error \(.*\); if the build failed, fix "
                                            r"how commits are built \(--build\)"):
        run_bisect(history, "Numeric", build="exit 3", bad=history["c"]["c2"])


def test_good_and_bad_that_are_one_commit_or_swapped_are_named_so(history):
    c = history["c"]
    with pytest.raises(UserError, match=r"--good \w+ and --bad \w+ are the same commit \(\w{12}\)"):
        run_bisect(history, "Numeric", good=c["c2"], bad=c["c2"])
    with pytest.raises(UserError, match=r"must be an ancestor of --bad \S+ in .* \(it is newer: are --good and --bad "
                                        r"swapped\?\)"):
        run_bisect(history, "Numeric", good=c["c5"], bad=c["c1"])


@pytest.mark.slow
def test_numeric_change_is_found_through_unbuildable_commits(history):
    result = run_bisect(history, "Numeric")

    assert result.status == "found" and result.check == "precision" and result.metrics == ["output:y"]
    assert history["name"][result.culprit.item] == "c3"
    assert result.culprit.commit.subject == "Scale the output layer"
    assert history["name"][result.last_good.item] == "c2"
    assert result.range_size == 14 and result.builds == 6 and within_cost_target(result)
    assert [history["name"][p.item] for p in result.probes if p.verdict == "skip"] == ["c1"]
    assert all(p.run_id is not None for p in result.probes), "every probe is stored as a normal run"


@pytest.mark.slow
def test_a_2x_slowdown_is_found_with_statistics_and_confirmed(history):
    result = run_bisect(history, "Slow", check="timing")

    assert result.status == "found" and result.metrics == ["time.infer"]
    assert history["name"][result.culprit.item] == "c6"
    assert result.builds == 6 and within_cost_target(result)
    assert result.confirmation["confirmed"]
    numbers = result.confirmation["numbers"]
    assert numbers["ratio"] > 1.5 and numbers["p_value"] < 0.05
    reruns = [history["name"][p.item] for p in result.probes if p.round == -1]
    assert reruns == ["c5", "c6"], "the two boundary commits are re-run before the culprit is reported"


@pytest.mark.slow
def test_a_crash_is_traced_to_the_branch_commit_through_the_merge(history):
    result = run_bisect(history, "Crash")

    assert result.check == "status"
    assert history["name"][result.culprit.item] == "f2"
    assert result.culprit.commit.pr is None
    assert result.builds == 6 and within_cost_target(result)


@pytest.mark.slow
def test_first_parent_reports_the_merged_pr(history):
    result = run_bisect(history, "Crash", first_parent=True)

    culprit = result.culprit.commit
    assert history["name"][culprit.sha] == "c8"
    assert culprit.pr == 42 and culprit.subject == "Merge pull request #42 from ada/fused"
    assert culprit.author == "Ada Test <ada@example.com>" and culprit.date.startswith("2024-01-01T")
    assert result.range_size == 12 and "f1" not in {history["name"][p.item] for p in result.probes}
    assert result.builds == 6 and result.skipped == 1 and within_cost_target(result)


@pytest.mark.slow
def test_a_saved_model_that_no_longer_loads(history):
    result = run_bisect(history, "SavedModel")

    assert history["name"][result.culprit.item] == "c11" and result.culprit.commit.pr == 57
    assert "unsupported model format" in next(p.why for p in result.probes if p.item == result.bad.item)
    assert result.builds == 6 and within_cost_target(result)


def test_timing_noise_is_not_blamed_on_a_commit(history):
    # the Noisy workload's time varies a lot at every commit and no commit changes it
    with pytest.raises(BisectRefused, match="bad end .* is not bad"):
        run_bisect(history, "Noisy", check="timing")


def test_refuses_when_the_good_end_is_not_good(history):
    with pytest.raises(BisectRefused, match="good end .* is not good: suite/Crash is crashed"):
        run_bisect(history, "Crash", good=history["c"]["c8"])


def test_a_ref_that_does_not_exist_is_named(history):
    with pytest.raises(UserError, match="ref 'v9.9' does not exist"):
        run_bisect(history, "Numeric", good="v9.9")


@pytest.mark.slow
def test_parallel_probes_search_k_plus_1_ways(history):
    from modelci import workflow

    with workflow.WorkerPool(history["cfg"]) as pool:
        result = run_bisect(history, "Numeric", jobs=3, first_parent=True, pool=pool)
        # the commits share one environment, and the probes of a round fork from its one warm worker together
        assert len(pool._all) == 1 and pool._all[0].alive, (pool._all[0].reason, pool._all[0].deaths, [
            p.read_text()[-2000:] for p in pool.root.rglob("worker-*.log")])
        worker = pool._all[0].worker.pid
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)  # closing the pool stopped it

    assert history["name"][result.culprit.item] == "c3"
    per_round = {}
    for probe in result.probes:
        per_round[probe.round] = per_round.get(probe.round, 0) + 1
    assert per_round[1] == 3, "each round probes K commits at once"
    assert result.rounds <= math.ceil(math.log(result.range_size, 4)) + 1 + result.skipped


def test_an_interrupted_bisect_lists_the_first_candidates_left_and_counts_them_all(history, monkeypatch):
    """A range may hold thousands of commits: the report of a cancelled bisect lists the first
    MAX_CANDIDATES_SHOWN of those left and says how many there are."""
    import modelci.bisect as bisect_module

    monkeypatch.setattr(bisect_module, "MAX_CANDIDATES_SHOWN", 3)

    def interrupt(line):
        if line.startswith("probing "):  # the first round, before any commit between the ends is probed
            raise KeyboardInterrupt

    with pytest.raises(workflow.Interrupted) as cut:
        run_bisect(history, "Numeric", log=interrupt)
    result = cut.value.bisect
    assert result.status == "interrupted" and result.rounds == 0
    assert len(result.candidates) == 3 and result.range_size > 3
    assert f"{result.range_size} of {result.range_size} commits" in result.message, result.message
    assert "still candidates (the first 3 listed)" in result.message, result.message
    assert [c["item"] for c in result.to_json()["candidates"]] == [c.item for c in result.candidates]


@pytest.mark.slow
def test_wheel_builds_resume_after_an_interruption_without_rebuilding(history, tmp_path):
    # its own cache and history: everything here is built by this test
    cfg = config_module.load(config_file=write_project(tmp_path / "project", tmp_path / "cache"))
    history = dict(history, cfg=cfg)

    def interrupt(line):
        if line.startswith("round 2:"):
            raise KeyboardInterrupt

    with pytest.raises(workflow.Interrupted) as cut:  # the cancel, with how far the search got
        run_bisect(history, "SavedModel", build="wheel", first_parent=True, log=interrupt)
    assert cut.value.bisect.status == "interrupted" and cut.value.bisect.rounds == 1
    first_builds = len(list((tmp_path / "cache" / "builds").glob("*/build.json")))
    failed = list((tmp_path / "cache" / "builds").glob("*.failed.json"))

    resumed = run_bisect(history, "SavedModel", build="wheel", first_parent=True)
    assert history["name"][resumed.culprit.item] == "c11"
    early = [p for p in resumed.probes if p.round in (0, 1, 2)]
    assert early and all(p.reused and not p.built for p in early), "the probes it already had are reused"
    assert resumed.fresh_builds == resumed.builds - len({p.item for p in early})
    assert first_builds + len(failed) == len({p.item for p in early})
    assert len(list((tmp_path / "cache" / "builds").glob("*/build.json"))) + len(
        list((tmp_path / "cache" / "builds").glob("*.failed.json"))) == resumed.builds
    wheels = list((tmp_path / "cache" / "builds").glob("*/fakefw-1.0-py3-none-any.whl"))
    assert wheels, "the wheel strategy builds real wheels"


@pytest.mark.slow
def test_cli_bisect_prints_the_culprit_and_writes_json(history, tmp_path):
    out = tmp_path / "bisect.json"
    proc = subprocess.run(
        [sys.executable, "-m", "modelci.cli", "bisect", "--repo", str(history["repo"]), "--good", history["c"]["c10"],
         "--bad", "main", "--suite", str(history["suite"]), "-k", "SavedModel", "--build", "pythonpath",
         "--json", str(out)],
        cwd=history["root"] / "project", capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "first bad:" in proc.stdout and "Store models in format 2" in proc.stdout
    report = json.loads(out.read_text())
    assert report["kind"] == "bisect" and report["culprit"]["pr"] == 57 and report["status"] == "found"
    # the outcome is kept in the history, for the dashboard's bisect page
    kept = Store.from_config(history["cfg"]).bisects()[0]
    assert kept.culprit == report["culprit"]["item"] and kept.result["probes"] == report["probes"]


def test_a_bisect_cancelled_by_sigterm_reports_how_far_it_got_and_resumes(history, tmp_path):
    """SIGTERM in round 2 of a CLI bisect: exit 143, the JSON report holds the probes so far and the candidates
    left (marked interrupted), and the same command then resumes from the stored probes."""
    project = write_project(tmp_path / "project", tmp_path / "cache").parent  # no probe of the other tests to reuse
    out = tmp_path / "bisect.json"
    argv = [sys.executable, "-m", "modelci.cli", "bisect", "--repo", str(history["repo"]), "--good",
            history["c"]["c0"], "--bad", history["c"]["c12"], "--suite", str(history["suite"]), "-k", "Numeric",
            "--build", "pythonpath", "--json", str(out)]
    proc = subprocess.Popen(argv, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("probing ") and "(round 2," in line:
            proc.send_signal(signal.SIGTERM)
            break
    stdout, rest = proc.communicate(timeout=300)
    err = "".join(seen) + rest
    assert proc.returncode == 143, stdout + err
    assert "Traceback" not in stdout + err and "interrupted by SIGTERM" in err, err
    report = json.loads(out.read_text())
    assert report["interrupted"] is True and report["status"] == "interrupted" and report["culprit"] is None
    assert report["rounds"] == 1 and [p["round"] for p in report["probes"]] == [0, 0, 1], report["probes"]
    assert 0 < len(report["candidates"]) < report["range_size"] == 14
    assert history["c"]["c3"] in {c["item"] for c in report["candidates"]}  # the culprit is still among them
    assert "still candidates" in report["message"] and "still candidates" in stdout

    resumed = subprocess.run(argv, cwd=project, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    again = json.loads(out.read_text())
    assert again["interrupted"] is False and again["culprit"]["item"] == history["c"]["c3"]
    assert all(p["reused"] for p in again["probes"] if p["round"] in (0, 1))


# --- releases --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_releases_between_two_versions_finds_the_first_bad_release(tmp_path):
    wheels = tmp_path / "wheels"
    for minor in range(7):
        version = f"1.{minor}"
        build_fake_wheel(wheels, "fakefw", version, {"fakefw/__init__.py": fakefw_source(scale=1.5 if minor >= 4
                                                                                          else 1.0)})
    build_fake_wheel(wheels, "fakefw", "1.5rc1", {"fakefw/__init__.py": fakefw_source(scale=1.5)})
    suite = write_suite(tmp_path / "suite")
    with offline_environment() as patch:
        patch.setenv("MODELCI_FIND_LINKS", str(wheels))
        cfg = config_module.load(config_file=write_project(tmp_path / "project", tmp_path / "cache"))
        versions = releases.between("fakefw", "1.0", "1.6", envs.IndexConfig.from_pip())
        assert versions == [f"fakefw==1.{minor}" for minor in range(7)], "pre-releases left out"
        result = bisect(cfg, [str(suite)], "Numeric", versions=versions, log=lambda line: None)

    assert result.status == "found" and result.culprit.item == "fakefw==1.4"
    assert result.last_good.item == "fakefw==1.3"
    assert result.builds == 4  # the ends, then 1.3 (good) and 1.4 (bad)


def test_release_list_from_a_simple_index_skips_yanked_files(tmp_path):
    page = tmp_path / "simple" / "fakefw"
    page.mkdir(parents=True)
    (page / "index.html").write_text(
        '<html><body><a href="../../files/fakefw-1.0-py3-none-any.whl">x</a>'
        '<a href="../../files/fakefw-1.1.tar.gz">x</a>'
        '<a href="../../files/fakefw-1.2-py3-none-any.whl" data-yanked="broken">x</a>'
        '<a href="../../files/otherpkg-9.0-py3-none-any.whl">x</a></body></html>')

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(tmp_path), **kwargs)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        index = envs.IndexConfig(index_url=f"http://127.0.0.1:{server.server_port}/simple")
        assert [str(v) for v in releases.versions("FakeFW", index)] == ["1.0", "1.1"]
        with pytest.raises(UserError, match="fakefw==1.5 is not offered"):
            releases.between("fakefw", "1.0", "1.5", index)
    finally:
        server.shutdown()
        server.server_close()


# --- which metric a bisect follows -------------------------------------------------------------------------


def _timed(setup: float, infer: list[float], status: str = "ok"):
    from modelci.records import Metric, Result

    return Result(workload="suite/Model", status=status,
                  metrics={"time.setup": Metric("time.setup", "samples", [setup], "s"),
                           "time.infer": Metric("time.infer", "samples", infer, "s")})


def test_a_timing_bisect_follows_the_gating_metric_that_moved_most():
    from modelci.bisect.judge import choose

    good = _timed(0.01, [0.010, 0.011, 0.0105, 0.0102, 0.0108, 0.0101])
    # time.setup moved 80x on one sample (report-only), time.infer 50x on six samples each
    bad = _timed(0.80, [0.50, 0.52, 0.51, 0.505, 0.515, 0.50])
    from modelci.checks import Policy

    def policy(metric):
        return Policy()

    for check in ("timing", None):
        criterion = choose(good, bad, policy, check, "the good end A", "the bad end B")
        assert criterion.check == "timing" and criterion.metrics == ["time.infer"], check
        assert criterion.ratio > 40

    # only the report-only metric moved: with --check timing that is not a regression to bisect either
    quiet = _timed(0.80, [0.010, 0.0104, 0.0103, 0.0106, 0.0101, 0.0109])
    with pytest.raises(BisectRefused, match="report-only, not gating: time.setup .*too few samples"):
        choose(good, quiet, policy, "timing", "the good end A", "the bad end B")


def test_with_several_gating_timings_the_bisect_follows_the_one_that_moved_most():
    from modelci.bisect.judge import choose
    from modelci.checks import Policy
    from modelci.records import Metric, Result

    def result(train, infer):
        return Result(workload="suite/Model", status="ok",
                      metrics={"time.train_step": Metric("time.train_step", "samples", train, "s"),
                               "time.infer": Metric("time.infer", "samples", infer, "s")})

    base = [0.010, 0.011, 0.0105, 0.0102, 0.0108, 0.0101]
    good, bad = result(base, base), result([v * 1.6 for v in base], [v * 9 for v in base])
    criterion = choose(good, bad, lambda metric: Policy(), "timing", "the good end A", "the bad end B")
    assert criterion.metrics == ["time.infer"] and 8 < criterion.ratio < 10


# --- file:// indexes ---------------------------------------------------------------------------------------


def test_a_file_index_is_read_as_pip_reads_it(tmp_path):
    simple = tmp_path / "simple"
    (simple / "fakefw").mkdir(parents=True)
    (simple / "fakefw" / "index.html").write_text(
        '<html><body><a href="../../files/fakefw-1.0-py3-none-any.whl#sha256=00">x</a>'
        '<a href="../../files/fakefw-1.1.tar.gz">x</a>'
        '<a href="../../files/fakefw-1.2-py3-none-any.whl" data-yanked="">x</a></body></html>')
    wheels = tmp_path / "wheels"
    build_fake_wheel(wheels, "otherpkg", "2.0", {"otherpkg/__init__.py": ""})
    index = envs.IndexConfig(index_url=simple.as_uri(), extra_index_urls=[(tmp_path / "more").as_uri()],
                             find_links=[str(wheels)])
    assert [str(v) for v in releases.versions("FakeFW", index)] == ["1.0", "1.1"]
    # otherpkg has no folder in either index (one of them does not even exist): no releases there, not an error
    assert [str(v) for v in releases.versions("otherpkg", index)] == ["2.0"]
    with pytest.raises(UserError, match="no release of 'nothere' found"):
        releases.versions("nothere", index)


def test_between_takes_an_end_written_as_a_target_of_the_package(tmp_path):
    wheels = tmp_path / "wheels"
    for version in ("1.0", "1.1", "1.2"):
        build_fake_wheel(wheels, "fakefw", version, {"fakefw/__init__.py": ""})
    index = envs.IndexConfig(find_links=[str(wheels)], no_index=True)
    expected = ["fakefw==1.0", "fakefw==1.1", "fakefw==1.2"]
    assert releases.between("fakefw", "fakefw==1.0", "FakeFW==1.2", index) == expected
    assert releases.between("fakefw", "1.0", "fakefw==1.2", index) == expected


# --- reports and the other direction -----------------------------------------------------------------------


@pytest.mark.slow
def test_every_probe_has_its_subject_and_reused_ones_their_run_id(history):
    first = run_bisect(history, "SavedModel", good=history["c"]["c5"], first_parent=True)
    again = run_bisect(history, "SavedModel", good=history["c"]["c5"], first_parent=True)

    assert [p.item for p in again.probes] == [p.item for p in first.probes]
    assert all(p.reused for p in again.probes), "the same bisect again takes every probe from the history"
    assert [p.run_id for p in again.probes] == [p.run_id for p in first.probes]
    assert all(p.run_id is not None for p in again.probes)
    for probe in again.probes:
        subject = next(k for k, v in history["c"].items() if v == probe.item)
        assert probe.label.startswith(probe.item[:10] + " ") and len(probe.label) > 11, subject
    assert {p["label"] for p in again.to_json()["probes"]} == {p.label for p in again.probes}


@pytest.mark.slow
def test_a_commit_remembered_as_unbuildable_names_the_run_that_recorded_it(history):
    first = run_bisect(history, "Numeric")
    again = run_bisect(history, "Numeric")

    [broken] = [p for p in first.probes if history["name"][p.item] == "c1"]
    [remembered] = [p for p in again.probes if history["name"][p.item] == "c1"]
    assert remembered.verdict == "skip" and "remembered" in remembered.why and remembered.reused
    assert broken.run_id is not None and remembered.run_id == broken.run_id, "the stored run of the failed build"
    stored = {r.status for r in store_of(history).run(remembered.run_id).results}
    assert stored == {"error"}
    assert {p["run_id"] for p in again.to_json()["probes"]} == {p.run_id for p in again.probes} and None not in {
        p["run_id"] for p in again.to_json()["probes"]}


@pytest.mark.slow
def test_a_bisect_opens_the_history_once_for_all_its_probes(history, monkeypatch):
    from modelci.store import Store

    opened = []
    original = Store.__init__

    def counting(self, *args, **kwargs):
        opened.append(args[0] if args else kwargs.get("db"))
        original(self, *args, **kwargs)

    monkeypatch.setattr(Store, "__init__", counting)
    result = run_bisect(history, "Numeric")
    assert result.status == "found" and len(result.probes) >= 5
    assert len(opened) == 1, f"{len(opened)} stores opened for {len(result.probes)} probes"


def store_of(history):
    from modelci.store import Store

    return Store.from_config(history["cfg"])


@pytest.mark.slow
def test_an_improvement_is_bisected_to_the_commit_that_made_it(tmp_path):
    repo = FakeRepo(tmp_path / "repo")
    shas = repo.history(8, culprit=5, delay=0.002)  # commit 5 makes the kernel 10x faster
    suite = write_suite(tmp_path / "suite")
    cfg = config_module.load(config_file=write_project(tmp_path / "project", tmp_path / "cache"))
    with offline_environment():
        with pytest.raises(BisectRefused, match="the bad end .* is not bad for the timing check"):
            bisect(cfg, [str(suite)], "Slow", repo=str(repo.path), good=shas[0], bad=shas[-1], check="timing",
                   build="pythonpath", log=lambda line: None)
        result = bisect(cfg, [str(suite)], "Slow", repo=str(repo.path), good=shas[0], bad=shas[-1],
                        build="pythonpath", improvement=True, log=lambda line: None)
        with pytest.raises(BisectRefused, match="the older end .* is not worse than the newer end"):
            bisect(cfg, [str(suite)], "Slow", repo=str(repo.path), good=shas[5], bad=shas[-1],
                   build="pythonpath", improvement=True, log=lambda line: None)

    assert result.status == "found" and result.direction == "improvement" and result.check == "timing"
    assert result.culprit.item == shas[5] and result.last_good.item == shas[4]
    assert result.message.startswith("first improved: ") and result.confirmation["confirmed"]
    assert result.confirmation["numbers"]["ratio"] > 3, "the last old commit is slower than the first new one"
    assert {p.verdict for p in result.probes} <= {"old", "new", "skip"}
    assert within_cost_target(result)


@pytest.mark.slow
def test_cli_invert_names_the_first_improved_commit(history, tmp_path):
    out = tmp_path / "bisect.json"
    cmd = [sys.executable, "-m", "modelci.cli", "bisect", "--repo", str(history["repo"]), "--old", history["c"]["c2"],
           "--new", history["c"]["c5"], "--suite", str(history["suite"]), "-k", "Numeric", "--build", "pythonpath",
           "--json", str(out)]
    proc = subprocess.run([*cmd, "--invert"], cwd=history["root"] / "project", capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "first improved:" in proc.stdout and "Scale the output layer" in proc.stdout
    report = json.loads(out.read_text())
    assert report["direction"] == "improvement" and report["culprit"]["item"] == history["c"]["c3"]
    assert {p["verdict"] for p in report["probes"]} <= {"old", "new", "skip"}

    # the same ends without --invert: c2 -> c5 changed the outputs, which is what a regression bisect follows
    again = subprocess.run(cmd, cwd=history["root"] / "project", capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "first bad:" in again.stdout


@pytest.mark.slow
def test_the_live_log_says_why_a_release_that_could_not_install_was_skipped(tmp_path):
    """The log said "no result for the workload" where the table said why: the release could not be installed."""
    wheels = tmp_path / "wheels"
    for version, scale in (("1.0", 1.0), ("1.2", 1.5)):  # 1.1 is on no index
        build_fake_wheel(wheels, "fakefw", version, {"fakefw/__init__.py": fakefw_source(scale=scale)})
    suite = write_suite(tmp_path / "suite")
    lines = []
    with offline_environment() as patch:
        patch.setenv("MODELCI_FIND_LINKS", str(wheels))
        cfg = config_module.load(config_file=write_project(tmp_path / "project", tmp_path / "cache"))
        result = bisect(cfg, [str(suite)], "Numeric", versions=["fakefw==1.0", "fakefw==1.1", "fakefw==1.2"],
                        log=lines.append)

    [skipped] = [p for p in result.probes if p.verdict == "skip"]
    assert skipped.item == "fakefw==1.1" and "could not install" in skipped.why
    [logged] = [line for line in lines if line.startswith("round 1: fakefw==1.1 is skip")]
    assert logged == f"round 1: fakefw==1.1 is skip ({skipped.why})"
