"""What the harness costs (docs/overhead.md): `modelci run` on zoo:torch against a plain script.

    .venv/bin/python benchmarks/overhead.py                 # 3 rounds of plain + fork (+ 1 spawn), prints markdown
    .venv/bin/python benchmarks/overhead.py --runs 5 --spawn-runs 0 -k LeNet
    .venv/bin/python benchmarks/overhead.py --runs 3 --spawn-runs 0 --history 30   # with a long history

Each round runs, one after the other on the same machine:
- plain: a script that imports torch once and calls each workload's phases directly (seed and determinism
  through the torch helper, setup, the training steps, warm-up + timed repeats of infer, every save format),
  in the same environment, with the same thread variables; a `devices = 2` workload forks its second rank
  after seeding, as `modelci run` does (a fresh process when the script runs threads by then);
- fork / spawn: the real `modelci -q run --target torch==2.13.0 --suite zoo:torch` in a subprocess, with
  `isolation` set through MODELCI_ISOLATION. The harness steps' seconds come from its `--json` report.

Reported: the median wall time of each, the ratio modelci/plain (median of the per-round ratios), and where
the difference goes: per harness step (RunOutcome.timings) and per workload (result duration against the
plain script's time for the same workload). The environment is built once, before the first round.

The `--plain` mode is the plain script itself; it runs inside the environment (standard library, torch and
the `modelci.workload` package only).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = "torch==2.13.0"
SUITE = "zoo:torch"


# -- the plain script (runs inside the environment) ---------------------------------------------------------


def plain(suite: Path, seed: int, pattern: str, out: Path) -> None:
    """Import torch once, then run every workload's phases directly; writes the seconds per workload to `out`."""
    start = time.perf_counter()
    import torch  # noqa: F401 - the one import of the framework this script pays for

    from modelci.workload.api import Context
    from modelci.workload.child import import_file, suite_files, workload_classes
    from modelci.workload.fw_torch import TorchHelper

    helper = TorchHelper()
    record: dict = {"import": time.perf_counter() - start, "workloads": {}}
    scratch = Path(tempfile.mkdtemp(prefix="plain-"))
    for path in suite_files(suite):
        for cls in workload_classes(import_file(path, "torch")):
            if pattern and pattern not in f"torch/{cls.workload_name()}":
                continue
            began = time.perf_counter()
            rank1 = None
            helper.seed(seed)
            helper.set_determinism(True)
            ctx = Context(seed=seed, scratch=scratch / cls.__name__, world_size=max(1, cls.devices))
            ctx.scratch.mkdir()
            if cls.devices > 1:
                port = free_port()
                rank1 = start_rank1(path, cls, seed, port, scratch)
                helper.init_distributed(0, cls.devices, "127.0.0.1", port)
            phases(cls(), cls, ctx, helper, save=True)
            if rank1 is not None:
                helper.shutdown_distributed()
                if isinstance(rank1, int):
                    os.waitpid(rank1, 0)
                else:
                    rank1.wait()
            record["workloads"][f"torch/{cls.workload_name()}"] = time.perf_counter() - began
    record["total"] = time.perf_counter() - start
    out.write_text(json.dumps(record))


def phases(workload, cls, ctx, helper, save: bool) -> None:
    """Setup, the training steps, warm-up + repeats of infer, the outputs as arrays, every save format."""
    workload.setup(ctx)
    for step in range(int(cls.steps)):
        float(workload.train_step(ctx, step))
    outputs = None
    for _ in range(cls.warmup + max(1, cls.repeats)):
        outputs = workload.infer(ctx)
        helper.synchronize()
    _ = {name: helper.to_numpy(value) for name, value in outputs.items()}
    for fmt in cls.formats if save else ():
        helper.save(workload, ctx, fmt, ctx.scratch / fmt)


def start_rank1(path: Path, cls, seed: int, port: int, scratch: Path):
    """The second rank, forked from this process after seeding (as `modelci run` forks it: the best a plain
    script can do, no second `import torch`), or started fresh when this process runs threads; returns its pid
    or its Popen."""
    if len(os.listdir("/proc/self/task")) > 1:
        return subprocess.Popen([sys.executable, __file__, "--rank1", str(path), cls.__name__, str(seed), str(port)])
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    from modelci.workload.api import Context
    from modelci.workload.fw_torch import TorchHelper

    code = 1
    try:
        helper = TorchHelper()
        ctx = Context(seed=seed, scratch=Path(tempfile.mkdtemp(dir=scratch)), rank=1, world_size=cls.devices)
        helper.init_distributed(1, cls.devices, "127.0.0.1", port)
        phases(cls(), cls, ctx, helper, save=False)
        helper.shutdown_distributed()
        code = 0
    finally:
        os._exit(code)


def rank1(path: str, name: str, seed: int, port: int) -> None:
    """The second rank of a `devices = 2` workload as a fresh process, when the plain script runs threads."""
    from modelci.workload.api import Context
    from modelci.workload.child import import_file, workload_classes
    from modelci.workload.fw_torch import TorchHelper

    cls = next(c for c in workload_classes(import_file(Path(path), "torch")) if c.__name__ == name)
    helper = TorchHelper()
    helper.seed(seed)
    helper.set_determinism(True)
    ctx = Context(seed=seed, scratch=Path(tempfile.mkdtemp()), rank=1, world_size=cls.devices)
    helper.init_distributed(1, cls.devices, "127.0.0.1", port)
    phases(cls(), cls, ctx, helper, save=False)
    helper.shutdown_distributed()


def free_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- the harness side -----------------------------------------------------------------------------------------

def environment(project: Path):
    """The environment `modelci run` uses for zoo:torch (built here once), and the suite folder."""
    from modelci import config, steps, targets

    os.chdir(project)
    cfg = config.load()
    target = targets.resolve(TARGET, cache_dir=cfg.cache_dir)
    env = steps.environment_for(cfg, target, log=print)
    suites = steps.resolve_suites([SUITE], project)
    from modelci.execute import local

    found = local.discover(env.python, suites, Path(tempfile.mkdtemp()))
    workloads, _ = steps.select(found, None)
    extra = steps.missing_requirements(env, workloads)
    if extra:
        env = steps.environment_for(cfg, target, extra, log=print)
    return cfg, env, suites["torch"]


def run_plain(cfg, env, suite: Path, pattern: str, project: Path) -> dict:
    """One round of the plain script; its record plus the wall time seen from here."""
    from modelci.execute import local

    out = project / "plain.json"
    shim = local.shim_dir(project / "shim-root")
    child_env = local.child_env(shim, cfg.seed, cfg.threads)
    start = time.perf_counter()
    subprocess.run([str(env.python), __file__, "--plain", str(suite), "--seed", str(cfg.seed), "-k", pattern,
                    "--out", str(out)], env=child_env, check=True)
    record = json.loads(out.read_text())
    record["wall"] = time.perf_counter() - start
    return record


def run_modelci(isolation: str, pattern: str, project: Path) -> dict:
    """One `modelci -q run --json` in a subprocess, as a user starts it; the harness steps' seconds and the
    results from its JSON report, plus the wall time seen from here."""
    out = project / f"modelci-{isolation}.json"
    modelci = Path(sys.executable).with_name("modelci")
    argv = [str(modelci), "-q", "run", "--target", TARGET, "--suite", SUITE, "--json", str(out)]
    argv += ["-k", pattern] if pattern else []
    env = dict(os.environ, MODELCI_ISOLATION=isolation)
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"modelci run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    report = json.loads(out.read_text())
    results = {r["workload"]: {"duration": r["duration"], "status": r["status"], "isolation": r["isolation"]}
               for r in report["results"]}
    return {"timings": report["run"]["timings"], "results": results, "wall": wall}


def add_history(project: Path, targets: int) -> None:
    """Store `targets` earlier torch versions (2.0.0, 2.0.1, ...) on the benchmark's runner, each a copy of the
    last run's results with its samples scaled by 1-3% of noise, so that every series of the next runs has more
    than `targets` points: the alarm step then segments them, as it does on any history of 20 targets or more."""
    import numpy as np

    from modelci import config
    from modelci.records import Metric
    from modelci.store import Store
    from modelci.targets import Target

    os.chdir(project)
    cfg = config.load()
    store = Store.from_config(cfg)
    last = store.run(store.runs(cfg.runner, limit=1)[0].id)
    environment = workflow_environment(store, last)
    rng = np.random.default_rng(0)
    for index in range(targets):
        version = f"2.0.{index}"
        target = Target(spec=f"torch=={version}", kind="requirement", name="torch",
                        requirements=[f"torch=={version}"], version=version)
        results = []
        for result in last.results:
            scale = 1 + 0.03 * rng.standard_normal()
            metrics = {name: Metric(m.name, m.kind, [v * scale if m.kind == "samples" else v for v in m.values],
                                    m.unit) for name, m in result.metrics.items()}
            results.append(dataclasses.replace(result, id=None, metrics=metrics))
        store.ingest(target=target, environment=environment, runner=cfg.runner, results=results)


def workflow_environment(store, stored):
    """The Environment of a stored run, as `ingest` takes it."""
    from modelci.envs.build import Environment

    row = store.environment(stored.row.environment_id)
    return Environment(id=row.id, path=None, python=Path(sys.executable), spec=None, lock=row.lock,
                       fingerprint=row.fingerprint, isolated=True)


def median(values: list[float]) -> float:
    """The median, or nan for no values."""
    return statistics.median(values) if values else float("nan")


TRIVIAL = """\
import torch
import modelci


class Trivial(modelci.Workload):
    framework = "torch"
    steps = 2
    warmup = 0
    repeats = 1

    def setup(self, ctx):
        self.model = torch.nn.Linear(4, 2)
        self.x = torch.ones(3, 4)

    def train_step(self, ctx, step):
        return float(self.model(self.x).sum())

    def infer(self, ctx):
        return {"y": self.model(self.x)}
"""


def per_workload_cost(env, project: Path, forks: int, spawns: int) -> dict[str, list[float]]:
    """Seconds of one trivial torch workload outside its own phases, per isolation: what one workload costs
    the harness (start the child, import the suite file, write and read the result), without first-use costs
    of the framework that a real model adds."""
    from modelci.execute import forked
    from modelci.execute.local import WorkloadInfo

    suite = project / "trivial"
    suite.mkdir(exist_ok=True)
    (suite / "trivial.py").write_text(TRIVIAL)
    suites = {"trivial": suite}
    costs: dict[str, list[float]] = {}
    for mode, count in (("fork", forks), ("spawn", spawns)):
        scratch = Path(tempfile.mkdtemp(dir=project))
        with forked.Executor(env.python, scratch, isolation=mode, threads=1) as executor:
            workload = WorkloadInfo.from_json(executor.discover(suites)["workloads"][0])
            executor.run_workload(suites, workload, timeout=600)  # the worker's one-time warm-up
            for _ in range(count):
                result = executor.run_workload(suites, workload, timeout=600)
                own = sum(sum(result.metrics[m].values) for m in ("time.setup", "time.train", "time.infer"))
                costs.setdefault(mode, []).append(result.duration - own)
    return costs


def peak_rss(project: Path) -> dict[str, str]:
    """Per workload, the median peak RSS of its forked runs against its spawned ones, from the history."""
    import sqlite3

    rows = sqlite3.connect(project / ".modelci" / "history.db").execute(
        "select r.workload, json_extract(r.info, '$.isolation'), m.median from results r "
        "join metrics m on m.result_id = r.id where m.name = 'mem.peak_rss'")
    values: dict[str, dict[str, list[float]]] = {}
    for workload, isolation, value in rows:
        values.setdefault(workload, {}).setdefault(isolation, []).append(value)
    found = {}
    for workload, by_mode in values.items():
        if by_mode.get("fork") and by_mode.get("spawn"):
            fork, spawn = median(by_mode["fork"]), median(by_mode["spawn"])
            found[workload] = f"{fork / 2**20:.1f} / {spawn / 2**20:.1f} MiB ({fork / spawn:.3f})"
    return found


def same_outputs(project: Path) -> dict[str, str]:
    """Per workload, whether every stored run (fork and spawn) has the same output digests, from the history."""
    import sqlite3

    rows = sqlite3.connect(project / ".modelci" / "history.db").execute(
        "select r.id, r.workload, json_extract(r.info, '$.isolation'), o.name, o.sha256 "
        "from results r join outputs o on o.result_id = r.id")
    runs: dict[str, dict[int, set]] = {}
    modes: dict[str, set] = {}
    for result_id, workload, isolation, name, digest in rows:
        runs.setdefault(workload, {}).setdefault(result_id, set()).add((name, digest))
        modes.setdefault(workload, set()).add(isolation)
    return {w: ("identical" if len({frozenset(v) for v in by_result.values()}) == 1 else "DIFFER")
            + f" ({len(by_result)} runs: {', '.join(sorted(modes[w]))})" for w, by_result in runs.items()}


def report(plains: list[dict], modes: dict[str, list[dict]], machine: str, outputs: dict[str, str],
           memory: dict[str, str], trivial: dict[str, list[float]]) -> str:
    """The figures as markdown."""
    lines = [f"Machine: {machine}. Rounds: {len(plains)} (plain and fork alternate; spawn: "
             f"{len(modes.get('spawn', []))}). Medians.", "",
             "| what | wall (s) | ratio to plain |", "|---|---|---|"]
    plain_wall = median([p["wall"] for p in plains])
    lines.append(f"| plain script (import torch once) | {plain_wall:.1f} | 1.00 |")
    for mode, records in modes.items():
        if not records:
            continue
        ratios = [r["wall"] / p["wall"] for r, p in zip(records, plains)]
        lines.append(f"| `modelci run`, isolation = {mode} | {median([r['wall'] for r in records]):.1f} | "
                     f"{median(ratios):.2f} |")
    fork = modes["fork"]
    count = len(fork[0]["results"])
    steps = sorted({k for r in fork for k in r["timings"]})
    lines += ["", f"Harness steps of `modelci run` (isolation = fork), median seconds per run and per workload "
              f"({count} workloads):", "", "| step | s per run | s per workload |", "|---|---|---|"]
    for step in steps:
        value = median([r["timings"].get(step, 0.0) for r in fork])
        lines.append(f"| {step} | {value:.2f} | {value / count:.3f} |")
    accounted = [sum(v for k, v in r["timings"].items() if k != "worker_start") for r in fork]
    rest = median([r["wall"] - a for r, a in zip(fork, accounted)])
    lines.append(f"| interpreter start, imports, config, report (wall minus the steps) | {rest:.2f} | "
                 f"{rest / count:.3f} |")
    lines += ["", "Per workload: seconds in `modelci run` (result duration: fork or spawn of the child, its "
              "phases, writing and reading its files) against the plain script's seconds for the same phases:", "",
              "| workload | isolation | plain | fork | fork - plain |" + (" spawn |" if modes.get("spawn") else "")
              + " outputs across all stored runs | peak RSS fork / spawn |",
              "|---|---|---|---|---|" + ("---|" if modes.get("spawn") else "") + "---|---|"]
    for name in fork[0]["results"]:
        p = median([r["workloads"].get(name, float("nan")) for r in plains])
        f = median([r["results"][name]["duration"] for r in fork])
        row = f"| {name} | {fork[0]['results'][name]['isolation']} | {p:.2f} | {f:.2f} | {f - p:+.2f} |"
        if modes.get("spawn"):
            row += f" {median([r['results'][name]['duration'] for r in modes['spawn']]):.2f} |"
        lines.append(row + f" {outputs.get(name, 'none')} | {memory.get(name, '-')} |")
    extra = median([r["wall"] - p["wall"] for r, p in zip(fork, plains)])
    lines += ["", f"Harness time per workload, (fork wall - plain wall) / {count}: **{extra / count:.2f} s**."]
    if trivial:
        lines += ["", "One trivial torch workload (a 4x2 linear layer, 2 steps, 1 repeat, no formats), seconds "
                  "outside its own phases (result duration minus setup, train and infer):", "",
                  "| isolation | runs | median | min |", "|---|---|---|---|"]
        for mode, values in trivial.items():
            lines.append(f"| {mode} | {len(values)} | {median(values):.3f} | {min(values):.3f} |")
    return "\n".join(lines)


def main() -> None:
    """Parse the flags and run the rounds (or, with --plain / --rank1, be the plain script)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds of plain + fork")
    parser.add_argument("--spawn-runs", type=int, default=1, help="rounds that also run isolation = spawn")
    parser.add_argument("--trivial", type=int, default=10, help="runs of the trivial workload in fork mode "
                        "(a third as many in spawn mode); 0 skips it")
    parser.add_argument("-k", dest="pattern", default="", help="only workloads whose id contains this")
    parser.add_argument("--project", help="folder for the history and the config (default: a temp folder)")
    parser.add_argument("--history", type=int, default=0, help="store this many earlier targets first, so that "
                        "the alarm step segments every series (as on any history of 20 targets or more)")
    parser.add_argument("--plain", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--rank1", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain:
        return plain(Path(args.plain), args.seed, args.pattern, Path(args.out))
    if args.rank1:
        path, name, seed, port = args.rank1
        return rank1(path, name, int(seed), int(port))

    project = Path(args.project or tempfile.mkdtemp(prefix="overhead-"))
    project.mkdir(parents=True, exist_ok=True)
    (project / "modelci.toml").write_text('runner = "overhead-bench"\n')
    cfg, env, suite = environment(project)
    print(f"environment {env.id}: {env.python}", file=sys.stderr)
    # one untimed round of each: the page cache holds torch, the history has a baseline to compare with
    run_plain(cfg, env, suite, args.pattern, project)
    run_modelci("fork", args.pattern, project)
    if args.history:
        add_history(project, args.history)
    plains: list[dict] = []
    modes: dict[str, list[dict]] = {"fork": [], "spawn": []}
    for index in range(args.runs):
        plains.append(run_plain(cfg, env, suite, args.pattern, project))
        modes["fork"].append(run_modelci("fork", args.pattern, project))
        if index < args.spawn_runs:
            modes["spawn"].append(run_modelci("spawn", args.pattern, project))
        print(f"round {index + 1}: plain {plains[-1]['wall']:.1f} s, fork {modes['fork'][-1]['wall']:.1f} s"
              + (f", spawn {modes['spawn'][-1]['wall']:.1f} s" if index < args.spawn_runs else ""), file=sys.stderr)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    machine = f"{os.cpu_count()} CPUs, load average {load:.1f} at the end"
    trivial = per_workload_cost(env, project, args.trivial, max(1, args.trivial // 3)) if args.trivial else {}
    print(report(plains, modes, machine, same_outputs(project), peak_rss(project), trivial))


if __name__ == "__main__":
    main()
