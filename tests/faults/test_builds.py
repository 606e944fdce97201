"""A git commit's build that hangs, is cancelled, or outlives a killed harness: it ends with every process it
started. Under subprocess.run a timeout or a SIGTERM ended the build's shell alone, and the compilers it had
started (here: `sleep`s, one of them in a session of its own) ran on after the run was over."""

from __future__ import annotations

import signal
import subprocess

import pytest
from probes import QUICK, processes_with, wait_for

#: a build that tells the probe it has started, leaves a process in its group and one in a session of its own,
#: and never ends
HANGING_BUILD = 'touch "$PROBE_DIR/building"; sleep 1000 & setsid sleep 1001 & sleep 1002; exit 1'


@pytest.fixture
def repo(tmp_path):
    """A repository of one commit; its build is the command given with --build."""
    path = tmp_path / "repo"
    path.mkdir()
    (path / "README").write_text("a framework\n")
    git = ["git", "-C", str(path), "-c", "user.name=probe", "-c", "user.email=probe@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-qm", "Initial"], check=True)
    return path


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
    wait_for(lambda: project.marker("building").exists() or proc.poll() is not None, 120, "the build")
    assert proc.poll() is None, proc.communicate()
    wait_for(lambda: len(processes_with(project.token)) >= 5, 30, "the build's processes")
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    if signum == signal.SIGTERM:
        assert "interrupted (SIGTERM)" in err
    # SIGKILL included: the build's supervisor gets its parent-death signal and ends what the build started
    project.assert_clean(type("Done", (), {"stdout": out, "stderr": err, "returncode": proc.returncode}))
