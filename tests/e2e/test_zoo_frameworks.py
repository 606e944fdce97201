"""The torch, paddle and jax zoos end to end through the real `modelci` command, in real environments.

These build environments holding torch 2.13.0 (from the find-links of the user's pip configuration),
paddlepaddle 3.0.0 and jax 0.10.2 (from the index), so they use a persistent cache like a user's machine: the first run
on a fresh machine downloads the frameworks once, later runs reuse the environments.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

CACHE = Path(os.environ.get("MODELCI_TEST_CACHE", Path.home() / ".cache" / "modelci-tests"))


def modelci(tmp_path: Path, *args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELCI_")}
    env.update(MODELCI_CACHE_DIR=str(CACHE), MODELCI_RUNNER="e2e")
    return subprocess.run([sys.executable, "-m", "modelci.cli", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_torch_two_process_workload_matches_one_process_and_saves_every_format(tmp_path):
    report = tmp_path / "torch.json"
    proc = modelci(tmp_path, "run", "--target", "torch==2.13.0", "--suite", "zoo:torch", "-k", "DataParallel*",
                   "--json", str(report))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert data["run"]["target"]["version"].startswith("2.13.0")
    statuses = {r["workload"]: r["status"] for r in data["results"]}
    # the 2-node variant needs a cluster; the local executor skips it and says how to run it
    assert statuses == {"torch/DataParallelMLP": "ok", "torch/DataParallelMLPReference": "ok",
                        "torch/DataParallelMLPTwoNodes": "skipped"}
    reasons = {r["workload"]: r["reason"] for r in data["results"]}
    assert 'executor = "ray"' in reasons["torch/DataParallelMLPTwoNodes"], reasons

    from modelci.store import Store

    store = Store(str(tmp_path / ".modelci" / "history.db"), str(tmp_path / ".modelci" / "artifacts"))
    results = {r.workload: r for r in store.run(data["run"]["id"]).results}
    two, one = results["torch/DataParallelMLP"], results["torch/DataParallelMLPReference"]
    assert two.info["world_size"] == 2
    np.testing.assert_allclose(two.metrics["loss"].values, one.metrics["loss"].values, rtol=1e-5)
    assert len(two.metrics["loss"].values) >= 10
    saved = {entry["format"]: entry["status"] for entry in two.info["saved"]}
    assert saved == {"state_dict": "ok", "torchscript": "ok", "torch_export": "ok"}
    assert "torch" in two.info["modules"] and str(CACHE) in two.info["modules"]["torch"]["file"]


def test_paddle_workload_runs_end_to_end(tmp_path):
    report = tmp_path / "paddle.json"
    proc = modelci(tmp_path, "run", "--target", "paddlepaddle==3.0.0", "--suite", "zoo:paddle", "-k", "LeNet",
                   "--json", str(report))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert [(r["workload"], r["status"]) for r in data["results"]] == [("paddle/LeNet", "ok")]
    metrics = data["results"][0]["metrics"]
    assert metrics["loss"]["n"] >= 10 and metrics["time.infer"]["n"] >= 5


@pytest.mark.timeout(1500)  # the first run downloads jax and jaxlib; every child imports jax and compiles
def test_jax_zoo_runs_end_to_end_in_spawned_children(tmp_path):
    """jax 0.10.2 (and jaxlib, from the index) in a uv environment: every zoo:jax model trains, infers and saves
    both formats; XLA's thread pools make the fork worker spawn each child, and the result says why."""
    report = tmp_path / "jax.json"
    proc = modelci(tmp_path, "run", "--target", "jax==0.10.2", "--suite", "zoo:jax", "--json", str(report))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert data["run"]["target"]["version"] == "0.10.2"
    statuses = {r["workload"]: r["status"] for r in data["results"]}
    assert statuses == {f"jax/{name}": "ok" for name in ("MLPClassifier", "SmallCNN", "TransformerBlock",
                                                         "GRUForecaster")}
    assert {r["isolation"] for r in data["results"]} == {"spawn"}

    from modelci.store import Store

    store = Store(str(tmp_path / ".modelci" / "history.db"), str(tmp_path / ".modelci" / "artifacts"))
    for result in store.run(data["run"]["id"]).results:
        assert "thread" in result.info["isolation_reason"], result.info.get("isolation_reason")
        assert {(e["format"], e["status"], e["unsafe"]) for e in result.info["saved"]} == {
            ("jax_params", "ok", False), ("jax_export", "ok", False)}
        assert result.info["versions"]["jax"] == "0.10.2" and result.info["versions"]["jax.backend"] == "cpu"
        assert str(CACHE) in result.info["modules"]["jax"]["file"]
        assert len(result.metrics["loss"].values) >= 10
