"""A clone of a git target's repository that hangs (a slow remote, a large repository) and the run that is
cancelled or killed meanwhile: the clone ends with every process it started. Under subprocess.run a SIGTERM
ended git alone, and a SIGKILL of the harness left the whole clone running. Here `git clone` is a script first on
PATH that starts processes (one in a session of its own, as a transport helper may) and never ends; every other
git command is the real one."""

from __future__ import annotations

import shutil
import signal

import pytest
from probes import QUICK, one_commit_repo


@pytest.fixture
def slow_clone(project, tmp_path):
    """A repository of one commit, and a PATH whose `git clone` hangs."""
    repo = one_commit_repo(tmp_path / "repo")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real = shutil.which("git")
    script = bin_dir / "git"
    script.write_text(f'#!/bin/sh\nif [ "$1" = clone ]; then touch "$PROBE_DIR/cloning"; sleep 1000 & '
                      f'setsid sleep 1001 & sleep 1002; exit 1; fi\nexec {real} "$@"\n')
    script.chmod(0o755)
    project.extra_env["PATH"] = f"{bin_dir}:{project.env()['PATH']}"
    return repo


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGKILL, -9)])
def test_a_clone_ends_with_the_run_that_is_cancelled_or_killed(project, slow_clone, signum, code):
    project.workloads(QUICK)
    proc = project.start("run", "--repo", str(slow_clone), "--ref", "HEAD", "--suite", "suite")
    # modelci, the supervisor, the script and its three sleeps
    project.stop_midway(proc, "cloning", 6, "the clone", signum, code)
