"""Store speed (docs/overhead.md): ingesting a run of 100 results, and `history` over 10,000 runs.

    .venv/bin/python benchmarks/store.py                  # prints markdown
    .venv/bin/python benchmarks/store.py --runs 2000      # a smaller history

- ingest: `Store.ingest` of one run of 100 results, each with 6 metrics of 20-30 samples (time.setup,
  time.train, time.infer, mem.peak_rss, loss as a curve, one user metric) and 2-3 small output arrays
  (16x3 float32, 10 float64, sometimes 4x4 int64), into a SQLite history that already holds runs. Every
  result's arrays are new bytes, as after a real change. Median of 7 ingests.
- history: `Store.series(workload, metric)` (what `modelci history WORKLOAD --metric NAME` reads) over a
  history of 10,000 runs of 10 workloads with 6 metrics each (600,000 metric rows), with and without a
  runner filter. The history is written with SQLAlchemy Core in bulk (it is the setup, not what is measured).
  Median of 15 queries.
- the `history` command around that call: `modelci history WORKLOAD --metric time.infer` through the CLI's
  entry point in this process (config, opening the store, the query, the table of the last 50 runs, printed
  into a buffer), median of 7; the same with `--all` (a table of 10,000 rows), once; and the whole command
  as the user starts it, in a fresh process (interpreter start and imports included), median of 5.

Both are reported as wall time and as CPU time of this process: on a shared runner whose load average is
several times its core count, the wall time mostly measures the wait for a core; the CPU time is what the
work costs, and what the wall time is on an idle machine.

    .venv/bin/python benchmarks/store.py --backends        # SQLite against PostgreSQL (docs/store.md)

With --backends it compares the two backends instead, on a PostgreSQL server it starts itself (initdb +
pg_ctl, as the tests do: tests/pgserver.py):
- concurrent writers: 1, 4 and 8 processes started together (a barrier), each storing --writer-runs runs of
  20 results into one fresh history; runs stored per second from the start to the last commit, median of 3.
- the same history of --runs runs in both: `Store.series` (median of 15, the calls of the two backends
  interleaved), `modelci history W --metric time.infer` in process (median of 7, interleaved), and the whole
  site (`generate_site`, full) once each, with its load phase (the queries) on its own.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np
from sqlalchemy import insert

from modelci import cli
from modelci.records import Metric, Result
from modelci.store import Store
from modelci.store.schema import EnvironmentRow, MetricRow, ResultRow, RunRow, TargetRow

WORKLOADS = [f"suite/Model{i}" for i in range(10)]
METRICS = ("time.setup", "time.train", "time.infer", "mem.peak_rss", "loss", "accuracy")


class Target(SimpleNamespace):
    """The little of a Target that the store reads."""

    def identity(self) -> dict[str, str]:
        """The columns that identify a target row."""
        return {"kind": self.kind, "name": self.name, "version": self.version, "commit": "", "wheel_sha256": ""}


def target(version: str) -> Target:
    """A requirement target `fw==version`."""
    return Target(spec=f"fw=={version}", kind="requirement", name="fw", version=version, commit_date="", subject="")


ENVIRONMENT = SimpleNamespace(id="bench-env", python="/usr/bin/python3", isolated=True, lock="fw==1.0\n",
                              fingerprint={"python": "3.11"})


def make_result(rng: random.Random, index: int) -> Result:
    """One realistic result: 6 metrics of 20-30 samples and 2-3 small output arrays with fresh bytes."""
    samples = lambda base: [base * (1 + 0.05 * rng.random()) for _ in range(rng.randint(20, 30))]  # noqa: E731
    metrics = {
        "time.setup": Metric("time.setup", "samples", samples(0.2), "s"),
        "time.train": Metric("time.train", "samples", samples(0.01), "s"),
        "time.infer": Metric("time.infer", "samples", samples(0.003), "s"),
        "mem.peak_rss": Metric("mem.peak_rss", "samples", samples(3e8), "bytes"),
        "loss": Metric("loss", "curve", [1.0 / (step + 1) for step in range(rng.randint(20, 30))], ""),
        "accuracy": Metric("accuracy", "samples", samples(0.9), ""),
    }
    seed = rng.getrandbits(32)
    arrays = np.random.default_rng(seed)
    outputs = {"prediction": arrays.standard_normal((16, 3)).astype(np.float32), "scores": arrays.standard_normal(10)}
    if index % 2:
        outputs["labels"] = arrays.integers(0, 10, (4, 4))
    return Result(workload=f"suite/Model{index}", status="ok", metrics=metrics, outputs=outputs,
                  framework="numpy", domain="other", duration=1.0, code_hash="c" * 64, info={"python": "3.11"})


class Clock:
    """Wall and CPU seconds of what runs inside `with clock:`, appended to `wall` and `cpu`."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def __enter__(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def __exit__(self, *exc: object) -> None:
        self.wall.append(time.perf_counter() - self._wall)
        self.cpu.append(time.process_time() - self._cpu)


def bench_ingest(folder: Path, repeats: int) -> Clock:
    """Wall and CPU seconds per `Store.ingest` of a 100-result run."""
    store = Store(str(folder / "ingest.db"), str(folder / "artifacts"))
    rng = random.Random(1)
    clock, warm = Clock(), Clock()
    for attempt in range(repeats + 1):
        results = [make_result(rng, i) for i in range(100)]
        # the first one creates the target and environment rows and warms the connection
        with clock if attempt else warm:
            store.ingest(target=target(f"1.{attempt}"), environment=ENVIRONMENT, runner="bench", results=results)
    return clock


def fill_history(store: Store, runs: int) -> None:
    """`runs` runs x 10 workloads x 6 metrics, inserted in bulk with SQLAlchemy Core."""
    rng = random.Random(2)
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    with store.engine.begin() as conn:
        conn.execute(insert(EnvironmentRow).values(id=ENVIRONMENT.id, python="", isolated=True, lock="",
                                                   fingerprint={}, created_at=start))
        conn.execute(insert(TargetRow), [dict(spec=f"fw==1.{i}", kind="requirement", name="fw", version=f"1.{i}",
                                              commit="", wheel_sha256="", commit_date="", subject="", created_at=start)
                                         for i in range(100)])
    result_id = metric_id = 0
    for first in range(0, runs, 1000):
        run_rows, result_rows, metric_rows = [], [], []
        for run_id in range(first + 1, min(runs, first + 1000) + 1):
            when = start + timedelta(minutes=run_id)
            run_rows.append(dict(id=run_id, target_id=run_id % 100 + 1, environment_id=ENVIRONMENT.id,
                                 runner=f"runner-{run_id % 3}", status="complete", suites=["suite"], selection="",
                                 command="", modelci_version="", started_at=when, finished_at=when))
            for workload in WORKLOADS:
                result_id += 1
                result_rows.append(dict(id=result_id, run_id=run_id, workload=workload, code_hash="", status="ok",
                                        reason="", traceback="", stderr_tail="", framework="numpy", domain="other",
                                        duration=1.0, info={}))
                for name in METRICS:
                    metric_id += 1
                    values = [rng.random() for _ in range(25)]
                    metric_rows.append(dict(id=metric_id, result_id=result_id, name=name, kind="samples", unit="",
                                            values=values, n=25, median=statistics.median(values),
                                            minimum=min(values), maximum=max(values), final=values[-1]))
        with store.engine.begin() as conn:
            conn.execute(insert(RunRow), run_rows)
            conn.execute(insert(ResultRow), result_rows)
            conn.execute(insert(MetricRow), metric_rows)


def bench_series(folder: Path, runs: int, repeats: int) -> dict[str, Clock]:
    """Wall and CPU seconds per `Store.series` over a history of `runs` runs, without and with a runner filter."""
    store = Store(str(folder / "history.db"), str(folder / "artifacts"))
    started = time.perf_counter()
    fill_history(store, runs)
    print(f"history of {runs} runs written in {time.perf_counter() - started:.1f} s")
    clocks = {"all runners": Clock(), "one runner": Clock()}
    warm = Clock()
    for attempt in range(repeats + 1):
        for label, runner in (("all runners", None), ("one runner", "runner-1")):
            with clocks[label] if attempt else warm:
                rows = store.series(WORKLOADS[attempt % len(WORKLOADS)], "time.infer", runner)
            assert len(rows) == (runs if runner is None else len([r for r in range(1, runs + 1) if r % 3 == 1]))
    return clocks


def bench_command(folder: Path, runs: int, repeats: int) -> dict[str, Clock]:
    """Wall and CPU seconds of `modelci history WORKLOAD --metric time.infer` over the history of bench_series:
    in this process (default table, and --all) and as a fresh process."""
    env = {**os.environ, "MODELCI_DB": str(folder / "history.db"), "MODELCI_ARTIFACTS": str(folder / "artifacts")}
    argv = ["history", WORKLOADS[0], "--metric", "time.infer"]
    clocks = {"in process, last 50 runs shown (the default)": Clock(), f"in process, --all ({runs:,} rows)": Clock(),
              "fresh process, last 50 runs shown": Clock()}
    saved, cwd = dict(os.environ), os.getcwd()
    os.environ.update(env)
    os.chdir(folder)  # no modelci.toml or pyproject.toml of someone else's
    try:
        for attempt in range(repeats + 1):
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer), (clocks["in process, last 50 runs shown (the default)"]
                                                      if attempt else Clock()):
                assert cli.main(argv) == 0
            assert "the last 50 of" in buffer.getvalue(), buffer.getvalue()[-500:]
        with contextlib.redirect_stdout(io.StringIO()), clocks[f"in process, --all ({runs:,} rows)"]:
            assert cli.main([*argv, "--all"]) == 0
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(saved)
    command = [str(Path(sys.executable).with_name("modelci")), *argv]
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run(command, env=env, cwd=folder, check=True, capture_output=True)
        # the child's CPU time is not this process's: its wall time stands in for both
        clocks["fresh process, last 50 runs shown"].wall.append(time.perf_counter() - started)
        clocks["fresh process, last 50 runs shown"].cpu.append(float("nan"))
    return clocks


def main() -> None:
    """Run the measurements and print them as markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000, help="stored runs for the history query")
    parser.add_argument("--folder", help="where the databases go (default: a temp folder)")
    parser.add_argument("--backends", action="store_true", help="compare SQLite with PostgreSQL (docs/store.md)")
    parser.add_argument("--writer-runs", type=int, default=10,
                        help="runs each concurrent writer stores (0: leave the concurrent writers out)")
    args = parser.parse_args()
    folder = Path(args.folder or tempfile.mkdtemp(prefix="store-bench-"))
    if args.backends:
        compare_backends(folder, args.runs, args.writer_runs)
        return
    ingest = bench_ingest(folder, 7)
    series = bench_series(folder, args.runs, 15)
    command = bench_command(folder, args.runs, 7)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nMachine: {os.cpu_count()} CPUs, load average {load:.1f}. SQLite (WAL), local artifact folder.\n")
    print("| measurement | wall, median | wall, min | CPU, median | CPU, min |\n|---|---|---|---|---|")
    rows = [("ingest one run of 100 results (600 metric rows, 250 arrays)", ingest)]
    rows += [(f"`Store.series` over {args.runs:,} runs, {label}", clock) for label, clock in series.items()]
    rows += [(f"`modelci history W --metric time.infer`, {label}", clock) for label, clock in command.items()]
    for label, clock in rows:
        print(f"| {label} | {statistics.median(clock.wall) * 1000:.0f} ms | {min(clock.wall) * 1000:.0f} ms "
              f"| {_ms(statistics.median(clock.cpu))} | {_ms(min(clock.cpu))} |")


# -- SQLite against PostgreSQL -------------------------------------------------------------------------------


def _writer(db: str, artifacts: str, index: int, runs: int, barrier: Any) -> None:
    """One runner of the fleet: opens the history, then stores `runs` runs of 20 results."""
    rng = random.Random(index)
    prepared = [[make_result(rng, i) for i in range(20)] for _ in range(runs)]
    store = Store(db, artifacts)  # the schema is made by whichever writer comes first, before the clock starts
    barrier.wait()
    for n in range(runs):
        # every writer stores the same new targets: the race on get-or-create is part of what is measured
        store.ingest(target=target(f"2.{n}"), environment=ENVIRONMENT, runner=f"writer-{index}",
                     results=prepared[n])
    store.engine.dispose()


def bench_writers(new_db: Callable[[], str], folder: Path, writers: int, runs: int) -> float:
    """Runs stored per second by `writers` processes started together on a fresh history."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    db = new_db()
    barrier = context.Barrier(writers + 1)
    processes = [context.Process(target=_writer, args=(db, str(folder / "artifacts"), i, runs, barrier))
                 for i in range(writers)]
    for process in processes:
        process.start()
    barrier.wait()
    started = time.perf_counter()
    for process in processes:
        process.join()
    seconds = time.perf_counter() - started
    assert all(p.exitcode == 0 for p in processes), [p.exitcode for p in processes]
    store = Store(db, str(folder / "artifacts"))
    assert len(store.runs(limit=writers * runs + 1)) == writers * runs
    store.engine.dispose()
    return writers * runs / seconds


def compare_backends(folder: Path, runs: int, writer_runs: int) -> None:
    """Concurrent ingest, `series`, `modelci history` and the site on SQLite and on PostgreSQL."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from pgserver import PostgresServer

    from modelci.report.site import generate_site

    server = PostgresServer().start()
    try:
        counter = iter(range(1_000_000))
        new_db = {"SQLite": lambda: str(folder / f"writers-{next(counter)}.db"), "PostgreSQL": server.database}
        throughput: dict[tuple[str, int], list[float]] = {}
        for _ in range(3 if writer_runs else 0):
            for writers in (1, 4, 8):
                for backend, make in new_db.items():
                    throughput.setdefault((backend, writers), []).append(bench_writers(make, folder, writers,
                                                                                       writer_runs))
        print(f"\n### Concurrent writers ({writer_runs} runs of 20 results each; runs stored per second, "
              "median of 3)\n")
        print("| writers | SQLite | PostgreSQL |\n|---|---|---|")
        for writers in (1, 4, 8) if writer_runs else ():
            print(f"| {writers} | {statistics.median(throughput[('SQLite', writers)]):.1f} "
                  f"| {statistics.median(throughput[('PostgreSQL', writers)]):.1f} |", flush=True)

        stores = {"SQLite": Store(str(folder / "history.db"), str(folder / "artifacts")),
                  "PostgreSQL": Store(server.database(), str(folder / "artifacts"))}
        for backend, store in stores.items():
            started = time.perf_counter()
            fill_history(store, runs)
            print(f"{backend}: history of {runs} runs written in {time.perf_counter() - started:.1f} s", flush=True)
        series = {backend: Clock() for backend in stores}
        for attempt in range(16):
            for backend, store in stores.items():
                with series[backend] if attempt else Clock():
                    assert len(store.series(WORKLOADS[attempt % len(WORKLOADS)], "time.infer")) == runs
        command = {backend: Clock() for backend in stores}
        saved, cwd = dict(os.environ), os.getcwd()
        os.chdir(folder)
        try:
            for attempt in range(8):
                for backend, store in stores.items():
                    os.environ.update(MODELCI_DB=store.url, MODELCI_ARTIFACTS=str(folder / "artifacts"))
                    with contextlib.redirect_stdout(io.StringIO()), command[backend] if attempt else Clock():
                        assert cli.main(["history", WORKLOADS[0], "--metric", "time.infer"]) == 0
        finally:
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(saved)
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"\n### A history of {runs:,} runs on each backend (load average {load:.1f})\n")
        print("| measurement | SQLite | PostgreSQL | PostgreSQL / SQLite |\n|---|---|---|---|")
        rows = [(f"`Store.series` over {runs:,} runs, wall / CPU, median of 15", series),
                ("`modelci history W --metric time.infer` in process, wall / CPU, median of 7", command)]
        for label, clocks in rows:
            a, b = clocks["SQLite"], clocks["PostgreSQL"]
            print(f"| {label} | {_ms(statistics.median(a.wall))} / {_ms(statistics.median(a.cpu))} "
                  f"| {_ms(statistics.median(b.wall))} / {_ms(statistics.median(b.cpu))} "
                  f"| {statistics.median(b.wall) / statistics.median(a.wall):.2f}x |", flush=True)
        site: dict[str, Any] = {}
        for backend, store in stores.items():
            site[backend] = generate_site(store, folder / f"site-{backend}", full=True)
        a, b = site["SQLite"], site["PostgreSQL"]
        print(f"| the whole site (`generate_site`, full: {a.pages:,} pages), once | {a.seconds:.1f} s "
              f"| {b.seconds:.1f} s | {b.seconds / a.seconds:.2f}x |")
        la, lb = a.phases.get("load", float("nan")), b.phases.get("load", float("nan"))
        print(f"| its load phase (the history's queries) | {la:.2f} s | {lb:.2f} s | {lb / la:.2f}x |")
        for store in stores.values():
            store.engine.dispose()
    finally:
        server.stop()


def _ms(seconds: float) -> str:
    return "-" if seconds != seconds else f"{seconds * 1000:.0f} ms"  # NaN: not measured


if __name__ == "__main__":
    main()
