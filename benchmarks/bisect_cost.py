"""What a bisect costs, against its targets (figures in docs/bisect.md).

Named bisect_cost.py, not bisect.py: a script's folder comes first on sys.path, and a `bisect.py` there would
shadow the standard library's `bisect` (imported by `random`) for every benchmark in this folder.

    .venv/bin/python benchmarks/bisect_cost.py          # search costs + 3 end-to-end bisects, writes docs/bisect.md
    .venv/bin/python benchmarks/bisect_cost.py --quick  # search costs only, prints only

Search costs use the real search (modelci.bisect.search.Search) with a cheap oracle instead of runs: commit i is bad
when i >= culprit, and untestable when drawn so (independently, with probability 0.2; or as one run of 10, 40 or 160
broken commits around the midpoint, the case that turns asv's `find` into a linear walk). Builds count the two ends.

- none untestable: max builds over every culprit position, against ceil(log2 N) + 2;
- 20% untestable: 200 draws per N; the worst builds minus skipped probes, against ceil(log2 N) + 2;
- --jobs K: max rounds over every culprit position, against ceil(log_(K+1) N) + 1 (the ends are one round);
- a run of broken commits at the midpoint: probes of this search against "step one commit along" after a skip.

The end-to-end part bisects a 16-commit repository holding a pure-Python package (pythonpath builds, a precision
regression at a random commit), 3 times from an empty cache, and reports the median wall time and builds.

The history's part of a probe: what one probe asks of the store (open it, count the targets run, look for a
reusable result, ingest a one-result run, choose its baseline, store its findings), 12 probes in a row, once with
a store opened per probe (what every probe did before: the schema check, and SQLAlchemy compiling each statement
again for the new engine) and once with one store shared by all (what a bisect does now); the two alternate
probe by probe, side by side, and the median per probe is reported, wall and CPU time of this process.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from modelci.bisect.search import Search

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "bisect.md"
MARK = ("<!-- benchmarks/bisect_cost.py: begin -->", "<!-- benchmarks/bisect_cost.py: end -->")


def oracle(n: int, culprit: int, untestable: set[int] = frozenset(), jobs: int = 1,
           step_along: bool = False) -> tuple[int, int, int, bool]:
    """Bisect commits 1..n (0 is the good end, n the bad one): (builds, skipped probes, rounds, found)."""
    items = [f"c{i}" for i in range(1, n + 1)]
    search = Search.linear(items)
    builds, skipped, rounds = 2, 0, 1
    while not search.done:
        batch = _step_along(search) if step_along else search.next_probes(jobs)
        outcome = {}
        for sha in batch:
            i = int(sha[1:])
            outcome[sha] = "skip" if i in untestable else "bad" if i >= culprit else "good"
            builds += 1
            skipped += outcome[sha] == "skip"
        search.record(outcome)
        rounds += 1
    found = search.culprit == f"c{culprit}" or (search.culprit is None and f"c{culprit}" in search.remaining())
    return builds, skipped, rounds, found


def _step_along(search: Search) -> list[str]:
    """asv's behaviour after a failed build: the midpoint, else the next testable commit after it."""
    testable = search.testable()
    left = search.remaining()
    mid = left[(len(left) - 1) // 2]
    later = [sha for sha in left[left.index(mid):] if sha in testable]
    return [later[0] if later else testable[-1]]


def search_costs(sizes: list[int]) -> list[str]:
    """The cost table as markdown lines."""
    rng = random.Random(7)
    lines = ["| N | no untestable: max builds (target) | 20% untestable: max builds - skipped (target) "
             "| mean skipped | --jobs 2 / 3 / 4: max rounds (target) |",
             "|---:|---:|---:|---:|---:|"]
    for n in sizes:
        positions = range(1, n + 1) if n <= 1024 else rng.sample(range(1, n + 1), 300)
        plain = max(oracle(n, c)[0] for c in positions)
        worst, skips = 0, []
        for _ in range(200):
            culprit = rng.randrange(1, n + 1)
            untestable = {i for i in range(1, n) if i != culprit and rng.random() < 0.2}
            builds, skipped, _, found = oracle(n, culprit, untestable)
            assert found, (n, culprit)
            worst = max(worst, builds - skipped)
            skips.append(skipped)
        rounds = []
        for jobs in (2, 3, 4):
            worst_rounds = max(oracle(n, c, jobs=jobs)[2] for c in positions)
            rounds.append(f"{worst_rounds} ({math.ceil(math.log(n, jobs + 1) - 1e-9) + 1})")
        bound = math.ceil(math.log2(n)) + 2
        lines.append(f"| {n} | {plain} ({bound}) | {worst} ({bound}) | {statistics.mean(skips):.1f} | "
                     + " / ".join(rounds) + " |")
    return lines


def clustered(n: int = 1024) -> list[str]:
    """Probes through a run of broken commits at the midpoint: this search against stepping one along."""
    lines = ["| broken run at the midpoint | this search: builds (skipped) | step one along: builds (skipped) |",
             "|---|---:|---:|"]
    for width in (10, 40, 160):
        broken = set(range(n // 2 - width // 2, n // 2 + width // 2))
        ours, walk = [], []
        for culprit in (n // 4, 3 * n // 4):
            ours.append(oracle(n, culprit, broken))
            walk.append(oracle(n, culprit, broken, step_along=True))
        worst = max(ours), max(walk)
        lines.append(f"| {width} commits | {worst[0][0]} ({worst[0][1]}) | {worst[1][0]} ({worst[1][1]}) |")
    return lines


def end_to_end(runs: int = 3) -> list[str]:
    """Median wall time and builds of a real bisect over 16 commits, each from an empty cache."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fakerepo import FakeRepo, write_project, write_suite

    from modelci import config as config_module
    from modelci.bisect import bisect

    times, builds, probes = [], [], []
    rng = random.Random(3)
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="modelci-bench-bisect-") as tmp:
            root = Path(tmp)
            repo = FakeRepo(root / "repo")
            culprit = rng.randrange(2, 15)
            shas = repo.history(16, culprit=culprit, scale=1.5)
            suite = write_suite(root / "suite")
            cfg = config_module.load(config_file=write_project(root / "project", root / "cache"))
            start = time.perf_counter()
            result = bisect(cfg, [str(suite)], "Numeric", repo=str(repo.path), good=shas[0], bad=shas[-1],
                            build="pythonpath", log=lambda line: None)
            times.append(time.perf_counter() - start)
            assert result.culprit.item == shas[culprit]
            builds.append(result.builds)
            probes.append(len(result.probes))
    return [f"| 15 commits after the good end, pythonpath builds | {statistics.median(times):.1f} s | "
            f"{statistics.median(builds):g} (target {math.ceil(math.log2(15)) + 2}) | "
            f"{statistics.median(times) / statistics.median(probes):.2f} s |"]


def store_per_probe(probes: int = 12) -> list[str]:
    """The store's part of a probe, opened per probe against shared (medians per probe), as markdown lines."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from store import ENVIRONMENT, Clock, make_result, target

    from modelci.checks import Finding
    from modelci.store import Store

    def probe(store: Store, index: int, rng: random.Random) -> None:
        version = f"1.{index}"
        store.targets_run("bench")
        store.reusable(target(version), ENVIRONMENT.id, "bench", "suite/Model0", "c" * 64, {"seed": 0})
        result = make_result(rng, 0)
        store.ingest(target=target(version), environment=ENVIRONMENT, runner="bench", results=[result])
        baseline = store.baseline(result.workload, "bench", target(version))
        store.add_findings(result.id, baseline.id if baseline else None,
                           [Finding("status", "status", "ok", {}, "ok", gating=True)])

    rng = random.Random(5)
    own, shared = Clock(), Clock()
    with tempfile.TemporaryDirectory(prefix="modelci-bench-probe-store-") as tmp:
        db, artifacts = str(Path(tmp) / "history.db"), str(Path(tmp) / "artifacts")
        one = Store(db, artifacts)
        probe(one, 0, rng)  # the history exists and holds a run, as when a bisect's ends have run
        for index in range(1, probes + 1):
            with own:
                probe(Store(db, artifacts), 2 * index - 1, rng)
            with shared:
                probe(one, 2 * index, rng)
    med = statistics.median
    return ["| probe's store work | wall per probe (median) | CPU per probe (median) |", "|---|---:|---:|",
            f"| a store opened per probe (before) | {med(own.wall) * 1000:.0f} ms | {med(own.cpu) * 1000:.0f} ms |",
            f"| one store shared by the probes (now) | {med(shared.wall) * 1000:.0f} ms | "
            f"{med(shared.cpu) * 1000:.0f} ms |",
            f"| ratio | {med(shared.wall) / med(own.wall):.2f} | {med(shared.cpu) / med(own.cpu):.2f} |"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="search costs for small N only; print, write nothing")
    args = parser.parse_args()
    os.environ.setdefault("PIP_NO_INDEX", "1")
    sizes = [16, 64, 256] if args.quick else [16, 64, 256, 1024, 4096]
    out = ["Search cost (oracle, real `Search`), builds include the two ends; target in brackets:", "",
           *search_costs(sizes), "",
           "Runs of broken commits at the midpoint of 1024, culprit at 1/4 or 3/4, worst of the two:", "",
           *clustered()]
    out += ["", f"The history's part of a probe ({runs_note()}, load average {os.getloadavg()[0]:.1f}), 12 probes "
                "each way, alternating:", "", *store_per_probe()]
    if not args.quick:
        load = os.getloadavg()[0]
        e2e = end_to_end()
        out += ["", f"End to end ({runs_note()}, load average {load:.1f} at the start, "
                    f"{os.getloadavg()[0]:.1f} at the end), median of 3 bisects from an empty cache:", "",
                "| bisect | wall time | builds | per probe |", "|---|---:|---:|---:|", *e2e]
    text = "\n".join(out)
    print(text)
    if not args.quick:
        doc = DOC.read_text()
        block = f"{MARK[0]}\n{text}\n{MARK[1]}"
        DOC.write_text(re.sub(re.escape(MARK[0]) + ".*?" + re.escape(MARK[1]), lambda _: block, doc, flags=re.S))


def runs_note() -> str:
    cpu = subprocess.run(["uname", "-m"], capture_output=True, text=True).stdout.strip()
    return f"{os.cpu_count()} cores {cpu}, Python {sys.version.split()[0]}"


if __name__ == "__main__":
    main()
