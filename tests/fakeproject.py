"""A fakefw project for end-to-end tests: fakefw 1.0/1.1 wheels, a suite using them and a modelci.toml.

A module of its own rather than part of conftest.py: test files import it by name, and `conftest` is not a name
they can import (pytest loads every folder's conftest.py under that one name; tests/faults has its own).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from fakefw.framework import source as fakefw_source
from fakefw.suite import SUITE as FAKEFW_SUITE
from fakewheels import build_fake_wheel


@dataclass
class FakeProject:
    """A project folder with fakefw 1.0/1.1 wheels, a suite using them, and a modelci.toml."""

    root: Path
    wheels: Path
    suite: Path
    v10: Path
    v11: Path
    env: dict

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """Run the real `modelci` command in the project folder."""
        return subprocess.run([sys.executable, "-m", "modelci.cli", *args], cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=timeout)


def make_fake_project(root: Path, cache: Path, timeout: float = 8.0, extra_toml: str = "") -> FakeProject:
    """Write the wheels, the suite and the config of a fakefw project under `root`."""
    wheels = root / "wheels"
    v10 = build_fake_wheel(wheels, "fakefw", "1.0", {"fakefw/__init__.py": fakefw_source("1.0")})
    v11 = build_fake_wheel(wheels, "fakefw", "1.1", {"fakefw/__init__.py": fakefw_source("1.1")})
    suite = root / "fakesuite"
    suite.mkdir(parents=True)
    (suite / "models.py").write_text(FAKEFW_SUITE)
    (root / "modelci.toml").write_text(
        f'cache_dir = "{cache}"\ntimeout = {timeout}\nrunner = "test-runner"\n'
        '[checks]\n# the slowed function is 2x; a wide factor keeps a shared machine\'s noise out\n'
        'timing_factor = 1.5\n' + extra_toml
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELCI_")}
    env.update(MODELCI_FIND_LINKS=str(wheels), PIP_NO_INDEX="1")
    return FakeProject(root=root, wheels=wheels, suite=suite, v10=v10, v11=v11, env=env)
