"""compat across git commits and releases of a real (small, numpy-based) package, `tinynet` (tests/tinyrepo.py).

    c0 ─ c1 ─ c2 (Rename the weight key (#7)) ─ c3 ─ c4 ─ c5

c2 renames the key tinynet's loader expects, so models saved at c0 or c1 no longer load from c2 on. Every commit
carries the version 0.1.0 (`0.1.0+g<sha>` when built with pythonpath), so only the commit graph can say which
build is older; the package is named in setup.cfg only, so its name must come from there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tinyrepo import TINYNET, TinyRepo, write_suite

from modelci import builds, compat, projectmeta, targets, workflow
from modelci import config as config_module
from modelci.bisect import bisect
from modelci.errors import UserError


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, env_cache):
    root = tmp_path_factory.mktemp("tiny")
    repo = TinyRepo(root / "repo")
    c = {"c0": repo.commit("Initial tinynet"),
         "c1": repo.commit("Docs", note="c1"),
         "c2": repo.commit("Rename the weight key (#7)", key="kernel"),
         "c3": repo.commit("More docs", note="c3"),
         "c4": repo.commit("Even more docs", note="c4"),
         "c5": repo.commit("Typos", note="c5")}
    suite = write_suite(root / "tinysuite")
    project = root / "project"
    project.mkdir()
    (project / "modelci.toml").write_text(f'cache_dir = "{env_cache}"\ntimeout = 120\nrunner = "test-runner"\n')
    with pytest.MonkeyPatch.context() as patch:
        for key in [k for k in os.environ if k.startswith("MODELCI_")]:
            patch.delenv(key)
        patch.chdir(project)
        yield {"root": root, "repo": repo, "c": c, "suite": suite, "cfg": config_module.load(),
               "patch": patch}


def spec(tiny, commit: str, build: str = "pythonpath") -> str:
    return targets.git_spec(str(tiny["repo"].path), tiny["c"][commit], build)


def by_cell(outcome) -> dict[tuple[str, str], str]:
    return {(e.workload, e.format): e.outcome for e in outcome.entries}


@pytest.mark.parametrize("build", ["pythonpath", "wheel"])
def test_compat_between_commits_finds_the_renamed_key(tiny, build):
    produced = workflow.run(tiny["cfg"], spec(tiny, "c0", build), [str(tiny["suite"])])
    assert [r.status for r in produced.results] == ["ok", "ok"], [r.reason for r in produced.results]
    # named from setup.cfg, not after the commit or the checkout folder
    assert produced.target.name == "tinynet"
    expected = f"0.1.0+g{tiny['c']['c0'][:12]}" if build == "pythonpath" else "0.1.0"
    assert produced.target.version == expected
    saved = {e["format"]: e for r in produced.results for e in r.info["saved"]}
    # the workload's own format, unknown to the numpy helper, is saved by the workload, not skipped
    assert {f: e["status"] for f, e in saved.items()} == {"npz": "ok", "tinynet": "ok"}
    assert saved["tinynet"]["unsafe"] is False  # declared safe by modelci.Format

    before = compat.check(tiny["cfg"], spec(tiny, "c1", build), [str(tiny["suite"])])
    assert by_cell(before) == {("tinysuite/Dense", "npz"): "ok", ("tinysuite/OwnFormat", "tinynet"): "ok"}
    assert {e.producer["commit"] for e in before.entries} == {tiny["c"]["c0"]}

    after = compat.check(tiny["cfg"], spec(tiny, "c3", build), [str(tiny["suite"])])
    assert by_cell(after) == {("tinysuite/Dense", "npz"): "load_failed",
                              ("tinysuite/OwnFormat", "tinynet"): "load_failed"}
    assert all("KeyError: 'kernel' (in load)" in e.error for e in after.entries), [e.error for e in after.entries]
    assert after.regressed

    # the newer commit's models are not "older" than c1: only the graph says so, both versions are 0.1.0
    workflow.run(tiny["cfg"], spec(tiny, "c3", build), [str(tiny["suite"])], "Dense")
    again = compat.check(tiny["cfg"], spec(tiny, "c1", build), [str(tiny["suite"])], "Dense")
    assert {e.producer["commit"] for e in again.entries} == {tiny["c"]["c0"]}


def test_from_takes_a_ref_a_target_spec_or_a_specifier(tiny):
    workflow.run(tiny["cfg"], spec(tiny, "c0"), [str(tiny["suite"])], "Dense")
    workflow.run(tiny["cfg"], spec(tiny, "c2"), [str(tiny["suite"])], "Dense")
    target = spec(tiny, "c3")
    # a ref of the target's repository: that one build
    by_ref = compat.check(tiny["cfg"], target, [str(tiny["suite"])], "Dense", from_spec=tiny["c"]["c2"][:10])
    assert {e.producer["commit"] for e in by_ref.entries} == {tiny["c"]["c2"]}
    assert by_cell(by_ref) == {("tinysuite/Dense", "npz"): "ok"}
    by_branch_ref = compat.check(tiny["cfg"], target, [str(tiny["suite"])], "Dense", from_spec="main~5")
    assert {e.producer["commit"] for e in by_branch_ref.entries} == {tiny["c"]["c0"]}
    # a target spec of another build
    by_spec = compat.check(tiny["cfg"], target, [str(tiny["suite"])], "Dense", from_spec=spec(tiny, "c0"))
    assert {e.producer["commit"] for e in by_spec.entries} == {tiny["c"]["c0"]}
    # a specifier: the local label of a pythonpath build matches ==0.1.0
    by_version = compat.check(tiny["cfg"], target, [str(tiny["suite"])], "Dense", from_spec="==0.1.0")
    assert {e.producer["commit"] for e in by_version.entries} >= {tiny["c"]["c0"], tiny["c"]["c2"]}
    with pytest.raises(UserError, match="--from 'no-such-ref'.*a ref of the target's repository"):
        compat.check(tiny["cfg"], target, [str(tiny["suite"])], "Dense", from_spec="no-such-ref")


@pytest.mark.parametrize("build", ["pythonpath", "wheel"])
def test_bisect_check_compat_names_the_commit_that_broke_loading(tiny, build):
    result = bisect(tiny["cfg"], [str(tiny["suite"])], "tinysuite/OwnFormat", repo=str(tiny["repo"].path),
                    good=tiny["c"]["c0"], bad=tiny["c"]["c5"], check="compat", build=build, log=lambda _: None)
    assert result.status == "found", result.message
    assert result.culprit.item == tiny["c"]["c2"] and result.culprit.commit.pr == 7
    assert result.last_good.item == tiny["c"]["c1"]
    assert result.check == "compat" and "KeyError" in result.evidence
    bad = [p for p in result.probes if p.verdict == "bad" and p.round > 0]
    assert all("load_failed" in p.why for p in bad)
    # a probe that loads stored models runs nothing: it names the compat check it stored instead of a run
    assert all(p.check_id and p.run_id is None for p in result.probes if p.verdict != "skip")
    assert {p["check_id"] for p in result.to_json()["probes"]} == {p.check_id for p in result.probes}


def test_bisect_cli_follows_the_models_of_a_named_producer(tiny, tmp_path):
    """`--from` a ref: the models c1 saved (run first), bisected between c1 and c5 on the command line."""
    workflow.run(tiny["cfg"], spec(tiny, "c1"), [str(tiny["suite"])], "Dense")
    out = tmp_path / "bisect.json"
    proc = subprocess.run(
        [sys.executable, "-m", "modelci.cli", "bisect", "--repo", str(tiny["repo"].path), "--good", "main~4",
         "--bad", "main", "--suite", str(tiny["suite"]), "-k", "tinysuite/Dense", "--build", "pythonpath",
         "--check", "compat", "--from", tiny["c"]["c1"][:12], "--json", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "first bad:" in proc.stdout and "Rename the weight key" in proc.stdout
    report = json.loads(out.read_text())
    assert report["check"] == "compat" and report["culprit"]["pr"] == 7
    # --from without --check compat is refused, naming what to add
    refused = subprocess.run(
        [sys.executable, "-m", "modelci.cli", "bisect", "--repo", str(tiny["repo"].path), "--good", "main~4",
         "--bad", "main", "--suite", str(tiny["suite"]), "-k", "Dense", "--from", "main~4"],
        capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "add --check compat" in refused.stderr + refused.stdout


def test_compat_alarm_is_bisected_to_the_commit_that_broke_loading(tiny, tmp_path):
    """`modelci compat --bisect-on-alarm --good REF`: the check opens an alarm per saved model that no longer
    loads, and each is bisected with --check compat from its producer, as `run --bisect-on-alarm` does. c0 run
    with pythonpath and as a wheel is one producer: two entries, told apart by their build, but one alarm and
    one bisect."""
    for build in ("pythonpath", "wheel"):
        workflow.run(tiny["cfg"], spec(tiny, "c0", build), [str(tiny["suite"])], "OwnFormat", reuse=True)
    out = tmp_path / "compat.json"
    proc = subprocess.run(
        [sys.executable, "-m", "modelci.cli", "compat", "--target", spec(tiny, "c5"), "--suite", str(tiny["suite"]),
         "-k", "tinysuite/OwnFormat", "--from", tiny["c"]["c0"], "--bisect-on-alarm", "--good", tiny["c"]["c0"],
         "--json", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the check's own verdict: a model no longer loads
    assert proc.stdout.count("alarm opened") == 1, proc.stdout
    assert f"compat:tinynet:saved by tinynet@{tiny['c']['c0'][:10]}" in proc.stdout, proc.stdout
    assert "bisected" in proc.stdout and "Rename the weight key" in proc.stdout, proc.stdout
    report = json.loads(out.read_text())
    assert [e["outcome"] for e in report["entries"]] == ["load_failed", "load_failed"]
    assert "[pythonpath]" in proc.stdout and "[wheel]" in proc.stdout, proc.stdout
    [bisected] = report["bisects"]
    assert bisected["check"] == "compat"
    assert (bisected["result"]["culprit"]["sha"], bisected["result"]["culprit"]["pr"]) == (tiny["c"]["c2"], 7)
    # each probe loads the models of both builds, and its why says whose each outcome is
    bad = [p["why"] for p in bisected["result"]["probes"] if p["verdict"] == "bad"]
    assert bad and all("saved by tinynet==0.1.0+g" in why and "[pythonpath]: load_failed" in why
                       and "[wheel]: load_failed" in why for why in bad), bad


def test_a_compat_bisect_cancelled_by_sigterm_keeps_the_check_and_says_how_to_resume(tiny, tmp_path):
    """SIGTERM while `compat --bisect-on-alarm` probes: the check's report is already written and stays, the
    command exits 143 and says how to resume, without a traceback."""
    workflow.run(tiny["cfg"], spec(tiny, "c0"), [str(tiny["suite"])], "OwnFormat", reuse=True)
    out = tmp_path / "compat.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "modelci.cli", "--db", str(tmp_path / "h.db"), "compat", "--target", spec(tiny, "c5"),
         "--suite", str(tiny["suite"]), "-k", "tinysuite/OwnFormat", "--from", tiny["c"]["c0"], "--bisect-on-alarm",
         "--good", tiny["c"]["c0"], "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:  # the bisect logs each round before it probes
        seen.append(line)
        if line.startswith("probing "):
            proc.send_signal(signal.SIGTERM)
            break
    stdout, rest = proc.communicate(timeout=300)
    err = "".join(seen) + rest
    assert proc.returncode == 143, stdout + err
    assert "Traceback" not in stdout + err, err
    assert "interrupted by SIGTERM" in err and "resumes from the probes already run" in err, err
    report = json.loads(out.read_text())
    assert report["kind"] == "compat" and report["regressed"] is True and "bisects" not in report


def test_bisect_into_an_older_consumer_names_the_commit_whose_models_it_no_longer_loads(tiny):
    """`--into c0`, the forward way: each probe saves its own models and c0 loads them. From c2 on the models
    are saved under the renamed key, which c0's loader does not know."""
    workflow.run(tiny["cfg"], spec(tiny, "c0"), [str(tiny["suite"])], "OwnFormat", reuse=True)
    result = bisect(tiny["cfg"], [str(tiny["suite"])], "tinysuite/OwnFormat", repo=str(tiny["repo"].path),
                    good=tiny["c"]["c1"], bad=tiny["c"]["c5"], check="compat", into_spec=spec(tiny, "c0"),
                    build="pythonpath", log=lambda _: None)
    assert result.status == "found", result.message
    assert result.culprit.item == tiny["c"]["c2"] and result.last_good.item == tiny["c"]["c1"]
    assert "KeyError" in result.evidence and spec(tiny, "c0") in result.metrics[0]
    assert all(p.run_id is not None for p in result.probes), "each probe ran the workload that saved its models"
    assert {p.verdict for p in result.probes if p.item == tiny["c"]["c5"]} == {"bad"}
    with pytest.raises(UserError, match="not both"):
        bisect(tiny["cfg"], [str(tiny["suite"])], "tinysuite/OwnFormat", repo=str(tiny["repo"].path),
               good=tiny["c"]["c1"], bad=tiny["c"]["c5"], check="compat", into_spec=spec(tiny, "c0"),
               from_spec=tiny["c"]["c0"], log=lambda _: None)
    with pytest.raises(UserError, match="--into 'notaversion' is neither a version"):  # it named --from
        bisect(tiny["cfg"], [str(tiny["suite"])], "tinysuite/OwnFormat", repo=str(tiny["repo"].path),
               good=tiny["c"]["c1"], bad=tiny["c"]["c5"], check="compat", into_spec="notaversion",
               build="pythonpath", log=lambda _: None)


def test_bisect_into_the_good_end_itself_finds_the_commit_that_build_can_no_longer_load(tiny):
    """`--into c0 --good c0`: since c0, which commit's models can c0 no longer load? The good end loads its own
    models (trivially good), also when c0 built the other way is in the store too."""
    for build in ("pythonpath", "wheel"):
        workflow.run(tiny["cfg"], spec(tiny, "c0", build), [str(tiny["suite"])], "OwnFormat", reuse=True)
    itself = compat.check(tiny["cfg"], spec(tiny, "c0"), [str(tiny["suite"])], "OwnFormat",
                          from_spec=tiny["c"]["c0"][:10], direction="forward")
    assert by_cell(itself) == {("tinysuite/OwnFormat", "tinynet"): "ok"}
    # c0 is checked once, in the target's own build, not again as the wheel built from it
    assert {e.consumer["label"] for e in itself.entries} == {itself.target.label}
    result = bisect(tiny["cfg"], [str(tiny["suite"])], "tinysuite/OwnFormat", repo=str(tiny["repo"].path),
                    good=tiny["c"]["c0"], bad=tiny["c"]["c5"], check="compat", into_spec=tiny["c"]["c0"][:10],
                    build="pythonpath", log=lambda _: None)
    assert result.status == "found", result.message
    assert result.culprit.item == tiny["c"]["c2"] and result.last_good.item == tiny["c"]["c1"]


def test_a_forward_compat_alarm_is_bisected_to_the_commit_whose_models_the_consumer_no_longer_loads(tiny, tmp_path):
    """`modelci compat --direction forward --bisect-on-alarm`: c5's models do not load in c0, which opens a
    forward alarm (producer c5, consumer c0); it is bisected with each probe's models loaded into c0."""
    workflow.run(tiny["cfg"], spec(tiny, "c0"), [str(tiny["suite"])], "OwnFormat", reuse=True)
    workflow.run(tiny["cfg"], spec(tiny, "c5"), [str(tiny["suite"])], "OwnFormat", reuse=True)
    out = tmp_path / "compat.json"
    proc = subprocess.run(
        [sys.executable, "-m", "modelci.cli", "compat", "--target", spec(tiny, "c5"), "--suite", str(tiny["suite"]),
         "-k", "tinysuite/OwnFormat", "--direction", "forward", "--from", spec(tiny, "c0"), "--bisect-on-alarm",
         "--good", tiny["c"]["c1"], "--json", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "alarm opened" in proc.stdout and "bisected" in proc.stdout, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["bisects"] and all(b["check"] == "compat" for b in report["bisects"])
    assert {(b["result"]["culprit"]["sha"], b["result"]["culprit"]["pr"]) for b in report["bisects"]} == {
        (tiny["c"]["c2"], 7)}, [b["summary"] for b in report["bisects"]]


def test_a_release_sequence_of_wheels(tiny, tmp_path):
    """Releases 0.1.0, 0.1.1, 0.2.0 (the rename) and 0.3.0 as wheels on a find-links folder: ordered by version;
    bisect over the releases names 0.2.0."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version, key in (("0.1.0", "weight"), ("0.1.1", "weight"), ("0.2.0", "kernel"), ("0.3.0", "kernel")):
        builds.write_wheel(wheels, "tinynet", version,
                           {"tinynet/__init__.py": TINYNET.format(key=key, note=version)}, ["numpy"])
    tiny["patch"].setenv("MODELCI_FIND_LINKS", str(wheels))
    workflow.run(tiny["cfg"], "tinynet==0.1.0", [str(tiny["suite"])])
    outcome = compat.check(tiny["cfg"], str(wheels / "tinynet-0.3.0-py3-none-any.whl"), [str(tiny["suite"])])
    # the release 0.1.0 (and the commits of 0.1.0 that the other tests ran) are older than 0.3.0; 0.2.0 never ran
    assert {e.producer["version"].split("+")[0] for e in outcome.entries} == {"0.1.0"}
    release = [e for e in outcome.entries if e.producer["kind"] == "requirement"]
    assert len(release) == 2 and {e.outcome for e in release} == {"load_failed"}

    releases = [f"tinynet=={v}" for v in ("0.1.0", "0.1.1", "0.2.0", "0.3.0")]
    result = bisect(tiny["cfg"], [str(tiny["suite"])], "tinysuite/Dense", versions=releases, check="compat",
                    log=lambda _: None)
    assert result.status == "found" and result.culprit.spec == "tinynet==0.2.0"
    assert result.last_good.spec == "tinynet==0.1.1"


# -- the project name from metadata ------------------------------------------------------------------------


def write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def test_project_metadata_from_every_kind_of_project(tmp_path):
    pep621 = write(tmp_path / "a", {"pyproject.toml": '[project]\nname = "Alpha"\nversion = "1.2"\n'
                                                        'dependencies = ["numpy>=1"]\n'})
    assert (projectmeta.of_folder(pep621).name, projectmeta.of_folder(pep621).dependencies) == ("Alpha", ["numpy>=1"])
    poetry = write(tmp_path / "b", {"pyproject.toml": '[tool.poetry]\nname = "beta"\nversion = "0.3"\n'})
    assert (projectmeta.of_folder(poetry).name, projectmeta.of_folder(poetry).version) == ("beta", "0.3")
    cfg = write(tmp_path / "c", {"pyproject.toml": "[build-system]\nrequires = []\n",
                                 "setup.cfg": "[metadata]\nname = gamma\nversion = attr: gamma.__version__\n"
                                              "[options]\ninstall_requires =\n    numpy\n    scipy>=1\n"})
    meta = projectmeta.of_folder(cfg)
    assert (meta.name, meta.version, meta.dependencies) == ("gamma", None, ["numpy", "scipy>=1"])
    # setup.py: the project's own script answers --name --version (as setuptools' does)
    setup_py = write(tmp_path / "d", {"setup.py": "import sys\nif sys.argv[1:] == ['--name', '--version']:\n"
                                                  "    print('delta'); print('4.5.6')\n"})
    assert projectmeta.of_checkout(setup_py, sys.executable).name == "delta"
    egg = write(tmp_path / "e", {"setup.py": "raise SystemExit('not run when an egg-info is there')\n"})
    write(egg / "epsilon.egg-info", {"PKG-INFO": "Metadata-Version: 2.1\nName: epsilon\nVersion: 2.0\n",
                                     "requires.txt": "numpy\n\n[test]\npytest\n"})
    meta = projectmeta.of_checkout(egg, sys.executable)
    assert (meta.name, meta.version, meta.dependencies) == ("epsilon", "2.0", ["numpy"])
    failing = write(tmp_path / "f", {"setup.py": "raise SystemExit('broken setup')\n"})
    with pytest.raises(projectmeta.MetadataError, match="broken setup"):
        projectmeta.of_checkout(failing, sys.executable)
    with pytest.raises(projectmeta.MetadataError, match="no project name"):
        projectmeta.of_checkout(write(tmp_path / "g", {"pyproject.toml": "[build-system]\n"}), sys.executable)


PINNED_SUITE = '''
import fakedep
import modelci


class _Base(modelci.Workload):
    framework = "python"
    requires = ["fakedep==1.0"]
    steps = 1
    warmup = 0
    repeats = 1

    def train_step(self, ctx, step):
        return 0.0


class Pinned(_Base):
    def infer(self, ctx):
        return {"y": [float(fakedep.__version__)]}
'''


def test_a_git_targets_first_environment_already_holds_the_suites_pins(tmp_path, capsys):
    """The commit depends on `fakedep` (2.0 is the newest), the suite pins fakedep==1.0 in a base class: the one
    environment built holds 1.0 from the start, discovery included, and no environment with 2.0 is made first."""
    from fakerepo import FakeRepo, offline_environment
    from fakewheels import build_fake_wheel

    from modelci.report.console import Progress

    wheels = tmp_path / "wheels"
    for version in ("1.0", "2.0"):
        build_fake_wheel(wheels, "fakedep", version)
    repo = FakeRepo(tmp_path / "repo")
    pyproject = ('[build-system]\nrequires = []\nbuild-backend = "fakebackend"\nbackend-path = ["_build"]\n\n'
                 '[project]\nname = "fakefw"\nversion = "1.0"\ndependencies = ["fakedep"]\n')
    sha = repo.commit("Depend on fakedep", pyproject=pyproject)
    suite = tmp_path / "pinned"
    suite.mkdir()
    (suite / "models.py").write_text(PINNED_SUITE)
    (tmp_path / "modelci.toml").write_text(f'cache_dir = "{tmp_path / "cache"}"\ntimeout = 60\nrunner = "t"\n')
    with offline_environment() as patch:
        patch.setenv("MODELCI_FIND_LINKS", str(wheels))
        patch.chdir(tmp_path)
        cfg = config_module.load()
        capsys.readouterr()
        outcome = workflow.run(cfg, targets.git_spec(str(repo.path), sha, "pythonpath"), [str(suite)],
                               progress=Progress())
    log = capsys.readouterr().err
    assert [r.status for r in outcome.results] == ["ok"], outcome.results[0].reason
    assert list(outcome.results[0].outputs["y"]) == [1.0]
    assert log.count("building environment") == 1, log
    assert "fakedep==2.0" not in "".join(p.read_text() for p in (tmp_path / "cache").rglob("*.lock") if p.is_file())


def test_lineage_orders_commits_by_the_graph_and_releases_by_version(tmp_path):
    from modelci.lineage import NEWER, OLDER, SAME, UNORDERED, Lineage

    repo = TinyRepo(tmp_path / "repo")
    a = repo.commit("a")
    b = repo.commit("b", note="b")
    repo.git("checkout", "-q", "-b", "side", a)
    c = repo.commit("c", note="c")
    lineage = Lineage(tmp_path / "cache")

    def commit(sha: str, **more) -> dict:
        return {"commit": sha, "repo": str(repo.path), "version": f"0.1.0+g{sha[:12]}", **more}

    assert lineage.relation(commit(a), commit(b)) == OLDER and lineage.relation(commit(b), commit(a)) == NEWER
    assert lineage.relation(commit(b), commit(c)) == UNORDERED  # diverging branches
    assert lineage.relation(commit(a), commit(a)) == SAME
    # a commit whose repository is gone: only the versions are left, and they differ in the local label alone
    gone = {"commit": "f" * 40, "repo": str(tmp_path / "gone"), "version": "0.1.0+gffffffffffff"}
    assert lineage.relation(gone, commit(b)) == UNORDERED
    assert lineage.relation({"version": "1.9"}, {"version": "1.10"}) == OLDER
    assert lineage.relation({"version": "0.1.0"}, commit(b)) == UNORDERED
