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
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

#: the signals that cancel a command
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Cancelled(KeyboardInterrupt):
    """A cancelling signal arrived; `signum` says which."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_state: dict[str, Any] = {"received": None, "deferring": 0, "pending": None, "unraisable": sys.unraisablehook}


def install() -> None:
    """Make SIGINT, SIGTERM and SIGHUP raise `Cancelled` in this (main) thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in SIGNALS:
        signal.signal(signum, _handle)
    if sys.unraisablehook is not _unraisable:
        _state["unraisable"] = sys.unraisablehook
        sys.unraisablehook = _unraisable


def _unraisable(unraisable: Any) -> None:
    """Deliver again a `Cancelled` that a finalizer swallowed.

    Python runs a signal's handler wherever the main thread is, also inside a `__del__` or a weakref callback
    (SQLAlchemy's pool has some), and an exception raised there is only printed ("Exception ignored in ...").
    The cancel was then lost: the command ran on to its end, and every later signal was held as a second one.
    Here the signal is sent to the main thread once more, from a thread of its own so that it arrives after this
    hook has returned (raised in the hook, it would be swallowed again), and is raised where the command can act
    on it; any other unraisable exception goes to the hook that was there before."""
    if isinstance(unraisable.exc_value, Cancelled) and _state["received"] == unraisable.exc_value.signum:
        _state["received"] = None  # the handler takes the signal again as the first
        returned = threading.Event()
        threading.Thread(target=_send_again, args=(threading.main_thread().ident, unraisable.exc_value.signum,
                                                   returned), name="modelci-cancel", daemon=True).start()
        returned.set()
        return
    _state["unraisable"](unraisable)


def _send_again(main: int, signum: int, returned: threading.Event) -> None:
    """Send `signum` to the main thread once the hook that asked for it has returned (and a moment more, for
    the few steps from setting `returned` to leaving it)."""
    returned.wait()
    time.sleep(0.01)
    signal.pthread_kill(main, signum)


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
