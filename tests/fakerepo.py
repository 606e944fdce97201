"""Real git repositories made in the tests, holding the pure-Python fake framework `fakefw`.

Each commit writes `fakefw/__init__.py` from a few knobs (numeric scale, kernel delay, crash, saved-model format),
so a test says which commit changes what. The project has a pyproject.toml with an in-tree PEP 517 backend
(`backend-path`), so `wheel` builds work offline and with build isolation; `broken_pyproject()` gives a commit
that does not build with any strategy.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
from fakewheels import BACKEND_WHEEL_WRITER

FAKEFW = '''\
"""fakefw at one commit of a test repository."""
import os
import random
import time

SCALE = {scale!r}
DELAY = {delay!r}
CRASH = {crash!r}
FORMAT = {format!r}
NOTE = {note!r}


def scale(values):
    """The layer whose numerics a commit may change."""
    return [v * SCALE for v in values]


def kernel():
    """A kernel whose speed a commit may change; it sleeps, so a busy machine does not change its time much."""
    time.sleep(DELAY)


def noisy_kernel():
    """The same kernel at every commit, with a lot of run-to-run noise."""
    time.sleep(random.uniform(0.002, 0.014))


def step(values):
    """A fused op that a commit may make abort the process."""
    if CRASH:
        os.abort()
    return [v + 1.0 for v in values]


def save(values, path):
    """Save a model in this commit's format."""
    with open(path, "w") as handle:
        handle.write(f"FKM{{FORMAT}}\\n" + " ".join(map(repr, values)) + "\\n")


def load(path):
    """Load a saved model; a commit that changes FORMAT no longer reads older files."""
    with open(path) as handle:
        magic, body = handle.read().split("\\n", 1)
    if magic != f"FKM{{FORMAT}}":
        raise ValueError(f"unsupported model format {{magic!r}} (this fakefw reads FKM{{FORMAT}})")
    return [float(v) for v in body.split()]
'''

BACKEND = '''\
"""An in-tree PEP 517 backend: builds a pure-Python wheel with the standard library only, offline."""
import tomllib


def _project():
    with open("pyproject.toml", "rb") as handle:
        return tomllib.load(handle)["project"]


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    meta = _project()
    return _write_wheel(wheel_directory, meta["name"], meta["version"], meta.get("dependencies", []))
''' + BACKEND_WHEEL_WRITER

PYPROJECT = '''\
[build-system]
requires = []
build-backend = "fakebackend"
backend-path = ["_build"]

[project]
name = "fakefw"
version = "{version}"
dependencies = []
'''

SUITE = '''\
import pathlib
import modelci
import fakefw

MODEL = pathlib.Path(__file__).with_name("model.fkm")


class _Base(modelci.Workload):
    framework = "python"
    requires = ["fakefw"]
    steps = 2
    repeats = 5
    warmup = 0

    def setup(self, ctx):
        self.x = [0.5, -1.25, 2.0]

    def train_step(self, ctx, step):
        return sum(self.x) / (step + 1)


class Numeric(_Base):
    def infer(self, ctx):
        return {"y": fakefw.scale(self.x)}


class Slow(_Base):
    repeats = 9

    def infer(self, ctx):
        fakefw.kernel()
        return {"y": self.x}


class Crash(_Base):
    def infer(self, ctx):
        return {"y": fakefw.step(self.x)}


class SavedModel(_Base):
    """Loads a model saved by an older fakefw (the file beside this suite, written in format 1)."""

    def infer(self, ctx):
        return {"y": fakefw.load(MODEL)}


class Noisy(_Base):
    repeats = 15

    def infer(self, ctx):
        fakefw.noisy_kernel()
        return {"y": self.x}
'''


def fakefw_source(scale: float = 1.0, delay: float = 0.02, crash: bool = False, format: int = 1,
                  note: str = "") -> str:
    """fakefw/__init__.py with the given knobs; `note` changes the text and nothing else."""
    return FAKEFW.format(scale=scale, delay=delay, crash=crash, format=format, note=note)


def write_suite(folder: Path) -> Path:
    """The test suite and the format-1 model file it loads, written into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "models.py").write_text(SUITE)
    (folder / "model.fkm").write_text("FKM1\n0.5 -1.25 2.0\n")
    return folder


class FakeRepo:
    """A git repository in a temp folder; `commit(...)` writes fakefw and commits, returning the sha."""

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.count = 0
        self.knobs: dict = {}
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        """Run git in the repository with a fixed identity and clock."""
        self.count += 1
        stamp = f"2024-01-01T00:{self.count // 60:02d}:{self.count % 60:02d}+00:00"
        env = dict(os.environ, GIT_AUTHOR_NAME="Ada Test", GIT_AUTHOR_EMAIL="ada@example.com",
                   GIT_COMMITTER_NAME="Ada Test", GIT_COMMITTER_EMAIL="ada@example.com",
                   GIT_AUTHOR_DATE=stamp, GIT_COMMITTER_DATE=stamp)
        return subprocess.run(["git", *args], cwd=self.path, env=env, check=True, capture_output=True,
                              text=True).stdout.strip()

    def commit(self, message: str, *, pyproject: str | None = None, version: str = "1.0", **knobs) -> str:
        """Write fakefw with the knobs (accumulated over commits) and commit everything."""
        self.knobs.update(knobs)
        package = self.path / "fakefw"
        package.mkdir(exist_ok=True)
        (package / "__init__.py").write_text(fakefw_source(**self.knobs))
        (self.path / "_build").mkdir(exist_ok=True)
        (self.path / "_build" / "fakebackend.py").write_text(BACKEND)
        (self.path / "pyproject.toml").write_text(pyproject if pyproject is not None else
                                                  PYPROJECT.format(version=version))
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def history(self, count: int, culprit: int | None = None, broken: tuple[int, ...] = (), **change) -> list[str]:
        """`count` commits on main: commit `culprit` applies `change`, the `broken` ones do not build.

        Returns the shas, oldest first (index 0 is the good end).
        """
        shas = []
        for k in range(count):
            knobs = dict(change) if k == culprit else {}
            pyproject = broken_pyproject() if k in broken else None
            shas.append(self.commit(f"commit {k}", pyproject=pyproject, note=f"c{k}", **knobs))
        return shas


def broken_pyproject() -> str:
    """A pyproject.toml with a syntax error: no strategy can build a commit holding it."""
    return PYPROJECT.format(version="1.0").replace('name = "fakefw"', 'name = "fakefw')


def write_project(root: Path, cache: Path, extra_toml: str = "") -> Path:
    """A modelci.toml in `root` with its own history and the given cache; returns the config file."""
    root.mkdir(parents=True, exist_ok=True)
    config = root / "modelci.toml"
    config.write_text(f'cache_dir = "{cache}"\ntimeout = 60\nrunner = "test-runner"\n' + extra_toml)
    return config


@contextmanager
def offline_environment():
    """No MODELCI_* variables from outside, and pip/uv never reach an index (the fake packages are local)."""
    with pytest.MonkeyPatch.context() as patch:
        for key in [k for k in os.environ if k.startswith("MODELCI_")]:
            patch.delenv(key)
        patch.setenv("PIP_NO_INDEX", "1")
        yield patch
