"""The executor interface: the workflow picks its executor from the configuration and needs nothing else of it.

An executor of the tests' own (`Elsewhere`, below) wraps the local one and hands back results whose saved models
lie in a folder of its own, not in the run's scratch folder: the run must store them all the same. The Ray executor
itself is tested against a real Ray cluster in tests/test_ray_executor.py.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from modelci import config as config_module
from modelci import execute, steps, workflow
from modelci.errors import UserError
from modelci.execute import base, forked, ray_executor
from modelci.store import Store, compat_schema

SUITE = '''\
import json
import modelci


class Saves(modelci.Workload):
    """Trains a list of weights and saves them in a format of its own."""

    framework = "python"
    steps = 3
    repeats = 1
    formats = (modelci.Format("weights_json", unsafe=False),)

    def setup(self, ctx):
        self.w = [ctx.rng().random() for _ in range(4)]

    def train_step(self, ctx, step):
        self.w = [x * 0.5 for x in self.w]
        return sum(self.w)

    def infer(self, ctx):
        return {"w": self.w}

    def save(self, ctx, fmt, path):
        path.write_text(json.dumps(self.w))

    def load(self, ctx, fmt, path):
        self.w = json.loads(path.read_text())
        return self.w


class NeedsGpu(Saves):
    resources = {"gpu": 1, "a100": 0.5}


class BadResources(Saves):
    resources = {"gpu": "one"}
'''


class Elsewhere(base.Executor):
    """An executor that runs locally but keeps what comes back in a folder of its own (as a remote one does)."""

    name = "elsewhere"
    calls: list[str] = []

    def __init__(self, inner: forked.Executor, folder: Path):
        self.inner, self.folder = inner, folder
        self.seed, self.timings = inner.seed, inner.timings

    @property
    def files(self) -> Path:
        return self.folder

    def start(self, suites):
        self.calls.append("start")
        self.inner.start(suites)

    def discover(self, suites, timeout=300):
        self.calls.append("discover")
        return self.inner.discover(suites, timeout)

    def run_workload(self, suites, workload, *, timeout=1800, repeats=None, save=True):
        self.calls.append(f"run {workload.id}")
        result = self.inner.run_workload(suites, workload, timeout=timeout, repeats=repeats, save=save)
        for number, entry in enumerate(result.info.get("saved", [])):
            if entry.get("path"):
                moved = self.folder / f"{workload.name}-{number}"
                self.folder.mkdir(parents=True, exist_ok=True)
                shutil.move(entry["path"], moved)
                entry["path"] = str(moved)
        result.info["node"] = {"id": "elsewhere"}
        return result

    def run_module(self, module, argv, log_dir, timeout, framework="", watch=None):
        self.calls.append("run_module")
        return self.inner.run_module(module, argv, log_dir, timeout, framework, watch)

    def close(self):
        self.calls.append("close")
        self.inner.close()


@pytest.fixture
def project(fake_project):
    suite = fake_project.root / "savers"
    suite.mkdir()
    (suite / "models.py").write_text(SUITE)
    return fake_project, suite


def test_the_local_executor_is_the_default_and_ray_is_chosen_by_option_or_variable(project, tmp_path):
    fake, _ = project
    env = type("Env", (), {"python": Path(sys.executable), "paths": []})()
    target = type("Target", (), {"kind": "current"})()
    chosen = execute.create(config_module.load(), env, target, tmp_path)
    assert isinstance(chosen, forked.Executor) and chosen.name == "local" and chosen.files == tmp_path
    chosen.close()
    cfg = config_module.load(environ={"MODELCI_EXECUTOR": "ray", "MODELCI_RAY_ADDRESS": "127.0.0.1:1"})
    assert cfg.sources["executor"] == "env:MODELCI_EXECUTOR" and cfg.ray_address == "127.0.0.1:1"
    chosen = execute.create(cfg, env, target, tmp_path)
    assert isinstance(chosen, ray_executor.RayExecutor) and chosen.name == "ray" and chosen.files == tmp_path
    chosen.close()
    (fake.root / "modelci.toml").write_text('executor = "kubernetes"\n')
    with pytest.raises(UserError, match="executor.* must be one of local, ray, got 'kubernetes'"):
        config_module.load()


def test_the_workflow_keeps_what_an_executor_hands_back_wherever_it_lies(project, monkeypatch, tmp_path):
    fake, suite = project
    elsewhere = tmp_path / "elsewhere"
    made = []

    def create(config, env, target, scratch):
        made.append(scratch)
        return Elsewhere(forked.Executor(env.python, scratch, seed=config.seed, threads=config.threads), elsewhere)

    monkeypatch.setattr(execute, "create", create)
    Elsewhere.calls = []
    outcome = workflow.run(config_module.load(), str(fake.v10), [str(suite)], "Saves")

    assert made and [r.status for r in outcome.results] == ["ok"]
    assert Elsewhere.calls[:3] == ["start", "discover", "run savers/Saves"] and Elsewhere.calls[-1] == "close"
    (result,) = outcome.results
    saved = [e for e in result.info["saved"] if e.get("status") == "ok"]
    assert saved and all(Path(e["path"]).parent == elsewhere for e in saved)
    store = Store.from_config(config_module.load())
    (stored,) = store.run(outcome.run_id).results
    assert stored.info["node"] == {"id": "elsewhere"}
    # the saved model was recorded for compat from the executor's folder, not from the run's scratch folder
    with store.read() as session:
        rows = compat_schema.saved_models(session)
    assert [(row.workload, row.format) for row in rows] == [("savers/Saves", "weights_json")]


def test_resources_are_discovered_and_a_bad_table_is_an_error_result(project):
    fake, suite = project
    outcome = workflow.run(config_module.load(), str(fake.v10), [str(suite)], "savers")
    by_id = {r.workload: r for r in outcome.results}
    assert by_id["savers/Saves"].status == "ok"
    # the local executor runs every workload on this machine: resources are for a cluster's placement
    assert by_id["savers/NeedsGpu"].status == "ok"
    bad = by_id["savers/BadResources"]
    assert bad.status == "error" and "`resources` asks for 'one' of 'gpu'" in bad.reason


def test_found_resources_reach_the_workload_record(project, tmp_path):
    fake, suite = project
    with forked.Executor(Path(sys.executable), tmp_path) as executor:
        found = executor.discover({"savers": suite})
    infos, _ = steps.select(found, "NeedsGpu")
    assert [w.resources for w in infos] == [{"gpu": 1.0, "a100": 0.5}]


def test_executor_ray_without_ray_installed_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets where Ray is not installed
    with pytest.raises(UserError, match=r"pip install 'modelci\[ray\]'"):
        ray_executor.import_ray()


@pytest.mark.parametrize("address, message", [
    ("nohost", "is not HOST:PORT"),
    ("127.0.0.1:1", "no Ray cluster answers at 127.0.0.1:1"),
])
def test_a_ray_address_that_cannot_be_a_cluster_is_a_user_error(address, message):
    with pytest.raises(UserError, match=message):
        ray_executor.check_reachable(address)


def test_placement_maps_workload_resources_to_rays_names():
    wanted = ray_executor.demand({"gpu": 1, "a100": 0.5, "memory": 2e9}, threads=2)
    assert wanted == {"CPU": 2.0, "GPU": 1.0, "a100": 0.5, "memory": 2e9}
    assert ray_executor.demand({"cpu": 0}, threads=1) == {"CPU": 0.0}
    gpu_node = {"Resources": {"CPU": 8.0, "GPU": 1.0, "a100": 1.0, "memory": 4e9}}
    cpu_node = {"Resources": {"CPU": 8.0, "memory": 64e9}}
    assert ray_executor.fits(wanted, gpu_node) and not ray_executor.fits(wanted, cpu_node)


#: a Ray worker process on a node: builds a node agent on the cache folder argv[1], says its folder, and waits to be
#: killed (a Ray worker or node lost in the middle of a run)
AGENT = """
import sys, time
import modelci
from modelci import envs, targets
from modelci.execute import local, ray_agent
cache = sys.argv[1]
env = envs.current(cache, environ=local.child_env(cache, 0, 1))
settings = {"seed": 0, "threads": 1, "isolation": "fork", "start_timeout": 60.0, "cache_dir": cache, "python": ""}
payload = {"modelci": modelci.__version__, "target": targets.resolve("current"), "lock": None,
           "environment": env.id, "fingerprint": ray_agent.software(env.fingerprint), "index": None,
           "settings": settings, "suites": {}, "suites_digest": "none"}
agent = ray_agent.NodeAgent(payload, {"id": "f" * 56, "address": "10.1.2.3", "hostname": "gpu-3"})
print(agent.home, flush=True)
time.sleep(600)
"""


def test_the_folder_of_a_killed_node_agent_is_removed_by_the_next_agent_on_its_node(tmp_path):
    """A node agent's folder (its workloads' scratch, suites being unpacked) was made with no owner, so an agent
    killed with its Ray worker left it for ever on a node where nothing else ever cleans the cache. The next agent
    on the node removes it; an agent that still runs keeps its own."""
    import signal
    import subprocess

    cache = tmp_path / "cache"
    agents = [subprocess.Popen([sys.executable, "-c", AGENT, str(cache)], stdout=subprocess.PIPE, text=True)
              for _ in range(2)]
    try:
        killed, live = [Path(agent.stdout.readline().strip()) for agent in agents]
        assert killed.is_dir() and live.is_dir(), (killed, live)
        agents[0].send_signal(signal.SIGKILL)
        agents[0].wait()
        assert killed.is_dir()  # left behind by the kill
        code = AGENT.replace("time.sleep(600)", "agent.close()")
        subprocess.run([sys.executable, "-c", code, str(cache)], check=True, capture_output=True, timeout=120)
        assert not killed.exists()
        assert live.is_dir()
    finally:
        for agent in agents:
            agent.kill()
            agent.wait()
            agent.stdout.close()


def test_a_scratch_folder_left_by_a_modelci_from_before_the_owner_lock_is_removed_once_it_is_old(tmp_path):
    """Scratch folders made before they had an owner file are removed once nothing in them changed for
    UNOWNED_AGE_S; a new one without an owner file (being made) is left alone, as is a live one."""
    import os
    import time

    from modelci.execute import local

    root = local.scratch_root(tmp_path)
    old, new = root / "run-old", root / "run-new"
    for folder in (old, new):
        (folder / "model").mkdir(parents=True)
        (folder / "model" / "weights.bin").write_bytes(b"w" * 1000)
    then = time.time() - local.UNOWNED_AGE_S - 60
    for path in (old / "model" / "weights.bin", old / "model", old):
        os.utime(path, (then, then))
    live = local.Scratch(tmp_path, "run-")
    os.utime(live.path / local.SCRATCH_OWNER, (then, then))
    os.utime(live.path, (then, then))
    assert local.sweep_scratch(tmp_path) == (1, 1000)
    assert sorted(p.name for p in root.iterdir()) == sorted(["run-new", live.path.name])
    live.remove()


def test_a_node_agent_takes_the_drivers_environment_and_refuses_one_that_differs(tmp_path):
    """The check every node makes before it runs anything (execute.ray_agent), without Ray: the same
    environment passes; another interpreter version, or another modelci, is refused naming what differs."""
    import modelci
    from modelci import envs, targets
    from modelci.execute import local, ray_agent

    cache = tmp_path / "cache"
    env = envs.current(cache, environ=local.child_env(cache, 0, 1))
    settings = {"seed": 0, "threads": 1, "isolation": "fork", "start_timeout": 60.0, "cache_dir": str(cache),
                "python": ""}
    payload = {"modelci": modelci.__version__, "target": targets.resolve("current"), "lock": None,
               "environment": env.id, "fingerprint": ray_agent.software(env.fingerprint), "index": None,
               "settings": settings, "suites": {}, "suites_digest": "none"}
    node = {"id": "f" * 56, "address": "10.1.2.3", "hostname": "gpu-3"}
    agent = ray_agent.NodeAgent(payload, node)
    assert agent.env.id == env.id
    agent.close()
    other = dict(payload, fingerprint=dict(payload["fingerprint"], python="3.99.0"))
    with pytest.raises(UserError, match=r"differs from the driver's in python \(python: '3\.\d+\.\d+' here, "
                                        r"'3\.99\.0' on the driver\)"):
        ray_agent.NodeAgent(other, node)
    with pytest.raises(UserError, match="this node has modelci .*, the driver 0.0.1; install the same modelci"):
        ray_agent.NodeAgent(dict(payload, modelci="0.0.1"), node)
    assert ray_agent.describe_node(node) == "node 10.1.2.3 (host gpu-3, id ffffffffffff)"
