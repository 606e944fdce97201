"""Cancellation: SIGINT, SIGTERM and SIGHUP stop a command the same way.

A CI system cancels a job with SIGTERM (then SIGKILL after a grace period); a closed terminal sends SIGHUP;
Ctrl-C sends SIGINT. Each of them raises `Cancelled` (a KeyboardInterrupt) in the main thread, so the one path
that Ctrl-C already took is taken by all three: the running workload is killed, what finished is stored in one
transaction marked `interrupted`, the report files say so, and the command exits with 128 + the signal's number
(130, 143, 129), as a shell reports a process ended by that signal.

The steps that must not be cut in half (the transaction that stores a run, the report files) run inside
`deferred()`: a signal that arrives there is held, and raised once the step is done.

Only the first signal cancels. One that follows it (a second Ctrl-C, a CI runner that sends SIGTERM twice) is
held for good: raised again in the middle of the clean-up that the first one started, it would cut that
clean-up short (the report files not written, or a traceback out of the handler that tells the user about the
first one), which is what cancelling is meant to avoid. The clean-up is bounded (the workload's process group
is killed, the store's transaction is short); a command that must die at once is sent SIGKILL, as a CI
system does after its grace period.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator

#: the signals that cancel a command
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Cancelled(KeyboardInterrupt):
    """A cancelling signal arrived; `signum` says which."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_state: dict[str, Any] = {"received": None, "deferring": 0, "pending": None}


def install() -> None:
    """Make SIGINT, SIGTERM and SIGHUP raise `Cancelled` in this (main) thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in SIGNALS:
        signal.signal(signum, _handle)


def _handle(signum: int, frame: Any) -> None:
    if _state["received"] is not None:  # already cancelling: the first signal's clean-up runs to its end
        return
    _state["received"] = signum
    if _state["deferring"]:
        _state["pending"] = _state["pending"] or signum
        return
    raise Cancelled(signum)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold cancelling signals while the block runs; the first one that arrived is raised when it ends."""
    _state["deferring"] += 1
    try:
        yield
    finally:
        _state["deferring"] -= 1
        pending = _state["pending"]
        if not _state["deferring"] and pending is not None:
            _state["pending"] = None
            raise Cancelled(pending)


def received() -> int | None:
    """The cancelling signal received in this process (the first, when several were), or None."""
    return _state["received"]


def exit_code(default: int = 130) -> int:
    """The exit code of a cancelled command: 128 + the signal's number (SIGINT 130, SIGTERM 143, SIGHUP 129)."""
    signum = _state["received"]
    return 128 + signum if signum else default


def signal_name() -> str:
    """The name of the signal that cancelled the command (SIGINT when none was seen: a KeyboardInterrupt)."""
    signum = _state["received"]
    return signal.Signals(signum).name if signum else "SIGINT"
