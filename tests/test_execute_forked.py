"""Fork isolation: a warm worker per environment forks each workload; results as with spawn.

Real uv environments with the fakefw wheels, real workers and children, real signals; no mocks.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

import modelci
from modelci import config as config_module
from modelci import steps, targets, workflow
from modelci.errors import UserError
from modelci.execute import forked
from modelci.execute.local import WorkloadInfo
from modelci.workload import npy

ZOO_NUMPY = Path(modelci.__file__).resolve().parent / "zoo" / "numpy"
ZOO_TORCH = Path(modelci.__file__).resolve().parent / "zoo" / "torch"
ZOO_PADDLE = Path(modelci.__file__).resolve().parent / "zoo" / "paddle"

TINY_SUITE = '''\
import modelci


class Tiny{n}(modelci.Workload):
    framework = "numpy"
    steps = 1
    repeats = 1
    warmup = 0

    def setup(self, ctx):
        import numpy as np
        self.x = np.arange(8.0) * (ctx.seed + {n})

    def train_step(self, ctx, step):
        return float(self.x.sum())

    def infer(self, ctx):
        return {{"y": self.x * 2}}
'''


def outputs_bytes(result) -> dict[str, bytes]:
    """Each output array as its exact .npy bytes (dtype, shape and every bit of the data)."""
    return {name: npy.to_bytes(array) for name, array in result.outputs.items()}


def run_both(fake_project, target: str, pattern: str | None = None) -> dict[str, dict]:
    """One `workflow.run` per isolation mode; returns mode -> workload -> result."""
    by_mode = {}
    for mode in ("fork", "spawn"):
        cfg = config_module.load(cli={"isolation": mode})
        outcome = workflow.run(cfg, target, [str(fake_project.suite)], pattern)
        by_mode[mode] = {r.workload: r for r in outcome.results}
    return by_mode


def assert_forked_like_spawned(fork: dict, spawn: dict) -> None:
    """Every workload ok in both modes, really forked in the first, with bit-identical outputs and loss curves
    and a peak RSS within 10% of the spawned one's (the child maps in the pages the worker's import touched)."""
    assert set(fork) == set(spawn)
    for workload, result in fork.items():
        other = spawn[workload]
        assert result.status == other.status == "ok", (workload, result.reason, result.stderr_tail, other.reason)
        assert result.info["isolation"] == "fork", result.info.get("isolation_reason")
        assert outputs_bytes(result) == outputs_bytes(other), workload
        assert result.metrics["loss"].values == other.metrics["loss"].values, workload
        ratio = result.metrics["mem.peak_rss"].values[0] / other.metrics["mem.peak_rss"].values[0]
        assert 0.9 < ratio < 1.1, (workload, ratio)
        assert result.info["worker_rss"] > 0
        # what the resident set held at the end, by kind: each part is there, and together no more than the peak
        parts = result.info["rss_end"]
        assert parts["anon"] > 0 and parts["file"] > 0, parts
        assert sum(parts.values()) <= result.metrics["mem.peak_rss"].values[0], (workload, parts)


def executor_results(python: Path, suites: dict[str, Path], scratch: Path, mode: str, only: str = "",
                     threads: int = 1, **kwargs) -> dict:
    """Discover and run every workload of `suites` (whose id contains `only`) with one Executor; returns
    workload -> result."""
    scratch.mkdir(parents=True, exist_ok=True)
    with forked.Executor(python, scratch, isolation=mode, threads=threads, **kwargs) as executor:
        found = executor.discover(suites)
        return {w["id"]: executor.run_workload(suites, WorkloadInfo.from_json(w), timeout=600)
                for w in found["workloads"] if only in w["id"]}


def fakefw_env(fake_project, version: str):
    cfg = config_module.load()
    wheel = fake_project.v10 if version == "1.0" else fake_project.v11
    return steps.environment_for(cfg, targets.resolve(str(wheel)), log=lambda _: None)


def test_fork_and_spawn_give_bit_identical_results_on_fakefw(fake_project):
    by_mode = run_both(fake_project, str(fake_project.v10))

    fork, spawn = by_mode["fork"], by_mode["spawn"]
    assert set(fork) == set(spawn) and len(fork) == 6
    for workload, result in fork.items():
        other = spawn[workload]
        assert result.status == other.status == "ok", (workload, result.reason, other.reason)
        assert result.info["isolation"] == "fork" and other.info["isolation"] == "spawn"
        assert outputs_bytes(result) == outputs_bytes(other), workload
        assert result.metrics["loss"].values == other.metrics["loss"].values, workload
        assert result.info["modules"] == other.info["modules"], workload


def test_fork_and_spawn_give_bit_identical_outputs_and_comparable_memory_on_zoo_numpy(tmp_path):
    suites = {"numpy": ZOO_NUMPY}
    # target `current`: the workloads run in this interpreter's environment
    fork = executor_results(Path(sys.executable), suites, tmp_path / "fork", "fork")
    spawn = executor_results(Path(sys.executable), suites, tmp_path / "spawn", "spawn")

    assert len(fork) >= 6
    assert_forked_like_spawned(fork, spawn)


def test_fork_mode_reports_failed_crashed_and_timeout_like_spawn(fake_project, tmp_path):
    env = fakefw_env(fake_project, "1.1")
    suites = {"fakesuite": fake_project.suite}
    with forked.Executor(env.python, tmp_path, isolation="fork") as executor:
        found = {w["name"]: WorkloadInfo.from_json(w) for w in executor.discover(suites)["workloads"]}
        worker_pid = executor.worker.pid
        results = {name: executor.run_workload(suites, found[name], timeout=3)
                   for name in ("Raises", "Aborts", "Hangs", "Stable")}
        hung_pid = executor.child_pid
        # crashes and timeouts kill the child, never the worker
        assert executor.worker.pid == worker_pid

    for result in results.values():
        assert result.info["isolation"] == "fork"
    assert results["Raises"].status == "failed"
    assert "validate() rejects a valid input" in results["Raises"].reason
    assert "Traceback" in results["Raises"].traceback
    assert results["Aborts"].status == "crashed" and "SIGABRT" in results["Aborts"].reason
    assert "fused_update" in results["Aborts"].stderr_tail  # faulthandler wrote into the child's stderr file
    assert results["Hangs"].status == "timeout" and "after 3 s" in results["Hangs"].reason
    assert 3 <= results["Hangs"].duration < 30
    assert results["Stable"].status == "ok"
    assert not alive(hung_pid)


def alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            state = next(line for line in fh if line.startswith("State:"))
    except (FileNotFoundError, StopIteration):
        return False
    return " Z " not in state and "zombie" not in state


def test_a_worker_that_dies_makes_the_running_workload_crashed_and_is_restarted(fake_project, tmp_path):
    env = fakefw_env(fake_project, "1.1")
    suites = {"fakesuite": fake_project.suite}
    with forked.Executor(env.python, tmp_path, isolation="fork") as executor:
        found = {w["name"]: WorkloadInfo.from_json(w) for w in executor.discover(suites)["workloads"]}
        first_worker = executor.worker.pid
        killer = threading.Timer(1.0, os.kill, (first_worker, signal.SIGKILL))
        killer.start()
        try:
            hangs = executor.run_workload(suites, found["Hangs"], timeout=60)
        finally:
            killer.cancel()
        orphan = executor.child_pid
        stable = executor.run_workload(suites, found["Stable"], timeout=60)
        second_worker = executor.worker.pid

    assert hangs.status == "crashed" and "worker process died" in hangs.reason
    assert "SIGKILL" in hangs.reason
    assert hangs.duration < 30
    assert not alive(orphan)  # the child of the dead worker was killed, not left running
    assert stable.status == "ok" and stable.info["isolation"] == "fork"
    assert second_worker != first_worker


def test_fork_is_faster_per_workload_than_spawn(tmp_path):
    suite = tmp_path / "tiny"
    suite.mkdir()
    for n in range(4):
        (suite / f"tiny{n}.py").write_text(TINY_SUITE.format(n=n))
    suites = {"tiny": suite}
    durations = {}
    for mode in ("spawn", "fork"):
        results = executor_results(Path(sys.executable), suites, tmp_path / mode, mode)
        assert all(r.status == "ok" for r in results.values())
        durations[mode] = sorted(r.duration for r in results.values())
    # no timed threshold: a loaded runner slows both; only the order is asserted
    assert durations["fork"][len(durations["fork"]) // 2] < durations["spawn"][len(durations["spawn"]) // 2]


def test_fork_falls_back_to_spawn_where_forking_is_unsafe(tmp_path, monkeypatch):
    suite = tmp_path / "multi"
    suite.mkdir()
    (suite / "ranks.py").write_text(TINY_SUITE.format(n=0) + "\n\nclass TwoRanks(Tiny0):\n    devices = 2\n")
    suites = {"multi": suite}

    # rank 0 of a `devices = 2` workload is forked like any other, and forks rank 1 from itself
    results = executor_results(Path(sys.executable), suites, tmp_path / "devices", "fork")
    assert results["multi/Tiny0"].info["isolation"] == "fork"
    assert results["multi/TwoRanks"].info["isolation"] == "fork"
    assert results["multi/TwoRanks"].info["ranks"] == "fork"

    results = executor_results(Path(sys.executable), suites, tmp_path / "spawn", "spawn")
    assert {r.info["isolation"] for r in results.values()} == {"spawn"}
    assert results["multi/TwoRanks"].info["ranks"] == "spawn"  # every process fresh, the ranks too

    # threads = 0 leaves OpenBLAS its own pool: the worker's `import numpy` starts a thread, so no fork
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    scratch = tmp_path / "threads"
    scratch.mkdir()
    with forked.Executor(Path(sys.executable), scratch, isolation="fork", threads=0) as executor:
        found = executor.discover(suites)
        result = executor.run_workload(suites, WorkloadInfo.from_json(found["workloads"][0]), timeout=120)
        assert executor.isolation == "spawn"
    assert result.status == "ok" and result.info["isolation"] == "spawn"
    assert "thread" in result.info["isolation_reason"]


def test_peak_rss_counts_the_workload_not_what_loading_it_took(tmp_path):
    """mem.peak_rss starts afresh after the prologue (child.reset_peak_rss): 200 MiB that the suite file held and
    freed while it was imported are not the workload's, in either mode (loading paddle's library moved its
    peak by 90 MiB with nothing else changed, docs/zoo.md)."""
    plain, heavy = tmp_path / "plain", tmp_path / "heavy"
    for folder in (plain, heavy):
        folder.mkdir()
    (plain / "tiny0.py").write_text(TINY_SUITE.format(n=0))
    (heavy / "tiny0.py").write_text("_loading = b'x' * (200 * 2**20)\ndel _loading\n" + TINY_SUITE.format(n=0))
    for mode in ("fork", "spawn"):
        peaks = {}
        for folder in (plain, heavy):
            results = executor_results(Path(sys.executable), {"tiny": folder}, tmp_path / mode / folder.name, mode)
            result = results["tiny/Tiny0"]
            assert result.status == "ok" and result.info["isolation"] == mode, result.reason
            peaks[folder.name] = result.metrics["mem.peak_rss"].values[0]
        assert abs(peaks["heavy"] - peaks["plain"]) < 50 * 2**20, (mode, peaks)


def test_isolation_option_is_a_choice(fake_project):
    assert config_module.load().isolation == "fork"
    assert config_module.load(cli={"isolation": "spawn"}).isolation == "spawn"
    with pytest.raises(UserError, match="must be one of fork, spawn"):
        config_module.load(environ={"MODELCI_ISOLATION": "threads"})


def test_run_outcome_times_the_harness_steps(fake_project):
    cfg = config_module.load()
    started = time.perf_counter()
    outcome = workflow.run(cfg, str(fake_project.v10), [str(fake_project.suite)], "Stable")
    wall = time.perf_counter() - started
    steps = ("environment", "store", "discovery", "execute", "ingest", "checks", "worker_start")
    assert set(steps) <= set(outcome.timings)
    assert all(outcome.timings[s] >= 0 for s in steps)
    assert sum(outcome.timings[s] for s in steps if s != "worker_start") <= wall


def test_start_launches_the_worker_without_waiting_and_close_stops_one_still_importing(tmp_path):
    suite = tmp_path / "tiny"
    suite.mkdir()
    (suite / "tiny0.py").write_text(TINY_SUITE.format(n=0))
    suites = {"tiny": suite}

    with forked.Executor(Path(sys.executable), tmp_path / "used", isolation="fork", threads=1) as executor:
        (tmp_path / "used").mkdir()
        executor.start(suites)
        worker = executor.worker
        assert worker is not None and worker.ready is None  # launched, not waited for
        found = executor.discover(suites)
        assert executor.worker is worker and worker.ready["event"] == "ready"
        result = executor.run_workload(suites, WorkloadInfo.from_json(found["workloads"][0]), timeout=120)
        assert result.status == "ok" and result.info["isolation"] == "fork"
    assert worker.proc.returncode == 0  # told to end (EOF), it ended by itself

    (tmp_path / "dropped").mkdir()
    executor = forked.Executor(Path(sys.executable), tmp_path / "dropped", isolation="fork", threads=1)
    executor.start(suites)
    worker = executor.worker
    executor.close()  # e.g. the store would not open: the worker is stopped, not waited for
    # stopped by SIGTERM (which it takes as the harness going away: it exits 1 once its handler is in place) or,
    # failing that, by the SIGKILL to its group; never the 0 of a worker that ended by itself
    assert worker.proc.returncode in (1, -signal.SIGTERM, -signal.SIGKILL) and executor.worker is None


def torch_env(tmp_path: Path, monkeypatch, spec: str = "torch==2.13.0"):
    """The torch 2.13.0 environment (or `spec`'s), from the persistent cache of the framework tests (built once
    per machine)."""
    for key in [k for k in os.environ if k.startswith("MODELCI_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    cache = Path(os.environ.get("MODELCI_TEST_CACHE", Path.home() / ".cache" / "modelci-tests"))
    (tmp_path / "modelci.toml").write_text(f'cache_dir = "{cache}"\nthreads = 1\n')
    cfg = config_module.load()
    try:
        return steps.environment_for(cfg, targets.resolve(spec), log=lambda _: None)
    except UserError as exc:
        if os.environ.get("CI"):  # CI installs what the tests need: a skip there would hide a broken install
            raise
        pytest.skip(f"{spec} cannot be installed here: {exc}")


@pytest.mark.slow
def test_zoo_paddle_forks_beside_the_bvar_thread_with_the_outputs_and_memory_of_spawn(tmp_path, monkeypatch):
    """paddle's import starts brpc's bvar sampler thread, which brpc starts again in a forked child: the worker
    forks beside it (the paddle helper's fork_safe_threads), and the results are those of fresh processes."""
    env = torch_env(tmp_path, monkeypatch, "paddlepaddle==3.0.0")
    suites = {"paddle": ZOO_PADDLE}
    fork = executor_results(env.python, suites, tmp_path / "fork", "fork")
    spawn = executor_results(env.python, suites, tmp_path / "spawn", "spawn")
    assert len(fork) >= 5
    assert_forked_like_spawned(fork, spawn)

    # with `threads = 0` paddle's import also starts OpenMP's pool, which nothing starts again in a child
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    spawned = executor_results(env.python, suites, tmp_path / "threads", "fork", only="LeNet", threads=0)
    assert spawned["paddle/LeNet"].info["isolation"] == "spawn"
    assert "thread" in spawned["paddle/LeNet"].info["isolation_reason"]


@pytest.mark.torch
@pytest.mark.slow
def test_zoo_torch_ranks_forked_from_rank_0_match_fresh_ranks_and_one_process(tmp_path, monkeypatch):
    env = torch_env(tmp_path, monkeypatch)
    suites = {"torch": ZOO_TORCH}
    # the first environment holds what the torch helper needs (numpy): no second environment after discovery
    with forked.Executor(env.python, tmp_path, threads=1) as executor:
        found = executor.discover(suites)
    assert steps.missing_requirements(env, [WorkloadInfo.from_json(w) for w in found["workloads"]]) == []

    fork = executor_results(env.python, suites, tmp_path / "fork", "fork", only="DataParallel")
    spawn = executor_results(env.python, suites, tmp_path / "spawn", "spawn", only="DataParallel")
    two, other = fork["torch/DataParallelMLP"], spawn["torch/DataParallelMLP"]
    assert two.status == other.status == "ok", (two.reason, two.stderr_tail, other.reason)
    assert (two.info["isolation"], two.info["ranks"]) == ("fork", "fork"), two.info.get("ranks_reason")
    assert (other.info["isolation"], other.info["ranks"]) == ("spawn", "spawn")
    assert two.info["world_size"] == 2
    assert outputs_bytes(two) == outputs_bytes(other)
    assert two.metrics["loss"].values == other.metrics["loss"].values
    # DDP over two forked ranks learns what one process learns on the full batch
    one = fork["torch/DataParallelMLPReference"]
    assert len(two.metrics["loss"].values) >= 10
    assert two.metrics["loss"].values == pytest.approx(one.metrics["loss"].values, rel=1e-5)
    ratio = two.metrics["mem.peak_rss"].values[0] / other.metrics["mem.peak_rss"].values[0]
    assert 0.9 < ratio < 1.1, ratio


WARM_UP_PROBE = """
import json, sys
import torch
from modelci.workload.fw_torch import TorchHelper

helper = TorchHelper()
helper.seed(3)
helper.set_determinism(True)
cold = torch.rand(4).tolist()
helper.seed(3)
before = len(sys.modules)
helper.warm_up()
imported = len(sys.modules) - before
helper.warm_up()  # once per process: a forked child inherits the flag from its worker
print(json.dumps({"cold": cold, "warm": torch.rand(4).tolist(), "imported": imported,
                  "again": len(sys.modules) - before - imported}))
"""


@pytest.mark.torch
@pytest.mark.slow
def test_torch_warm_up_leaves_the_random_streams_as_seeded_and_runs_once_per_process(tmp_path, monkeypatch):
    import json
    import subprocess

    from modelci.execute import local

    env = torch_env(tmp_path, monkeypatch)
    child_env = local.child_env(local.shim_dir(tmp_path), 0, 1)
    done = subprocess.run([str(env.python), "-c", WARM_UP_PROBE], env=child_env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout)
    assert probe["warm"] == probe["cold"]  # the same numbers as without the warm-up: outputs cannot change
    assert probe["imported"] > 100  # torch.export's first use really happened here, not in the workload
    assert probe["again"] == 0
