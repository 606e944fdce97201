"""Run one part of the site's generation in a forked child while the parent builds the rest.

A full build of a large history is two independent halves, the workload pages and the run pages, of about
equal cost. Forking hands the child everything already loaded, without pickling 25,000 results. Fork is safe
only in a single-threaded process, so `serve` (whose request threads build the site) never forks. Whatever goes
wrong in the child, the caller gets None and does the work itself.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["can_fork", "Forked"]


def can_fork() -> bool:
    """Whether forking is safe here: a platform with fork, and no other thread that could hold a lock."""
    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


class Forked:
    """`work()` running in a forked child; `result()` waits for the JSON-able value it returned, or None."""

    def __init__(self, work: Callable[[], Any], before: Callable[[], None] = lambda: None):
        context = multiprocessing.get_context("fork")
        self._receive, send = context.Pipe(duplex=False)
        self._process = context.Process(target=_child, args=(work, before, send), daemon=True)
        self._process.start()
        send.close()  # the parent's copy: with it closed, the child's exit ends recv() with EOFError

    def result(self) -> Any:
        """The child's value; None when it failed, died or sent nothing."""
        try:
            message = json.loads(self._receive.recv())
        except (EOFError, OSError, ValueError):
            message = {"ok": False}
        finally:
            self._receive.close()
            self._process.join()
        return message.get("value") if message.get("ok") else None


def _child(work: Callable[[], Any], before: Callable[[], None], send: Any) -> None:
    try:
        before()
        send.send(json.dumps({"ok": True, "value": work()}))
    except BaseException:  # report any failure to the parent, which then does the work itself
        send.send(json.dumps({"ok": False, "error": traceback.format_exc()}))
    finally:
        send.close()
        os._exit(0)  # skip atexit handlers and finalizers inherited from the parent (its pools, its files)
