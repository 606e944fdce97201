"""Long steps are never silent: through the real `modelci` command, with its output not a terminal (a CI log),
an environment build passes on uv's progress lines, a workload that runs for a while gets `still running` lines
with its elapsed time, nothing is styled for a terminal, and `-q` prints none of it."""

from __future__ import annotations

import os

from fakeproject import make_fake_project

SLEEPY = '''\
import time

import modelci


class Sleeps(modelci.Workload):
    """Takes a while to set up, as a large model does."""

    framework = "python"
    steps = 1

    def setup(self, ctx):
        time.sleep(1.5)

    def train_step(self, ctx, step):
        return 0.0

    def infer(self, ctx):
        return {"prediction": [[0.5, 0.25]]}
'''


def test_long_steps_print_plain_progress_lines_off_a_terminal_and_none_with_quiet(tmp_path):
    project = make_fake_project(tmp_path / "project", tmp_path / "cache")
    suite = tmp_path / "sleepy"
    suite.mkdir()
    (suite / "sleeps.py").write_text(SLEEPY)
    project.env["MODELCI_PROGRESS_EVERY"] = "0.25"

    done = project.cli("run", "--target", str(project.v10), "--suite", str(suite))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert any(line.startswith("building environment in ") for line in lines), done.stderr
    assert any(line.startswith("uv: ") for line in lines), done.stderr  # uv's own progress, as it came
    assert not any(line.startswith("uv:  + ") for line in lines)  # not the list of packages: the lock has it
    built = next(line for line in lines if line.startswith("built environment "))
    assert built.split()[2] in done.stdout  # the environment id of the run's table, not the cache folder's
    still = [line for line in lines if line.startswith("still running sleepy/Sleeps (")]
    assert still and still[0].endswith("s)"), done.stderr
    assert "\x1b[" not in done.stderr  # plain lines: no terminal codes in a log

    project.env["MODELCI_CACHE_DIR"] = str(tmp_path / "other-cache")  # a new environment to build, quietly
    quiet = project.cli("-q", "run", "--target", str(project.v10), "--suite", str(suite))
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert not any(word in quiet.stderr for word in ("still ", "uv: ", "building environment")), quiet.stderr
    assert os.path.isdir(tmp_path / "other-cache" / "envs")  # it did build an environment, silently
