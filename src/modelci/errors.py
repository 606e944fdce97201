"""The one user-error hierarchy (docs/design.md: "One user-error type, caught once")."""


class UserError(Exception):
    """Something the user can fix: the message says what was wrong, where, and what to do. Exit code 2."""

    exit_code = 2


class HarnessError(UserError):
    """The harness itself could not run (uv missing, store unreadable). Exit code 3."""

    exit_code = 3


class CorruptArtifact(UserError):
    """A stored artifact whose bytes no longer match its address, or that is gone. Here rather than in the store,
    so that the checks, which read a baseline's outputs lazily, can judge around it without importing the store."""


class BisectRefused(UserError):
    """A bisect's ends do not bracket a change (the good end is not good, or the bad end is not bad)."""


def short_number(value: object) -> str:
    """A number for a message: its repr, or its first digits and its length when it has hundreds (a TOML
    integer has no bound, and a message of 400 digits hides what it says)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} digits)"


def described(exc: BaseException, limit: int = 300) -> str:
    """An exception in a few words: its type and the first line of its message (`MemoryError()` says nothing)."""
    said = str(getattr(exc, "orig", None) or exc).strip()
    return type(exc).__name__ + (f": {said.splitlines()[0][:limit]}" if said else "")


#: how a disk that is full (or a quota spent, or a file-size limit hit) reads in a child's or a tool's output:
#: the OS's words, and Rust's io errors as uv prints them
NO_SPACE_WORDS = ("No space left on device", "Disk quota exceeded", "File too large", "os error 28", "os error 122",
                  "os error 27")


def no_space_in(text: str) -> str | None:
    """The words of `text` that say a disk was full or a file-size limit hit, or None."""
    return next((words for words in NO_SPACE_WORDS if words in text), None)


#: a disk with less room than this is full: a write that failed there without a word (a child's result, its
#: stderr, SQLite's "disk I/O error") most likely found no room
LOW_DISK_BYTES = 1 << 20


def nearly_full(path: object) -> int | None:
    """The bytes free on the disk of `path` when they are under LOW_DISK_BYTES, else None (room, or unknown)."""
    left = free_bytes(path)
    return left if left is not None and left < LOW_DISK_BYTES else None


def free_bytes(path: object) -> int | None:
    """The bytes free to this user on the disk of `path` (or of its folder, when it does not exist yet), or None
    where that cannot be told."""
    import os
    from pathlib import Path

    if path is None:
        return None
    path = Path(str(path))
    try:
        stats = os.statvfs(path if path.exists() else path.parent)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize
