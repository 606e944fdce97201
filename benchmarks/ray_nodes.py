"""A 2-node DDP model against the same model with 2 ranks on one node (docs/ray.md, "Models across machines").

    .venv/bin/python benchmarks/ray_nodes.py               # one run of each, torch 2.13.0
    .venv/bin/python benchmarks/ray_nodes.py --runs 3

Needs `modelci[ray]`, root and `ip` (iproute2). It starts the two-node Ray cluster of the tests (tests/netns.py:
the head on this side of a veth pair, a worker node in a network namespace of its own, one CPU each) and runs
`modelci run --target torch==2.13.0 --suite zoo:torch -k DataParallelMLP` through the Ray executor: zoo:torch's
DataParallelMLP (2 ranks on one node), DataParallelMLPTwoNodes (the same model, one rank on each node, meeting
at rank 0's node address) and DataParallelMLPReference (one process on the full batch). Reported per run: each
workload's status, wall time and median training step, and the largest relative difference between the 2-node
loss curve and each of the others, step by step; then the two curves themselves.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from netns import Link, RayNodes  # noqa: E402

NAMES = ("DataParallelMLPTwoNodes", "DataParallelMLP", "DataParallelMLPReference")


def run_once(cluster: RayNodes, root: Path, cache: Path) -> dict[str, dict]:
    """One `modelci run` of the three workloads on the cluster; workload name -> status, duration, losses, step."""
    root.mkdir(parents=True)
    (root / "modelci.toml").write_text(f'cache_dir = "{cache}"\nthreads = 1\nexecutor = "ray"\n'
                                       f'ray_address = "{cluster.address}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELCI_")}
    env.update(cluster.environ())
    done = subprocess.run([sys.executable, "-m", "modelci.cli", "-q", "run", "--target", "torch==2.13.0", "--suite",
                           "zoo:torch", "-k", "DataParallelMLP", "--no-alarms"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode not in (0, 1):
        raise SystemExit(f"modelci run failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    found = {}
    with sqlite3.connect(root / ".modelci" / "history.db") as db:
        for workload, status, duration, result_id in db.execute("SELECT workload, status, duration, id FROM results"):
            metrics = {name: json.loads(values) for name, values in
                       db.execute("SELECT name, \"values\" FROM metrics WHERE result_id = ?", (result_id,))}
            found[workload.split("/", 1)[1]] = {"status": status, "duration": duration,
                                                "loss": metrics.get("loss", []),
                                                "step": statistics.median(metrics.get("time.train") or [0.0])}
    return found


def max_rel(a: list[float], b: list[float]) -> float:
    if len(a) != len(b) or not a:
        return float("nan")
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    cache = Path(os.environ.get("MODELCI_TEST_CACHE", Path.home() / ".cache" / "modelci-tests"))
    with tempfile.TemporaryDirectory(prefix="ray-nodes-bench-") as tmp, Link() as link:
        cluster = RayNodes(link, cpus=1)
        try:
            cluster.start()
            print(f"cluster: head {link.here}, worker node {link.there} (network namespace {link.namespace})")
            last = {}
            for run in range(args.runs):
                last = run_once(cluster, Path(tmp) / f"run-{run}", cache)
                two = last["DataParallelMLPTwoNodes"]
                print(f"run {run + 1}:")
                for name in NAMES:
                    r = last[name]
                    print(f"  {name:26s} {r['status']:8s} wall {r['duration']:6.1f} s  median step "
                          f"{r['step'] * 1000:6.2f} ms  max rel. loss difference to 2 nodes "
                          f"{max_rel(two['loss'], r['loss']):.2e}")
            print("loss curves (2 nodes | 2 ranks on one node):")
            pairs = zip(last["DataParallelMLPTwoNodes"]["loss"], last["DataParallelMLP"]["loss"])
            for step, (a, b) in enumerate(pairs):
                print(f"  {step:2d}  {a:.7f}  {b:.7f}")
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
