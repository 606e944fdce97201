"""How fast `modelci report` writes the dashboard for a large history, and how large its pages get.

Generates a history of W workloads x T targets (default 50 x 500: 500 runs, 25,000 results, 125,000 metric
series, 175,000 findings) straight through the Store API: one `Store.ingest` per run, the findings of a run in
one bulk insert. The series carry steps, drifts and noise, so the change-point markers have work to do. Then it
times `generate_site` several times (median), runs the real `modelci report` command once, and checks that no
page passes 2 MB. With --write-docs the figures replace the block between the markers in docs/dashboard.md.

    .venv/bin/python benchmarks/report_scale.py                 # 50 x 500, 3 repeats
    .venv/bin/python benchmarks/report_scale.py --workloads 5 --targets 40 --repeats 1   # a quick look
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from sqlalchemy import insert

from modelci.records import Metric, Result
from modelci.report.site import generate_site
from modelci.store import Store
from modelci.store.schema import FindingRow
from modelci.targets import Target

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "dashboard.md"
BEGIN, END = "<!-- report_scale:begin -->", "<!-- report_scale:end -->"
LIMIT_S, LIMIT_BYTES = 15.0, 2 * 10**6


def build_history(store: Store, workloads: int, targets: int, seed: int = 0, runner: str = "ci-cpu") -> None:
    """Ingest `targets` runs of `workloads` results each, with realistic metrics, outputs and findings."""
    rng = np.random.default_rng(seed)
    names = [f"zoo{w % 5}/Model{w:02d}" for w in range(workloads)]
    base = {name: 0.01 * (1 + w % 7) for w, name in enumerate(names)}
    # every fifth workload gets a 20% slowdown from 60% of the history on, every seventh a memory step
    slow_from, mem_from = int(targets * 0.6), int(targets * 0.3)
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    output = {name: rng.standard_normal((8, 4)).astype(np.float32) for name in names}
    for t in range(targets):
        version = f"2.{t // 50}.{t % 50}"
        target = Target(spec=f"fakefw=={version}", kind="requirement", name="fakefw", requirements=[], version=version)
        lock = f"fakefw=={version}\nnumpy==1.26.{t // 100}\nfilelock==3.13.1\n"
        env = SimpleNamespace(id=f"{runner}-{t:08x}", python="/cache/envs/python", isolated=True, lock=lock,
                              fingerprint={"schema": 1, "python": "3.11.7", "cpu": "synthetic",
                                           "packages_of_interest": {"fakefw": version}})
        results = []
        for w, name in enumerate(names):
            scale = base[name] * (1.2 if w % 5 == 0 and t >= slow_from else 1.0)
            train = list(scale * (1 + 0.03 * rng.standard_normal(20)))
            infer = list(scale / 4 * (1 + 0.03 * rng.standard_normal(10)))
            mem = 200e6 + (50e6 if w % 7 == 0 and t >= mem_from else 0) + 1e6 * rng.standard_normal()
            loss = list(np.exp(-np.arange(20) / 6) * (1 + 0.002 * t / targets) + 0.01)
            drifted = output[name] * (1 + 1e-6 * (t % 10)) if w % 3 == 0 else output[name]
            failed = (t * 7 + w) % 97 == 0
            results.append(Result(
                workload=name, status="failed" if failed else "ok", framework="fakefw", domain="vision",
                reason="RuntimeError: synthetic failure" if failed else "", duration=float(sum(train) + sum(infer)),
                stderr_tail="Traceback (most recent call last):\n  ...\nRuntimeError: synthetic failure" * failed,
                code_hash=f"{w:064x}",
                metrics={"time.setup": Metric("time.setup", "samples", [scale / 2], "s"),
                         "time.train": Metric("time.train", "samples", train, "s"),
                         "time.infer": Metric("time.infer", "samples", infer, "s"),
                         "mem.peak_rss": Metric("mem.peak_rss", "samples", [mem], "bytes"),
                         "loss": Metric("loss", "curve", [float(v) for v in loss])},
                outputs={} if failed else {"prediction": drifted}))
        run_id = store.ingest(target=target, environment=env, runner=runner, results=results,
                              suites=["zoo:synthetic"], command="modelci run --suite zoo:synthetic",
                              started_at=start + timedelta(hours=t))
        with store.sessions.begin() as session:
            session.execute(insert(FindingRow), [row for r in results for row in _findings(r, t, rng)])
        if t % 50 == 49:
            print(f"  ingested {t + 1}/{targets} runs", flush=True)
        del run_id


def _findings(result: Result, t: int, rng: np.random.Generator) -> list[dict]:
    """The seven findings `checks.evaluate` gives an ok result (status, precision, curve, memory, 3 timings)."""
    rows = [{"result_id": result.id, "check": "status", "metric": "status", "gating": True,
             "verdict": "regression" if result.status != "ok" else ("new" if t == 0 else "ok"),
             "numbers": {"baseline": "ok", "current": result.status}, "message": f"status ok -> {result.status}"}]
    if result.status != "ok" or t == 0:
        return rows
    max_rel = 1e-6 * (t % 10) if result.workload.endswith(("0", "3", "6", "9")) else 0.0
    rows.append({"result_id": result.id, "check": "precision", "metric": "output:prediction", "gating": True,
                 "verdict": "ok", "numbers": {"max_abs": max_rel * 2, "max_rel": max_rel, "mismatches": 0,
                                              "elements": 32, "cosine": 1.0},
                 "message": f"output:prediction within rtol=1e-05 atol=1e-08: max_rel {max_rel:.2e}"})
    rows.append({"result_id": result.id, "check": "curve", "metric": "loss", "gating": True, "verdict": "ok",
                 "numbers": {"first_diverging_step": None, "max_rel_diff": 1e-4}, "message": "loss within tolerance"})
    rows.append({"result_id": result.id, "check": "memory", "metric": "mem.peak_rss", "gating": True, "verdict": "ok",
                 "numbers": {"ratio": 1.0}, "message": "mem.peak_rss within tolerance"})
    for name in ("time.infer", "time.setup", "time.train"):
        ratio = float(1 + 0.03 * rng.standard_normal())
        rows.append({"result_id": result.id, "check": "timing", "metric": name, "gating": True, "verdict": "ok",
                     "numbers": {"ratio": ratio, "p_value": 0.4}, "message": f"{name} {ratio:.2f}x within 1.1x"})
    return rows


def measure(db: Path, artifacts: Path, repeats: int) -> dict:
    """Median of `repeats` generations from scratch, a refresh that keeps every run page, the page sizes, and
    one real `modelci report` run (a new process: imports included)."""
    store = Store(str(db), str(artifacts))
    with tempfile.TemporaryDirectory() as tmp:
        # forked (the default) and one process alternate, so that both see the same load on a shared machine
        reports, serials = [], []
        for i in range(repeats):
            reports.append(generate_site(store, Path(tmp) / f"site-{i}"))
            serials.append(generate_site(store, Path(tmp) / f"serial-{i}", jobs=1))
        refresh = generate_site(store, Path(tmp) / f"site-{repeats - 1}")
        site = Path(tmp) / f"site-{repeats - 1}"
        sizes = [p.stat().st_size for p in site.rglob("*.html")]
        env = {**os.environ, "MODELCI_DB": str(db), "MODELCI_ARTIFACTS": str(artifacts)}
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "modelci.cli", "report", "--out", str(Path(tmp) / "cli")], env=env,
                       check=True, capture_output=True, cwd=tmp)
        cli_s = time.perf_counter() - t0
    middle = sorted(reports, key=lambda r: r.seconds)[len(reports) // 2]
    return {"median_s": middle.seconds, "times": [r.seconds for r in reports],
            "cpu_s": statistics.median(r.cpu_seconds for r in reports), "phases": middle.phases,
            "serial_s": statistics.median(r.seconds for r in serials),
            "serial_cpu_s": statistics.median(r.cpu_seconds for r in serials), "refresh_s": refresh.seconds,
            "refresh_kept": refresh.kept_pages, "cli_s": cli_s,
            "pages": middle.pages, "largest": middle.largest_page, "largest_bytes": middle.largest_bytes,
            "total_bytes": sum(sizes), "median_bytes": statistics.median(sizes), "load": os.getloadavg()[0]}


def render(args: argparse.Namespace, figures: dict, ingest_s: float | None) -> str:
    """The figures as the markdown block for docs/dashboard.md."""
    ok = figures["median_s"] < LIMIT_S and figures["largest_bytes"] < LIMIT_BYTES
    phases = figures["phases"]
    lines = [
        BEGIN,
        f"Measured by `benchmarks/report_scale.py` on {platform.machine()} with {os.cpu_count()} CPUs shared with "
        f"other work (load average {figures['load']:.1f} at the end), Python {platform.python_version()}, SQLite; "
        f"{datetime.now(timezone.utc):%Y-%m-%d}.",
        "",
        "| history | figure |",
        "|---|---|",
        f"| workloads x targets | {args.workloads} x {args.targets} ({args.workloads * args.targets:,} results, "
        f"one run per target) |",
        f"| `generate_site` from scratch, median of {len(figures['times'])} | **{figures['median_s']:.1f} s** wall, "
        f"{figures['cpu_s']:.1f} s CPU in both processes "
        f"(runs: {', '.join(f'{t:.1f}' for t in figures['times'])} s; limit "
        f"{LIMIT_S:.0f} s) |",
        f"| of which: bulk load / workload pages (change points) / run pages, in a forked child meanwhile | "
        f"{phases['load']:.1f} / {phases['workload pages']:.1f} ({phases['change points']:.1f}) / "
        f"{phases['run pages (own)']:.1f} s |",
        f"| the same in one process (`jobs=1`), alternating with the above, median | {figures['serial_s']:.1f} s "
        f"wall, {figures['serial_cpu_s']:.1f} s CPU |",
        f"| refresh with nothing new ({figures['refresh_kept']} run pages kept) | {figures['refresh_s']:.1f} s |",
        f"| `modelci report` end to end (new process, imports included) | {figures['cli_s']:.1f} s |",
        f"| pages | {figures['pages']:,} |",
        f"| largest page | {figures['largest']} **{figures['largest_bytes'] / 1024:.0f} KiB** (limit 2 MB) |",
        f"| median page / all pages | {figures['median_bytes'] / 1024:.0f} KiB / "
        f"{figures['total_bytes'] / 2**20:.0f} MiB |",
        "| shared asset (not a page) | assets/plotly.min.js, copied once from the plotly package |",
    ]
    if ingest_s is not None:
        lines.append(f"| generating the history (not part of the limit) | {ingest_s:.0f} s |")
    lines += ["", f"Within the limits: {'yes' if ok else 'NO'}.", END]
    return "\n".join(lines)


def main() -> int:
    """Build (or reuse) the history, measure, print, and optionally write docs/dashboard.md."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=50)
    parser.add_argument("--targets", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="folder for the generated history; reused when it exists")
    parser.add_argument("--write-docs", action="store_true", help="write the figures into docs/dashboard.md")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="report-scale-"))
    db, artifacts = folder / f"history-{args.workloads}x{args.targets}.db", folder / "artifacts"
    ingest_s = None
    if not db.exists():
        print(f"generating {args.workloads} x {args.targets} into {db}", flush=True)
        t0 = time.perf_counter()
        build_history(Store(str(db), str(artifacts)), args.workloads, args.targets)
        ingest_s = time.perf_counter() - t0
    figures = measure(db, artifacts, args.repeats)
    block = render(args, figures, ingest_s)
    print(block)
    if args.write_docs:
        text = DOC.read_text()
        if BEGIN not in text or END not in text:
            print(f"{DOC} has no {BEGIN} ... {END} block to replace", file=sys.stderr)
            return 2
        head, rest = text.split(BEGIN, 1)
        DOC.write_text(head + block + rest.split(END, 1)[1])
    return 0 if figures["median_s"] < LIMIT_S and figures["largest_bytes"] < LIMIT_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
