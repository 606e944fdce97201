"""Consistency across runners: the same target on ci-cpu and ci-gpu over different dependency versions."""

from __future__ import annotations

import pytest
from fakefw.framework import source as fakefw_source
from fakewheels import build_fake_wheel

from modelci import config as config_module
from modelci import workflow
from modelci.envs.consistency import consistency, matches
from modelci.errors import UserError
from modelci.store import Store


def test_runners_that_drifted_apart_are_listed(fake_project, monkeypatch, tmp_path):
    # fakefw 1.0 needs helperlib; each runner's index holds another helperlib
    for runner, helper in (("ci-cpu", "1.0"), ("ci-gpu", "1.2")):
        folder = tmp_path / runner
        build_fake_wheel(folder, "fakefw", "1.0", {"fakefw/__init__.py": fakefw_source("1.0")}, requires=["helperlib"])
        build_fake_wheel(folder, "helperlib", helper)
        monkeypatch.setenv("MODELCI_FIND_LINKS", str(folder))
        cfg = config_module.load(cli={"runner": runner})
        workflow.run(cfg, "fakefw==1.0", [str(fake_project.suite)], "Stable")
    store = Store(cfg.db, cfg.artifacts)

    result = consistency(store, "fakefw==1.0")

    assert sorted(result.runners) == ["ci-cpu", "ci-gpu"]
    assert result.packages == [{"name": "helperlib", "versions": {"ci-cpu": "1.0", "ci-gpu": "1.2"}, "bump": "minor"}]
    assert not result.consistent
    cli = fake_project.cli("env", "consistency", "--target", "fakefw==1.0", "--exit-code")
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert "helperlib" in cli.stdout and "ci-gpu" in cli.stdout
    with pytest.raises(UserError, match="no complete run of target 'torch==2.13.0'.*fakefw==1.0"):
        consistency(store, "torch==2.13.0")


def test_a_target_spec_matches_its_builds():
    row = {"target_spec": "torch==2.13.0", "target_name": "torch", "target_version": "2.13.0+cpu"}
    assert matches("torch==2.13.0", row)
    assert matches("torch==2.13.0", {**row, "target_spec": "/wheels/torch-2.13.0+cpu-cp311.whl"})
    assert matches("torch==2.13.0+cpu", {**row, "target_spec": "x"})
    assert not matches("torch==2.14.0", {**row, "target_spec": "x"})
    assert not matches("numpy==2.13.0", {**row, "target_spec": "x"})


def test_a_version_written_with_trailing_zeros_is_the_same_target():
    """`numpy==2.1.3.0` and `numpy==2.1.3` are one release (PEP 440), as `compare` and the history take them;
    consistency called them two targets and left out the runner that wrote the other."""
    row = {"target_spec": "numpy==2.1.3", "target_name": "numpy", "target_version": "2.1.3"}
    assert matches("numpy==2.1.3.0", row)
    assert matches("numpy==2.1.3", {**row, "target_spec": "numpy==2.1.3.0", "target_version": "2.1.3.0"})
    assert matches("numpy==2.1.3.0", {**row, "target_version": "2.1.3+cpu"})
    assert not matches("numpy==2.1.3.1", row)

    class History:
        rows = [{**row, "run_id": 2, "runner": "ci-gpu", "status": "complete", "environment_id": "e2",
                 "target_spec": "numpy==2.1.3.0", "target_version": "2.1.3.0"},
                {**row, "run_id": 1, "runner": "ci-cpu", "status": "complete", "environment_id": "e1"}]

        def run_environments(self):
            return self.rows

        def environment(self, env_id):
            return type("Env", (), {"lock": "numpy==2.1.3\n" + ("scipy==1.14.1\n" if env_id == "e2" else "")})

    result = consistency(History(), "numpy==2.1.3")
    assert sorted(result.runners) == ["ci-cpu", "ci-gpu"]
    assert [p["name"] for p in result.packages] == ["scipy"]
