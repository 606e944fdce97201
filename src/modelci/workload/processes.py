"""Processes of the harness and of the fork worker: ending a child's process group, and telling whether this
process may fork. Standard library only: the worker and the child run inside the environment under test.

A workload child leads its own process group, and ending the group ends whatever it started (a server, a data
loader) with it. A fork copies only the calling thread, so a process that runs other threads, or a framework
whose runtime cannot be shared across a fork, must not fork.
"""

from __future__ import annotations

import os
import signal
import sys


def signal_name(number: int) -> str:
    """`SIGABRT` for 6, `signal 40` for a number without a name: how every reason names the signal that ended a
    process (an exit code -N is signal N)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by `pid`, or `pid` alone before it has made its group; gone is fine."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def thread_count() -> int:
    """Threads of this process, native ones included (1 when /proc is not there to say)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def framework_hazard() -> str:
    """Why a framework this process imported makes forking it unsafe (its helper's `fork_hazard`: a GPU runtime
    it started), or "" when none does."""
    from modelci.workload import frameworks

    for helper in frameworks.helper_classes():
        hazard = helper.fork_hazard() if helper.module in sys.modules else ""
        if hazard:
            return hazard
    return ""
