"""A git commit's build, or an environment's install, that hangs, is cancelled, or outlives a killed harness: it
ends with every process it started. Under subprocess.run a timeout or a SIGTERM ended a build's shell alone, and
the compilers it had started (here: `sleep`s, one of them in a session of its own) ran on after the run was over;
a SIGTERM while uv installed an environment waited for uv to finish, and a SIGKILL left uv and its sdist build
running."""

from __future__ import annotations

import signal
import tarfile
import textwrap

import pytest
from fakewheels import build_fake_wheel
from probes import QUICK, one_commit_repo

#: a build that tells the probe it has started, leaves a process in its group and one in a session of its own,
#: and never ends
HANGING_BUILD = 'touch "$PROBE_DIR/building"; sleep 1000 & setsid sleep 1001 & sleep 1002; exit 1'


@pytest.fixture
def repo(tmp_path):
    """A repository of one commit; its build is the command given with --build."""
    return one_commit_repo(tmp_path / "repo")


def run_args(repo) -> list[str]:
    return ["run", "--repo", str(repo), "--ref", "HEAD", "--build", HANGING_BUILD, "--suite", "suite",
            "--json", "report.json"]


def test_a_build_past_build_timeout_ends_with_everything_it_started(project, repo):
    project.config("build_timeout = 2")
    project.workloads(QUICK)
    done = project.cli(*run_args(repo))
    assert done.returncode == 1, done.stderr  # the commit did not build: an error result
    [result] = project.report()["results"]
    assert result["status"] == "error"
    assert "no result after 2 s (build_timeout; every process it started was ended)" in result["reason"]
    project.assert_clean(done)


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGKILL, -9)])
def test_a_build_ends_with_the_run_that_is_cancelled_or_killed(project, repo, signum, code):
    project.workloads(QUICK)
    proc = project.start(*run_args(repo))
    project.stop_midway(proc, "building", 5, "the build", signum, code)


#: an sdist whose in-tree build backend tells the probe it has started, leaves a process in a session of its own
#: and never ends: what uv runs while it installs an environment that needs the package
SLOW_BACKEND = """
import os, subprocess, time


def get_requires_for_build_wheel(config_settings=None):
    open(os.path.join(os.environ["PROBE_DIR"], "installing"), "w").close()
    subprocess.Popen(["sleep", "1003"], start_new_session=True)
    time.sleep(1000)
    return []
"""


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGKILL, -9)])
def test_an_environment_install_ends_with_the_run_that_is_cancelled_or_killed(project, tmp_path, signum, code):
    source = tmp_path / "slowpkg-0.1"
    source.mkdir()
    (source / "pyproject.toml").write_text('[project]\nname = "slowpkg"\nversion = "0.1"\n\n[build-system]\n'
                                           'requires = []\nbuild-backend = "slow_backend"\nbackend-path = ["."]\n')
    (source / "slow_backend.py").write_text(SLOW_BACKEND)
    sdist = tmp_path / "slowpkg-0.1.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        archive.add(source, arcname=source.name)
    target = build_fake_wheel(tmp_path, "fakefw", "1.0")
    project.workloads(QUICK + textwrap.dedent(f"""
        class NeedsSlow(Quick):
            requires = ["slowpkg @ {sdist.as_uri()}"]
    """))
    proc = project.start("run", "--target", str(target), "--suite", "suite", "--json", "report.json")
    project.stop_midway(proc, "installing", 5, "the install", signum, code, within=60)  # uv is not waited for


def test_a_build_killed_by_sigkill_says_so_and_that_it_printed_nothing(project, repo):
    # the supervisor could not set a handler for SIGKILL (signal.signal refuses it): the "build log" was its own
    # traceback, and the build read as "exit code 1"
    project.workloads(QUICK)
    done = project.cli("run", "--repo", str(repo), "--ref", "HEAD", "--build", "kill -9 $$", "--suite", "suite",
                       "--json", "report.json")
    assert done.returncode == 1, done.stderr
    [result] = project.report()["results"]
    assert "did not build with the build command 'kill -9 $$': killed by SIGKILL; the build printed nothing" in \
        result["reason"], result["reason"]
    assert "Traceback" not in done.stdout + done.stderr + str(result)
    project.assert_clean(done)
