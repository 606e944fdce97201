"""The local executor: one fresh process per workload, with a timeout and crash capture.

The child sees the environment's own site-packages plus a folder holding only the `modelci`
package (docs/design.md: a PYTHONPATH that points at the harness's site-packages would silently test the
harness's numpy instead of the target's).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

import modelci
from modelci import locks
from modelci.errors import HarnessError, UserError, nearly_full, no_space_in
from modelci.execute import supervisor
from modelci.execute.base import DISCOVERY_TIMEOUT
from modelci.records import Metric, Result
from modelci.workload.processes import signal_name

STDERR_TAIL_CHARS = 4000


@dataclass
class WorkloadInfo:
    """A workload as discovery found it inside the environment."""

    id: str
    name: str
    suite: str
    file: str
    framework: str
    domain: str
    steps: int
    formats: list[str]
    devices: int
    requires: list[str]
    code_hash: str
    cls: str = ""
    #: machines its ranks span (`nodes * devices` ranks); more than 1 needs a cluster executor
    nodes: int = 1
    #: what a node must offer to run it (`Workload.resources`), read by the Ray executor's placement
    resources: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "WorkloadInfo":
        """Build from the child's discovery record."""
        return cls(
            id=data["id"], name=data["name"], suite=data["suite"], file=data["file"], framework=data["framework"],
            domain=data["domain"], steps=data["steps"], formats=data["formats"], devices=data["devices"],
            requires=data["requires"], code_hash=data["code_hash"], cls=data.get("class", ""),
            nodes=int(data.get("nodes", 1)),
            resources=dict(data.get("resources") or {}),
        )


@dataclass(frozen=True)
class NodeRole:
    """The part one node plays in a workload that spans `nodes` machines: which node it is, where the ranks meet
    (rank 0's node address and a port there, never 127.0.0.1), and this node's own address, which its ranks'
    collectives bind to. A cluster executor makes one per node and runs the workload on each with it."""

    nodes: int
    node_rank: int
    master_addr: str
    master_port: int
    node_address: str

    def args(self) -> list[str]:
        """The child's arguments that place it (workload/child.py, `Placement`)."""
        return ["--nodes", str(self.nodes), "--node-rank", str(self.node_rank), "--master-addr", self.master_addr,
                "--master-port", str(self.master_port), "--node-address", self.node_address]


def needs_nodes(workload: WorkloadInfo) -> Result | None:
    """The `skipped` result of a workload whose ranks span several nodes, run without a cluster executor; None
    for any other workload. Its ranks on one machine would not test what it is there for: collectives and
    rendezvous between machines."""
    if workload.nodes <= 1:
        return None
    return Result(status="skipped", workload=workload.id, code_hash=workload.code_hash, framework=workload.framework,
                  domain=workload.domain,
                  reason=f"its ranks span {workload.nodes} nodes (nodes = {workload.nodes}): run it with "
                         'executor = "ray" on a cluster of that many nodes')


def shim_dir(root: Path) -> Path:
    """A folder that holds only a link to the `modelci` package, to put on the child's PYTHONPATH."""
    package = Path(modelci.__file__).resolve().parent
    shim = root / "shim"
    shim.mkdir(parents=True, exist_ok=True)
    link = shim / "modelci"
    if not link.exists():
        link.symlink_to(package, target_is_directory=True)
    return shim


#: the variables that set the thread count of BLAS, OpenMP and the frameworks built on them
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def child_env(shim: Path, seed: int, threads: int = 0, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The child's environment: ours minus anything that would leak the harness's packages into it.

    With `threads` > 0 every BLAS/OpenMP pool gets that many threads: on a shared 2-core runner a
    numpy CNN ran 13x slower with OpenBLAS's default pool than with one thread, which is noise, not a
    regression of the target.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=str(shim), PYTHONNOUSERSITE="1", PYTHONHASHSEED=str(seed), PYTHONFAULTHANDLER="1")
    if threads > 0:
        env.update({name: str(threads) for name in THREAD_VARIABLES})
    env.update(extra or {})
    return env


def tail(path: Path, limit: int = STDERR_TAIL_CHARS) -> str:
    """The last `limit` characters of a log file, starting at a line boundary."""
    if not path.exists():
        return ""
    text = path.read_bytes()[-limit * 2 :].decode("utf-8", "replace")
    if len(text) > limit:
        text = text[-limit:]
        text = text[text.find("\n") + 1 :] if "\n" in text else text
    return text.strip()


def spawn(cmd: list[str], env: dict[str, str], log_dir: Path, timeout: float | None,
          watch: Callable[[], bool] | None = None) -> tuple[int | None, float]:
    """Run a child in its own process group; returns (exit code or None on timeout, seconds).

    Its own session means a Ctrl-C at the terminal reaches only the parent, which then kills the
    child and stores what it has (docs/design.md: an interrupted run is stored, marked interrupted).
    `watch`, when given, is called every supervisor.WATCH_INTERVAL seconds; the child is killed (exit code None)
    once it returns True. compat uses it for a timeout per job of a child that runs many jobs.

    `cmd` (a Python interpreter and its arguments) runs under the lifeline supervisor of that interpreter
    (execute/supervisor.py): whatever the child starts ends with it, a process that left its group with `setsid`
    too, even when this process is killed with SIGKILL.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "stdout.txt", "wb") as out, open(log_dir / "stderr.txt", "wb") as err:
        return supervisor.run(cmd, env, out, err, timeout, watch, python=cmd[0])


def discover(python: Path, suites: dict[str, Path], scratch: Path, timeout: float = DISCOVERY_TIMEOUT
             ) -> dict[str, Any]:
    """Run discovery inside the environment; returns the child's JSON (workloads and per-file errors)."""
    out = scratch / "discovery.json"
    cmd = [str(python), "-m", "modelci.workload.child", "list", "--out", str(out)]
    cmd += [arg for name, folder in suites.items() for arg in ("--suite", f"{name}={folder}")]
    code, _ = spawn(cmd, child_env(shim_dir(scratch), 0), scratch / "discovery", timeout)
    if code != 0 or not out.exists():
        raise discovery_failed(python, scratch / "discovery" / "stderr.txt", timeout if code is None else None)
    return json.loads(out.read_text())


def discovery_failed(python: Path, stderr: Path, timed_out: float | None, died: str = "") -> HarnessError:
    """The error of a discovery that ended without its result: which suite file it was importing, whether it
    ran out of time (`timed_out`: its timeout), and the end of its stderr. A file that blocks at import (a
    server it waits for, an input()) left only "its stderr ends with: (nothing)" after minutes."""
    from modelci.workload.child import IMPORTING

    text = stderr.read_text(errors="replace") if stderr.exists() else ""
    files = [line[len(IMPORTING):] for line in text.splitlines() if line.startswith(IMPORTING)]
    rest = "\n".join(line for line in text.splitlines() if not line.startswith(IMPORTING))[-1500:]
    how = (f"did not finish in {timed_out:g} s (the larger of {DISCOVERY_TIMEOUT:g} s and the `timeout` option)"
           if timed_out is not None
           else "ended without its result" + (f" ({died})" if died else ""))
    where = f" while importing {files[-1]}: does that file block or exit at import?" if files else ""
    full = no_space_in(text)
    left = nearly_full(stderr.parent)
    if not full and not text and left is not None:
        # a disk full before discovery began: even its stderr could not be written, so it says nothing
        full = f"{left} bytes free on the disk of {stderr.parent}"
    if full and timed_out is None:  # the suite is not at fault: its result had no room to be written
        where = (f": it could not write its result ({full}): free space under cache_dir (where the scratch "
                 "folders are)" + ("" if text == "" else ", or raise the file-size limit (ulimit -f)"))
    return HarnessError(f"workload discovery inside the environment ({python}) {how}{where}; its stderr ends "
                        f"with:\n{rest or '(nothing)'}")


def run_workload(
    python: Path,
    suites: dict[str, Path],
    workload: WorkloadInfo,
    scratch: Path,
    *,
    seed: int = 0,
    timeout: float = 1800,
    repeats: int | None = None,
    save: bool = True,
    threads: int = 0,
    node: NodeRole | None = None,
) -> Result:
    """Execute one workload in a fresh process and turn whatever happened into a Result."""
    skipped = None if node else needs_nodes(workload)
    if skipped:
        return skipped
    out = Path(tempfile.mkdtemp(prefix=scratch_prefix(workload.name), dir=scratch))
    cmd = [str(python), "-m", "modelci.workload.child", *run_args(suites, workload, out, seed=seed, repeats=repeats,
                                                                  save=save, node=node)]
    code, seconds = spawn(cmd, child_env(shim_dir(scratch), seed, threads), out, timeout)
    return child_outcome(workload, out, code, seconds, timeout)


def cache_folder(cache_dir: str | Path) -> Path:
    """The cache folder (environments, builds, scratch), made if need be: one that cannot be made or written is
    a UserError that names it, before anything is built or run in it."""
    cache = Path(cache_dir).expanduser()
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=cache).close()
    except OSError as exc:
        why = "it is a file" if cache.is_file() else exc.strerror or str(exc)
        raise UserError(f"cache_dir {cache} cannot be used: {why}; set cache_dir in modelci.toml or "
                        "MODELCI_CACHE_DIR to a folder you can write") from None
    return cache


def scratch_root(cache_dir: str | Path) -> Path:
    """The folder that holds the scratch folders of runs, compat checks and Ray agents: `scratch` in the cache
    folder (on the driver, or on a Ray node in that node's cache)."""
    root = cache_folder(cache_dir) / "scratch"
    root.mkdir(parents=True, exist_ok=True)
    return root


#: the lock a scratch folder's process holds for the folder's life (`Scratch`)
SCRATCH_OWNER = ".owner"


class Scratch:
    """A scratch folder of this process under `scratch_root`, removed by `remove`; one whose process was killed
    outright (SIGKILL, the OOM killer) is removed by the next `sweep_scratch`.

    A killed run left its folder behind, with the saved models and outputs of its workloads in it, and nothing
    ever removed it: a runner killed now and then filled its cache disk. The process holds an exclusive `flock`
    on the folder's `.owner` file for the folder's life (`locks.hold_new`), and the kernel releases it however
    the process ends, so a sweep never takes the folder of a process that still runs (on this machine, or on
    another sharing the cache folder through a file system that honours `flock`).
    """

    def __init__(self, cache_dir: str | Path, prefix: str):
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=scratch_root(cache_dir)))
        self._owner = locks.hold_new(self.path / SCRATCH_OWNER)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self._owner.close()


#: a scratch folder with no owner file, in which nothing changed for this long, was left by a modelci from before
#: the owner lock, killed: no run lasts days, and a folder being made gets its owner file within microseconds
UNOWNED_AGE_S = 2 * 24 * 3600


def sweep_scratch(cache_dir: str | Path) -> tuple[int, int]:
    """Remove the scratch folders of processes that are gone (their `.owner` lock is free, or they have no owner
    file and nothing in them changed for UNOWNED_AGE_S); how many, and the bytes they held."""
    root = Path(cache_dir).expanduser() / "scratch"  # only read: nothing to make, nor a write to probe
    removed = freed = 0
    for folder in root.iterdir() if root.is_dir() else ():
        owner = locks.take_if_free(folder / SCRATCH_OWNER)
        if owner is None and not _unowned_and_old(folder):  # its process is still going, or is being made
            continue
        try:
            freed += sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())
        except OSError:
            pass
        shutil.rmtree(folder, ignore_errors=True)
        if owner is not None:
            owner.close()
        removed += 1
    return removed, freed


def _unowned_and_old(folder: Path) -> bool:
    """Whether `folder` is a scratch folder without an owner file in which nothing changed for UNOWNED_AGE_S."""
    if not folder.is_dir() or folder.is_symlink() or (folder / SCRATCH_OWNER).exists():
        return False
    try:
        newest = max(p.lstat().st_mtime for p in [folder, *folder.rglob("*")])
    except OSError:  # changing under the sweep: in use
        return False
    return time.time() - newest > UNOWNED_AGE_S


def scratch_prefix(name: str) -> str:
    """The start of a workload's scratch folder name: its name, cut short, with nothing that is not a letter,
    digit, `_`, `.` or `-` (discovery refuses such names; a folder name must never leave the scratch area)."""
    return re.sub(r"[^\w.-]", "_", name[:40]).lstrip(".") + "-"


def run_args(suites: dict[str, Path], workload: WorkloadInfo, out: Path, *, seed: int = 0,
             repeats: int | None = None, save: bool = True, ranks: str = "fork", node: NodeRole | None = None
             ) -> list[str]:
    """The arguments of `modelci.workload.child` that run one workload into `out` (shared with forked.py).

    `ranks` says how rank 0 of a `devices > 1` workload starts the others: "fork" (from itself, where that is
    safe) or "spawn" (fresh processes, with `isolation = "spawn"`). `node` places the run on one node of a
    workload that spans several.
    """
    args = ["run", "--workload", workload.id, "--file", workload.file, "--out", str(out), "--seed", str(seed)]
    args += [arg for name, folder in suites.items() for arg in ("--suite", f"{name}={folder}")]
    if repeats is not None:
        args += ["--repeats", str(repeats)]
    if not save:
        args.append("--no-save")
    if workload.devices > 1 and ranks != "fork":
        args += ["--ranks", ranks]
    if node is not None:
        args += node.args()
    return args


def child_outcome(workload: WorkloadInfo, out: Path, code: int | None, seconds: float, timeout: float) -> Result:
    """The Result of a child that ran into `out` and ended with `code` (None: timed out, negative: a signal)."""
    stderr = tail(out / "stderr.txt")
    base = dict(workload=workload.id, code_hash=workload.code_hash, framework=workload.framework,
                domain=workload.domain, duration=seconds, stderr_tail=stderr)
    if code is None:
        return Result(status="timeout", reason=f"no result after {timeout:g} s; the process was killed", **base)
    result_file = out / "result.json"
    if code < 0:
        return Result(status="crashed", reason=f"killed by {signal_name(-code)}", **base)
    if code != 0 or not result_file.exists():
        reason = f"the process exited with code {code} before writing its result"
        left = nearly_full(out)
        if left is not None:  # its traceback too may have found no room in stderr.txt
            reason += (f"; the disk of its scratch folder {out.parent} is full ({left // 1024} KiB free): free space "
                       "there, or set cache_dir to a folder on a bigger disk")
        return Result(status="crashed", reason=reason, **base)
    return load_child_result(json.loads(result_file.read_text()), out, base)


def load_child_result(data: dict[str, Any], out: Path, base: dict[str, Any]) -> Result:
    """Turn the child's result.json and .npy files into a Result."""
    metrics = {name: Metric(name=name, kind=m["kind"], unit=m.get("unit", ""), values=list(m["values"]))
               for name, m in data.get("metrics", {}).items()}
    outputs = {}
    for name, entry in data.get("outputs", {}).items():
        outputs[name] = np.load(out / entry["file"], allow_pickle=False)
        # in memory now: its file goes, so that the scratch disk holds one workload's outputs at a time, not the
        # whole suite's until the run ends (saved models stay, for compat)
        (out / entry["file"]).unlink(missing_ok=True)
    info = dict(data.get("info", {}))
    info["saved"] = [dict(entry, path=str(out / entry["path"])) if entry.get("path") else entry
                     for entry in data.get("saved", [])]
    return Result(status=data["status"], reason=data.get("reason", ""), traceback=data.get("traceback", ""),
                  metrics=metrics, outputs=outputs, info=info, **base)


def python_of(env_python: Path | None) -> Path:
    """The interpreter to run children with: the environment's, or ours for the `current` target."""
    return Path(env_python) if env_python else Path(sys.executable)
