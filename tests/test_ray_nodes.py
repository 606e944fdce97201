"""Workloads whose ranks span machines, through the real `modelci run` on a real two-node Ray cluster.

The cluster's nodes stand in separate network namespaces with their own addresses (tests/netns.py): the head
here, a worker node in a namespace of its own. The history is the real PostgreSQL server the tests start. A
rendezvous at 127.0.0.1, a collective bound to the address the host name resolves to (127.0.0.1 here), or a
result that stays on the node that made it fails these tests, as it would on two machines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")
import psycopg  # noqa: E402

from netns import Link, RayNodes, processes_naming  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.torch]

FAULTY_SUITE = '''\
import os
import signal
import time

import torch
import torch.distributed as dist

import modelci


class _TwoNodes(modelci.Workload):
    framework = "torch"
    requires = ["torch"]
    nodes = 2
    steps = 3
    repeats = 1

    def setup(self, ctx):
        self.w = torch.zeros(4, requires_grad=True)

    def train_step(self, ctx, step):
        if ctx.node_rank == 1 and step == 1:
            self.fault()
        grad = torch.ones(4) * (ctx.rank + 1)
        dist.all_reduce(grad)
        return float(grad.sum())

    def infer(self, ctx):
        return {"w": self.w.detach().numpy()}


class RankCrashes(_TwoNodes):
    def fault(self):
        os.kill(os.getpid(), signal.SIGKILL)


class RankHangs(_TwoNodes):
    def fault(self):
        time.sleep(3600)


class ThreeNodes(_TwoNodes):
    nodes = 3
'''


@pytest.fixture(scope="module")
def cluster():
    """A two-node Ray cluster across two network namespaces, for this module; ended and removed after it."""
    link = Link().create()
    nodes = RayNodes(link, cpus=1)
    try:
        nodes.start()
        yield nodes
    finally:
        nodes.stop()
        link.delete()
        left = processes_naming(str(nodes.folder))
        assert not left, f"Ray processes outlived the cluster: {left}"


def project(tmp_path: Path, cluster: RayNodes, db: str, timeout: float = 600) -> tuple[Path, dict[str, str]]:
    """A project folder using the cluster and the PostgreSQL history, and the environment to run modelci in."""
    cache = Path(os.environ.get("MODELCI_TEST_CACHE", Path.home() / ".cache" / "modelci-tests"))
    (tmp_path / "modelci.toml").write_text(
        f'cache_dir = "{cache}"\nthreads = 1\ntimeout = {timeout}\nexecutor = "ray"\n'
        f'ray_address = "{cluster.address}"\ndb = "{db}"\nrunner = "ray-nodes"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELCI_")}
    env.update(cluster.environ())
    return tmp_path, env


def modelci(root: Path, env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "modelci.cli", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=timeout)


def stored(db: str, workload: str) -> list[dict]:
    """Every stored result of `workload`, read back from PostgreSQL directly: status, reason, info, loss curve."""
    url = db.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT r.status, r.reason, r.info, m.values FROM results r LEFT JOIN metrics m "
            "ON m.result_id = r.id AND m.name = 'loss' WHERE r.workload = %s ORDER BY r.id", (workload,)).fetchall()
    return [{"status": s, "reason": reason, "info": info if isinstance(info, dict) else json.loads(info),
             "loss": values if values is None or isinstance(values, list) else json.loads(values)}
            for s, reason, info, values in rows]


def wait_gone(text: str, seconds: float = 30) -> list[str]:
    """The processes naming `text` once none are left, or after `seconds` (what outlived the run)."""
    deadline = time.monotonic() + seconds
    while True:
        left = processes_naming(text)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def test_a_two_node_ddp_model_learns_what_two_ranks_on_one_node_learn(cluster, postgres_server, tmp_path):
    db = postgres_server.database()
    root, env = project(tmp_path, cluster, db)
    report = root / "report.json"
    done = modelci(root, env, "run", "--target", "torch==2.13.0", "--suite", "zoo:torch", "-k", "DataParallelMLP",
                   "--json", str(report), "--no-alarms")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    results = {r["workload"]: r for r in json.loads(report.read_text())["results"]}
    two_nodes, one_node = results["torch/DataParallelMLPTwoNodes"], results["torch/DataParallelMLP"]
    assert two_nodes["status"] == one_node["status"] == "ok", (two_nodes, one_node)
    # the history holds both, and the loss curve the ranks learned across the two namespaces is the one 2 ranks
    # learn on one node
    [spread] = stored(db, "torch/DataParallelMLPTwoNodes")
    [single] = stored(db, "torch/DataParallelMLP")
    assert spread["status"] == "ok" and len(spread["loss"]) >= 10
    assert spread["loss"] == pytest.approx(single["loss"], rel=1e-6)
    nodes = spread["info"]["nodes"]
    assert [n["node_rank"] for n in nodes] == [0, 1] and all(n["status"] == "ok" for n in nodes)
    assert sorted(n["address"] for n in nodes) == sorted([cluster.link.here, cluster.link.there])
    assert spread["info"]["master_addr"] == nodes[0]["address"] != "127.0.0.1"


@pytest.mark.parametrize("workload, status, timeout", [("RankCrashes", "crashed", 600), ("RankHangs", "timeout", 60)])
def test_a_rank_that_crashes_or_hangs_ends_every_rank_and_names_its_node(cluster, postgres_server, tmp_path,
                                                                        workload, status, timeout):
    db = postgres_server.database()
    root, env = project(tmp_path, cluster, db, timeout=timeout)
    suite = root / "faulty"
    suite.mkdir()
    (suite / "faulty.py").write_text(FAULTY_SUITE)
    report = root / "report.json"
    done = modelci(root, env, "run", "--target", "torch==2.13.0", "--suite", str(suite), "-k", workload,
                   "--json", str(report), "--no-alarms")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    [result] = json.loads(report.read_text())["results"]
    assert result["status"] == status, result
    [row] = stored(db, f"faulty/{workload}")
    assert row["status"] == status
    # the reason names the node whose rank crashed or hung, by its address (either namespace may hold node 1)
    nodes = {n["node_rank"]: n for n in row["info"]["nodes"]}
    assert {nodes[0]["address"], nodes[1]["address"]} == {cluster.link.here, cluster.link.there}
    assert f"node 1 ({nodes[1]['address']})" in row["reason"], row["reason"]
    assert nodes[1]["status"] == status
    if status == "crashed":
        assert "SIGKILL" in row["reason"] and "node 0" not in row["reason"], row["reason"]
    # every rank of both nodes ended with the run: no workload process names the suite any more
    assert wait_gone(str(suite)) == []


def test_a_workload_spanning_more_nodes_than_the_cluster_has_is_skipped_with_the_reason(cluster, postgres_server,
                                                                                        tmp_path):
    db = postgres_server.database()
    root, env = project(tmp_path, cluster, db)
    suite = root / "faulty"
    suite.mkdir()
    (suite / "faulty.py").write_text(FAULTY_SUITE)
    report = root / "report.json"
    done = modelci(root, env, "run", "--target", "torch==2.13.0", "--suite", str(suite), "-k", "ThreeNodes",
                   "--json", str(report), "--no-alarms")
    assert done.returncode == 0, done.stdout + done.stderr
    [result] = json.loads(report.read_text())["results"]
    assert result["status"] == "skipped", result
    assert "span 3 nodes" in result["reason"] and "2 nodes of the Ray cluster" in result["reason"], result["reason"]
    assert [row["status"] for row in stored(db, "faulty/ThreeNodes")] == ["skipped"]
