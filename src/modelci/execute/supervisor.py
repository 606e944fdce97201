"""Commands that end with everything they started: the lifeline supervisor (workload/lifeline.py) from the
harness's side.

A command started here runs as `python -I -S lifeline.py -- CMD`, in a session of its own. The supervisor is a
child subreaper and takes SIGTERM as its parent-death signal, so whatever the command starts, a process that
left its group with `setsid` included, ends when the command exits, when the harness stops it (a timeout, a
cancelled run), and when the harness itself is killed, SIGKILL included. Spawned workloads, discovery and
compat's loaders run so (execute/local.py), and so do the harness's own long commands: a commit's build
(builds.py), uv installing an environment (envs/build.py), whose compilers and sdist builds used to outlive a
cancelled run, and git's clone and fetch of a remote (gitrepo.py). Standard library only, and no numpy: envs imports it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from modelci.workload.processes import kill_group

#: the supervisor, run as a script of the standard library only
LIFELINE = str(Path(__file__).resolve().parent.parent / "workload" / "lifeline.py")
#: how long a supervisor asked to stop may take to end its child's descendants before its group is killed
STOP_WITHIN_S = 10.0
#: seconds between two calls of a `watch` function while a child runs
WATCH_INTERVAL = 0.05


def with_parent(env: dict[str, str]) -> dict[str, str]:
    """`env` naming this process as the parent that a child must die with (workload/lifeline.py)."""
    from modelci.workload.lifeline import PARENT_VARIABLE

    return {**env, PARENT_VARIABLE: str(os.getpid())}


def start(cmd: list[str], *, env: dict[str, str] | None = None, python: str = sys.executable,
          **popen: Any) -> subprocess.Popen:
    """Start `cmd` under the supervisor of `python` (an interpreter whose standard library it needs), in a
    session of its own, stdin closed; `popen` is subprocess.Popen's (stdout, stderr, text, cwd). End it with
    `stop`, also when the caller is cancelled: the supervisor then ends all it started."""
    env = with_parent(dict(os.environ) if env is None else env)  # it dies with this process, whatever kills it
    # by its file, isolated (-I) and without site (-S): the supervisor needs the standard library only, and
    # starts before every spawned child
    return subprocess.Popen([python, "-I", "-S", LIFELINE, "--", *cmd], env=env, stdin=subprocess.DEVNULL,
                            start_new_session=True, **popen)


def run(cmd: list[str], env: dict[str, str], out: Any, err: Any, timeout: float | None,
        watch: Callable[[], bool] | None = None, *, python: str = sys.executable,
        cwd: Path | None = None) -> tuple[int | None, float]:
    """Run `cmd` supervised (`start`), its output to the open files `out` and `err` (they may be one), in
    `cwd`; returns (its exit code, or None past `timeout` or once `watch` returned True; seconds). `watch`, when
    given, is called every WATCH_INTERVAL seconds. Whatever the command started is ended however it ends."""
    begun = time.monotonic()
    deadline = begun + timeout if timeout is not None else float("inf")
    proc = start(cmd, env=env, python=python, stdout=out, stderr=err, cwd=cwd)
    code: int | None = None
    try:
        while True:
            step = deadline - time.monotonic()
            if watch is not None:
                step = min(step, WATCH_INTERVAL)
            try:
                code = proc.wait(timeout=max(step, 0.0) if step != float("inf") else None)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline or (watch is not None and watch()):
                    break
    except BaseException:
        stop(proc)
        raise
    # the group goes after every child, not only on a timeout: a process the child started and left running
    # (a server, a data loader) would outlive the run
    stop(proc)
    return code, time.monotonic() - begun


def stop(proc: subprocess.Popen) -> None:
    """End a supervised command: a supervisor still running is asked to stop (SIGTERM), so that it ends every
    descendant, those outside its process group too; then the group is killed (SIGKILL) and the supervisor
    reaped."""
    if proc.returncode is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + STOP_WITHIN_S
        while time.monotonic() < deadline and not ended(proc.pid):
            time.sleep(0.01)
    kill_group(proc.pid)  # the supervisor, not reaped yet, still holds its group's id
    proc.wait()


def ended(pid: int) -> bool:
    """Whether the child `pid` has ended, leaving it to be reaped (its group id stays taken until then)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True
