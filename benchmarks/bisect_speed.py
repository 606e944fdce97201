"""From alarm to culprit: modelci's bisect against an expert's hand-written `git bisect run` (figures in
docs/bisect.md).

    .venv/bin/python benchmarks/bisect_speed.py              # 3 runs of every case, writes docs/bisect.md
    .venv/bin/python benchmarks/bisect_speed.py --runs 1 --no-write

The benchmark builds its own repository: COMMITS commits of `torchcalc`, a pure-Python package that imports torch
and computes a value; one commit (CULPRIT) scales it. Each run measures, side by side:

- the expert: one prepared venv with torch 2.13.0 (`python -m venv` + `pip install torch==2.13.0`, not timed),
  a clone of the repository and `git bisect run` with a 20-line predicate that starts a fresh `python` per step
  with the checkout on PYTHONPATH;
- `modelci bisect --build pythonpath` (the good end already in the history, a warm uv cache, nothing else);
- the whole chain a CI runs, `modelci run --repo R --ref BAD --bisect-on-alarm --good GOOD`, from the start of the
  bad run to the named culprit; the same with `--jobs 2`, and with `--build wheel` (an in-tree PEP 517 backend,
  so wheel builds work offline).

Every modelci case gets a fresh history, whose good end is run first, untimed; the cache folder (environments,
the repository's mirror) and uv's cache are shared and warm, and every build and checkout is removed before each
case. Times are wall-clock seconds of the whole command; the table gives medians over the runs and the
ratios of the medians measured in the same runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "bisect.md"
MARK = ("<!-- benchmarks/bisect_speed.py: begin -->", "<!-- benchmarks/bisect_speed.py: end -->")
sys.path.insert(0, str(ROOT / "tests"))

COMMITS = 150
CULPRIT = 97
TORCH = "torch==2.13.0"

PACKAGE = '''\
"""torchcalc at commit {k}: a value computed with torch."""
import torch

SCALE = {scale!r}
REVISION = {k}


def value() -> float:
    x = torch.linspace(0.0, 1.0, 64, dtype=torch.float64)
    return float((torch.sin(x) * SCALE).sum())
'''

PYPROJECT = '''\
[build-system]
requires = []
build-backend = "fakebackend"
backend-path = ["_build"]

[project]
name = "torchcalc"
version = "1.0"
dependencies = ["{torch}"]
'''

SUITE = '''\
import torch
import modelci
import torchcalc


class Value(modelci.Workload):
    framework = "torch"
    requires = ["torchcalc"]
    steps = 1
    warmup = 0
    repeats = 1

    def train_step(self, ctx, step):
        return 0.0

    def infer(self, ctx):
        return {"value": torch.tensor([torchcalc.value()], dtype=torch.float64)}
'''

PREDICATE = '''\
#!/usr/bin/env python3
"""git bisect run predicate: exit 0 when torchcalc.value() is the good value, 1 when it changed, 125 to skip."""
import os
import subprocess
import sys

GOOD = os.environ["GOOD_VALUE"]
PYTHON = os.environ["BISECT_PYTHON"]
top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True).stdout.strip()
env = dict(os.environ, PYTHONPATH=top)
proc = subprocess.run([PYTHON, "-c", "import torchcalc; print(repr(torchcalc.value()))"],
                      capture_output=True, text=True, env=env, cwd="/")
if proc.returncode != 0:
    sys.stderr.write(proc.stderr)
    sys.exit(125)  # does not import: untestable, as `git bisect skip`
value = proc.stdout.strip()
print(f"value {value} (good: {GOOD})")
sys.exit(0 if value == GOOD else 1)
'''


def git(cwd: Path, *args: str, stamp: int = 0) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="Ada Bench", GIT_AUTHOR_EMAIL="ada@example.com",
               GIT_COMMITTER_NAME="Ada Bench", GIT_COMMITTER_EMAIL="ada@example.com",
               GIT_AUTHOR_DATE=f"{1700000000 + stamp} +0000", GIT_COMMITTER_DATE=f"{1700000000 + stamp} +0000")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def make_repo(path: Path) -> list[str]:
    """The benchmark repository: COMMITS commits, CULPRIT scales the value; returns the shas, oldest first."""
    from fakerepo import BACKEND

    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "_build").mkdir()
    (path / "_build" / "fakebackend.py").write_text(BACKEND)
    (path / "pyproject.toml").write_text(PYPROJECT.format(torch=TORCH))
    (path / "torchcalc").mkdir()
    shas = []
    for k in range(COMMITS):
        scale = 1.5 if k >= CULPRIT else 1.0
        (path / "torchcalc" / "__init__.py").write_text(PACKAGE.format(k=k, scale=scale))
        git(path, "add", "-A")
        subject = "Scale the output (#%d)" % (100 + k) if k == CULPRIT else f"Refactor step {k}"
        git(path, "commit", "-q", "-m", subject, stamp=k)
        shas.append(git(path, "rev-parse", "HEAD"))
    return shas


def expert_venv(folder: Path) -> Path:
    """The expert's prepared environment: a venv with torch (untimed)."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = folder / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", TORCH], check=True)
    return python


def expert(repo: Path, work: Path, python: Path, good: str, bad: str) -> tuple[float, str, int]:
    """`git bisect run` in a clone: (seconds, first bad sha, steps)."""
    clone = work / "expert-clone"
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    predicate = work / "predicate.py"
    predicate.write_text(PREDICATE)
    predicate.chmod(0o755)
    subprocess.run(["git", "checkout", "-q", good], cwd=clone, check=True)
    good_value = subprocess.run(  # what the good end computes is known before the bisect starts: untimed
        [str(python), "-c", "import torchcalc; print(repr(torchcalc.value()))"], capture_output=True, text=True,
        env=dict(os.environ, PYTHONPATH=str(clone)), check=True, cwd="/").stdout.strip()
    subprocess.run(["git", "checkout", "-q", "main"], cwd=clone, check=True)
    env = dict(os.environ, GOOD_VALUE=good_value, BISECT_PYTHON=str(python))
    start = time.perf_counter()
    subprocess.run(["git", "bisect", "start", bad, good], cwd=clone, check=True, capture_output=True)
    proc = subprocess.run(["git", "bisect", "run", str(predicate)], cwd=clone, env=env, capture_output=True,
                          text=True)
    seconds = time.perf_counter() - start
    found = re.search(r"([0-9a-f]{40}) is the first bad commit", proc.stdout)
    steps = proc.stdout.count("value ")
    return seconds, found.group(1) if found else "", steps


def modelci(args: list[str], cwd: Path, log: Path) -> tuple[float, int]:
    """One modelci command: (seconds, exit code); its output goes to `log`."""
    start = time.perf_counter()
    with open(log, "ab") as out:
        proc = subprocess.run([sys.executable, "-m", "modelci.cli", *args], cwd=cwd, stdout=out,
                              stderr=subprocess.STDOUT)
    return time.perf_counter() - start, proc.returncode


def case(name: str, work: Path, cache: Path, repo: Path, suite: Path, shas: list[str], build: str, chain: bool,
         jobs: int = 1) -> dict:
    """One modelci case from a fresh history: the good end run first (untimed), then the timed command.

    The cache folder is shared by every case, as on a CI runner: the good end's environment and the repository's
    mirror are there. Every build and checkout is removed first, so each case builds all it probes but the good
    end, which the untimed run builds."""
    project = work / name
    shutil.rmtree(project, ignore_errors=True)
    project.mkdir(parents=True)
    for folder in ("builds", "worktrees"):
        shutil.rmtree(cache / folder, ignore_errors=True)
    (project / "modelci.toml").write_text(f'cache_dir = "{cache}"\ntimeout = 600\nrunner = "bench"\n')
    log = project / "log.txt"
    common = ["--suite", str(suite), "-k", "Value", "--build", build]
    _, code = modelci(["run", "--repo", str(repo), "--ref", shas[0], *common], project, log)
    assert code == 0, f"{name}: the good end did not run ok; see {log}"
    report = project / "report.json"
    if chain:
        args = ["run", "--repo", str(repo), "--ref", shas[-1], *common, "--bisect-on-alarm", "--good", shas[0],
                "--jobs", str(jobs), "--json", str(report)]
    else:
        args = ["bisect", "--repo", str(repo), "--good", shas[0], "--bad", shas[-1], *common, "--jobs", str(jobs),
                "--json", str(report)]
    seconds, code = modelci(args, project, log)
    data = json.loads(report.read_text()) if report.exists() else {}
    result = (data.get("bisects") or [{}])[0].get("result") if chain else data
    culprit = ((result or {}).get("culprit") or {}).get("item", "")
    assert culprit == shas[CULPRIT], f"{name}: the culprit was not found (exit {code}); see {log}"
    return {"seconds": seconds, "builds": result["builds"], "rounds": result["rounds"]}


CASES = [  # name, build, chain, jobs
    ("bisect", "pythonpath", False, 1),
    ("chain", "pythonpath", True, 1),
    ("chain-jobs2", "pythonpath", True, 2),
    ("chain-wheel", "wheel", True, 1),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of every case (medians are reported)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/bisect.md alone")
    parser.add_argument("--keep", help="work in this folder and keep it (default: a temporary one)")
    args = parser.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="modelci-bench-bisect-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("UV_CACHE_DIR", str(work / "uv-cache"))  # shared by every case: a warm uv cache
    try:
        repo = work / "repo"
        shutil.rmtree(repo, ignore_errors=True)
        shas = make_repo(repo)
        from fakerepo import write_suite  # noqa: F401 - the tests' helpers are importable from here

        suite = work / "suite"
        suite.mkdir(exist_ok=True)
        (suite / "calc.py").write_text(SUITE)
        python = expert_venv(work / "expert-venv")
        times: dict[str, list[float]] = {"expert": []}
        builds: dict[str, list[int]] = {}
        steps = []
        for run in range(args.runs):
            seconds, found, count = expert(repo, work, python, shas[0], shas[-1])
            assert found == shas[CULPRIT], "the hand-written bisect did not find the culprit"
            times["expert"].append(seconds)
            steps.append(count)
            print(f"run {run + 1}: expert {seconds:.1f} s ({count} steps)", flush=True)
            for name, build, chain, jobs in CASES:
                measured = case(name, work / f"run{run}", work / "cache", repo, suite, shas, build, chain, jobs)
                times.setdefault(name, []).append(measured["seconds"])
                builds.setdefault(name, []).append(measured["builds"])
                print(f"run {run + 1}: {name} {measured['seconds']:.1f} s, {measured['builds']} builds, "
                      f"{measured['rounds']} rounds", flush=True)
        text = table(times, builds, steps, args.runs)
        print(text)
        if not args.no_write:
            doc = DOC.read_text()
            block = f"{MARK[0]}\n{text}\n{MARK[1]}"
            DOC.write_text(re.sub(re.escape(MARK[0]) + ".*?" + re.escape(MARK[1]), lambda _: block, doc,
                                  flags=re.S))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def table(times: dict[str, list[float]], builds: dict[str, list[int]], steps: list[int], runs: int) -> str:
    median = {name: statistics.median(values) for name, values in times.items()}
    bound = math.ceil(math.log2(COMMITS - 1)) + 2
    cpu = subprocess.run(["uname", "-m"], capture_output=True, text=True).stdout.strip()
    rows = [f"{COMMITS} commits of a pure-Python package on torch 2.13.0 (CPU), the value changes at commit "
            f"{CULPRIT}; {os.cpu_count()} cores {cpu}, Python {sys.version.split()[0]}; median of {runs} runs, "
            "all cases side by side in each run:", "",
            "| case | wall time (median) | each run | builds | / hand-written | target |",
            "|---|---:|---|---:|---:|---|",
            f"| hand-written `git bisect run` (fresh python per step) | {median['expert']:.1f} s | "
            + ", ".join(f"{t:.1f}" for t in times["expert"]) + f" | {statistics.median(steps):g} steps | 1.00 | |"]
    targets = {"bisect": "<= 1.0x hand-written", "chain": f"<= 45 s, <= {bound} builds",
               "chain-jobs2": f"<= 45 s, <= {bound} builds", "chain-wheel": "<= 2x the pythonpath chain"}
    labels = {"bisect": "`modelci bisect --build pythonpath`",
              "chain": "`run --bisect-on-alarm`, pythonpath (from the bad run to the culprit)",
              "chain-jobs2": "the same with `--jobs 2`", "chain-wheel": "the same with `--build wheel`"}
    for name, _, _, _ in CASES:
        ratio = median[name] / median["expert"]
        extra = f" ({median[name] / median['chain']:.2f}x the pythonpath chain)" if name == "chain-wheel" else ""
        rows.append(f"| {labels[name]} | {median[name]:.1f} s | " + ", ".join(f"{t:.1f}" for t in times[name])
                    + f" | {max(builds[name])} | {ratio:.2f}{extra} | {targets[name]} |")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
