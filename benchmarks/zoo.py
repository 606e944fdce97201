"""The built-in zoos through the real `modelci run` (figures in docs/zoo.md).

    .venv/bin/python benchmarks/zoo.py --target torch==2.13.0 --suite zoo:torch [--runs 2] [--write-docs]
    .venv/bin/python benchmarks/zoo.py --target paddlepaddle==3.0.0 --suite zoo:paddle [--runs 2] [--write-docs]

In a fresh project (its own history; the environment cache is the user's, so a cached environment is reused)
it runs `modelci run` `--runs` times on the same target and reports:

- the wall time of each run, and whether that run had to build the environment (the zoo target is "under 5
  minutes from a cached environment");
- per workload of the last run: status, median train step × steps, median infer, peak RSS;
- every finding of runs 2.. that is not `ok`/`new`: a second run of the same target with nothing changed must
  raise none (a regression or an improvement there is noise the checks let through).

It exits 1 when a workload is not ok or a later run has such a finding, so it doubles as the acceptance check.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs" / "zoo.md"


def modelci(project: Path, argv: list[str]) -> tuple[int, float, str]:
    """`modelci ARGV` in `project` with this interpreter; (exit code, wall seconds, stderr)."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", "import sys; from modelci import cli; sys.exit(cli.main())", *argv],
                          cwd=project, capture_output=True, text=True)
    return proc.returncode, time.perf_counter() - start, proc.stderr


def one_run(project: Path, target: str, suite: str, index: int) -> dict:
    report = project / f"run{index}.json"
    code, wall, stderr = modelci(project, ["run", "--target", target, "--suite", suite, "--json", str(report)])
    if not report.exists():
        raise SystemExit(f"modelci run failed ({code}) without a report:\n{stderr[-3000:]}")
    return {"code": code, "wall": wall, "built": "building environment" in stderr,
            "report": json.loads(report.read_text())}


def ms(value: float | None) -> str:
    return "" if value is None else f"{value * 1e3:.1f}"


def table(report: dict) -> list[str]:
    rows = ["| workload | status | train: median step (ms) × steps | infer: median (ms) | peak RSS (MiB) |",
            "|---|---|---:|---:|---:|"]
    for result in report["results"]:
        metrics = result["metrics"]
        train, infer = metrics.get("time.train", {}), metrics.get("time.infer", {})
        rss = metrics.get("mem.peak_rss", {}).get("median")
        steps = f"{ms(train.get('median'))} × {train.get('n', 0)}" if train else ""
        rows.append(f"| {result['workload']} | {result['status']} | {steps} | {ms(infer.get('median'))} | "
                    f"{'' if rss is None else f'{rss / 2**20:.0f}'} |")
    return rows


def noisy_findings(report: dict) -> list[str]:
    """Findings of a repeat run that say something changed."""
    return [f"{r['workload']} {f['check']}:{f['metric']} {f['verdict']}{'' if f['gating'] else ' (report only)'}: "
            f"{f['message']}" for r in report["results"] for f in r["findings"] if f["verdict"] not in ("ok", "new")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--suite", required=True)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--write-docs", action="store_true", help="replace the suite's block in docs/zoo.md")
    args = parser.parse_args()

    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="modelci-zoo-") as folder:
        project = Path(folder)
        runs = [one_run(project, args.target, args.suite, i + 1) for i in range(args.runs)]
    last = runs[-1]["report"]
    lines = [f"Measured {date.today()} on {platform.machine()} Linux ({os.cpu_count()} cores, load average "
             f"{load:.1f} at the start): `python benchmarks/zoo.py --target {args.target} --suite {args.suite} "
             f"--runs {args.runs}`, target {last['run']['target']['label']}, environment "
             f"{last['run']['environment']}.", ""]
    lines += ["| run | wall (s) | environment | exit code | findings other than ok/new |", "|---|---:|---|---:|---:|"]
    noisy = []
    for i, run in enumerate(runs, 1):
        found = noisy_findings(run["report"]) if i > 1 else []
        noisy += found
        lines.append(f"| {i} | {run['wall']:.1f} | {'built' if run['built'] else 'cached'} | {run['code']} | "
                     f"{len(found) if i > 1 else '(first run: no baseline)'} |")
    lines += ["", f"Run {len(runs)}, per workload:", "", *table(last)]
    if noisy:
        lines += ["", "Findings of the repeat runs:", "", *[f"- {text}" for text in noisy]]
    text = "\n".join(lines)
    print(text)
    if args.write_docs:
        name = args.suite.removeprefix("zoo:")
        begin, end = f"<!-- bench:zoo-{name}:begin -->", f"<!-- bench:zoo-{name}:end -->"
        docs = DOCS.read_text()
        if begin not in docs:
            raise SystemExit(f"docs/zoo.md has no {begin} marker")
        DOCS.write_text(re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: f"{begin}\n{text}\n{end}",
                               docs, flags=re.S))
    bad = [r for r in last["results"] if r["status"] not in ("ok", "skipped")]
    return 1 if bad or noisy else 0


if __name__ == "__main__":
    sys.exit(main())
