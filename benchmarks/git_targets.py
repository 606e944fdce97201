"""How long a git-commit target takes to build, per strategy (speed: pythonpath < 1 s; docs/bisect.md).

    .venv/bin/python benchmarks/git_targets.py           # 8 commits, writes its table into docs/bisect.md
    .venv/bin/python benchmarks/git_targets.py --print   # prints only

For each of 8 commits of a repository holding a pure-Python package, from an empty cache, side by side:
- pythonpath build: targets.resolve (mirror, rev-parse, commit metadata) + builds.prepare (worktree + `.pth` wheel);
- pythonpath environment: the same plus envs.ensure, i.e. ready to run a workload;
- wheel build: targets.resolve + builds.prepare with `uv build --wheel` (an in-tree PEP 517 backend, so no index);
- cached: builds.prepare again for a commit already built.
Medians over the commits; the first commit also pays for cloning the mirror and is reported apart.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "bisect.md"
MARK = ("<!-- benchmarks/git_targets.py: begin -->", "<!-- benchmarks/git_targets.py: end -->")
COMMITS = 8


def measure() -> dict[str, list[float]]:
    """Seconds per commit for each strategy, each with its own empty cache."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fakerepo import FakeRepo

    from modelci import builds, envs, targets
    from modelci.config import OPTION_BY_NAME

    timeout = OPTION_BY_NAME["build_timeout"].default  # a user's build gets as long

    times: dict[str, list[float]] = {"pythonpath build": [], "pythonpath environment": [], "wheel build": [],
                                     "cached build": []}
    with tempfile.TemporaryDirectory(prefix="modelci-bench-git-") as tmp:
        root = Path(tmp)
        repo = FakeRepo(root / "repo")
        shas = repo.history(COMMITS)
        index = envs.IndexConfig.from_pip()
        python = sys.executable
        for strategy, cache in (("pythonpath", root / "cache-pp"), ("pythonpath-env", root / "cache-env"),
                                ("wheel", root / "cache-wheel")):
            for sha in shas:
                build = "wheel" if strategy == "wheel" else "pythonpath"
                start = time.perf_counter()
                target = targets.resolve(targets.git_spec(str(repo.path), sha, build), cache_dir=cache)
                requirements = builds.prepare(target, cache, python=python, index=index, timeout=timeout,
                                              log=lambda line: None)
                if strategy == "pythonpath-env":
                    envs.ensure(envs.EnvSpec(requirements=requirements, python=python, index=index), cache,
                                log=lambda line: None)
                seconds = time.perf_counter() - start
                name = {"pythonpath": "pythonpath build", "pythonpath-env": "pythonpath environment",
                        "wheel": "wheel build"}[strategy]
                times[name].append(seconds)
                if strategy == "wheel":
                    start = time.perf_counter()
                    builds.prepare(target, cache, python=python, index=index, timeout=timeout, log=lambda line: None)
                    times["cached build"].append(time.perf_counter() - start)
    return times


def table(times: dict[str, list[float]]) -> list[str]:
    """The figures as markdown lines."""
    lines = [f"{COMMITS} commits of a pure-Python package, {os.cpu_count()} cores, Python {sys.version.split()[0]}; "
             "medians over commits 2..8 (commit 1 also clones the mirror):", "",
             "| step | median | first commit | target |", "|---|---:|---:|---|"]
    targets = {"pythonpath build": "< 1 s"}
    for name, values in times.items():
        lines.append(f"| {name} | {statistics.median(values[1:]) * 1000:.1f} ms | {values[0] * 1000:.1f} ms | "
                     f"{targets.get(name, '')} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="print only; do not write docs/bisect.md")
    args = parser.parse_args()
    os.environ.setdefault("PIP_NO_INDEX", "1")
    text = "\n".join(table(measure()))
    print(text)
    if not args.print:
        doc = DOC.read_text()
        block = f"{MARK[0]}\n{text}\n{MARK[1]}"
        DOC.write_text(re.sub(re.escape(MARK[0]) + ".*?" + re.escape(MARK[1]), lambda _: block, doc, flags=re.S))


if __name__ == "__main__":
    main()
