"""A real git repository of `tinynet`, a small numpy-based package, for the compat tests across commits.

tinynet keeps a dense layer whose state is a dict of arrays. A commit may rename the key its loader expects
(`weight` -> `kernel`), which is what breaks models saved by the commits before it. Its metadata is in
`setup.cfg` (the pyproject.toml holds only [build-system]), so the package name must come from there, never from
the commit. An in-tree PEP 517 backend builds the wheel offline from setup.cfg.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from fakewheels import BACKEND_WHEEL_WRITER

TINYNET = '''\
"""tinynet at one commit: a dense layer saved as a dict of arrays."""
import numpy as np

#: the key the layer's weights are saved and loaded under
KEY = {key!r}
NOTE = {note!r}


class Dense:
    def __init__(self, n_in, n_out, seed=0):
        rng = np.random.default_rng(seed)
        self.w = rng.standard_normal((n_in, n_out)).astype(np.float32)
        self.b = np.zeros(n_out, dtype=np.float32)

    def __call__(self, x):
        return x @ self.w + self.b

    def state_dict(self):
        return {{KEY: self.w, "bias": self.b}}

    def load_state_dict(self, state):
        self.w = np.asarray(state[KEY], dtype=np.float32)
        self.b = np.asarray(state["bias"], dtype=np.float32)
        return self


def save(model, path):
    """Write the layer to `path` (an .npz; no pickles)."""
    with open(path, "wb") as handle:
        np.savez(handle, **model.state_dict())


def load(model, path):
    """Read a layer written by `save` into `model`."""
    with np.load(path, allow_pickle=False) as data:
        return model.load_state_dict({{k: data[k] for k in data.files}})
'''

BACKEND = '''\
"""An in-tree PEP 517 backend: a pure-Python wheel from setup.cfg, standard library only, offline."""
import configparser


def _meta():
    parser = configparser.ConfigParser()
    parser.read("setup.cfg")
    deps = [d.strip() for d in parser.get("options", "install_requires", fallback="").splitlines() if d.strip()]
    return parser.get("metadata", "name"), parser.get("metadata", "version"), deps


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, *_meta())
''' + BACKEND_WHEEL_WRITER

PYPROJECT = '''\
[build-system]
requires = []
build-backend = "tinybackend"
backend-path = ["_build"]
'''

SETUP_CFG = '''\
[metadata]
name = tinynet
version = {version}

[options]
install_requires =
    numpy
'''

#: the suite: `Dense` saves through the numpy helper's `npz`; `OwnFormat` saves and loads itself in a format the
#: helper has never heard of, declared safe (an .npz read without pickles)
SUITE = '''\
import numpy as np
import modelci
import tinynet


class _Layer(modelci.Workload):
    framework = "numpy"
    steps = 1
    repeats = 1
    warmup = 0

    def setup(self, ctx):
        rng = np.random.default_rng(ctx.seed)
        self.x = rng.standard_normal((4, 3)).astype(np.float32)
        self.model = tinynet.Dense(3, 2, seed=ctx.seed)

    def train_step(self, ctx, step):
        self.model.w = self.model.w * np.float32(0.5)
        return float(np.abs(self.model.w).sum())

    def infer(self, ctx):
        return {"y": self.model(self.x)}


class Dense(_Layer):
    formats = ("npz",)

    def state_dict(self):
        return self.model.state_dict()

    def load_state_dict(self, state):
        return self.model.load_state_dict(state)


class OwnFormat(_Layer):
    formats = (modelci.Format("tinynet", unsafe=False),)

    def save(self, ctx, fmt, path):
        tinynet.save(self.model, path)

    def load(self, ctx, fmt, path):
        self.model = tinynet.load(tinynet.Dense(3, 2), path)
'''


class TinyRepo:
    """The repository in a temp folder; `commit(...)` writes tinynet with the knobs and commits, returning the sha."""

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.count = 0
        self.knobs = {"key": "weight", "note": "", "version": "0.1.0"}
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        """Run git in the repository with a fixed identity and clock."""
        self.count += 1
        stamp = f"2024-02-01T00:{self.count // 60:02d}:{self.count % 60:02d}+00:00"
        env = dict(os.environ, GIT_AUTHOR_NAME="Ada Test", GIT_AUTHOR_EMAIL="ada@example.com",
                   GIT_COMMITTER_NAME="Ada Test", GIT_COMMITTER_EMAIL="ada@example.com",
                   GIT_AUTHOR_DATE=stamp, GIT_COMMITTER_DATE=stamp)
        return subprocess.run(["git", *args], cwd=self.path, env=env, check=True, capture_output=True,
                              text=True).stdout.strip()

    def commit(self, message: str, **knobs: str) -> str:
        """Write tinynet with the knobs (kept over commits: key, note, version) and commit everything."""
        self.knobs.update(knobs)
        package = self.path / "tinynet"
        package.mkdir(exist_ok=True)
        (package / "__init__.py").write_text(TINYNET.format(key=self.knobs["key"], note=self.knobs["note"]))
        (self.path / "_build").mkdir(exist_ok=True)
        (self.path / "_build" / "tinybackend.py").write_text(BACKEND)
        (self.path / "pyproject.toml").write_text(PYPROJECT)
        (self.path / "setup.cfg").write_text(SETUP_CFG.format(version=self.knobs["version"]))
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")


def write_suite(folder: Path) -> Path:
    """The tinynet suite in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "layers.py").write_text(SUITE)
    return folder
