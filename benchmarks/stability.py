"""Do two `compare A B --rerun` of the same builds agree? (figures in docs/zoo.md, "Stability of compare").

    .venv/bin/python benchmarks/stability.py --a numpy==1.26.4 --b numpy==2.1.3 --suite zoo:numpy [--pairs 3]
    .venv/bin/python benchmarks/stability.py --a paddlepaddle==2.6.2 --b paddlepaddle==3.0.0 --suite zoo:paddle
    .venv/bin/python benchmarks/stability.py ... --from-reports DIR   # the tables again from kept reports

In a fresh project (its own history; the environment cache is the user's) it runs `modelci compare A B --rerun`
2 x `--pairs` times, one after the other, and for each compare takes its gating verdict set: every finding that
gates with a regression or an improvement, and every result that is not ok. Nothing changed between two
compares but the machine's load, so the sets of a pair should be equal. Side by side, from the same runs, it
also reports the set a compare would have had with one pass per side and no confirmation (what the first pass
flagged, before the A B B A confirmation judged it, memory included), which is how `compare` judged before, and
the set it would have had with one confirmation pair only (B A, before the third pass in the order A B).

It also counts the alarms each compare opened (the JSON's `alarms`): an alarm must open only for a verdict of
the compare's own set. For a pair that disagrees it lists each verdict found by one compare only, with the
ratios both compares measured (first pass / confirmation), and it says apart whether the gating *regressions*
agree (what alarms open for). It exits 1 when two compares of a pair disagree. `--keep DIR` keeps the JSON
reports; `--from-reports DIR` makes the tables from kept ones without running anything.
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


def compare(project: Path, a: str, b: str, suite: str, index: int) -> dict:
    """One `modelci compare A B --rerun` in `project`: its report, exit code and wall time."""
    report = project / f"compare{index}.json"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", "import sys; from modelci import cli; sys.exit(cli.main())",
                           "compare", a, b, "--suite", suite, "--rerun", "--json", str(report)],
                          cwd=project, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if not report.exists():
        raise SystemExit(f"modelci compare failed ({proc.returncode}) without a report:\n{proc.stderr[-3000:]}")
    return {"code": proc.returncode, "wall": wall, "load": os.getloadavg()[0],
            "report": json.loads(report.read_text())}


def short(workload: str) -> str:
    return workload.split("/", 1)[-1]


def gating_set(report: dict) -> set[str]:
    """The compare's verdicts that count: gating regressions and improvements, and results that are not ok."""
    found = set()
    for result in report["results"]:
        if result["status"] not in ("ok", "skipped"):
            found.add(f"{short(result['workload'])} {result['status']}")
        for f in result["findings"]:
            if f["gating"] and f["verdict"] in ("regression", "improvement") and f["check"] != "status":
                found.add(f"{short(result['workload'])} {f['metric']} {f['verdict']}")
    return found


def one_pass_set(report: dict) -> set[str]:
    """What one run per side would have gated on: the gating set plus what the first pass flagged and the
    confirmation rejected (a rejected finding keeps the first pass's numbers and says `not confirmed`)."""
    found = gating_set(report)
    for result in report["results"]:
        for f in result["findings"]:
            confirmation = f["numbers"].get("confirmation")
            if confirmation is not None and not confirmation.get("confirmed"):
                ratio = f["numbers"].get("ratio") or 1.0
                lower = f["check"] in ("timing", "memory")
                word = "regression" if (ratio > 1) == lower else "improvement"
                found.add(f"{short(result['workload'])} {f['metric']} {word}")
    return found


def one_pair_set(report: dict) -> set[str]:
    """What the compare would have said with one confirmation pair (B A), as before a third pass was added: the
    gating set, less what the third pass rejected, plus what the first pair had confirmed and the third rejected
    (the first pass and the pair agree on the verdict, their ratios within the factor of each other)."""
    found = gating_set(report)
    for result in report["results"]:
        for f in result["findings"]:
            confirmation = f["numbers"].get("confirmation") or {}
            passes = confirmation.get("passes") or []
            if len(passes) < 2 or not f["gating"]:
                continue  # decided by the first pair (or not confirmed at all): the same either way
            first, pair, factor = f["numbers"].get("ratio"), passes[0].get("ratio"), f["numbers"].get("factor")
            word = passes[0].get("verdict")
            if word in ("regression", "improvement") and first and pair and factor and \
                    max(first, pair) / min(first, pair) <= factor:
                found.add(f"{short(result['workload'])} {f['metric']} {word}")
    return found


def regressions(found: set[str]) -> set[str]:
    return {v for v in found if not v.endswith(" improvement")}


def ratios(report: dict, verdict: str) -> str:
    """The ratios a compare measured for the workload and metric of `verdict`: the first pass / each confirming
    pass (B A, then A B while the difference still stood)."""
    workload, metric = verdict.split(" ")[:2]
    for result in report["results"]:
        if short(result["workload"]) != workload:
            continue
        for f in result["findings"]:
            if f["metric"] == metric:
                first = f["numbers"].get("ratio")
                confirmation = f["numbers"].get("confirmation") or {}
                later = [p.get("ratio") for p in confirmation.get("passes", [])] or [confirmation.get("ratio")]
                text = f"{first:.2f}x" if isinstance(first, (int, float)) else "-"
                return text + "".join(f" / {r:.2f}x" for r in later if isinstance(r, (int, float)))
    return "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True)
    parser.add_argument("--b", required=True)
    parser.add_argument("--suite", required=True)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true", help="replace the suite's block in docs/zoo.md")
    parser.add_argument("--keep", metavar="DIR", help="keep each compare's JSON report (and its wall time) in DIR")
    parser.add_argument("--from-reports", metavar="DIR", help="read the reports kept in DIR instead of running")
    args = parser.parse_args()

    if args.from_reports:
        kept = sorted((p for p in Path(args.from_reports).glob("compare*.json") if p.stem[7:].isdigit()),
                      key=lambda p: int(p.stem[7:]))
        runs = []
        for path in kept:
            meta = path.with_suffix(".meta.json")
            known = json.loads(meta.read_text()) if meta.exists() else {}
            runs.append({"code": known.get("code", int(bool(json.loads(path.read_text())["regressed"]))),
                         "wall": known.get("wall", float("nan")), "load": known.get("load", float("nan")),
                         "report": json.loads(path.read_text())})
        args.pairs = len(runs) // 2
        runs = runs[:2 * args.pairs]
    else:
        with tempfile.TemporaryDirectory(prefix="modelci-stability-") as folder:
            project = Path(folder)
            runs = []
            for i in range(2 * args.pairs):
                runs.append(compare(project, args.a, args.b, args.suite, i + 1))
                if args.keep:
                    Path(args.keep).mkdir(parents=True, exist_ok=True)
                    (Path(args.keep) / f"compare{i + 1}.json").write_text(json.dumps(runs[-1]["report"]))
                    (Path(args.keep) / f"compare{i + 1}.meta.json").write_text(json.dumps(
                        {k: runs[-1][k] for k in ("code", "wall", "load")}))
    sets = [gating_set(r["report"]) for r in runs]
    single = [one_pass_set(r["report"]) for r in runs]
    paired = [one_pair_set(r["report"]) for r in runs]
    lines = [f"Measured {date.today()} on {platform.machine()} Linux ({os.cpu_count()} cores): "
             f"`python benchmarks/stability.py --a {args.a} --b {args.b} --suite {args.suite} --pairs {args.pairs}`.",
             "", "| compare | wall (s) | load | exit | gating verdicts | alarms opened | one pass, unconfirmed |",
             "|---:|---:|---:|---:|---|---:|---|"]
    for i, (run, found, first) in enumerate(zip(runs, sets, single), 1):
        opened = sum(1 for e in run["report"].get("alarms", []) if e["event"] == "open")
        lines.append(f"| {i} | {run['wall']:.0f} | {run['load']:.1f} | {run['code']} | "
                     f"{', '.join(sorted(found)) or '(none)'} | {opened} | {', '.join(sorted(first)) or '(none)'} |")
    agree = [sets[2 * p] == sets[2 * p + 1] for p in range(args.pairs)]
    agree_single = [single[2 * p] == single[2 * p + 1] for p in range(args.pairs)]
    agree_paired = [paired[2 * p] == paired[2 * p + 1] for p in range(args.pairs)]
    agree_regressions = [regressions(sets[2 * p]) == regressions(sets[2 * p + 1]) for p in range(args.pairs)]
    agree_single_regressions = [regressions(single[2 * p]) == regressions(single[2 * p + 1])
                                for p in range(args.pairs)]
    lines += ["", f"Pairs whose gating verdict sets agree: {sum(agree)} of {args.pairs} "
                  f"(with one pass per side and no confirmation: {sum(agree_single)} of {args.pairs}; with one "
                  f"confirmation pair, B A, as before the third pass: {sum(agree_paired)} of {args.pairs}); "
                  f"whose gating regressions agree: {sum(agree_regressions)} of {args.pairs} "
                  f"(one pass: {sum(agree_single_regressions)} of {args.pairs}); "
                  f"distinct sets over all {len(runs)} compares: {len({frozenset(s) for s in sets})} "
                  f"(one pass: {len({frozenset(s) for s in single})}; one pair: "
                  f"{len({frozenset(s) for s in paired})})."]
    for i, (found, before) in enumerate(zip(sets, paired), 1):
        for verdict in sorted(before - found):
            lines.append(f"- compare {i}: {verdict} confirmed by the B A pair, rejected by the third pass; ratios "
                         f"(first pass / confirming passes) {ratios(runs[i - 1]['report'], verdict)}")
    for p in range(args.pairs):
        first, second = 2 * p, 2 * p + 1
        for verdict in sorted(sets[first] ^ sets[second]):
            only = first + 1 if verdict in sets[first] else second + 1
            lines.append(f"- pair {p + 1}: {verdict} only in compare {only}; ratios (first pass / confirming "
                         f"passes) {ratios(runs[first]['report'], verdict)} in compare "
                         f"{first + 1}, {ratios(runs[second]['report'], verdict)} in compare {second + 1}")
    text = "\n".join(lines)
    print(text)
    if args.write_docs:
        name = args.suite.removeprefix("zoo:")
        begin, end = f"<!-- bench:stability-{name}:begin -->", f"<!-- bench:stability-{name}:end -->"
        docs = DOCS.read_text()
        if begin not in docs:
            raise SystemExit(f"docs/zoo.md has no {begin} marker")
        DOCS.write_text(re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: f"{begin}\n{text}\n{end}",
                               docs, flags=re.S))
    return 0 if all(agree) else 1


if __name__ == "__main__":
    sys.exit(main())
