"""Processes of a run die with the process that started them, whatever kills it.

Runs inside the environment under test (standard library only). A workload process left behind by a cancelled
or killed harness runs on, at full CPU, with parent 1, forever; CI runners recycle machines for days. Linux's
parent-death signal (prctl PR_SET_PDEATHSIG) lets the kernel signal a process when its parent ends, however it
ends (SIGKILL included). The harness names itself in MODELCI_PARENT_PID when it starts a worker or a spawned
child, so that a parent that died before the signal was armed is noticed too.

Two limits of the parent-death signal, and what covers them: it follows the parent *thread* (the harness starts
its worker from the thread that runs the workflow, which outlives the worker), and it reaches only the direct
child. The worker therefore takes SIGTERM as its parent-death signal and ends the running workload's whole
process group before it exits (worker.py), and it watches its job pipe for EOF while a workload runs; a
workload process takes SIGKILL, and the harness ends its process group after every workload.

A spawned child (`isolation = "spawn"`, discovery, compat) has no worker to outlive the harness, so it runs under
a supervisor (`python -I -S lifeline.py -- CMD`, `supervise`): a small process that takes SIGTERM as
its parent-death signal, is a child subreaper (prctl PR_SET_CHILD_SUBREAPER: whatever a descendant leaves
behind is re-parented to it, not to init, even a process that left the process group with `setsid`), and ends
every descendant when the child exits, when the harness dies or when the harness stops it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable, Sequence

#: the variable through which the harness names itself to the processes it starts
PARENT_VARIABLE = "MODELCI_PARENT_PID"
#: how the supervisor says that its command could not be started (exit code 127)
CANNOT_RUN = "lifeline: cannot run"
#: prctl option: the signal to get when the parent dies
PR_SET_PDEATHSIG = 1
#: prctl option: orphaned descendants are re-parented to this process instead of to init
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    """prctl(option, value); False where it fails or the platform has no prctl (only Linux has)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return prctl(option, value, 0, 0, 0) == 0


def die_with_parent(parent: int, signum: int = signal.SIGKILL) -> bool:
    """Have the kernel send `signum` to this process when its parent ends; exit at once when the parent (whose
    pid is `parent`) has ended already. False where the platform has no parent-death signal."""
    if not _prctl(PR_SET_PDEATHSIG, int(signum)):
        return False
    if os.getppid() != parent:  # the parent ended before the signal was armed: nobody waits for us
        os._exit(1)
    return True


def from_environment(signum: int = signal.SIGKILL) -> bool:
    """`die_with_parent` for the parent the harness named in MODELCI_PARENT_PID, which is taken out of the
    environment (the processes this one starts have another parent). False when none is named."""
    value = os.environ.pop(PARENT_VARIABLE, "")
    if not value.isdigit():
        return False
    return die_with_parent(int(value), signum)


def become_subreaper() -> bool:
    """Have the processes that descendants of this one leave behind re-parented to it rather than to init (so
    that `end_descendants` finds them, a `setsid` daemon too). False where the platform cannot."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def children() -> list[int]:
    """The pids whose parent is this process now (zombies included), read from /proc."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    parent = int(fh.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if parent == me:
                found.append(int(entry))
    return found


def end_descendants(keep: Callable[[int], bool] | None = None) -> int:
    """SIGKILL and reap every child of this process (but those `keep` says to keep), then the children that
    re-parents to it (as a subreaper), until none is left; returns how many ended. Each round ends one
    generation: a process killed hands its own children to this one before it can be reaped."""
    ended = 0
    while True:
        found = [pid for pid in children() if keep is None or not keep(pid)]
        if not found:
            return ended
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in found:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        ended += len(found)


class _Stopped(Exception):
    """The harness died (the parent-death signal) or stopped the supervisor (SIGTERM)."""


def _stop(signum: int, frame: object) -> None:
    raise _Stopped


def supervise(command: Sequence[str]) -> int:
    """Run `command` as a child and end every descendant of it once it exits, or once this process gets SIGTERM
    (the harness's death or its request); the result is the child's: its exit code, or its death by the same
    signal."""
    signal.signal(signal.SIGTERM, _stop)  # before the parent-death signal is armed, so that it finds the handler
    from_environment(signal.SIGTERM)
    become_subreaper()
    env = {**os.environ, PARENT_VARIABLE: str(os.getpid())}  # the child dies with this process
    status = None
    try:
        # posix_spawn rather than subprocess: this process starts before every spawned child, so its imports
        # count (subprocess pulls in threading, selectors and more)
        try:
            child = os.posix_spawnp(command[0], list(command), env)
        except OSError as exc:  # as a shell says it: the caller reads exit code 127 and this line
            sys.stderr.write(f"{CANNOT_RUN} {command[0]}: {exc.strerror}\n")
            return 127
        while status is None:
            pid, waited = os.waitpid(-1, 0)  # reaps the orphans re-parented here as they end, too
            if pid == child:
                status = waited
    except _Stopped:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # ending the descendants is not cut short
        end_descendants()
    signum = signal.SIGTERM if status is None else (os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0)
    if not signum:
        return os.waitstatus_to_exitcode(status)
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the child dumped its core already, if it was to
    if signum not in (signal.SIGKILL, signal.SIGSTOP):  # no handler can be set for these two: they act as default
        signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # ends here as the child ended: the harness reads the signal as the child's
    return 128 + signum


if __name__ == "__main__":
    arguments = sys.argv[1:]
    sys.exit(supervise(arguments[1:] if arguments[:1] == ["--"] else arguments))
