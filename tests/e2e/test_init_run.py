"""`modelci init` then `modelci run`, through the real command in a real environment: the starter passes.

The run writes the same report files the pipelines in examples/ci hand to their CI system (JSON, JUnit,
Markdown), so this also shows those files come out of a starter project as they are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy
import pytest

pytestmark = pytest.mark.slow

CACHE = Path(os.environ.get("MODELCI_TEST_CACHE", Path.home() / ".cache" / "modelci-tests"))


def modelci(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELCI_")}
    env.update(MODELCI_CACHE_DIR=str(CACHE), MODELCI_RUNNER="e2e-init")
    return subprocess.run([sys.executable, "-m", "modelci.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.mark.parametrize("framework, target, workload", [
    ("numpy", f"numpy=={numpy.__version__}", "models/SoftmaxClassifier"),
    # torch 2.13.0 from the find-links of the user's pip configuration; the environment is the one the zoo:torch
    # end-to-end test builds (torch and numpy), so this costs the run alone
    pytest.param("torch", "torch==2.13.0", "models/MLPClassifier", marks=pytest.mark.torch),
])
def test_starter_passes_its_first_run(tmp_path, framework, target, workload):
    init = modelci(tmp_path, "init", "--framework", framework, "--dir", "team")
    assert init.returncode == 0, init.stdout + init.stderr
    project = tmp_path / "team"
    # the suite comes from the written modelci.toml: no --suite
    proc = modelci(project, "run", "--target", target, "--json", "report.json",
                   "--junit", "junit.xml", "--markdown", "summary.md")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((project / "report.json").read_text())
    assert [(r["workload"], r["status"]) for r in report["results"]] == [(workload, "ok")]
    assert report["run"]["target"]["version"].startswith(target.split("==")[1])
    assert report["results"][0]["metrics"]["loss"]["n"] == 20
    junit = ET.parse(project / "junit.xml").getroot()
    assert (junit.get("tests"), junit.get("failures"), junit.get("errors")) == ("1", "0", "0")
    assert [c.get("classname") for c in junit.iter("testcase")] == [workload.replace("/", ".")]
    assert workload in (project / "summary.md").read_text()
    assert (project / ".modelci" / "history.db").is_file()
