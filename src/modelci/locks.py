"""Advisory file locks (flock) between modelci processes that share a cache: one helper for every lock.

An environment, a git build, a repository mirror: of two processes that would make the same thing, one does and
the other waits for it. The lock file is left in place: deleting it would let a third process lock a different
inode.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

#: the files this process holds a shared lock on until it ends (hold_shared), by path
_held: dict[str, IO[str]] = {}


@contextmanager
def exclusive(path: Path, *, waiting: str = "", log: Callable[[str], object] | None = None,
              wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive lock on the file `path` (created if absent) for the block, and yield True.

    When another process holds it: with `wait`, say `waiting` through `log` (when both are given) and wait for
    it; without, yield False at once, holding nothing.
    """
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                yield False
                return
            if log is not None and waiting:
                log(waiting)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def hold_shared(path: Path) -> None:
    """Hold a shared lock on the file `path` (created if absent) until this process ends: "in use", which a
    process that wants it exclusively (env gc) sees as busy. Waits while another holds it exclusively (a gc
    removing the thing: a moment). The descriptor is not passed to the processes this one starts."""
    key = str(path)
    if key in _held:
        return
    handle = open(path, "a")  # noqa: SIM115 (held until the process ends)
    fcntl.flock(handle, fcntl.LOCK_SH)
    _held[key] = handle


def release_shared(path: Path) -> None:
    """Let go of what `hold_shared` holds on `path` in this process (nothing when it holds nothing)."""
    handle = _held.pop(str(path), None)
    if handle is not None:
        handle.close()


def hold_new(path: Path) -> IO[str]:
    """Make the file `path` and hold an exclusive lock on it until the returned file is closed (or the process
    ends, however it ends): "its owner is alive", which `take_if_free` reads. The lock is taken under a name
    nothing looks at and the file renamed into place once it is held, so no process finds `path` unlocked
    while its owner is still starting."""
    part = path.with_name(path.name + ".part")
    handle = open(part, "w")  # noqa: SIM115 (held by the caller)
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.replace(part, path)
    return handle


def take_if_free(path: Path, *, make: bool = False) -> IO[str] | None:
    """The exclusive lock on the file `path`, taken, when no process holds it (its owner is gone: the kernel
    releases a lock however a process ends, and a reused process id cannot fool it); None while one does. A
    missing file gives None too, unless `make`: where every owner makes its file before anyone looks (a journal,
    made under a name nothing looks at), a missing one is damage, and the caller takes it to say so."""
    try:
        handle = open(path, "a" if make else "r+")  # noqa: SIM115 (closed by the caller)
    except OSError:
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle
