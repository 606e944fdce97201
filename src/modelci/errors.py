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
