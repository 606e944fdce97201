"""`modelci init`: a starting point for a team, a `modelci.toml` and a suite folder with one real workload.

The config holds the options a team changes first, each with a comment saying what it does (the rest:
`modelci config`), and names the suite folder in `suites`, so that a plain `modelci run --target SPEC` in the
folder runs it. The workload is a real model of the chosen framework, built from the seed, that passes its first
run: `templates/<framework>_classifier.py` (never named like the framework, which it would hide while imported).
Nothing is ever overwritten: when any file or folder it would write exists, nothing is written and the error
names what is in the way.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import modelci
from modelci.errors import UserError
from modelci.workload import frameworks as framework_helpers

TEMPLATES = Path(__file__).resolve().parent / "templates"
#: the workload file written into the suite folder
WORKLOAD_FILE = "classifier.py"
#: the suite folder `init` writes, named in the config's `suites`; workload ids are `models/<Class>`
SUITE = "models"

CONFIG = '''\
# modelci configuration, written by `modelci init --framework {framework}` (modelci {version}).
# `modelci config` lists every option, its value and where the value came from. Precedence: command-line
# flags > MODELCI_<OPTION> environment variables > this file > the defaults.

# The suites `run`, `compare` and `calibrate` use when no --suite is given: folders of workload files (every
# *.py not starting with `_`), or zoo:NAME for a built-in suite.
suites = ["{suite}"]

# The label stored with every run. Results are judged only against the same runner's, so give each kind of
# machine its own label (default: the host name, which changes on every hosted CI runner).
# runner = "ci-cpu"

# Where the history lives: a SQLite file, or postgresql://modelci@db.example/modelci for one history shared by
# runners on many machines (`pip install 'modelci[postgres]'`; MODELCI_DB keeps a password out of this file).
# db = ".modelci/history.db"

# Where the output arrays go: a folder, or any fsspec URL such as s3://bucket/modelci (`pip install 'modelci[s3]'`).
# artifacts = ".modelci/artifacts"

# Seconds one workload may take before it is killed and recorded as `timeout`.
timeout = 900

# BLAS/OpenMP threads per workload: a fixed count keeps timings comparable on a shared runner.
# threads = 1

# Where environments and built wheels are cached; a CI cache of this folder saves the installs between jobs.
# cache_dir = "~/.cache/modelci"

# Seconds a git commit's build (--repo/--ref, bisect) may take; building a large framework from source takes hours.
# build_timeout = 3600

[checks]  # how strictly every workload and metric is judged (per workload: [[overrides]] below)
# slower only past this ratio of the baseline's median time AND when a one-sided rank test gives p < alpha
# timing_factor = 1.10
# alpha = 0.05
# more peak memory only past this ratio
# memory_factor = 1.10

# Per workload and/or metric (glob patterns), applied in order; e.g. looser output tolerances for one model:
# [[overrides]]
# workload = "{suite}/*"
# metric = "output:*"
# rtol = 1e-4
'''


@dataclass
class Written:
    """What `init` wrote: the config file, the suite folder, the workload file, and a first command to run."""

    config: Path
    suite: Path
    workload: Path
    command: str


def frameworks() -> list[str]:
    """The registered frameworks that `init` has a starter workload for (`templates/<framework>_classifier.py`)."""
    return [name for name in framework_helpers.REGISTRY if (TEMPLATES / f"{name}_classifier.py").is_file()]


def render_config(framework: str) -> str:
    """The text of the `modelci.toml` that `init` writes for `framework`."""
    return CONFIG.format(framework=framework, version=modelci.__version__, suite=SUITE)


def init(folder: str | Path, framework: str) -> Written:
    """Write `modelci.toml` and `models/<file>` into `folder` (made when missing); refuse if any of them exists."""
    known = frameworks()
    if framework not in known:
        raise UserError(f"no starter for framework {framework!r}; choose one of {', '.join(known)}")
    # the distribution a target names: the first that provides the framework (paddle: paddlepaddle)
    dist = framework_helpers.helper_class(framework).distributions[0]
    root = Path(folder)
    if root.exists() and not root.is_dir():
        raise UserError(f"{root} is a file, not a folder; pass --dir with a folder (it is made when missing)")
    config, suite = root / "modelci.toml", root / SUITE
    workload = suite / WORKLOAD_FILE
    in_the_way = [str(p) for p in (config, suite) if p.exists() or p.is_symlink()]
    pyproject = root / "pyproject.toml"
    if not in_the_way and pyproject.is_file():
        from modelci.config import read_toml, tool_table

        if tool_table(read_toml(pyproject), pyproject) is not None:
            # a modelci.toml beside it would win, and its [tool.modelci] settings would be silently set aside
            raise UserError(f"{pyproject} already holds a [tool.modelci] table: this folder is set up; a "
                            "modelci.toml written beside it would silently replace those settings. Pass --dir "
                            "with another folder")
    if in_the_way:
        raise UserError(f"{' and '.join(in_the_way)} already exist{'s' if len(in_the_way) == 1 else ''}; "
                        "modelci init never overwrites anything: move them away, or pass --dir with another folder")
    made: list[Path] = []
    try:
        suite.mkdir(parents=True)
        made.append(suite)
        with open(config, "x") as fh:  # "x": a config that appeared meanwhile is not overwritten either
            made.append(config)
            fh.write(render_config(framework))
        workload.write_text((TEMPLATES / f"{framework}_classifier.py").read_text())
    except OSError as exc:
        # what it wrote goes (a full disk left half a starter, which the next `init` then refused as "already
        # exists"); nothing of the user's was there to lose, since every path was checked free above
        for path in reversed(made):
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        what = f"{exc.strerror or type(exc).__name__}" + (f" ({exc.filename})" if exc.filename else "")
        raise UserError(f"cannot write the starter into {root}: {what}; nothing was left there") from None
    return Written(config=config, suite=suite, workload=workload, command=f"modelci run --target {dist}")
