"""The journal of a run in progress: each result on the local disk as it finishes, so that a run killed outright
loses nothing that finished.

A cancel (SIGTERM, SIGINT, SIGHUP) stores what finished before the command ends (`cancel`). SIGKILL cannot be
caught: a CI system sends it when its grace period is spent, the kernel's OOM killer sends it, and a runner's
machine may simply go down. The results of an hour of workloads were then in memory only, and lost. Now `run`
writes each fresh result to a journal under `cache_dir/journals/<id>/` as it arrives (one pickle per result, the
output arrays with it, written under a temporary name and renamed, so a result is in the journal whole or not at
all), and removes the journal once the run is stored. The next `run` on the same history finds a journal whose
owner is gone, stores its results as a run marked `interrupted` (as a cancelled run is: no baseline, its results
reusable), says so, and removes it. The journal's name is stored with the run it was kept for (and with the run
the recovery makes of it), in the same transaction: a SIGKILL in the few milliseconds between that commit and
the journal's removal left a journal whose results were stored already, and the next run stored them twice; the
recovery now finds the name in the history and only removes the journal. A journal is removed by renaming it out
of the way first (`REMOVING`), so that a process killed halfway through the removal leaves no half journal (its
meta or its run gone, some results left) for every later run to warn about; a half journal that an earlier
version left is recognised by its name in the history too.

Whether the owner is gone is told by a lock, not a process id: the run holds an exclusive `flock` on the
journal's `owner.lock` for its life, and the kernel releases it however the process ends, so a journal is never
taken from a run that is still going (on this machine or another sharing the cache folder through a file system
that honours `flock`), and a process id reused by the system cannot fool it.

A journal names its history by the id stored in the history (store.schema.HistoryRow), so a run on another
history leaves it alone. A digest of the database URL named it before, and two machines sharing a cache folder,
each with its own SQLite history at the same path, took each other's. One written by another modelci version is
kept and named, not read (its pickles may not load).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import shutil
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import modelci
from modelci import locks
from modelci.errors import described
from modelci.records import Result, redacted
from modelci.targets import Target

#: the folder of the journals, under cache_dir
FOLDER = "journals"
#: the suffix of a journal being made (recovery leaves it alone)
STARTING = ".starting"
#: the suffix of a journal being removed (whoever finds one finishes the removal)
REMOVING = ".removing"
OWNER_LOCK = "owner.lock"
META = "meta.json"
RESULT_SUFFIX = ".result"


class Journal:
    """The journal of one run in progress; `add` each fresh result, `close` once the run is stored (or refused)."""

    def __init__(self, cache_dir: Path | str, history: str, run: dict[str, Any],
                 log: Callable[[str], object] = print):
        """`history`: the id of the history the run is stored in (Store.identity). `run` holds what storing the
        run needs besides its results: target, environment, runner, suites, selection, command, started_at
        (Store.ingest's arguments)."""
        self._log, self.failed = log, ""
        #: stored with the run (Store.ingest's `journal`)
        self.name = name = uuid.uuid4().hex
        # made under a name recovery skips, and locked, before it takes its own name: a recovery running meanwhile
        # (another run starting) found it unlocked and without its meta, and took it for a dead run's
        starting = Path(cache_dir) / FOLDER / (name + STARTING)
        starting.mkdir(parents=True)
        self._owner = locks.hold_new(starting / OWNER_LOCK)  # held for the run's life
        self._count = 0
        if isinstance(run.get("target"), Target):
            # a journal may outlive its run in the cache (an artifact a CI job uploads): no token of the target's
            # URL goes into it; the history stores the spec redacted anyway, and needs nothing else of it
            target = run["target"]
            run = dict(run, target=dataclasses.replace(target, spec=redacted(target.spec),
                                                        repo=target.repo and redacted(target.repo)))
        _write(starting / "run.pickle", pickle.dumps(run, protocol=pickle.HIGHEST_PROTOCOL))
        meta = {"history": history, "modelci_version": modelci.__version__, "pid": os.getpid(),
                "host": os.uname().nodename, "runner": run.get("runner", ""), "command": run.get("command", "")}
        _write(starting / META, json.dumps(meta).encode())
        self.folder = starting.with_name(name)
        os.replace(starting, self.folder)  # the lock stays held: it is on the open file, not the name

    def add(self, result: Any) -> None:
        """Keep one fresh result (with its outputs) until the run is stored. A journal that cannot be written (a
        full disk) stops keeping results and says so once; the run itself goes on."""
        if self.failed:
            return
        self._count += 1
        try:
            _write(self.folder / f"{self._count:06d}{RESULT_SUFFIX}",
                   pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
        except (OSError, pickle.PicklingError, TypeError, AttributeError) as exc:
            self.failed = f"{type(exc).__name__}: {exc}"
            self._log(f"the run's journal in {self.folder} stopped ({self.failed}): a SIGKILL before the run is "
                      "stored would lose its results")

    def close(self) -> None:
        """The run is stored: the journal goes."""
        _remove(self.folder)
        self._owner.close()

    @property
    def holds_results(self) -> bool:
        """Whether the journal holds every result it was given."""
        return bool(self._count) and not self.failed

    def keep(self) -> None:
        """The run could not be stored (the history refused it, the command failed before storing it): the journal
        stays, unlocked, for the next run on the history to store its results."""
        self._owner.close()
        if self.holds_results:
            self._log(f"the {self._count} result(s) of this run are kept in {self.folder}: the next `modelci run` "
                      "on this history stores them, marked interrupted")


def start(cache_dir: Path | str, store: Any, run: dict[str, Any], log: Callable[[str], object]) -> Journal | None:
    """The journal of a run about to execute, or None (said) when it cannot be made: the run goes on without."""
    try:
        return Journal(cache_dir, store.identity, run, log)
    except Exception as exc:  # noqa: BLE001 - a disk, a pickle or the history's id: the run goes on without
        log(f"no journal for this run ({described(exc, 200)}): a SIGKILL before it is stored would lose its "
            "results")
        return None


def recover_safely(cache_dir: Path | str, store: Any, log: Callable[[str], object]) -> list[int]:
    """`recover`, for a run about to start: a journal that cannot be stored now (the history refuses it) is kept
    for a later run and said, and never stops this one."""
    try:
        return recover(cache_dir, store.identity, store, log)
    except Exception as exc:  # noqa: BLE001 - the run that found it must still run
        log(f"could not store the results of killed runs kept under {Path(cache_dir) / FOLDER} "
            f"({described(exc, 200)}); they are kept for the next run")
        return []


def _remove(folder: Path) -> None:
    """Remove a journal: renamed first, in one step, so that it is whole or gone to anyone who looks."""
    gone = folder.with_name(folder.name + REMOVING)
    try:
        os.rename(folder, gone)
    except OSError:  # already gone, or a file system that cannot rename it: removed where it is
        gone = folder
    shutil.rmtree(gone, ignore_errors=True)


def _write(path: Path, data: bytes) -> None:
    """Write `path` whole: under a temporary name, flushed to the disk, then renamed."""
    part = path.with_name(path.name + ".part")
    with open(part, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(part, path)


def recover(cache_dir: Path | str, history: str, store: Any, log: Callable[[str], object]) -> list[int]:
    """Store the journals of the history whose id is `history` (`store`'s) whose runs were killed, each as an
    `interrupted` run; the ids of the runs stored. A journal that cannot be read is named and kept; one of
    another history is left alone."""
    root = Path(cache_dir) / FOLDER
    if not root.is_dir():
        return []
    stored = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.endswith(STARTING)):
        if folder.name.endswith(REMOVING):  # its owner was killed as it removed it
            shutil.rmtree(folder, ignore_errors=True)
            continue
        owner = _take(folder)
        if owner is None:  # its run is still going
            continue
        try:
            run_id = _recover_one(folder, history, store, log)
        except Exception as exc:  # noqa: BLE001 - one journal that cannot be stored must not hold up the others
            log(f"could not store the results of a killed run kept in {folder} ({described(exc, 200)}); they are "
                "kept for the next run, or remove the folder to give them up")
            run_id = None
        finally:
            owner.close()
        if run_id is not None:
            stored.append(run_id)
    return stored


def waiting(cache_dir: Path | str) -> list[Path]:
    """The journals of killed runs in `cache_dir` that wait for a run on their history to store them (their
    owner's lock is free), oldest first; `env gc` names them rather than remove results nothing else holds."""
    root = Path(cache_dir) / FOLDER
    found = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        if folder.name.endswith((STARTING, REMOVING)):
            continue
        owner = _take(folder)
        if owner is not None:
            owner.close()
            if any(folder.glob(f"*{RESULT_SUFFIX}")):
                found.append(folder)
    return sorted(found, key=lambda folder: folder.stat().st_mtime)


def _take(folder: Path) -> Any:
    """The journal's owner lock, taken (its run is gone), or None while its run holds it."""
    return locks.take_if_free(folder / OWNER_LOCK, make=True)


def _recover_one(folder: Path, history: str, store: Any, log: Callable[[str], object]) -> int | None:
    try:
        meta = json.loads((folder / META).read_text())
    except (OSError, ValueError) as exc:
        if not any(folder.glob(f"*{RESULT_SUFFIX}")):  # killed before it wrote its meta: it holds no result
            _remove(folder)
        elif (stored := store.run_for_journal(folder.name)) is not None:
            # half removed, by a version that removed a stored run's journal file by file and was cut in between
            _remove(folder)
            log(f"removed what was left of the journal of run {stored} in {folder}: that run was stored, and its "
                "journal was cut as it was removed")
        else:
            log(f"a journal of a killed run in {folder} has no readable {META} ({type(exc).__name__}), so its "
                "history is unknown and its results are not stored; remove the folder to give them up")
        return None
    if not isinstance(meta, dict):
        log(f"a journal of a killed run in {folder} has a {META} that is no JSON object; its results are not "
            "stored: remove the folder to give them up")
        return None
    if meta.get("history") != history:
        return None
    results_files = sorted(folder.glob(f"*{RESULT_SUFFIX}"))
    if not results_files:
        _remove(folder)
        return None
    if meta.get("modelci_version") != modelci.__version__:
        log(f"a run killed before it was stored left {len(results_files)} result(s) in {folder}, written by "
            f"modelci {meta.get('modelci_version')}; this is {modelci.__version__}, which does not read them: "
            "store them with that version (any `modelci run` on this history), or remove the folder")
        return None
    try:
        run = pickle.loads((folder / "run.pickle").read_bytes())
        if not isinstance(run, dict):
            raise TypeError(f"run.pickle holds {type(run).__name__}, not the run's fields")
    except Exception as exc:  # noqa: BLE001 - any unpickling failure: the journal is kept and named
        log(f"a run killed before it was stored left results in {folder} whose run cannot be read "
            f"({type(exc).__name__}: {exc}); remove the folder to give them up")
        return None
    results, unreadable = [], []
    for path in results_files:  # one cut or damaged result loses itself, not the others
        try:
            result = pickle.loads(path.read_bytes())
            if not isinstance(result, Result):
                raise TypeError(f"it holds {type(result).__name__}, not a result")
            results.append(result)
        except Exception as exc:  # noqa: BLE001 - named below
            unreadable.append(f"{path.name} ({type(exc).__name__})")
    if not results:
        log(f"a run killed before it was stored left results in {folder} that cannot be read: "
            f"{', '.join(unreadable)}; remove the folder to give them up")
        return None
    started = run.get("started_at")
    stored = store.run_for_journal(folder.name)
    if stored is not None:  # killed after its run was stored, before the journal was removed
        _remove(folder)
        log(f"removed the journal of run {stored} in {folder}: that run was stored, and killed before it removed "
            "its journal")
        return None
    run_id = store.ingest(**dict(run, results=results, status="interrupted", journal=folder.name))
    _remove(folder)
    if unreadable:
        log(f"of the earlier run stored as run {run_id}, {len(unreadable)} result(s) could not be read and are lost: "
            f"{', '.join(unreadable)}")
    when = started.isoformat(timespec="seconds") if isinstance(started, datetime) else "earlier"
    log(f"stored run {run_id} ({len(results)} result(s), marked interrupted) from an earlier run that was not stored "
        f"(killed, or refused by the history; started {when}, pid {meta.get('pid')} on {meta.get('host')}: "
        f"{meta.get('command') or 'run'})")
    return run_id
