"""Git-commit targets: a real repository made in the test, built three ways, cached by commit."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys

import pytest
from fakerepo import FakeRepo, broken_pyproject, offline_environment, write_project, write_suite

from modelci import builds, envs, targets, workflow
from modelci import config as config_module
from modelci.errors import UserError
from modelci.gitrepo import GitRepo
from modelci.store import Store


@pytest.fixture
def project(tmp_path):
    """A repository with a good commit, a numeric change and a commit that does not build."""
    repo = FakeRepo(tmp_path / "repo")
    shas = {"good": repo.commit("Initial fakefw"),
            "scaled": repo.commit("Scale the output layer", scale=1.5),
            "broken": repo.commit("Break the packaging", pyproject=broken_pyproject())}
    suite = write_suite(tmp_path / "suite")
    config = write_project(tmp_path / "project", tmp_path / "cache")
    with offline_environment() as patch:
        patch.chdir(tmp_path / "project")
        yield {"repo": repo, "shas": shas, "suite": suite, "cache": tmp_path / "cache",
               "cfg": config_module.load(config_file=config), "root": tmp_path}


def test_spec_round_trip():
    spec = targets.git_spec("/src/fw", "v1.2", "make wheel && cp dist/*.whl $MODELCI_DIST_DIR", "python")
    assert targets.parse_git_spec(spec) == ("/src/fw", "v1.2", {
        "build": "make wheel && cp dist/*.whl $MODELCI_DIST_DIR", "subdirectory": "python"})
    assert targets.parse_git_spec("git+ssh://git@host/fw.git@main") == ("ssh://git@host/fw.git", "main", {})
    assert targets.parse_git_spec("git+https://host/fw.git") == ("https://host/fw.git", "HEAD", {})
    with pytest.raises(UserError, match="unknown option"):
        targets.parse_git_spec("git+/src/fw@main#bulid=wheel")


@pytest.mark.parametrize("build, subdirectory, says", [
    ("pythonpath:../../..", "", "--build pythonpath:../../.. leads out of the checkout"),
    ("pythonpath:src/../..", "", "--build pythonpath:src/../.. leads out of the checkout"),
    ("wheel", "../..", "#subdirectory=../.. leads out of the checkout"),
])
def test_a_build_folder_outside_the_checkout_is_refused(build, subdirectory, says):
    # accepted before, and the run tested whatever sat beside the checkout as the commit's build
    from modelci.builds import BuildPlan

    with pytest.raises(UserError, match=re.escape(says)):
        BuildPlan.parse(build, subdirectory)
    assert BuildPlan.parse("pythonpath:src/pkg", "python").path == "src/pkg"


def test_pythonpath_target_imports_the_package_from_the_checkout(project):
    spec = targets.git_spec(str(project["repo"].path), "HEAD~1", "pythonpath")
    outcome = workflow.run(project["cfg"], spec, [str(project["suite"])], "Numeric")

    target = outcome.target
    assert target.kind == "git" and target.commit == project["shas"]["scaled"]
    assert target.subject == "Scale the output layer" and target.commit_date.startswith("2024-01-01T")
    assert target.version == f"1.0+g{target.commit[:12]}"
    assert [r.status for r in outcome.results] == ["ok"]
    assert list(outcome.results[0].outputs["y"]) == [0.75, -1.875, 3.0]  # scale 1.5: the checkout's code ran
    # the environment holds the dependencies; the checkout and the package's metadata go on the path
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(outcome.environment.paths))
    where = subprocess.run([str(outcome.environment.python), "-c", "import fakefw, importlib.metadata as m; "
                            "print(fakefw.__file__); print(m.version('fakefw'))"],
                           capture_output=True, text=True, check=True, env=env).stdout.split()
    assert where == [str(project["cache"] / "worktrees" / target.commit / "fakefw" / "__init__.py"), target.version]
    alone = subprocess.run([str(outcome.environment.python), "-c", "import fakefw"], capture_output=True)
    assert alone.returncode != 0, "the shared environment itself does not hold any commit's package"
    # the history records the commit, its date and subject
    stored = Store(project["cfg"].db, project["cfg"].artifacts).run(outcome.run_id).row.target
    assert (stored.commit, stored.subject) == (target.commit, "Scale the output layer")


def test_commits_with_the_same_dependencies_share_one_environment(project):
    repo = str(project["repo"].path)
    a = workflow.run(project["cfg"], targets.git_spec(repo, project["shas"]["good"], "pythonpath"),
                     [str(project["suite"])], "Numeric")
    b = workflow.run(project["cfg"], targets.git_spec(repo, project["shas"]["scaled"], "pythonpath"),
                     [str(project["suite"])], "Numeric")
    assert a.environment.id == b.environment.id and a.environment.path == b.environment.path
    assert a.environment.paths != b.environment.paths, "each run puts its own commit on the path"
    assert a.target.version != b.target.version
    assert list(a.results[0].outputs["y"]) == [0.5, -1.25, 2.0]
    assert b.comparisons[0].baseline.id == a.results[0].id, "the earlier commit is the baseline"
    assert any(f.check == "precision" and f.verdict == "regression" for f in b.comparisons[0].findings)


def test_wheel_build_is_cached_by_commit_and_valid_only_when_complete(project):
    target = targets.resolve(targets.git_spec(str(project["repo"].path), project["shas"]["good"]),
                             cache_dir=project["cache"])
    python = project["cfg"].python
    lines = []
    requires = builds.prepare(target, project["cache"], python=python, index=envs.IndexConfig.from_pip(), timeout=600,
                              log=lines.append)
    folder, _ = builds.build_dir(target, project["cache"], python)
    assert (folder / "fakefw-1.0-py3-none-any.whl").is_file() and target.version == "1.0"
    assert any(line.startswith("building commit") for line in lines)
    # only modules and metadata: unpacked beside it and put on the path; the environment holds its dependencies
    assert requires == [] and target.paths == [str(folder / "site")]
    assert (folder / "site" / "fakefw" / "__init__.py").is_file()
    assert (folder / "site" / "fakefw-1.0.dist-info" / "METADATA").is_file()

    lines.clear()
    assert builds.prepare(target, project["cache"], python=python, timeout=600, log=lines.append) == requires
    assert lines == [], "a cached build is not built again"

    # a build folder without its build.json (a killed build) is not taken for a build
    (folder / "build.json").unlink()
    assert not builds.is_built(target, project["cache"], python)
    builds.prepare(target, project["cache"], python=python, timeout=600, log=lines.append)
    assert any(line.startswith("building commit") for line in lines)
    assert json.loads((folder / "build.json").read_text())["commit"] == target.commit


def test_a_wheel_is_unpacked_onto_the_path_only_when_that_is_all_installing_it_does(tmp_path):
    modules = {"pkg/__init__.py": "X = 1\n"}
    plain = builds.write_wheel(tmp_path, "pkg", "1.0", modules,
                               ["numpy>=1.0", "torch; python_version >= '3.8'", "pytest; extra == 'test'"])
    assert builds._unpack(plain, tmp_path / "plain") == {
        "unpacked": True, "requires": ["numpy>=1.0", "torch; python_version >= '3.8'"]}
    assert (tmp_path / "plain" / "pkg" / "__init__.py").read_text() == "X = 1\n"
    (tmp_path / "other").mkdir()
    scripts = builds.write_wheel(tmp_path / "other", "pkg", "1.0", {**modules, "pkg-1.0.data/scripts/pkg": "#!x"})
    pth = builds.write_wheel(tmp_path / "other", "pkg", "2.0", {**modules, "pkg.pth": "import pkg\n"})
    for wheel in (scripts, pth):
        assert builds._unpack(wheel, tmp_path / "no") == {} and not (tmp_path / "no").exists(), wheel.name


def test_a_commit_that_does_not_build_gives_error_results_not_a_stopped_run(project):
    spec = targets.git_spec(str(project["repo"].path), project["shas"]["broken"])
    outcome = workflow.run(project["cfg"], spec, [str(project["suite"])], "Numeric")

    [result] = outcome.results
    assert result.workload == "suite/Numeric" and result.status == "error"
    assert "did not build" in result.reason and project["shas"]["broken"][:12] in result.reason
    assert "pyproject.toml" in result.stderr_tail, "the build log tail is kept"
    assert outcome.run_id is not None and workflow.failed(outcome)
    target = targets.resolve(spec, cache_dir=project["cache"])
    assert builds.remembered_failure(target, project["cache"], project["cfg"].python) is not None

    # every selected workload gets its error result
    everything = workflow.run(project["cfg"], spec, [str(project["suite"])])
    assert sorted(r.workload for r in everything.results) == [
        "suite/Crash", "suite/Noisy", "suite/Numeric", "suite/SavedModel", "suite/Slow"]


def test_a_commit_whose_pyproject_does_not_parse_is_said_to_be_untestable_not_nameless(project):
    # it said "give the package a name ... or build it with --build wheel": the file is broken, not nameless,
    # and a wheel build reads it too
    spec = targets.git_spec(str(project["repo"].path), project["shas"]["broken"], "pythonpath")
    [result] = workflow.run(project["cfg"], spec, [str(project["suite"])], "Numeric").results
    assert result.status == "error"
    assert "its pyproject.toml is not valid TOML (" in result.reason and "untestable" in result.reason
    assert "give the package a name" not in result.reason and "build it with --build wheel" not in result.reason


def test_a_history_that_refuses_a_failed_build_shows_its_errors_like_any_run_it_refuses(project):
    # failed_build stored its error results past workflow._ingest: a refusing history was a bare StoreWriteError,
    # with no results shown, no report files and no advice
    import sqlite3

    workflow.run(project["cfg"], "current", [str(project["suite"])], "Numeric")  # the history exists
    with sqlite3.connect(project["cfg"].db) as connection:
        connection.execute("CREATE TRIGGER frozen BEFORE INSERT ON runs BEGIN SELECT RAISE(ABORT, 'runs are frozen'); "
                           "END")
    failing = targets.git_spec(str(project["repo"].path), project["shas"]["scaled"], "exit 3")
    with pytest.raises(workflow.NotStored, match="runs are frozen. Nothing of this run is stored; fix what") as caught:
        workflow.run(project["cfg"], failing, [str(project["suite"])], "Numeric")
    outcome = caught.value.outcome
    assert outcome.run_id is None and "runs are frozen" in outcome.unstored
    [result] = outcome.results
    assert result.status == "error" and "the build command 'exit 3'" in result.reason


def test_a_build_command_that_ends_in_whl_is_still_a_git_target(project):
    # the spec ended in ".whl", and was taken for a wheel file: "no such wheel file"
    make = ('"$PYTHON" -c "import os, sys; sys.path.insert(0, \'_build\'); import fakebackend; '
            'fakebackend.build_wheel(\'out\')" && cp out/*.whl "$MODELCI_DIST_DIR"/fakefw-0-py3-none-any.whl')
    spec = targets.git_spec(str(project["repo"].path), project["shas"]["scaled"], make)
    assert spec.endswith(".whl")
    assert targets.resolve(spec, cache_dir=project["cache"]).kind == "git"


def test_custom_build_command(project):
    make = ('"$PYTHON" -c "import os, sys; sys.path.insert(0, \'_build\'); import fakebackend; '
            'fakebackend.build_wheel(os.environ[\'MODELCI_DIST_DIR\'])"')
    spec = targets.git_spec(str(project["repo"].path), project["shas"]["scaled"], make)
    outcome = workflow.run(project["cfg"], spec, [str(project["suite"])], "Numeric")
    assert [r.status for r in outcome.results] == ["ok"]
    assert list(outcome.results[0].outputs["y"]) == [0.75, -1.875, 3.0]

    failing = targets.git_spec(str(project["repo"].path), project["shas"]["scaled"], "echo compiling; exit 3")
    outcome = workflow.run(project["cfg"], failing, [str(project["suite"])], "Numeric")
    [result] = outcome.results
    assert result.status == "error" and "the build command 'echo compiling; exit 3'" in result.reason
    assert "exit code 3" in result.reason and "compiling" in result.stderr_tail


def test_bad_refs_and_unreachable_repositories_are_named(project, tmp_path):
    with pytest.raises(UserError, match="ref 'no-such-branch' does not exist in repository"):
        targets.resolve(targets.git_spec(str(project["repo"].path), "no-such-branch"), cache_dir=project["cache"])
    with pytest.raises(UserError, match="no git repository there"):
        targets.resolve(f"git+{tmp_path}/nowhere@main", cache_dir=project["cache"])
    # a folder inside a clone is not the clone: it was taken for one, then said "does not exist" when mirrored
    inside = project["repo"].path / "fakefw"
    assert inside.is_dir()
    top = str(project["repo"].path.resolve())
    with pytest.raises(UserError, match=f"a folder inside the git repository {re.escape(top)}; give {re.escape(top)}"):
        GitRepo(str(inside), project["cache"]).resolve("HEAD")
    assert GitRepo(str(project["repo"].path / ".git"), project["cache"]).resolve("HEAD")  # its git folder will do
    with pytest.raises(UserError, match="cannot be reached"):
        GitRepo("https://127.0.0.1:9/fw.git", project["cache"]).sync()


def test_run_cli_takes_repo_and_ref(project):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELCI_")}
    proc = subprocess.run(
        [sys.executable, "-m", "modelci.cli", "run", "--repo", str(project["repo"].path), "--ref", "HEAD",
         "--build", "pythonpath", "--suite", str(project["suite"]), "-k", "Numeric"],
        cwd=project["root"] / "project", env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr  # HEAD does not build: an error result, exit 1, no traceback
    assert "Traceback" not in proc.stderr and "did not build" in proc.stdout + proc.stderr

    bad = subprocess.run([sys.executable, "-m", "modelci.cli", "run", "--repo", str(project["repo"].path),
                          "--ref", "v0", "--suite", str(project["suite"])],
                         cwd=project["root"] / "project", env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "ref 'v0' does not exist" in bad.stderr


def test_a_password_in_a_repository_url_is_neither_stored_nor_shown(project):
    """A CI job names its repository with a token in the URL (`https://x-access-token:$TOKEN@host/fw.git`): the
    token went into the history (the target's spec, the command line), the report files and the messages. git
    still gets it (git's own `insteadOf` sends this URL to the local repository, as a real server would answer
    it); nothing modelci writes or says holds it."""
    secret = "s3cret-tok"
    url = f"https://ci:{secret}@git.example/fakefw.git"
    gitconfig = project["root"] / "gitconfig"
    gitconfig.write_text(f'[url "{project["repo"].path}"]\n\tinsteadOf = {url}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELCI_")} | {"GIT_CONFIG_GLOBAL": str(gitconfig)}
    spec = targets.git_spec(url, project["shas"]["good"], "pythonpath")
    proc = subprocess.run([sys.executable, "-m", "modelci.cli", "run", "--target", spec, "--suite",
                           str(project["suite"]), "-k", "Numeric", "--json", "report.json"],
                          cwd=project["root"] / "project", env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "https://ci:***@git.example/fakefw.git" in proc.stderr, proc.stderr
    written = [path for path in (project["root"] / "project").rglob("*") if path.is_file()]
    for text in [proc.stdout, proc.stderr, *(path.read_bytes().decode("latin-1") for path in written)]:
        assert secret not in text
    [db] = [path for path in written if path.suffix == ".db"]
    with sqlite3.connect(db) as connection:
        [(stored, command)] = connection.execute("SELECT spec, command FROM targets JOIN runs "
                                                 "ON runs.target_id = targets.id").fetchall()
    assert stored.startswith("git+https://ci:***@git.example/fakefw.git@") and "--target" in command, (stored, command)
    # read back redacted, the spec finds the same mirror, and git is left to its credential helper for the token
    again = GitRepo("https://ci:***@git.example/fakefw.git", project["cache"])
    assert again.mirror == GitRepo(url, project["cache"]).mirror and again.mirror.is_dir()
    assert again.remote == "https://ci@git.example/fakefw.git"
    unreachable = GitRepo(f"https://ci:{secret}@127.0.0.1:9/fw.git", project["cache"])
    with pytest.raises(UserError, match="cannot be reached") as refused:
        unreachable.sync()
    assert secret not in str(refused.value) and "ci:***@127.0.0.1" in str(refused.value)


def test_declared_workloads_are_read_without_importing(tmp_path):
    suite = write_suite(tmp_path / "suite")
    (suite / "named.py").write_text("import modelci\nimport missing_framework\n\n"
                                    "class Base(modelci.Workload):\n    pass\n\n"
                                    "class Child(Base):\n    name = 'renamed'\n")
    ids = [w for w, _ in builds.declared_workloads({"suite": suite})]
    assert ids == ["suite/Numeric", "suite/Slow", "suite/Crash", "suite/SavedModel", "suite/Noisy",
                   "suite/Base", "suite/renamed"]
    assert [w for w, _ in builds.declared_workloads({"suite": suite}, "renamed")] == ["suite/renamed"]


def test_a_lock_of_a_git_run_names_the_commit_it_built_not_a_version_no_index_has(project, tmp_path):
    from modelci import cli
    from modelci.envs import lockfile

    spec = targets.git_spec(str(project["repo"].path), "HEAD~1", "pythonpath")  # the "scaled" commit, for now
    first = workflow.run(project["cfg"], spec, [str(project["suite"])], "Numeric")
    path = tmp_path / "run.lock"
    assert cli.main(["env", "lock", str(first.run_id), "-o", str(path)]) == 0
    named = lockfile.read(path).target
    # it named `fakefw==1.0+g<sha>`, which `run --lock` then looked up as a requirement: on no index, and a
    # pythonpath lock does not hold the framework at all
    assert named == targets.git_spec(str(project["repo"].path), project["shas"]["scaled"], "pythonpath")
    project["repo"].commit("Scale again", scale=3.0)  # HEAD~1 is another commit now; the lock still names its own
    again = workflow.run(project["cfg"], named, [str(project["suite"])], "Numeric", lock=str(path))
    assert again.environment.id == first.environment.id
    assert list(again.results[0].outputs["y"]) == list(first.results[0].outputs["y"]) == [0.75, -1.875, 3.0]


def test_a_lock_of_a_pythonpath_run_rebuilds_its_environment_with_the_commit_on_the_path(project, tmp_path):
    from modelci import cli
    from modelci.envs import lockfile

    spec = targets.git_spec(str(project["repo"].path), project["shas"]["scaled"], "pythonpath")
    first = workflow.run(project["cfg"], spec, [str(project["suite"])], "Numeric")
    path = tmp_path / "run.lock"
    assert cli.main(["env", "lock", str(first.run_id), "-o", str(path)]) == 0
    assert "fakefw" not in lockfile.read(path).body(), "the lock holds the dependencies; the commit is on the path"

    again = workflow.run(project["cfg"], spec, [str(project["suite"])], "Numeric", lock=str(path))
    assert again.environment.id == first.environment.id and again.environment.paths == first.environment.paths
    assert [r.status for r in again.results] == ["ok"]
    assert list(again.results[0].outputs["y"]) == [0.75, -1.875, 3.0]


def test_a_clone_a_killed_run_left_half_done_is_cleared(tmp_path):
    # a SIGKILL during a clone leaves <mirror>.tmpPID behind; the next clone, under the mirror's lock, clears it
    repo = FakeRepo(tmp_path / "repo")
    sha = repo.commit("Initial fakefw")
    git_repo = GitRepo(str(repo.path), tmp_path / "cache")
    stale = git_repo.mirror.with_name(git_repo.mirror.name + ".tmp424242")
    (stale / "objects").mkdir(parents=True)
    git_repo.sync()
    assert not stale.exists()
    assert git_repo.has(sha)
