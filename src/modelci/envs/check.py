"""`modelci env check`: constraint files are read, and no environment contradicts them.

It fails when:
- a configured constraints file (or the platform's override file) cannot be read or parsed;
- a constraints file is not consumed: one named on the command line, or a `*constraint*.txt` in the project,
  that neither `[env] constraints`, `[env] platform_overrides` nor pip's `constraint` setting passes on;
- an environment in use (the latest complete run on each runner) was built without the current constraints;
- a lock (given with --lock, else those environments' locks) pins a version a constraint excludes.
Constraints that name a package no checked environment holds are warnings: dead entries, or misspelt names.
A FILE that is no file, and a check with nothing to check (no constraints, no lock, no environment in use), are
UserErrors: neither is a check that failed, nor one that passed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelci.envs import constraints as cons
from modelci.envs.lockfile import Lock
from modelci.errors import UserError


@dataclass
class CheckReport:
    """Problems (the check fails), warnings, and what was checked."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    #: what was not checked, and why (the check passes or fails without it)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the check passes."""
        return not self.problems


def check(settings: dict[str, Any], root: Path, store: Any, *, locks: list[Lock] = (), files: list[str] = (),
          pip_constraints: list[str] = (), platform_tag: str = "") -> CheckReport:
    """Check the `[env]` constraints against the project's files, the environments in use and `locks`; `store`
    None is a project with no history yet (no environment in use)."""
    _refuse_missing(files)
    report = CheckReport()
    configured = list(settings.get("constraints", []))
    overrides = dict(settings.get("platform_overrides", {}))
    for path in [*configured, *overrides.values()]:
        try:
            cons.parse_file(path)
            report.checked.append(f"constraints file {path}")
        except UserError as exc:
            report.problems.append(str(exc))
    if report.problems:
        return report  # nothing below means anything while a file is unreadable
    consumed = {str(Path(p).resolve()) for p in [*configured, *overrides.values(), *pip_constraints]}
    strays = [str(Path(f).resolve()) for f in files] if files else cons.stray_files(root, consumed)
    for path in strays:
        if path not in consumed:
            report.problems.append(f"{path} is not consumed: no environment reads it. Add it to [env] constraints "
                                   "(or [env] platform_overrides) in the config, or delete it")
    checked_locks = list(locks) or (_locks_in_use(store, settings, report) if store is not None else [])
    if not (report.checked or report.problems or files or checked_locks):
        # no constraints file, no lock, no environment in use: "env check passed" in CI would say that
        # something was checked and found sound
        history = ("there is no history yet" if store is None else
                   "the history holds no complete run of a built target (a run of `--target current` builds none)")
        raise UserError(f"nothing to check: no [env] constraints are configured, no *constraint*.txt is in the "
                        f"project {root}, no FILE or --lock was given, and {history}, so no environment is in "
                        "use. Configure [env] constraints in modelci.toml, name constraints files (`modelci env "
                        "check FILE...`), give a lock (`--lock FILE`), or run a built target first")
    if store is not None and not locks and not checked_locks:
        report.notes.append("no environment in use was checked: the history holds no complete run of a built "
                            "target")
    for lock in checked_locks:
        merged = cons.load(configured, overrides, lock.platform or platform_tag)
        label = lock.file or lock.source or f"environment {lock.environment}"
        report.checked.append(f"lock of {label}")
        for message in cons.contradictions(merged, lock):
            report.problems.append(f"{label}: {message}")
    merged_here = cons.load(configured, overrides, platform_tag)
    if checked_locks:
        report.warnings += cons.unused(merged_here, checked_locks)
    return report


def _refuse_missing(files: list[str]) -> None:
    """A UserError for a FILE that is no file: a mistyped path is a wrong argument, not a constraints file that
    failed the check (exit 1 read as a regression in CI)."""
    wrong = []
    for given in files:
        path = Path(given).resolve()
        if path.is_dir():
            wrong.append(f"{path} is a folder")
        elif path.exists() and not path.is_file():
            wrong.append(f"{path} is not a regular file")
        elif not path.exists():
            wrong.append(f"{path} does not exist")
    if wrong:
        raise UserError("; ".join(wrong) + ": name constraints files that exist (`modelci env check FILE...` "
                        "checks that the project's environments consume them), or give no FILE to check every "
                        "*constraint*.txt in the project")


def _locks_in_use(store: Any, settings: dict[str, Any], report: CheckReport) -> list[Lock]:
    """The locks of the latest complete run on each runner; notes environments built without the constraints."""
    latest: dict[str, dict[str, Any]] = {}
    for row in store.run_environments():
        if row["status"] == "complete" and row["target_kind"] != "current":
            latest.setdefault(row["runner"], row)
    locks = []
    for runner, row in sorted(latest.items()):
        env = store.environment(row["environment_id"])
        if env is None:
            continue
        fingerprint = dict(env.fingerprint or {})
        label = f"run {row['run_id']} on runner {runner} (environment {env.id})"
        lock = Lock.of(env.lock, fingerprint, environment=env.id, source=label)
        merged = cons.load(list(settings.get("constraints", [])), dict(settings.get("platform_overrides", {})),
                           lock.platform)
        if merged.entries:
            wanted = hashlib.sha256(merged.text().encode()).hexdigest()
            applied = {c.get("sha256") for c in (fingerprint.get("build") or {}).get("constraints", [])}
            if wanted not in applied:
                report.problems.append(f"{label} was built without the current [env] constraints: they were not "
                                       "consumed. Run again to rebuild it under them")
        locks.append(lock)
    return locks
