"""Dispatch cost per workload on a running Ray cluster, against the local executor (docs/ray.md).

    .venv/bin/python benchmarks/ray_dispatch.py                     # 5 rounds of 10 workloads per executor
    .venv/bin/python benchmarks/ray_dispatch.py --rounds 7 --per-round 20

Needs `modelci[ray]`. It starts a Ray cluster on this machine (`ray.cluster_utils.Cluster`: a head without CPUs
and one worker node with one CPU, no dashboard, free ports) and builds nothing: the target is `current` and the
workload a trivial one (framework "python", one training step, one timed inference), so that its own phases take
microseconds and what is measured is the executor. Both executors are warmed first (the local worker; on the node
the agent's environment check and its warm worker), then rounds alternate: K workloads one after the other
through the local executor, then K through the Ray executor, each timed from handing it out to holding its
Result. Reported: the median seconds per workload of each, and the difference (Ray minus local), per round and
as the median of the rounds. Workloads run one at a time here: a real run hands every workload out at once, so
that the nodes run them side by side, and this is the latency each of them pays.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

TRIVIAL = '''\
import modelci


class Trivial(modelci.Workload):
    framework = "python"
    steps = 1
    warmup = 0
    repeats = 1

    def setup(self, ctx):
        self.x = [1.0, 2.0, 3.0]

    def train_step(self, ctx, step):
        return sum(self.x)

    def infer(self, ctx):
        return {"y": self.x}
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def node_args(**more) -> dict:
    return dict(object_store_memory=80 * 2**20, dashboard_agent_listen_port=free_port(), min_worker_port=0,
                max_worker_port=0, **more)


def timed(executor, suites, workload, count: int) -> list[float]:
    """Seconds per workload, `count` workloads one after the other; each must come back ok."""
    seconds = []
    for _ in range(count):
        start = time.perf_counter()
        (result,) = list(executor.run(suites, [workload], timeout=600))
        seconds.append(time.perf_counter() - start)
        if result.status != "ok":
            raise SystemExit(f"{executor.name}: the workload ended {result.status}: {result.reason}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=10)
    args = parser.parse_args()

    os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
    from ray.cluster_utils import Cluster

    from modelci import config, envs, execute, steps, targets
    from modelci.execute.local import WorkloadInfo
    from modelci.execute.ray_executor import disconnect

    work = Path(tempfile.mkdtemp(prefix="ray-dispatch-"))
    suite = work / "trivial"
    suite.mkdir()
    (suite / "trivial.py").write_text(TRIVIAL)
    suites = {"trivial": suite}
    started = time.perf_counter()
    cluster = Cluster(initialize_head=True, connect=False,
                      head_node_args=node_args(gcs_server_port=free_port(), include_dashboard=False, num_cpus=0))
    try:
        cluster.add_node(**node_args(num_cpus=1))
        cluster.wait_for_nodes()
        cluster_s = time.perf_counter() - started
        options = {"cache_dir": str(work / "cache"), "threads": 1}
        local_config = config.load(cli=options, cwd=work, environ={})
        ray_config = config.load(cli=dict(options, executor="ray", ray_address=cluster.address), cwd=work,
                                 environ={})
        env = envs.current(Path(options["cache_dir"]), environ=steps.workload_environ(local_config))
        target = targets.resolve("current")
        local = execute.create(local_config, env, target, work / "local")
        remote = execute.create(ray_config, env, target, work / "ray")
        for folder in (work / "local", work / "ray"):
            folder.mkdir()
        started = time.perf_counter()
        remote.start(suites)
        connect_s = time.perf_counter() - started
        workload = WorkloadInfo.from_json(local.discover(suites)["workloads"][0])
        started = time.perf_counter()
        timed(local, suites, workload, 1)
        local_warm = time.perf_counter() - started
        started = time.perf_counter()
        timed(remote, suites, workload, 1)
        ray_warm = time.perf_counter() - started
        rows = []
        for number in range(1, args.rounds + 1):
            mine = statistics.median(timed(local, suites, workload, args.per_round))
            theirs = statistics.median(timed(remote, suites, workload, args.per_round))
            rows.append((number, mine, theirs))
        local.close()
        remote.close()
        disconnect()
    finally:
        cluster.shutdown()

    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}; "
          f"{args.rounds} rounds of {args.per_round} workloads per executor, one at a time.")
    print(f"Cluster start {cluster_s:.1f} s; connect {connect_s:.2f} s; first workload (warm-up): local "
          f"{local_warm:.2f} s, Ray {ray_warm:.2f} s.\n")
    print("| round | local (s/workload, median) | Ray (s/workload, median) | Ray - local (s) |")
    print("|---|---|---|---|")
    for number, mine, theirs in rows:
        print(f"| {number} | {mine:.3f} | {theirs:.3f} | {theirs - mine:+.3f} |")
    print(f"| median | {statistics.median(r[1] for r in rows):.3f} | {statistics.median(r[2] for r in rows):.3f} "
          f"| {statistics.median(r[2] - r[1] for r in rows):+.3f} |")


if __name__ == "__main__":
    main()
