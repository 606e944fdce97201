"""Benchmark: storing and checking 100 saved models, against the time of the loads themselves.

    .venv/bin/python benchmarks/compat.py [--repeats 3] [--models 100] [--no-docs]

Ten numpy MLP workloads (hidden 64 … 640, float32, batch 512) run under ten producer "versions" in this
interpreter (each trains a little differently, seed 0 as in a real history), which gives 100 distinct saved
`.npz` models. Then, side by side in each repeat, on a fresh
store each time:

- loads: one process that, for every saved file, builds the workload from its seed, loads the file and runs
  `infer`; this is the least any compat check must do, and what the ratio is measured against;
- store: `compat.record_saved_models` for the 100 models (blobs, manifests, history rows);
- check: reading the manifests, then `compat.check_stored` (sha256 verified, unpacked, discovered, loaded and
  inferred in one child process, compared by the precision check, kept as history).

Medians over the repeats; the figures go into docs/compat.md between the `bench:compat` markers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from modelci import compat, envs  # noqa: E402
from modelci import config as config_module  # noqa: E402
from modelci.execute import local  # noqa: E402
from modelci.execute.local import WorkloadInfo  # noqa: E402
from modelci.report.console import Progress  # noqa: E402
from modelci.store import Store  # noqa: E402
from modelci.store import compat_schema as records  # noqa: E402
from modelci.targets import Target  # noqa: E402

SUITE = '''\
import os

import numpy as np
import modelci


class _MLP(modelci.Workload):
    framework = "numpy"
    steps = 1
    warmup = 0
    repeats = 1
    formats = ("npz",)
    hidden = 64

    def setup(self, ctx):
        rng = np.random.default_rng(ctx.seed)
        self.x = rng.standard_normal((512, 784)).astype(np.float32)
        self.w1 = (rng.standard_normal((784, self.hidden)) * 0.05).astype(np.float32)
        self.w2 = (rng.standard_normal((self.hidden, self.hidden)) * 0.05).astype(np.float32)
        self.w3 = (rng.standard_normal((self.hidden, 10)) * 0.05).astype(np.float32)

    def train_step(self, ctx, step):
        # each producer "version" trains a little differently, so that its saved bytes are its own
        self.w1 *= np.float32(1.0 - 0.01 * int(os.environ.get("BENCHFW_VERSION", "0")))
        return 0.0

    def infer(self, ctx):
        h = np.maximum(self.x @ self.w1, 0)
        h = np.maximum(h @ self.w2, 0)
        return {"logits": h @ self.w3}

    def state_dict(self):
        return {"w1": self.w1, "w2": self.w2, "w3": self.w3}

    def load_state_dict(self, state):
        self.w1, self.w2, self.w3 = state["w1"], state["w2"], state["w3"]
        return self
'''
SUITE += "".join(f"\n\nclass MLP{h}(_MLP):\n    hidden = {h}\n" for h in range(64, 641, 64))

LOADS = '''\
import json, sys, time
from pathlib import Path
from modelci.workload.api import Context
from modelci.workload.child import find_class, parse_suites
from modelci.workload.frameworks import get_helper

jobs = json.loads(Path(sys.argv[1]).read_text())
suites = parse_suites(sys.argv[2:])
classes = {}
start = time.perf_counter()
for job in jobs:
    if job["workload"] not in classes:
        classes[job["workload"]] = find_class(suites, job["workload"])[0]
    cls = classes[job["workload"]]
    helper = get_helper(cls.framework)
    helper.seed(job["seed"])
    ctx = Context(seed=job["seed"])
    workload = cls()
    workload.setup(ctx)
    helper.load(workload, ctx, "npz", Path(job["path"]))
    workload.infer(ctx)
print(time.perf_counter() - start)
'''


def produce(root: Path, cfg, env, models: int) -> tuple[dict, list]:
    """Run the ten workloads under as many seeds as needed: (version -> (target, results)), workloads."""
    suite = root / "benchsuite"
    suite.mkdir()
    (suite / "models.py").write_text(SUITE)
    suites = {"benchsuite": suite}
    scratch = root / "produce"
    scratch.mkdir()
    found = local.discover(env.python, suites, scratch)
    workloads = [WorkloadInfo.from_json(w) for w in found["workloads"]]
    versions = {}
    for version in range(-(-models // len(workloads))):
        target = Target(spec=f"benchfw==1.{version}", kind="requirement", name="benchfw", version=f"1.{version}")
        chosen = workloads[: models - version * len(workloads)]
        os.environ["BENCHFW_VERSION"] = str(version)
        results = [local.run_workload(env.python, suites, w, scratch, seed=0, repeats=1) for w in chosen]
        assert all(r.status == "ok" for r in results), [r.reason for r in results]
        versions[version] = (target, results)
    return versions, workloads


def loads_time(root: Path, env, versions: dict) -> float:
    """Seconds of setup + load + infer for every saved model, in one process, without the harness."""
    jobs = [{"workload": r.workload, "seed": 0, "path": r.info["saved"][0]["path"]}
            for v, (_, results) in versions.items() for r in results]
    (root / "loads.json").write_text(json.dumps(jobs))
    (root / "loads.py").write_text(LOADS)
    out = subprocess.run([str(env.python), str(root / "loads.py"), str(root / "loads.json"),
                          f"benchsuite={root / 'benchsuite'}"], capture_output=True, text=True, check=True,
                         env=local.child_env(local.shim_dir(root), 0, 1))
    return float(out.stdout.strip())


def harness_times(root: Path, cfg, env, versions: dict, workloads: list,
                  repeat: int) -> tuple[float, float, float, int]:
    """Seconds to store the saved models and to check them all on a fresh store; the seconds of setup + load +
    infer inside that check (its own loads, timed by the child); and the entries checked."""
    cfg = dataclasses.replace(cfg, db=str(root / f"history-{repeat}.db"), artifacts=str(root / f"artifacts-{repeat}"))
    store = Store.from_config(cfg)
    suites = {"benchsuite": root / "benchsuite"}
    scratch = root / f"scratch-{repeat}"
    scratch.mkdir()
    start = time.perf_counter()
    for version, (target, results) in versions.items():
        compat.record_saved_models(store, target, env, results, seed=0, suites=suites, workloads=workloads,
                                   scratch=scratch)
    stored = time.perf_counter() - start
    consumer = Target(spec="benchfw==2.0", kind="requirement", name="benchfw", version="2.0")
    start = time.perf_counter()
    manifests, problems = records.read_manifests(store.artifacts)
    plan = [(compat.target_dict(consumer), env, compat.latest(manifests), "backward")]
    outcome = compat.check_stored(cfg, store, consumer, plan, problems, suites, "backward", Progress(quiet=True))
    checked = time.perf_counter() - start
    bad = [e for e in outcome.entries if e.outcome != "ok"]
    assert not bad, bad[0]
    inside = sum(sum(e.times.get(k, 0.0) for k in ("setup", "load", "infer")) for e in outcome.entries)
    return stored, checked, inside, len(outcome.entries)


def write_docs(figures: str) -> None:
    """Put the figures between the markers of docs/compat.md."""
    docs = ROOT / "docs" / "compat.md"
    text = docs.read_text()
    block = f"<!-- bench:compat -->\n{figures}\n<!-- /bench:compat -->"
    docs.write_text(re.sub(r"<!-- bench:compat -->.*?<!-- /bench:compat -->", lambda _: block, text, flags=re.S))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--no-docs", action="store_true", help="print the figures only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="modelci-bench-compat-") as tmp:
        root = Path(tmp)
        (root / "modelci.toml").write_text(f'cache_dir = "{root / "cache"}"\nrunner = "bench"\nthreads = 1\n')
        cfg = config_module.load(cwd=root)
        env = envs.current(root / "cache")
        versions, workloads = produce(root, cfg, env, args.models)
        rows = []
        for repeat in range(args.repeats):
            loads = loads_time(root, env, versions)
            stored, checked, inside, count = harness_times(root, cfg, env, versions, workloads, repeat)
            rows.append((loads, stored, checked, inside))
            print(f"repeat {repeat + 1}: {count} models; loads {loads:.2f} s, store {stored:.2f} s, "
                  f"check {checked:.2f} s (its own loads {inside:.2f} s), ratio {(stored + checked) / loads:.2f}, "
                  f"against its own loads {(stored + checked) / inside:.2f}", flush=True)
    loads, stored, checked, inside = (statistics.median(column) for column in zip(*rows))
    ratios = sorted((s + c) / lo for lo, s, c, _ in rows)
    inner = sorted((s + c) / i for _, s, c, i in rows)
    figures = "\n".join([
        f"Measured by `benchmarks/compat.py` ({count} saved models, {args.repeats} repeats, medians; "
        f"Python {sys.version.split()[0]}, numpy MLPs of hidden 64-640, float32, batch 512; 2-core shared runner):",
        "",
        "| step | seconds |",
        "|---|---|",
        f"| the loads themselves (setup + load + infer, one process) | {loads:.2f} |",
        f"| store the {count} saved models (blobs, manifests, history) | {stored:.2f} |",
        f"| check them (verify, unpack, load + infer in the env, compare, history) | {checked:.2f} |",
        f"| of which the check's own setup + load + infer (timed in its child) | {inside:.2f} |",
        f"| **(store + check) / loads** | **{statistics.median(ratios):.2f}** (each repeat: "
        + ", ".join(f"{r:.2f}" for r in ratios) + ") |",
        f"| (store + check) / the check's own loads | {statistics.median(inner):.2f} (each repeat: "
        + ", ".join(f"{r:.2f}" for r in inner) + ") |",
    ])
    print(figures)
    if not args.no_docs:
        write_docs(figures)


if __name__ == "__main__":
    main()
