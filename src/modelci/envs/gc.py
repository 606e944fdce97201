"""`modelci env gc`: remove cached environments that are old or beyond the N most recently used.

An environment is removed under its build lock, so one being built is skipped, and only when no running modelci
holds it in use (`ensure` takes a shared lock on `<id>.use` until its process ends); it is first renamed out of
place, so no process ever sees a half-deleted environment that still looks valid: `ensure` finds no folder
and builds it again. Half-built folders (no spec file) from killed builds are always removed.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from modelci import locks
from modelci.envs.build import IN_USE_SUFFIX, LAST_USED_FILE, SPEC_FILE
from modelci.errors import UserError

_TRASH = ".trash-"


@dataclass
class CachedEnv:
    """One folder in `<cache>/envs`: its spec id, whether it is complete, when it was last handed out."""

    path: Path
    complete: bool
    last_used: float

    @property
    def spec_id(self) -> str:
        """The folder name: the hash of the environment's spec."""
        return self.path.name


@dataclass
class GcReport:
    """What `gc` did: removed and kept environments, those skipped because a process held them, bytes freed."""

    removed: list[CachedEnv] = field(default_factory=list)
    kept: list[CachedEnv] = field(default_factory=list)
    busy: list[CachedEnv] = field(default_factory=list)
    freed_bytes: int = 0


def cached(cache_dir: str | Path) -> list[CachedEnv]:
    """The environment folders in the cache, most recently used first."""
    folder = Path(cache_dir) / "envs"
    found = []
    for path in folder.iterdir() if folder.is_dir() else []:
        if not path.is_dir() or path.name.startswith(_TRASH):
            continue
        complete = (path / SPEC_FILE).is_file()
        stamps = [_mtime(path / LAST_USED_FILE), _mtime(path / SPEC_FILE), _mtime(path)]
        found.append(CachedEnv(path, complete, max(stamps)))
    return sorted(found, key=lambda env: env.last_used, reverse=True)


def gc(cache_dir: str | Path, *, keep: int | None = None, older_than_days: float | None = None,
       now: float | None = None, log: Callable[[str], object] = print) -> GcReport:
    """Remove environments beyond the `keep` most recently used, or unused for `older_than_days`, and leftovers."""
    if keep is None and older_than_days is None:
        raise UserError("say what to remove: --keep N (keep the N most recently used) or --older-than DAYS")
    if (keep is not None and keep < 0) or (older_than_days is not None and older_than_days < 0):
        raise UserError("--keep and --older-than take a number of at least 0")
    now = time.time() if now is None else now
    report = GcReport()
    _empty_trash(Path(cache_dir) / "envs")
    complete_rank = 0
    for env in cached(cache_dir):
        remove = not env.complete
        if env.complete:
            remove = (keep is not None and complete_rank >= keep) or \
                (older_than_days is not None and now - env.last_used > older_than_days * 86400)
            complete_rank += 1
        if not remove:
            report.kept.append(env)
        elif _remove(env, log, report):
            report.removed.append(env)
        else:
            report.busy.append(env)
    return report


def _remove(env: CachedEnv, log: Callable[[str], object], report: GcReport) -> bool:
    """Remove one environment under its build lock; False when another process holds the lock."""
    with locks.exclusive(env.path.parent / f"{env.spec_id}.lock", wait=False) as held:
        if not held:
            log(f"skipping environment {env.spec_id}: another process is building it")
            return False
        in_use = env.path.parent / f"{env.spec_id}{IN_USE_SUFFIX}"
        locks.release_shared(in_use)  # what this process used is its own to remove; others' use makes it busy
        with locks.exclusive(in_use, wait=False) as free:
            if not free:
                log(f"skipping environment {env.spec_id}: a running modelci uses it")
                return False
            trash = env.path.with_name(f"{_TRASH}{env.spec_id}-{os.getpid()}")
            os.replace(env.path, trash)
        report.freed_bytes += _size(trash)
        shutil.rmtree(trash, ignore_errors=True)
    log(f"removed environment {env.spec_id}" + ("" if env.complete else " (incomplete)"))
    return True


def _empty_trash(folder: Path) -> None:
    """Finish removals that a killed gc left behind."""
    for path in folder.glob(f"{_TRASH}*") if folder.is_dir() else []:
        shutil.rmtree(path, ignore_errors=True)


def _size(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                stat = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            # hard links into uv's cache free nothing while the cache keeps its copy
            if stat.st_nlink == 1:
                total += stat.st_size
    return total


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
