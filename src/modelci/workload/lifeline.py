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
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

#: the variable through which the harness names itself to the processes it starts
PARENT_VARIABLE = "MODELCI_PARENT_PID"
#: prctl option: the signal to get when the parent dies
PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int, signum: int = signal.SIGKILL) -> bool:
    """Have the kernel send `signum` to this process when its parent ends; exit at once when the parent (whose
    pid is `parent`) has ended already. False where the platform has no parent-death signal."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    if prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
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
