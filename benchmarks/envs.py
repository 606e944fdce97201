"""How fast a cached torch environment is handed out, against `python -m venv` + `pip install` (docs/environments.md).

    .venv/bin/python benchmarks/envs.py            # 7 cached / 3 relinked / 3 pip repeats, writes docs/environments.md
    .venv/bin/python benchmarks/envs.py --quick    # 5 / 1 / 1 repeats, prints only

The requirement is `torch==2.13.0`, installed from where pip's configuration says (find-links, extra indexes,
constraints: `IndexConfig.from_pip()`), never from hardcoded paths; the benchmark checks that the environment
got the CPU build (2.13.0+cpu) and no CUDA package. Measured side by side in one run, medians of the repeats:

- cached: `envs.ensure(spec)` when the environment is in the cache (must be under 2 s);
- relinked: `envs.ensure(spec)` after the environment folder was removed (`env gc`) while uv's cache still holds
  the unpacked wheels: uv links them in again, and the fingerprint probe imports torch;
- cold: the first build, with uv's cache empty (once);
- pip: `python -m venv DIR` then `DIR/bin/pip install torch==2.13.0`, pip reading its own configuration.
The ratio pip / cached must be at least 20.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from modelci.envs import EnvSpec, IndexConfig, ensure, installed_version

REQUIREMENT = "torch==2.13.0"
DOC = Path(__file__).resolve().parent.parent / "docs" / "environments.md"
BEGIN, END = "<!-- benchmark:envs -->", "<!-- /benchmark:envs -->"


def timed(action) -> float:
    """Seconds one call of `action` takes."""
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def pip_install(base: Path, python: str) -> float:
    """`python -m venv` + `pip install REQUIREMENT` into a fresh folder under `base`; the seconds it took."""
    folder = Path(tempfile.mkdtemp(prefix="pip-venv-", dir=base))
    try:
        def build() -> None:
            subprocess.run([python, "-m", "venv", str(folder)], check=True, capture_output=True)
            subprocess.run([str(folder / "bin" / "pip"), "install", "--disable-pip-version-check", "-q", REQUIREMENT],
                           check=True, capture_output=True)

        seconds = timed(build)
        version = subprocess.run([str(folder / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
                                 check=True, capture_output=True, text=True).stdout.strip()
        if not version.startswith("2.13.0"):
            raise SystemExit(f"pip installed torch {version}, not 2.13.0: the comparison would be unfair")
        return seconds
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run(cached_repeats: int, relinked_repeats: int, pip_repeats: int) -> dict:
    """Measure everything in one temporary folder; returns the figures."""
    index = IndexConfig.from_pip()
    spec = EnvSpec([REQUIREMENT], index=index)
    with tempfile.TemporaryDirectory(prefix="modelci-bench-envs-") as scratch:
        cache = Path(scratch) / "cache"
        cold = timed(lambda: ensure(spec, cache, log=lambda line: None))
        env = ensure(spec, cache, log=lambda line: None)
        version = installed_version(env, "torch")
        cuda = [line for line in env.lock.splitlines() if line.startswith(("nvidia-", "triton"))]
        if version != "2.13.0+cpu" or cuda:
            raise SystemExit(f"expected torch 2.13.0+cpu and no CUDA packages, got torch {version} and {cuda}; "
                             f"pip's configuration gave {index}")
        cached = [timed(lambda: ensure(spec, cache, log=lambda line: None)) for _ in range(cached_repeats)]
        relinked = []
        for _ in range(relinked_repeats):
            shutil.rmtree(env.path)
            relinked.append(timed(lambda: ensure(spec, cache, log=lambda line: None)))
        pip = [pip_install(Path(scratch), sys.executable) for _ in range(pip_repeats)]
    return {"torch": version, "packages": len(env.lock.splitlines()), "find_links": index.find_links,
            "cold": cold, "cached": cached, "relinked": relinked, "pip": pip}


def table(figures: dict) -> str:
    """The figures as a markdown table."""
    rows = [("cached environment (`ensure`, hit)", figures["cached"]),
            ("relinked from uv's cache (env folder removed)", figures["relinked"]),
            ("cold uv build (empty uv cache)", [figures["cold"]]),
            ("`python -m venv` + `pip install`", figures["pip"])]
    pip = statistics.median(figures["pip"])
    lines = ["| materialising torch 2.13.0+cpu | runs | median | max | pip / this |", "|---|---|---|---|---|"]
    for label, values in rows:
        median = statistics.median(values)
        cells = (label, str(len(values)), _seconds(median), _seconds(max(values)), f"{pip / median:.0f}x")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _seconds(value: float) -> str:
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.1f} s"


def write_doc(text: str) -> None:
    """Replace the figures block of docs/environments.md (the rest of the page is written by hand)."""
    doc = DOC.read_text(encoding="utf-8") if DOC.exists() else f"# Environments\n\n{BEGIN}\n{END}\n"
    if BEGIN not in doc or END not in doc:
        doc += f"\n{BEGIN}\n{END}\n"
    block = f"{BEGIN}\n{text}\n{END}"
    updated = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, doc, flags=re.S)
    DOC.write_text(updated, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Parse the options, measure, print the table, check the targets and (full runs) write it into the docs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats; print only")
    parser.add_argument("--write", action="store_true", help="write docs/environments.md even with --quick")
    args = parser.parse_args(argv)
    repeats = (5, 1, 1) if args.quick else (7, 3, 3)
    figures = run(*repeats)
    cached, pip = statistics.median(figures["cached"]), statistics.median(figures["pip"])
    header = (f"Measured {datetime.date.today().isoformat()} on {platform.machine()} {platform.system()} "
              f"({platform.processor() or 'cpu'}, shared), "
              f"`python benchmarks/envs.py{' --quick' if args.quick else ''}`:"
              f" torch {figures['torch']} and {figures['packages'] - 1} dependencies from pip's find-links "
              f"{', '.join(figures['find_links']) or '(none)'}. Targets: cached < 2 s "
              f"({'met' if cached < 2 else 'MISSED'}), pip / cached >= 20x ({pip / cached:.0f}x, "
              f"{'met' if pip / cached >= 20 else 'MISSED'}).")
    text = f"{header}\n\n{table(figures)}"
    print(text)
    if not args.quick or args.write:
        write_doc(text)
    return 0 if cached < 2 and pip / cached >= 20 else 1


if __name__ == "__main__":
    sys.exit(main())
