"""Fixtures of the fault-injection suite; the helpers and the workload sources are in probes.py."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from probes import Project, processes_with


@pytest.fixture(scope="session")
def probe_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("probe-cache")


@pytest.fixture
def project(tmp_path: Path, probe_cache: Path) -> Project:
    made = Project(root=tmp_path / "project", cache=probe_cache)
    made.root.mkdir()
    made.config()
    yield made
    for pid in processes_with(made.token):  # a failed probe must not leave its processes to the next
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
