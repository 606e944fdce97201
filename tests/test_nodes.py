"""Workloads whose ranks span machines (`nodes = N`), on the workload side: each node's first rank is started on
its own with its node rank and the rendezvous address of rank 0's node, and starts that node's other ranks.

The torch tests run real node processes of zoo:torch's 2-node DDP workload: on loopback, and across two network
namespaces (tests/netns.py), where a rendezvous or a collective that assumed one host would never meet its peer.
Without a cluster executor such a workload is `skipped`, saying what it needs.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import modelci
from modelci import config as config_module
from modelci import steps, targets
from modelci.errors import UserError
from modelci.execute import forked, local
from modelci.execute.local import NodeRole, WorkloadInfo
from modelci.workload.frameworks import interface_of

from netns import Link, free_port

ZOO_TORCH = Path(modelci.__file__).resolve().parent / "zoo" / "torch"

TWO_NODE_SUITE = '''\
import modelci


class Spread(modelci.Workload):
    framework = "python"
    nodes = 2
    steps = 1

    def train_step(self, ctx, step):
        return 1.0

    def infer(self, ctx):
        return {"y": [float(ctx.rank)]}
'''


def discovered(python: Path, suites: dict[str, Path], scratch: Path) -> dict[str, WorkloadInfo]:
    found = local.discover(python, suites, scratch)
    return {w["id"]: WorkloadInfo.from_json(w) for w in found["workloads"]}


def test_a_multi_node_workload_is_skipped_without_a_cluster_executor_saying_what_it_needs(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "spread.py").write_text(TWO_NODE_SUITE)
    suites = {"multi": suite}
    workload = discovered(Path(sys.executable), suites, tmp_path)["multi/Spread"]
    assert workload.nodes == 2
    spawned = local.run_workload(Path(sys.executable), suites, workload, tmp_path)
    with forked.Executor(Path(sys.executable), tmp_path) as executor:
        executor.discover(suites)
        fork = executor.run_workload(suites, workload, timeout=60)
    for result in (spawned, fork):
        assert result.status == "skipped", result.reason
        assert "2 nodes" in result.reason and 'executor = "ray"' in result.reason


def test_a_node_without_the_rendezvous_address_fails_saying_so(tmp_path):
    """A child told it is one of 2 nodes but not where rank 0 is fails with the reason, never waiting on 127.0.0.1."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "spread.py").write_text(TWO_NODE_SUITE)
    suites = {"multi": suite}
    workload = discovered(Path(sys.executable), suites, tmp_path)["multi/Spread"]
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "modelci.workload.child", *local.run_args(suites, workload, out),
           "--nodes", "2", "--node-rank", "1"]
    code, seconds = local.spawn(cmd, local.child_env(local.shim_dir(tmp_path), 0), out, 120)
    result = local.child_outcome(workload, out, code, seconds, 120)
    assert result.status == "failed"
    assert "rendezvous address of rank 0's node" in result.reason and "--master-addr" in result.reason


def test_a_node_count_that_is_not_a_whole_number_from_1_is_an_error_naming_the_class(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "spread.py").write_text(TWO_NODE_SUITE + "\n\nclass Nowhere(Spread):\n    nodes = 0\n"
                                     "\n\nclass Half(Spread):\n    devices = 1.5\n")
    found = local.discover(Path(sys.executable), {"multi": suite}, tmp_path)
    assert [w["id"] for w in found["workloads"]] == ["multi/Spread"]
    messages = sorted(e["message"] for e in found["errors"])
    assert messages == ["class Half: `devices` must be a whole number, 1 or more, not 1.5",
                        "class Nowhere: `nodes` must be a whole number, 1 or more, not 0"]


def test_the_interface_holding_an_address_is_found_by_the_address():
    assert interface_of("127.0.0.1") == "lo"
    assert interface_of("192.0.2.254") is None  # TEST-NET-1: no interface here holds it
    assert interface_of("not an address") is None


# -- the network-namespace fixture itself: the two sides reach each other only by their own addresses --------


def _serve_once(address: str) -> tuple[socket.socket, threading.Thread]:
    server = socket.socket()
    server.bind((address, 0))
    server.listen()

    def answer() -> None:
        try:
            conn, _ = server.accept()
            conn.sendall(b"hello")
            conn.close()
        except OSError:
            pass

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return server, thread


CONNECT = ("import socket, sys; s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5); "
           "print(s.recv(5).decode())")


def test_the_namespace_reaches_this_side_by_its_address_and_never_by_loopback():
    with Link() as link:
        assert interface_of(link.here) == link.devices[0]
        for address, reachable in ((link.here, True), ("127.0.0.1", False)):
            server, thread = _serve_once(address)
            try:
                port = server.getsockname()[1]
                done = subprocess.run(link.inside([sys.executable, "-c", CONNECT, address, str(port)]),
                                      capture_output=True, text=True, timeout=60)
                assert (done.returncode == 0 and done.stdout.strip() == "hello") == reachable, (address, done.stderr)
            finally:
                server.close()
                thread.join(5)
        namespace = link.namespace
    assert namespace not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert interface_of(link.here) is None  # the veth pair went with it


# -- zoo:torch's 2-node DDP workload, node by node ------------------------------------------------------------


def torch_env(tmp_path: Path, monkeypatch):
    """The torch 2.13.0 environment, from the persistent cache of the framework tests (built once per machine)."""
    for key in [k for k in os.environ if k.startswith("MODELCI_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    cache = Path(os.environ.get("MODELCI_TEST_CACHE", Path.home() / ".cache" / "modelci-tests"))
    (tmp_path / "modelci.toml").write_text(f'cache_dir = "{cache}"\nthreads = 1\n')
    try:
        return steps.environment_for(config_module.load(), targets.resolve("torch==2.13.0"), log=lambda _: None)
    except UserError as exc:
        if os.environ.get("CI"):  # CI installs what the tests need: a skip there would hide a broken install
            raise
        pytest.skip(f"torch==2.13.0 cannot be installed here: {exc}")


def run_nodes(python: Path, workload: WorkloadInfo, scratch: Path, roles: list[NodeRole],
              wrap: dict[int, list[str]] | None = None, timeout: float = 300) -> list:
    """Start one child per node at once (node K's command wrapped by `wrap[K]`, e.g. `ip netns exec`), wait for
    all, and return each node's Result."""
    suites = {"torch": ZOO_TORCH}
    env = local.child_env(local.shim_dir(scratch), 0, threads=1)
    procs, outs = [], []
    for role in roles:
        out = scratch / f"node-{role.node_rank}"
        out.mkdir(parents=True)
        cmd = [str(python), "-m", "modelci.workload.child", *local.run_args(suites, workload, out, node=role)]
        cmd = (wrap or {}).get(role.node_rank, []) + cmd
        with open(out / "stdout.txt", "wb") as log, open(out / "stderr.txt", "wb") as err:
            procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=err, start_new_session=True))
        outs.append(out)
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            for other in procs:
                os.killpg(other.pid, 9)
            raise
    return [local.child_outcome(workload, out, code, 0.0, timeout) for out, code in zip(outs, codes)]


@pytest.fixture
def zoo_torch(tmp_path, monkeypatch):
    env = torch_env(tmp_path, monkeypatch)
    return env.python, discovered(env.python, {"torch": ZOO_TORCH}, tmp_path)


def single_node_losses(python: Path, workloads: dict[str, WorkloadInfo], scratch: Path) -> dict[str, list[float]]:
    """The loss curves of DataParallelMLP (2 ranks on this node) and its one-process reference."""
    losses = {}
    scratch.mkdir(parents=True, exist_ok=True)
    for name in ("DataParallelMLP", "DataParallelMLPReference"):
        result = local.run_workload(python, {"torch": ZOO_TORCH}, workloads[f"torch/{name}"], scratch, threads=1,
                                    timeout=300)
        assert result.status == "ok", (name, result.reason, result.stderr_tail)
        losses[name] = result.metrics["loss"].values
    return losses


@pytest.mark.torch
@pytest.mark.slow
def test_two_nodes_on_loopback_learn_what_two_ranks_on_one_node_learn(zoo_torch, tmp_path):
    python, workloads = zoo_torch
    workload = workloads["torch/DataParallelMLPTwoNodes"]
    assert (workload.nodes, workload.devices) == (2, 1)
    port = free_port("127.0.0.1")
    roles = [NodeRole(2, k, "127.0.0.1", port, "127.0.0.1") for k in range(2)]
    first, second = run_nodes(python, workload, tmp_path / "nodes", roles)
    assert first.status == second.status == "ok", (first.reason, first.stderr_tail, second.reason, second.stderr_tail)
    assert (first.info["world_size"], first.info["node_rank"], second.info["node_rank"]) == (2, 0, 1)
    assert [s["format"] for s in first.info["saved"]] and not second.info["saved"]  # rank 0 saves for the group
    losses = single_node_losses(python, workloads, tmp_path / "single")
    assert len(first.metrics["loss"].values) >= 10
    assert first.metrics["loss"].values == pytest.approx(losses["DataParallelMLP"], rel=1e-6)
    assert first.metrics["loss"].values == pytest.approx(losses["DataParallelMLPReference"], rel=1e-5)


@pytest.mark.torch
@pytest.mark.slow
def test_two_nodes_in_separate_network_namespaces_meet_at_rank_0s_node_address(zoo_torch, tmp_path):
    """Node 0 here, node 1 in its own network namespace: 127.0.0.1 of one is not the other's, and this host's
    name resolves to 127.0.0.1, so the ranks meet only if the rendezvous uses rank 0's node address and gloo
    binds each node's own address."""
    python, workloads = zoo_torch
    workload = workloads["torch/DataParallelMLPTwoNodes"]
    with Link() as link:
        port = free_port(link.here)
        roles = [NodeRole(2, 0, link.here, port, link.here), NodeRole(2, 1, link.here, port, link.there)]
        first, second = run_nodes(python, workload, tmp_path / "nodes", roles, wrap={1: link.inside([])})
    assert first.status == second.status == "ok", (first.reason, first.stderr_tail, second.reason, second.stderr_tail)
    assert (first.info["master_addr"], second.info["node_address"]) == (link.here, link.there)
    losses = single_node_losses(python, workloads, tmp_path / "single")
    assert first.metrics["loss"].values == pytest.approx(losses["DataParallelMLP"], rel=1e-6)
    assert json.loads((tmp_path / "nodes" / "node-1" / "result.json").read_text())["status"] == "ok"


# -- rank 0 joining its node's other ranks: how a rank that failed or died is named -------------------------------


def test_a_rank_that_reported_ok_and_then_died_fails_the_workload_saying_both(tmp_path):
    """A rank whose result says ok but whose process ended by a signal is no finished rank: the workload fails, and
    the reason says the rank got as far as its report (a teardown crash) and how it ended; a rank that failed
    gives its own reason."""
    from modelci.workload.child import Recorder, join_ranks

    for rank, status, reason in ((1, "ok", ""), (2, "failed", "ValueError: bad batch (in train)")):
        folder = tmp_path / f"rank-{rank}"
        folder.mkdir()
        rank_rec = Recorder(folder, "multi/Spread")
        rank_rec.data.update(status=status, reason=reason)
        rank_rec.write()
        (tmp_path / f"rank-{rank}.log").write_text(f"rank {rank} log\n")
    aborts = [sys.executable, "-c", "import os; os.abort()"]
    for failing, expected in ((1, "rank 1: reported ok, then was killed by SIGABRT"),
                              (2, "rank 2: ValueError: bad batch (in train)")):
        rec = Recorder(tmp_path, "multi/Spread")
        procs = [subprocess.Popen(aborts if failing == 1 else [sys.executable, "-c", "pass"])]
        join_ranks(procs, tmp_path, rec, first=failing)
        assert (rec.data["status"], rec.data["reason"]) == ("failed", expected)
        assert f"rank {failing} log" in rec.data["traceback"]
    rec = Recorder(tmp_path, "multi/Spread")  # the ok rank, exiting 0: nothing to say
    join_ranks([subprocess.Popen([sys.executable, "-c", "pass"])], tmp_path, rec, first=1)
    assert (rec.data["status"], rec.data["reason"]) == ("ok", "")
