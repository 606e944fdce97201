"""The Ray executor against a real Ray cluster: a head and worker nodes started on this machine by
`ray.cluster_utils.Cluster`, each worker node with a custom resource of its own so that placement can be seen.

The `modelci` command runs as a user runs it (`executor = "ray"`, `ray_address` the head's address), against a real
PostgreSQL server; the tests read what it stored. `.ci/run` installs `modelci[ray]` and runs these in a step of
their own (`pytest -m ray`); without Ray they are skipped here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from fakeproject import make_fake_project  # noqa: E402
from pgserver import free_port  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from modelci.store import Store, compat_schema  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

#: the most a test waits for something the cluster does (a node to start a workload, a process to end)
PATIENCE_S = 180


def suite_text(marks: Path) -> str:
    """A small suite: a workload for each worker node, one anywhere, one that no node can place, and two that
    write their process ids to `marks` and then wait (for the fault tests)."""
    return f'''\
import json
import os
import time
from pathlib import Path

import modelci

MARKS = Path({str(marks)!r})


class Anywhere(modelci.Workload):
    framework = "python"
    steps = 3
    repeats = 2
    formats = (modelci.Format("weights_json", unsafe=False),)

    def setup(self, ctx):
        self.w = [ctx.rng().random() for _ in range(4)]

    def train_step(self, ctx, step):
        self.w = [x * 0.5 for x in self.w]
        return sum(self.w)

    def infer(self, ctx):
        return {{"w": self.w}}

    def save(self, ctx, fmt, path):
        path.write_text(json.dumps(self.w))

    def load(self, ctx, fmt, path):
        self.w = json.loads(path.read_text())
        return self.w


class OnA(Anywhere):
    resources = {{"node_a": 1}}


class OnB(Anywhere):
    resources = {{"node_b": 1}}


class NeedsGpu(Anywhere):
    resources = {{"gpu": 1}}


class _Waits(Anywhere):
    """Writes its process, its worker and the worker's parent (the node's agent), then waits."""

    def setup(self, ctx):
        super().setup(ctx)
        worker = os.getppid()
        with open(f"/proc/{{worker}}/stat") as stat:
            agent = int(stat.read().rpartition(")")[2].split()[1])
        MARKS.mkdir(parents=True, exist_ok=True)
        (MARKS / (type(self).__name__ + ".json")).write_text(json.dumps([os.getpid(), worker, agent]))
        time.sleep(600)


class Doomed(_Waits):
    resources = {{"node_c": 1}}


class Sleeper(_Waits):
    resources = {{"node_a": 1}}


class Spare(_Waits):
    """Waits on its first attempt only: run again (ray_retries), it finishes."""

    resources = {{"spare": 1}}

    def setup(self, ctx):
        if (MARKS / "Spare.json").exists():
            Anywhere.setup(self, ctx)
        else:
            super().setup(ctx)
'''


def node_args(**more):
    """A node's arguments: small, on free ports, no dashboard (the machine is shared)."""
    return {"num_cpus": 1, "object_store_memory": 80 * 2**20, "dashboard_agent_listen_port": free_port(),
            "min_worker_port": 0, "max_worker_port": 0, **more}


@pytest.fixture(scope="module")
def cluster():
    """A head (that runs no workload: no CPU) and two worker nodes, `node_a` and `node_b`."""
    saved = os.environ.get("RAY_memory_monitor_refresh_ms")
    os.environ["RAY_memory_monitor_refresh_ms"] = "0"  # on a shared machine Ray would kill workers others crowd
    cluster = Cluster(initialize_head=True, connect=False,
                      head_node_args=node_args(gcs_server_port=free_port(), include_dashboard=False, num_cpus=0))
    try:
        nodes = {"a": cluster.add_node(**node_args(resources={"node_a": 1})),
                 "b": cluster.add_node(**node_args(resources={"node_b": 1}))}
        cluster.wait_for_nodes()
        yield cluster, {name: node.node_id for name, node in nodes.items()}
    finally:
        cluster.shutdown()
        if saved is None:
            os.environ.pop("RAY_memory_monitor_refresh_ms", None)
        else:
            os.environ["RAY_memory_monitor_refresh_ms"] = saved


@pytest.fixture(scope="module")
def project(cluster, postgres_server, tmp_path_factory, env_cache):
    root = tmp_path_factory.mktemp("ray")
    fake = make_fake_project(root / "project", env_cache, timeout=300)
    suite = fake.root / "raysuite"
    suite.mkdir()
    (suite / "models.py").write_text(suite_text(root / "marks"))
    db = postgres_server.database()
    fake.env.update(MODELCI_EXECUTOR="ray", MODELCI_RAY_ADDRESS=cluster[0].address, MODELCI_DB=db)
    return fake, suite, root / "marks", db


def stored(fake, db: str, report: Path) -> dict:
    """The stored results of the run a --json report names, by workload."""
    run_id = json.loads(report.read_text())["run"]["id"]
    store = Store(db, str(fake.root / ".modelci" / "artifacts"))
    return {r.workload: r for r in store.run(run_id).results}


def wait_for(path: Path, proc: subprocess.Popen) -> list[int]:
    deadline = time.monotonic() + PATIENCE_S
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the run ended ({proc.returncode}) before {path.name} started:\n{out}\n{err}")
        assert time.monotonic() < deadline, f"{path.name} did not start within {PATIENCE_S} s"
        time.sleep(0.2)
    time.sleep(0.2)  # written in one call; read it whole
    return json.loads(path.read_text())


def gone(pids: list[int]) -> list[int]:
    """Of `pids`, those still running after up to PATIENCE_S seconds (zombies count as ended)."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        alive = []
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
            except OSError:
                continue
            if state != "Z":
                alive.append(pid)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.5)


def test_a_suite_runs_on_the_nodes_that_can_place_each_workload_and_is_stored_with_its_node(project, cluster):
    fake, suite, _, db = project
    report = fake.root / "placed.json"
    done = fake.cli("run", "--target", str(fake.v10), "--suite", str(suite), "-k", "raysuite/[AON]*",
                    "--json", str(report), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    results = stored(fake, db, report)
    assert {w: r.status for w, r in results.items()} == {
        "raysuite/Anywhere": "ok", "raysuite/OnA": "ok", "raysuite/OnB": "ok", "raysuite/NeedsGpu": "skipped"}
    ids = cluster[1]
    assert results["raysuite/OnA"].info["node"]["id"] == ids["a"]
    assert results["raysuite/OnB"].info["node"]["id"] == ids["b"]
    assert results["raysuite/Anywhere"].info["node"]["id"] in (ids["a"], ids["b"])
    # measured on the node: the loss curve and timings came back, outputs verified from the artifact store
    ona = results["raysuite/OnA"]
    assert len(ona.metrics["loss"].values) == 3 and len(ona.metrics["time.infer"].values) == 2
    assert list(ona.outputs["w"].shape) == [4]
    skipped = results["raysuite/NeedsGpu"].reason
    assert "no node of the Ray cluster can place it" in skipped and "GPU 1" in skipped and "node_a 1" in skipped
    # the saved models came back from the nodes and were recorded for compat
    store = Store(db, str(fake.root / ".modelci" / "artifacts"))
    with store.read() as session:
        saved = sorted(row.workload for row in compat_schema.saved_models(session))
    assert saved == ["raysuite/Anywhere", "raysuite/OnA", "raysuite/OnB"]


def test_a_node_that_dies_mid_run_gives_error_results_and_the_run_ends(project, cluster):
    fake, suite, marks, db = project
    doomed = cluster[0].add_node(**node_args(resources={"node_c": 1}))
    cluster[0].wait_for_nodes()
    report = fake.root / "died.json"
    proc = subprocess.Popen([sys.executable, "-m", "modelci.cli", "run", "--target", str(fake.v10), "--suite",
                             str(suite), "-k", "raysuite/[OD]*", "--json", str(report)],
                            cwd=fake.root, env=fake.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = wait_for(marks / "Doomed.json", proc)
        cluster[0].remove_node(doomed)
        out, err = proc.communicate(timeout=PATIENCE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out + err
    results = stored(fake, db, report)
    assert results["raysuite/OnA"].status == "ok"
    died = results["raysuite/Doomed"]
    assert died.status == "error", died.reason
    assert doomed.node_id[:12] in died.reason and "died during the run" in died.reason, died.reason
    assert gone(pids) == []


def test_with_ray_retries_a_workload_whose_node_dies_runs_again_on_another_node(project, cluster):
    fake, suite, marks, db = project
    spares = [cluster[0].add_node(**node_args(resources={"spare": 1})) for _ in range(2)]
    cluster[0].wait_for_nodes()
    report = fake.root / "retried.json"
    proc = subprocess.Popen([sys.executable, "-m", "modelci.cli", "run", "--target", str(fake.v10), "--suite",
                             str(suite), "-k", "raysuite/Spare", "--json", str(report)],
                            cwd=fake.root, env=dict(fake.env, MODELCI_RAY_RETRIES="1"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _, _, agent = wait_for(marks / "Spare.json", proc)
        raylet = int(Path(f"/proc/{agent}/stat").read_text().rpartition(")")[2].split()[1])
        (first,) = [n for n in spares if n.all_processes["raylet"][0].process.pid == raylet]
        cluster[0].remove_node(first)
        out, err = proc.communicate(timeout=PATIENCE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
        for node in spares:
            if node in cluster[0].worker_nodes:
                cluster[0].remove_node(node)
    assert proc.returncode == 0, out + err
    (result,) = stored(fake, db, report).values()
    (second,) = [n for n in spares if n is not first]
    assert result.status == "ok" and result.info["node"]["id"] == second.node_id


def test_sigterm_of_the_driver_ends_the_cluster_work_of_the_run(project, cluster, env_cache):
    fake, suite, marks, _ = project
    proc = subprocess.Popen([sys.executable, "-m", "modelci.cli", "run", "--target", str(fake.v10), "--suite",
                             str(suite), "-k", "raysuite/Sleeper"],
                            cwd=fake.root, env=fake.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = wait_for(marks / "Sleeper.json", proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=PATIENCE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, out + err
    # the workload, its warm worker and the node's agent (the Ray worker that ran the task) all ended
    assert gone(pids) == []
    # and no process of the run is left on any node: none runs an interpreter of the run's environments
    left = []
    for entry in Path("/proc").iterdir():
        try:
            exe = os.readlink(entry / "exe") if entry.name.isdigit() else ""
            argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0].decode() if exe else ""
        except OSError:
            continue
        if argv0.startswith(str(env_cache)):
            left.append((entry.name, argv0))
    assert left == []


def test_without_an_address_the_run_starts_a_ray_instance_of_its_own_and_ends_it(project):
    fake, suite, _, db = project
    temp = Path(tempfile.mkdtemp(prefix="mci-", dir="/tmp"))  # short: Ray's socket paths live under it
    env = {k: v for k, v in fake.env.items() if k not in ("MODELCI_RAY_ADDRESS", "RAY_ADDRESS")}
    env["RAY_TMPDIR"] = str(temp)
    report = fake.root / "own.json"
    try:
        done = subprocess.run([sys.executable, "-m", "modelci.cli", "run", "--target", str(fake.v10), "--suite",
                               str(suite), "-k", "raysuite/Anywhere", "--json", str(report)],
                              cwd=fake.root, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        (result,) = stored(fake, db, report).values()
        assert result.status == "ok" and result.info["node"]["id"]
        # every process of that instance (GCS, raylet, workers: all run under its folder) ended with the command
        left = []
        deadline = time.monotonic() + PATIENCE_S
        while True:
            left = [entry.name for entry in Path("/proc").iterdir() if entry.name.isdigit()
                    and str(temp) in _cmdline(entry)]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert left == []
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _cmdline(entry: Path) -> str:
    try:
        return (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
