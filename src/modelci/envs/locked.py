"""`modelci run --lock FILE`: the environment rebuilt exactly from a lock, for a target it holds."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from modelci.envs.build import EnvSpec, Environment, ensure, installed_version
from modelci.envs.lockfile import Lock
from modelci.envs.pipconfig import IndexConfig
from modelci.errors import UserError
from modelci.records import redacted


def locked_target(lock: Lock) -> str:
    """The target spec a lock names (`# target:`), for `run --lock FILE` without --target."""
    if not lock.target:
        raise UserError(f"{lock.file or lock.source or 'the lock'} does not name its target (no `# target:` line); "
                        "pass --target as well")
    return lock.target


def ensure_locked(lock: Lock, target: Any, python: str, index: IndexConfig, cache_dir: Path, *,
                  log: Callable[[str], object] = print, environ: Mapping[str, str] | None = None,
                  on_path: bool = False) -> Environment:
    """Build (or reuse) the environment of `lock` and check that it holds `target`; sets `target.version`.
    With `on_path` the target is not installed but put on the path (a pythonpath build): the lock holds its
    dependencies only."""
    if target.kind == "current":
        raise UserError("--lock rebuilds an isolated environment; it cannot be combined with --target current")
    env = ensure(EnvSpec(requirements=[], python=python, index=index, lock=lock), cache_dir, log=log,
                 environ=environ)
    version = installed_version(env, target.name)
    where = lock.file or lock.source or "the lock"
    if version is None and on_path:
        return env
    if version is None:
        raise UserError(f"target {redacted(target.spec)}: {where} holds no {target.name}; lock an environment of this "
                        "target")
    wanted = target.version
    if target.kind == "requirement":
        try:
            specifier = Requirement(target.spec).specifier
        except InvalidRequirement:
            specifier = None
        if specifier is not None and not specifier.contains(version, prereleases=True):
            raise UserError(f"target {redacted(target.spec)}: {where} pins {target.name}=={version}, which the target "
                            "excludes")
    elif wanted and wanted != version:
        raise UserError(f"target {redacted(target.spec)} is {target.name} {wanted}, but {where} pins "
                        f"{target.name}=={version}")
    target.version = version
    return env
