"""What `modelci env lock|diff|export` accept as an environment: a run, an environment id, or a file.

- a run id, or `latest`: the environment that run used (from the history);
- an environment id, or a unique prefix of 6+ characters: from the history, else from the cache;
- a lock file, an export bundle folder, or an environment folder in the cache.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from modelci.envs import lockfile
from modelci.envs.build import FINGERPRINT_FILE, LOCK_FILE, SPEC_FILE
from modelci.errors import UserError

#: the file names inside an export bundle (`export.py`)
BUNDLE_LOCK, BUNDLE_FINGERPRINT = "lock.txt", "fingerprint.json"


@dataclass
class EnvRecord:
    """An environment as recorded: its id, pins, fingerprint, and the run it came from when there is one."""

    label: str
    id: str
    lock: str
    fingerprint: dict
    run: dict[str, Any] | None = None
    #: the target it was made for, as a lock names it (`name==version`, a git spec pinned to its commit), when
    #: known: a git build is not one of the environment's packages, so it is shown beside them
    target: str = ""

    @property
    def target_name(self) -> str:
        """The target's distribution name, when known (a run's; a lock's `name==version`)."""
        if self.run:
            return str(self.run["target_name"])
        try:
            return canonicalize_name(Requirement(self.target).name) if self.target else ""
        except InvalidRequirement:  # a git spec: its name is the run's
            return ""

    def to_lock(self) -> lockfile.Lock:
        """Its lock file contents."""
        return lockfile.Lock.of(self.lock, self.fingerprint, environment=self.id, source=self.label)


def resolve(ref: str, store: Any, cache_dir: str | Path) -> EnvRecord:
    """Find the environment `ref` names (see the module docstring); an unknown one is a UserError.

    `store` is the history, or a function that opens it, called only for a ref that needs it (a lock file or a
    folder does not, so it needs no history to exist)."""
    path = Path(ref)
    if path.exists():
        return _from_path(path)
    if callable(store):
        store = store()
    if ref == "latest" or ref.isdigit():
        return from_run(store, ref)
    row = store.environment(ref)
    if row is not None:
        return EnvRecord(f"environment {row.id}", row.id, row.lock, dict(row.fingerprint or {}))
    for folder in sorted((Path(cache_dir) / "envs").glob("*/")):
        record = _from_cache_folder(folder)
        if record is not None and len(ref) >= 6 and record.id.startswith(ref):
            return record
    raise UserError(f"{ref!r} is not a run id, an environment id, a lock file or a folder; "
                    "`modelci history` lists runs, and `modelci show RUN` shows a run's environment")


def lock_target(run: dict[str, Any]) -> str:
    """The target a lock of ``run`` names (its `# target:` line, what `run --lock FILE` runs without --target).

    A git build is its spec pinned to the commit it built: the ref it was asked for (a branch, HEAD~1) moves,
    and the `name==version` of a source build is on no package index. Any other target is the `name==version`
    that was installed, else its spec as given; a run of the `current` interpreter names none.
    """
    from modelci import targets

    if run["target_kind"] == "current":
        return ""
    if run["target_kind"] == "git" and run.get("target_commit"):
        url, _, options = targets.parse_git_spec(run["target_spec"])
        return targets.git_spec(url, run["target_commit"], options.get("build"), options.get("subdirectory"))
    if run["target_version"]:
        return f"{run['target_name']}=={run['target_version']}"
    return run["target_spec"]


def from_run(store: Any, run_id: str | int) -> EnvRecord:
    """The environment of a stored run (`latest` for the newest), with the run's target, suites and runner."""
    stored = store.run(run_id)
    row = stored.row
    env = row.environment
    run = {"id": row.id, "runner": row.runner, "status": row.status, "suites": list(row.suites or []),
           "selection": row.selection, "target_spec": row.target.spec, "target_kind": row.target.kind,
           "target_name": row.target.name, "target_version": row.target.version,
           "target_commit": row.target.commit, "results": stored.results}
    label = f"run {row.id} (runner {row.runner}, target {row.target.spec})"
    # the run's own machine: another runner (or this one after an upgrade) may have run the same environment
    return EnvRecord(label, env.id, env.lock, stored.fingerprint, run=run, target=lock_target(run))


def _from_path(path: Path) -> EnvRecord:
    if not path.is_file() and not path.is_dir():  # /dev/null, a pipe: was "is a folder but neither ..."
        raise UserError(f"{path} is neither a lock file nor a folder; pass a run id, an environment id or a lock "
                        "file")
    if path.is_file():
        lock = lockfile.read(path)
        return EnvRecord(f"lock {path}", lock.environment or lock.id(), lock.body(), _lock_facts(lock),
                         target=lock.target)
    if (path / BUNDLE_LOCK).is_file():
        lock = lockfile.read(path / BUNDLE_LOCK)
        fingerprint = _read_fingerprint(path / BUNDLE_FINGERPRINT) if (path / BUNDLE_FINGERPRINT).is_file() \
            else _lock_facts(lock)
        return EnvRecord(f"bundle {path}", lock.environment or lock.id(), lock.body(), fingerprint,
                         target=lock.target)
    record = _from_cache_folder(path)
    if record is None:
        raise UserError(f"{path} is a folder but neither an export bundle (lock.txt) nor a complete environment "
                        f"({SPEC_FILE}); pass a run id, an environment id or a lock file")
    return record


def _from_cache_folder(folder: Path) -> EnvRecord | None:
    if not (folder / SPEC_FILE).is_file():
        return None
    try:
        lock = (folder / LOCK_FILE).read_text()
        fingerprint = json.loads((folder / FINGERPRINT_FILE).read_text())
    except (OSError, ValueError):
        return None
    env_id = lockfile.id_of(lock, fingerprint)
    return EnvRecord(f"environment {env_id} ({folder})", env_id, lock, fingerprint)


def _read_fingerprint(path: Path) -> dict:
    from modelci.envs.fingerprint import SCHEMA

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read fingerprint {path}: {exc}") from None
    if data.get("schema") != SCHEMA:
        raise UserError(f"{path} has fingerprint schema {data.get('schema')}; this modelci reads schema {SCHEMA}. "
                        "Use the modelci that wrote it")
    return data


def _lock_facts(lock: lockfile.Lock) -> dict:
    """What a lock file alone says of the fingerprint: interpreter, platform and the files of each package."""
    return {"implementation": lock.implementation, "python": lock.python, "platform_tag": lock.platform,
            "distributions": {n: [v, lock.digests.get(n, "")] for n, v in lock.pins.items()},
            "build": {"requested": lock.requested, "target": lock.target, "wheels": lock.wheels}}
