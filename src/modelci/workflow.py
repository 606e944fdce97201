"""The `run` and `compare` workflows: a sequence of plain functions (docs/design.md, "Flow of modelci run").

    config.load → targets.resolve → envs.ensure → suite.discover (inside the env) → execute
                → store.ingest (one transaction) → checks.evaluate(baseline) → report → exit code
"""

from __future__ import annotations

import hashlib
import math
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelci import builds, cancel, checks, envs, execute, journal, steps, targets
from modelci.config import Config
from modelci.errors import HarnessError, UserError, described
from modelci.execute import forked, local
from modelci.execute.base import DISCOVERY_TIMEOUT, Executor
from modelci.execute.local import WorkloadInfo
from modelci.records import Result, redacted

if TYPE_CHECKING:
    from modelci.store import Store

# The store, and what reads it (calibrate, compat, the alarm step), are imported where they are used: SQLAlchemy
# and the rest take 0.5 s, which `run` spends while its worker imports the framework. The steps that `compat`,
# `calibrate` and `bisect` share with `run` are in `modelci.steps`, below all of them.


class Unjudged(HarnessError):
    """The history failed a run: `outcome` holds its results, not judged, so that the command still shows them and
    writes its report files; the message says what is stored and what is not."""

    def __init__(self, message: str, outcome: RunOutcome):
        super().__init__(message)
        self.outcome = outcome
        #: set by `compare`: what each side finished (CompareOutcome, B unjudged, `problem` this message)
        self.compare: CompareOutcome | None = None


class NotStored(Unjudged):
    """The history refused the run (a full disk): nothing of it is stored (`outcome.unstored` says why); its
    journal keeps the results for the next run (`outcome.kept`), else the report files are their only record."""


#: how a run is stored when a signal came after every workload finished: whole, but the signal skipped its checks
UNJUDGED = "complete; its checks and alarms did not run"
#: ... or came once its checks had run, in the alarm step
IN_ALARM_STEP = ("complete and judged; the signal came in its alarm step, so the report files list no alarm: "
                 "`modelci alarms` shows what the step recorded before it")


class Unfinished(Unjudged):
    """The run is stored (`outcome.run_id`), but a step after it failed: the artifact store took no outputs, or the
    history refused the findings or the alarms."""


class Interrupted(Exception):
    """A run cancelled (Ctrl-C, SIGTERM, SIGHUP: `cancel`): what finished is stored, marked interrupted.

    `outcome`, when the run got as far as executing workloads, holds what finished (without findings), so that
    the command can still write its report files for it, marked interrupted.
    """

    def __init__(self, run_id: int | None, outcome: RunOutcome | None = None, stored_as: str = "interrupted"):
        how = f"interrupted by {cancel.signal_name()}"
        unstored = getattr(outcome, "unstored", "")
        if unstored:  # the history refused the run, and the signal came meanwhile (a retry's wait)
            how += f"; nothing of the run is stored ({unstored})"
        # `stored_as`: complete when the signal came once every workload had finished (while the run was stored,
        # or after it: its checks and alarms are what the signal skipped)
        super().__init__(f"{how}; run {run_id} stored as {stored_as}" if run_id else how)
        self.run_id = run_id
        self.outcome = outcome
        #: set by `compare`: what each side finished (CompareOutcome, marked interrupted)
        self.compare: CompareOutcome | None = None
        #: set by `calibrate`: the runs it stored before the signal (a CalibrationOutcome without noise)
        self.calibration: Any = None
        #: set by `bisect`: how far the search got (a BisectResult with status "interrupted"), None before its
        #: ends were judged
        self.bisect: Any = None


@dataclass
class Comparison:
    """One result with its baseline and the checks' findings."""

    result: Result
    baseline: Result | None
    findings: list[Any]
    #: which rule chose the baseline, in words (modelci.baselines): the nearest earlier version or commit, the
    #: compare's reference, or the latest by run time where no order is known
    baseline_rule: str = ""


@dataclass
class RunOutcome:
    """What one `run` produced: the stored run and each result compared with its baseline."""

    run_id: int | None
    target: targets.Target
    environment: envs.Environment
    runner: str
    comparisons: list[Comparison] = field(default_factory=list)
    reused: int = 0
    #: what the alarm step did: events opened/recovered, change points, notifier deliveries (alarms.hooks)
    alarms: Any = None
    #: seconds per step of the harness (environment, discovery, execute, ingest, compat, checks, alarms, ...)
    timings: dict[str, float] = field(default_factory=dict)
    #: True when the run was cancelled: `comparisons` hold what finished, not judged
    interrupted: bool = False
    #: why the run could not be stored (NotStored), or "": `comparisons` then hold what finished, not judged
    unstored: str = ""
    #: True when the run could not be stored and its journal keeps its results for the next run (modelci.journal)
    kept: bool = False
    #: False when no check ran on the results (cancelled, not stored, or the history failed after storing them):
    #: an empty list of findings then means nothing, not a pass
    judged: bool = True
    #: the config errors found once the run was stored and judged ([[policy]] metrics no workload records:
    #: alarms.hooks.check_config), for the command to say after the run's report rather than instead of it
    config_errors: list[str] = field(default_factory=list)

    @property
    def results(self) -> list[Result]:
        """The results, in execution order."""
        return [c.result for c in self.comparisons]

    def refuse_config_errors(self) -> None:
        """Raise the first config error as a UserError: for the callers that have no report to write first (a
        bisect's probes), to which such an error is still bad input."""
        if self.config_errors:
            raise UserError(self.config_errors[0])


def run(config: Config, target_spec: str, suite_specs: list[str], pattern: str | None = None, *,
        reuse: bool = False, progress: Any = None, command: str = "", lock: str | None = None,
        alarms: bool = True, judge: bool = True, purpose: str = "", parent_run_id: int | None = None,
        pool: WorkerPool | None = None, compile_bytecode: bool = True, store: Store | None = None) -> RunOutcome:
    """Run the selected workloads against one target, store the run, and compare each result with its baseline.

    With `lock` (a lock file), the environment is rebuilt exactly from it, and the target may be None. Without
    `alarms`, the run is stored and judged but opens, updates and notifies no alarm: a bisect's probes of older
    commits are not news, and a good probe must not mark the alarm being bisected as recovered. Without `judge`
    the run is stored and not compared with anything (no findings, no alarms): `compare` judges its sides itself.
    A run that is part of another (`purpose`, `parent_run_id`: compare's confirmation runs) is stored as such.
    With `pool`, the warm worker of the environment is taken from the pool and given back after the run, still
    warm, for the next run in it (a bisect's probes). `compile_bytecode` goes to envs.ensure. With `store`, the run
    uses that open history instead of opening its own: a bisect's probes and a compare's runs share the one their
    caller opened, so they pay neither the schema check nor SQLAlchemy's compilation of the same statements again
    (compiled statements are cached per engine; a probe that opened its own store paid 0.2-0.8 s for both).
    """
    from modelci.report.console import Progress

    progress = progress or Progress()
    suites = steps.resolve_suites(suite_specs, config.root)
    locked = envs.lockfile.read(lock) if lock else None
    spec = target_spec if locked is None or target_spec else envs.locked_target(locked)
    target = targets.resolve(spec or "", cache_dir=config.cache_dir)
    shared = store
    if shared is None:
        if config.artifacts_readonly:  # refused before the run starts, not after it
            steps.open_store(config, alarms)
        steps.check_artifacts(config)  # a bad URL, a folder under a file, missing credentials: before the environment
    progress.note(f"target {redacted(target.spec)}: preparing the environment")
    timings: dict[str, float] = {}
    try:
        with _timed(timings, "environment"), progress.step(f"preparing the environment of {target.label}"):
            # a git target's first environment already holds the suite's pins: discovery runs there, and a
            # dependency of the commit must not pull a default build of what the suite pins (torch) first
            early = steps.static_needs(target, suites, pattern) if target.kind == "git" and locked is None else []
            env = steps.environment_for(config, target, early, log=progress.note, lock=locked,
                                        compile_bytecode=compile_bytecode)
    except builds.BuildError as exc:  # a commit that does not build gives error results, not a stopped run
        return failed_build(config, shared or steps.open_store(config, alarms), target, exc, suites, suite_specs,
                            pattern, command, alarms=alarms)
    # the scratch folders of runs killed outright (their saved models and outputs) go before this one is made
    swept, freed = local.sweep_scratch(config.cache_dir)
    if swept:
        progress.note(f"removed {swept} scratch folder(s) of killed runs ({freed / 1e6:.1f} MB) from "
                      f"{local.scratch_root(config.cache_dir)}")
    own_scratch = local.Scratch(config.cache_dir, "run-")
    scratch = own_scratch.path
    executor = _executor(config, env, target, scratch, pool)
    try:
        # the worker imports the framework while this process opens the store and imports the later steps
        executor.start(suites)
        # a new SQLite history is made only after the selection is known to hold a workload (and has no runs to
        # preload checks for); an existing one is opened now, beside the worker's import
        new = shared is None and steps.history_is_new(config)
        with _timed(timings, "store"):
            store = shared or (None if new else steps.open_store(config, alarms))
            # imported here, beside the worker's import of the framework, so that the steps after the workloads
            # do not pay for them
            from modelci import compat  # noqa: F401
            from modelci.alarms import hooks as alarm_hooks  # noqa: F401
            from modelci.store.schema import utcnow
            preloading = _preload_checks(config, store, alarms) if judge and store is not None else None
        with _timed(timings, "discovery"):
            found = executor.discover(suites, max(DISCOVERY_TIMEOUT, config.timeout))
        if preloading is not None:
            with _timed(timings, "store"):
                preloading.join()  # before any workload runs: an import beside one would disturb its timings
        workloads, errors = steps.select(found, pattern)
        if store is None:
            with _timed(timings, "store"):
                store = steps.open_store(config, alarms)
        extra = steps.missing_requirements(env, workloads, {target.name: target.version or ""} if env.paths else None)
        if extra and locked is not None:
            raise UserError(f"the workloads need {', '.join(extra)}, which the lock {lock} does not hold; "
                            "lock an environment that has them")
        if extra and target.kind != "current":
            progress.note(f"the workloads also need {', '.join(extra)}")
            with _timed(timings, "environment"), progress.step(f"adding {', '.join(extra)} to the environment"):
                env = steps.environment_for(config, target, [*early, *extra], log=progress.note,
                                            compile_bytecode=compile_bytecode)
            _finish(executor, pool)
            executor = _executor(config, env, target, scratch, pool)
        outcome = RunOutcome(run_id=None, target=target, environment=env, runner=config.runner, timings=timings)
        all_found = [WorkloadInfo.from_json(w) for w in found["workloads"]]
        results = steps.error_results(errors, suites, all_found)
        run_fields = dict(target=target, environment=env, runner=config.runner, suites=suite_specs,
                          selection=pattern or "", command=command, started_at=utcnow(), purpose=purpose,
                          parent_run_id=parent_run_id)
        with _timed(timings, "store"):
            # the results of a run killed outright (SIGKILL) before it was stored, kept by its journal
            journal.recover_safely(config.cache_dir, store, progress.note)
            kept = journal.start(config.cache_dir, store, run_fields, progress.note)
            for result in results if kept is not None else ():  # the suite files that did not import
                kept.add(result)
        interrupted = False
        try:
            try:
                with _timed(timings, "execute"):
                    results, reused, interrupted = _execute(config, store, target, env, suites, workloads, scratch,
                                                            results, reuse, progress, executor=executor,
                                                            journal=kept)
                timings.update(executor.timings)
                outcome.reused = reused
                if results and (interrupted or len(results) > reused):
                    # a signal that arrives while the run is stored waits for the transaction to end
                    # (`cancel.deferred`), and is raised once it has: the run is stored then, and the report files
                    # must say which it is
                    try:
                        with _timed(timings, "ingest"), cancel.deferred():
                            outcome.run_id = _ingest(store, outcome, dict(
                                run_fields, results=results, status="interrupted" if interrupted else "complete",
                                started_at=utcnow(), journal=kept.name if kept is not None else ""))
                    except KeyboardInterrupt:
                        raise Interrupted(outcome.run_id, _unjudged(outcome, results),
                                          "interrupted" if interrupted else UNJUDGED) from None
            finally:
                if kept is not None:
                    # stored (or nothing to store): it goes; refused by the history, or cut by an error before it
                    # was stored: it stays, for the next run on this history (a SIGKILL leaves it the same way).
                    # Either is done whole before a signal is acted on (it is raised below, the run stored)
                    stored = outcome.run_id is not None or not results or len(results) <= outcome.reused
                    with cancel.deferred():
                        if stored:
                            kept.close()
                        else:
                            kept.keep()
                            outcome.kept = kept.holds_results
            if interrupted:
                raise Interrupted(outcome.run_id, _unjudged(outcome, results))
            # saved models become compat records while the scratch folder still holds them; their inputs
            # are made in a fork of the run's warm worker, which is stopped only then
            _after_ingest(config, store, target, env, results, suites, workloads, scratch, executor, outcome, alarms,
                          judge, pool)
        except KeyboardInterrupt:
            if outcome.run_id is None:  # nothing stored: the journal keeps what finished, and says so
                raise
            if interrupted:  # stored as interrupted; the signal came again as its journal went
                raise Interrupted(outcome.run_id, _unjudged(outcome, results)) from None
            # the run is stored; what is left (compat, checks, alarms) is skipped. A signal between the commit and
            # the next step (as the journal was removed) lands here too: the report files still say which run
            if judge and outcome.comparisons:
                # the checks ran (and stored their findings); the signal came in the alarm step, which may have
                # opened or updated alarms before it: the report keeps the verdicts, and says where to look
                outcome.interrupted = True
                raise Interrupted(outcome.run_id, outcome, IN_ALARM_STEP) from None
            raise Interrupted(outcome.run_id, _unjudged(outcome, results), UNJUDGED) from None
        except Exception as exc:  # noqa: BLE001 - the kinds below; SQLAlchemy is imported by now (the store)
            from sqlalchemy.exc import SQLAlchemyError

            if isinstance(exc, HarnessError) or not isinstance(exc, (SQLAlchemyError, OSError, MemoryError)) \
                    or outcome.run_id is None:  # not stored: NotStored, or the journal keeps it
                raise
            # the history or the disk failed after the run was stored (a full disk, a server gone, no memory
            # left): that was a traceback and exit 1, as for a regression, and no report file
            raise Unfinished(f"run {outcome.run_id} is stored, but its checks and alarms could not be finished "
                             f"({described(exc)}); its results are shown and written to the report files unjudged. "
                             "Fix that and the next run is judged as usual", _unjudged(outcome, results, False)) \
                from None
        return outcome
    finally:
        _finish(executor, pool)
        own_scratch.remove()


def _ingest(store: Store, outcome: RunOutcome, run: dict) -> int:
    """Store a run (`run`: Store.ingest's arguments); its id. When the history refuses it (a full disk), a
    NotStored with `outcome` holding the results, so that they are shown and written to the report files.

    When the artifact store cannot take the output arrays (a full disk), the results are stored all the same,
    without their arrays, in a run marked incomplete, and the HarnessError says so with the run's id: the
    timings, losses and statuses of an hour of workloads are not lost for want of space for their outputs.
    An incomplete run is no baseline, no point of a series, and none of its results is reused (store.INCOMPLETE).
    So is a run in which a workload's outputs found no room in the scratch folder (`outputs_lost`, which the
    child sets): the others' outputs are stored with it.
    """
    from modelci.store import INCOMPLETE, StoreWriteError
    from modelci.store.artifacts import ArtifactWriteError

    # a cancelled run stays `interrupted` (no baseline either), and says so as a cancelled run does
    lost = [r for r in run["results"] if r.info.get("outputs_lost")] if run.get("status") == "complete" else []
    if lost:
        run = run | {"status": INCOMPLETE}
    try:
        try:
            run_id = store.ingest(**run)
            if lost:
                names = ", ".join(r.workload for r in lost[:3]) + (f" and {len(lost) - 3} more" if len(lost) > 3
                                                                   else "")
                outcome.run_id = run_id
                raise Unfinished(f"the outputs of {names} could not be written: {lost[0].info['outputs_lost']}. "
                                 f"The results are stored as run {run_id}, the outputs that were written with "
                                 f"them, marked incomplete (no baseline, not compared; `modelci show {run_id}` "
                                 "lists them)", _unjudged(outcome, run["results"], False))
            return run_id
        except ArtifactWriteError as exc:
            why = f"not stored: {exc.what}"
            kept = [replace(r, outputs={}, info={**r.info, "outputs": why}) if r.outputs else r
                    for r in run["results"]]
            run_id = store.ingest(**(run | {"results": kept, "status": INCOMPLETE}))
            for result, stored in zip(run["results"], kept):
                result.id = stored.id
            outcome.run_id = run_id
            raise Unfinished(f"{exc.what}. The results are stored as run {run_id} without their output arrays, "
                             f"marked incomplete (no baseline, not compared; `modelci show {run_id}` lists them); "
                             f"{exc.fix}", _unjudged(outcome, run["results"], False)) from None
    except StoreWriteError as exc:
        _unjudged(outcome, run["results"], False)
        outcome.unstored = str(exc)
        fix = ("free space for the history (or point db elsewhere); the next run on it stores these results too"
               if exc.full
               else "run again once the server answers" if exc.lost
               else "fix what the history refused and run again")
        raise NotStored(f"{exc}. Nothing of this run is stored; {fix}", outcome) from None


def failed_build(config: Config, store: Store, target: targets.Target, error: builds.BuildError,
                 suites: dict[str, Path], suite_specs: list[str], pattern: str | None, command: str = "",
                 alarms: bool = True) -> RunOutcome:
    """Store an `error` result, with the build log tail, for every selected workload of a target that did not
    build, judge them like any result, and return the workflow's RunOutcome.

    With `alarms`, the alarm step runs as after any run: the failed build opens (or updates) the alarm of the
    repository's `build` series and notifies, the loudest regression there is (`alarms.hooks.build_series`).
    """
    from modelci.store.schema import utcnow

    started = utcnow()
    digest = hashlib.sha256(f"{target.commit}:{target.build}:{target.subdirectory}".encode()).hexdigest()[:16]
    # no environment exists; this record stands for the one that could not be made
    env = envs.Environment(id=f"unbuilt-{digest}", path=None, python=Path(config.python), spec=None, lock="",
                           fingerprint={}, isolated=True)
    info = {"build_failed": True, "commit": target.commit, "build": builds.BuildPlan.parse(target.build).text}
    results = [Result(workload=workload_id, status="error", reason=str(error).splitlines()[0],
                      stderr_tail=error.log_tail, code_hash=code_hash, info=dict(info))
               for workload_id, code_hash in builds.declared_workloads(suites, pattern)]
    outcome = RunOutcome(run_id=None, target=target, environment=env, runner=config.runner)
    # through _ingest, as any run: a history that refuses it shows the errors and writes the report files
    outcome.run_id = _ingest(store, outcome, dict(target=target, environment=env, runner=config.runner,
                                                  results=results, status="complete", suites=suite_specs,
                                                  selection=pattern or "", command=command, started_at=started))
    outcome.comparisons = evaluate(config, store, target, results)
    from modelci.alarms import hooks as alarm_hooks

    alarm_hooks.check_config(config, store, outcome)
    if alarms:
        outcome.alarms = alarm_hooks.after_run(config, store, outcome)
    return outcome


def _unjudged(outcome: RunOutcome, results: list[Result], interrupted: bool = True) -> RunOutcome:
    """The outcome of a cancelled run (or, not `interrupted`, of one whose checks failed): what finished, with no
    baseline or findings; marked interrupted when it was."""
    outcome.comparisons = [Comparison(result=r, baseline=None, findings=[]) for r in results]
    outcome.interrupted = interrupted
    outcome.judged = False
    return outcome


def _after_ingest(config: Config, store: Store, target: targets.Target, env: envs.Environment,
                  results: list[Result], suites: dict[str, Path], workloads: list[WorkloadInfo], scratch: Path,
                  executor: Executor, outcome: RunOutcome, alarms: bool, judge: bool,
                  pool: WorkerPool | None = None) -> None:
    """The steps after the run is stored: compat records, the checks (unless not `judge`), the alarm step."""
    from modelci import compat
    from modelci.alarms import hooks as alarm_hooks

    timings = outcome.timings
    with _timed(timings, "compat"):
        compat.record_saved_models(store, target, env, results, seed=config.seed, suites=suites,
                                   workloads=workloads, scratch=scratch, runner=config.runner,
                                   threads=config.threads, executor=executor)
    _finish(executor, pool)
    fresh = {id(r) for r in results if not r.reused}
    if not judge:
        outcome.comparisons = [Comparison(result=r, baseline=None, findings=[]) for r in results]
        return
    with _timed(timings, "checks"):
        outcome.comparisons = evaluate(config, store, target, results, store_for=fresh)
    alarm_hooks.check_config(config, store, outcome)  # alarms or not: the entries judged this run
    # alarms after the run is stored, so that a failing notifier can never lose it
    if alarms:
        with _timed(timings, "alarms"):
            outcome.alarms = alarm_hooks.after_run(config, store, outcome)


def _preload_checks(config: Config, store: Store, alarms: bool) -> threading.Thread | None:
    """A thread importing what the checks will need after this run (`checks.preload`), started now so that it
    runs beside the worker's import of the framework: scipy.stats once the runner has a history to compare with,
    ruptures too once its series are long enough for the alarm step to segment them."""
    from modelci.checks import history

    targets = store.targets_run(config.runner)
    if not targets:
        return None  # a first run has no baseline: nothing to compare, nothing to import
    segments = alarms and config.alarms.get("changes", True) and targets + 1 >= history.MIN_POINTS_ONLINE
    thread = threading.Thread(target=_preload, args=(segments,), name="modelci-preload", daemon=True)
    thread.start()
    return thread


def _preload(segments: bool) -> None:
    try:
        checks.preload(segments)
    except Exception:  # noqa: BLE001 - a thread's traceback would reach the user; the step that needs them
        pass  # imports them again, and reports a broken install there


@contextmanager
def _timed(timings: dict[str, float], step: str) -> Any:
    """Add the seconds the block takes to `timings[step]` (what the harness costs, per step)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[step] = timings.get(step, 0.0) + time.perf_counter() - start


def _executor(config: Config, env: envs.Environment, target: targets.Target, scratch: Path,
              pool: WorkerPool | None = None) -> Executor:
    """The run's executor, as the `executor` option says (`execute.create`): locally, a warm worker to fork from
    (`isolation = "fork"`) or fresh processes, and with `pool`, a local one that the pool keeps warm across runs;
    or the nodes of a Ray cluster."""
    if pool is not None and config.executor == "local":
        return pool.acquire(config, env, scratch)
    return execute.create(config, env, target, scratch)


def _finish(executor: Executor, pool: WorkerPool | None) -> None:
    """Stop the run's executor, or hand a pool's back to it still warm (twice is harmless)."""
    if pool is not None and isinstance(executor, forked.Executor):
        pool.release(executor)
    else:
        executor.close()


class WorkerPool:
    """Warm workers kept across runs: a bisect's probes are runs in one environment (a pythonpath build's commits
    share the environment of their dependencies), so one worker imports the framework once and every probe forks
    from it with its own checkout on the path (`Executor.paths`), instead of paying `import torch` per probe.

    One worker per environment: runs at the same time (`--jobs K`) fork from it together (Executor.borrow), so K
    probes cost one import of the framework; the workers' logs and the `modelci` shim live in the pool's own
    folder, which outlives each run's scratch folder. `close()` stops every
    worker and removes the folder; use it as a context manager.
    """

    def __init__(self, config: Config):
        self._scratch = local.Scratch(config.cache_dir, "pool-")
        self.root = self._scratch.path
        self._idle: dict[tuple, list[forked.Executor]] = {}
        self._busy: dict[int, tuple] = {}
        self._all: list[forked.Executor] = []
        #: the executor that owns the worker of each key; others borrow it while it is busy
        self._owners: dict[tuple, forked.Executor] = {}
        # workers are started by this one thread, which lives as long as the pool: their parent-death signal
        # follows the thread that started them, and a bisect's probe threads end after each round
        self._launcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="modelci-pool")
        self._lock = threading.Lock()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def acquire(self, config: Config, env: envs.Environment, scratch: Path) -> forked.Executor:
        """An idle executor of this environment rebound to the run (its worker still warm), or a new one."""
        isolation = config.isolation
        key = (str(env.python), config.seed, config.threads, isolation, config.timeout)
        with self._lock:
            idle = self._idle.get(key) or []
            executor = idle.pop() if idle else None
            if executor is None and key in self._owners:
                # its worker is busy with another run of this round: fork from it too (see Executor.borrow)
                executor = self._owners[key].borrow(scratch, env.paths)
            if executor is None:
                home = Path(tempfile.mkdtemp(prefix="worker-", dir=self.root))
                executor = forked.Executor(env.python, scratch, seed=config.seed, threads=config.threads,
                                           isolation=isolation, start_timeout=config.timeout, paths=env.paths,
                                           home=home)
                executor.launcher = self._launch
                self._all.append(executor)
                self._owners[key] = executor
            self._busy[id(executor)] = key
        executor.rebind(scratch, env.paths)
        return executor

    def release(self, executor: forked.Executor) -> None:
        """Take an executor back after its run; a worker that died is stopped and a fresh one starts next time."""
        with self._lock:
            key = self._busy.pop(id(executor), None)
            if key is None:
                return  # released already
            if executor.lender is not None:
                return  # a borrower: the worker stays with its owner
            if executor.worker is not None and not executor.alive:
                executor.close()
            self._idle.setdefault(key, []).append(executor)

    def _launch(self, make: Any) -> forked.Worker:
        return self._launcher.submit(make).result()

    def close(self) -> None:
        """Stop every worker and remove the pool's folder."""
        with self._lock:
            executors, self._all, self._idle, self._busy, self._owners = self._all, [], {}, {}, {}
        for executor in executors:
            executor.close()
        self._launcher.shutdown(wait=True)
        self._scratch.remove()


def _execute(config: Config, store: Store, target: targets.Target, env: envs.Environment,
             suites: dict[str, Path], workloads: list[WorkloadInfo], scratch: Path, results: list[Result],
             reuse: bool, progress: Any, executor: Executor | None = None,
             journal: Any = None) -> tuple[list[Result], int, bool]:
    """Execute each workload (or reuse a stored result); Ctrl-C stops here and keeps what finished.

    Without `executor` one is made for `env` (its worker starts at the first workload) and closed at the end.
    Results come back in the order they finish (an executor may run several at once).
    """
    if executor is None:
        with _executor(config, env, target, scratch) as own:
            return _execute(config, store, target, env, suites, workloads, scratch, results, reuse, progress,
                            executor=own, journal=journal)
    reused = 0
    settings = measured_with(config)
    progress.start(len(workloads))
    try:
        fresh = []
        for workload in workloads:
            previous = (store.reusable(target, env.id, config.runner, workload.id, workload.code_hash, settings)
                        if reuse else None)
            if previous is None:
                fresh.append(workload)
                continue
            previous.reused = True
            results.append(previous)
            reused += 1
            progress.done(workload.id, previous, reused=True)
        running = executor.run(suites, fresh, timeout=config.timeout, repeats=config.repeats or None,
                               started=lambda workload: progress.begin(workload.id))
        try:
            for result in running:
                result.info["settings"] = settings
                results.append(result)
                if journal is not None:  # on the disk, for a run killed before it is stored
                    journal.add(result)
                progress.done(result.workload, result)
        finally:
            getattr(running, "close", lambda: None)()  # an executor ends the work it still has (cancelled)
    except KeyboardInterrupt:
        return results, reused, True
    finally:
        progress.stop()
    return results, reused, False


def measured_with(config: Config) -> dict[str, int]:
    """The harness settings that change what a result measures: the seed (outputs, curves), the thread count
    (timings, and outputs where reductions are split) and the repeats (the timing samples). A stored result is
    reused only for the same ones."""
    return {"seed": config.seed, "threads": config.threads, "repeats": config.repeats}


#: `calibrate --runs` past this is a typo, not a plan: each run is stored in the history
MAX_CALIBRATION_RUNS = 1000


def calibrate(config: Config, target_spec: str, suite_specs: list[str], pattern: str | None = None, *,
              runs: int = 5, progress: Any = None, command: str = "") -> Any:
    """Run the selection `runs` times on one target (each a stored run) and store its noise profile
    (modelci.calibrate): a calibrate.CalibrationOutcome."""
    from modelci import calibrate as noise
    from modelci.store import NOISE_WRITES, Store

    if runs < 2:
        raise UserError(f"--runs {runs}: noise needs at least 2 runs (default 5)")
    if runs > MAX_CALIBRATION_RUNS:  # 100,000,000 stored 779 runs in 170 s before it was stopped
        raise UserError(f"--runs {runs}: at most {MAX_CALIBRATION_RUNS}; 20 runs already make a history check "
                        "count the noise on a young history")
    if not steps.history_is_new(config):  # the noise is stored after every run: a role that may not is told first
        steps.open_store(config).check_privileges(NOISE_WRITES)
    outcomes: list[RunOutcome] = []
    try:
        for _ in range(runs):
            outcomes.append(run(config, target_spec, suite_specs, pattern, progress=progress, command=command))
    except (Interrupted, KeyboardInterrupt) as exc:
        # the runs that finished are stored, the noise is not (it would be measured on fewer runs than asked):
        # `calibration` on the exception says which runs there are, for the report file
        stopped = exc if isinstance(exc, Interrupted) else Interrupted(None)
        cut = [*outcomes, stopped.outcome] if stopped.outcome is not None else outcomes
        if cut:
            stopped.calibration = noise.CalibrationOutcome(
                target=cut[-1].target, environment=cut[-1].environment, runner=config.runner,
                run_ids=[o.run_id for o in cut if o.run_id is not None],
                failures=[r for o in cut for r in o.results if r.status != "ok"], interrupted=True)
        if stopped is exc:
            raise
        raise stopped from None
    last = outcomes[-1]
    per_run = [{r.workload: r for r in o.results if r.status == "ok"} for o in outcomes]
    outcome = noise.CalibrationOutcome(target=last.target, environment=last.environment, runner=config.runner,
                                       run_ids=[o.run_id for o in outcomes if o.run_id is not None],
                                       entries=noise.measure(per_run),
                                       failures=[r for o in outcomes for r in o.results if r.status != "ok"])
    noise.save(Store.from_config(config), outcome)
    return outcome


def policy_for(config: Config, store: Store, workload: str) -> Any:
    """The metric -> Policy function of one workload: config settings, floored by its calibrated noise."""
    from modelci import calibrate

    return calibrate.with_noise(config.policy_for(workload), calibrate.profile(store, config.runner, workload))


def evaluate(config: Config, store: Store, target: targets.Target, results: list[Result],
             baselines: dict[str, Result | None] | None = None, store_for: set[int] | None = None,
             rule: str = "") -> list[Comparison]:
    """Compare each result with its baseline (given, chosen by `rule`; or the one the history's target order
    gives, modelci.baselines) and store the findings of the results in `store_for` (default: all stored ones)."""
    from modelci import baselines as choosing
    from modelci.alarms import lifecycle

    chooser = choosing.Chooser(target, getattr(config, "cache_dir", None))
    comparisons = []
    for result in results:
        if baselines is not None:
            baseline, why = baselines.get(result.workload), rule
        else:
            baseline, why = store.choose_baseline(result.workload, config.runner, target, chooser)
        policy = policy_for(config, store, result.workload)
        findings = checks.evaluate(result, baseline, policy)
        if baselines is None:  # a compare's A is the reference the user named: no alarm's baseline replaces it
            lifecycle.judge_fixes(store, config.runner, result, baseline, findings, policy)
        comparison = Comparison(result=result, baseline=baseline, findings=findings, baseline_rule=why)
        note_baseline_rule(comparison)
        if result.id is not None and (store_for is None or id(result) in store_for):
            store.add_findings(result.id, baseline.id if baseline else None, findings)
        comparisons.append(comparison)
    return comparisons


def note_baseline_rule(comparison: Comparison) -> None:
    """Keep the rule that chose the baseline with the status finding, so the stored findings say it too."""
    if comparison.baseline_rule:
        for finding in comparison.findings:
            if finding.check == "status":
                finding.numbers["baseline_rule"] = comparison.baseline_rule


def failed(outcome: RunOutcome) -> bool:
    """Whether a run should exit 1: a gating regression, or any result that is not ok or skipped."""
    return any(
        c.result.status not in ("ok", "skipped") or checks.regressed(c.findings) for c in outcome.comparisons
    )


@dataclass
class CompareOutcome:
    """Both sides of `compare A B` and B's results judged against A's."""

    a: RunOutcome
    b: RunOutcome
    comparisons: list[Comparison]
    #: True when the compare was cancelled: `a` and `b` hold what each side finished (`b` is None when the
    #: cancel came while A ran), and B's results are not judged
    interrupted: bool = False
    #: why B's results are not judged though the compare was not cancelled (the history refused a side, or failed
    #: after storing it), or ""
    problem: str = ""

    @property
    def regressed(self) -> bool:
        """Whether B regresses against A."""
        return any(checks.regressed(c.findings) for c in self.comparisons)

    @property
    def unmeasured(self) -> list[str]:
        """B's workloads that gave no result (failed, crashed, timeout, error): their status check is ok when A's
        was as broken (no new regression), but nothing of them was compared, so the compare is no pass."""
        return [c.result.workload for c in self.comparisons if c.result.status not in ("ok", "skipped")]

    @property
    def alarms(self) -> Any:
        """What the alarm step did with B's verdicts (alarms.hooks.AlarmReport), None when B measured nothing new."""
        return self.b.alarms if self.b is not None else None


def compare(config: Config, spec_a: str, spec_b: str, suite_specs: list[str], pattern: str | None = None, *,
            rerun: bool = False, progress: Any = None, command: str = "", confirm: bool = True,
            alarms: bool = True) -> CompareOutcome:
    """Run (or reuse) both targets and judge B against A, workload by workload; with `confirm`, a timing or memory
    verdict stands only when a second, fresh pass over both sides agrees (see `confirm_verdicts`).

    One verdict per finding: the sides are stored unjudged, B's findings are the compare's (after the
    confirmation) and are stored with B's results, and only then does the alarm step see them, so an alarm opens
    for exactly the gating regressions the compare reports. A, the reference, is not judged on its own here.
    """
    from modelci.report.console import Progress

    progress = progress or Progress()
    sides: list[RunOutcome] = []
    try:
        return _compare(config, spec_a, spec_b, suite_specs, pattern, sides, rerun=rerun, progress=progress,
                        command=command, confirm=confirm, alarms=alarms)
    except Interrupted as exc:
        exc.compare = _interrupted_compare(sides, exc.outcome)
        raise
    except Unjudged as exc:  # a side the history refused, or failed after: its results, unjudged
        exc.compare = _interrupted_compare(sides, exc.outcome, problem=str(exc))
        raise
    except KeyboardInterrupt:  # between the runs (the checks, storing the findings): both sides are stored
        stopped = Interrupted(None)
        stopped.compare = _interrupted_compare(sides, None)
        raise stopped from None


def _interrupted_compare(sides: list[RunOutcome], cut: RunOutcome | None, problem: str = "") -> CompareOutcome | None:
    """What a cancelled compare finished: the sides done, plus the side cut short (`cut`, what it finished) while
    A or B ran; B's results unjudged. None when A had not run any workload yet (nothing to report). With
    `problem`, the compare was not cancelled: the history refused a side, or failed after storing it."""
    if len(sides) < 2 and cut is not None:
        sides = [*sides, cut]  # a cut confirmation run is neither side: its sides are whole
    if not sides:
        return None
    b = sides[1] if len(sides) > 1 else None
    comparisons = [Comparison(result=r, baseline=None, findings=[]) for r in (b.results if b is not None else [])]
    return CompareOutcome(a=sides[0], b=b, comparisons=comparisons, interrupted=not problem, problem=problem)


def _compare(config: Config, spec_a: str, spec_b: str, suite_specs: list[str], pattern: str | None,
             sides: list[RunOutcome], *, rerun: bool, progress: Any, command: str, confirm: bool,
             alarms: bool) -> CompareOutcome:
    """`compare`, keeping each side in `sides` as soon as it has run (for a cancelled compare's reports)."""
    side_a = run(config, spec_a, suite_specs, pattern, reuse=not rerun, progress=progress, command=command,
                 alarms=False, judge=False)
    sides.append(side_a)
    store = steps.open_store(config, alarms)  # one history for B, the judging and the confirmation runs
    side_b = run(config, spec_b, suite_specs, pattern, reuse=not rerun, progress=progress, command=command,
                 alarms=False, judge=False, store=store)
    sides.append(side_b)
    baselines = {r.workload: r for r in side_a.results}
    rule = f"the compare's reference A = {side_a.target.label}"
    comparisons = evaluate(config, store, side_b.target, side_b.results, baselines=baselines, store_for=set(),
                           rule=rule)
    if confirm:
        for comparison in comparisons:
            confirm_verdicts(config, store, spec_a, spec_b, suite_specs, comparison, progress, command)
    for comparison in comparisons:  # stored once final, with B's fresh results only (a reused one has its own)
        result = comparison.result
        if result.id is not None and not result.reused:
            store.add_findings(result.id, comparison.baseline.id if comparison.baseline else None,
                               comparison.findings)
    side_b.comparisons = comparisons
    from modelci.alarms import hooks as alarm_hooks

    alarm_hooks.check_config(config, store, side_b)
    if alarms and side_b.run_id is not None:
        with _timed(side_b.timings, "alarms"):
            side_b.alarms = alarm_hooks.after_run(config, store, side_b)
    return CompareOutcome(a=side_a, b=side_b, comparisons=comparisons)


#: the checks whose verdicts in `compare` are confirmed by a second pass over both sides
CONFIRMED_CHECKS = ("timing", "memory")


def confirmable(finding: checks.Finding) -> bool:
    """Whether a finding waits on a second pass: a timing or memory difference that gates, or a memory
    difference that would gate but for too few samples (one peak per run: `checks.timing.check_memory`)."""
    if finding.check not in CONFIRMED_CHECKS or finding.verdict not in ("regression", "improvement"):
        return False
    return finding.gating or bool(finding.numbers.get("needs_confirmation"))


def passes_apart(first: checks.Finding, *others: checks.Finding) -> str | None:
    """Why passes that found a difference the same way still do not confirm each other: their ratios lie further
    apart than the factor the check judges by, so the run-to-run noise is as large as the difference it claims (on
    a loaded runner one pass saw a train step at 0.84x, the next at 0.38x). None when they agree."""
    ratios = [f.numbers.get("ratio") for f in (first, *others)]
    factor = first.numbers.get("factor")
    if not all(isinstance(v, (int, float)) and v > 0 and math.isfinite(v) for v in (*ratios, factor)):
        return None
    spread = max(ratios) / min(ratios)
    if spread <= factor:
        return None
    shown = " and ".join(f"{r:.2f}x" for r in ratios) if len(ratios) == 2 else ", ".join(f"{r:.2f}x" for r in ratios)
    return (f"the {'two' if len(ratios) == 2 else len(ratios)} passes' ratios {shown} are {spread:.2f}x apart, more "
            f"than the factor {factor:g}: the difference is within the noise between runs")


#: fresh pairs of runs of both sides a timing or memory difference must be seen in again before it counts: the
#: first in the order B A, the next A B (see confirm_verdicts); a pair is run only while a difference still stands
CONFIRMATION_PAIRS = 2

_PASS_NAMES = ("second", "third", "fourth", "fifth")


def confirm_verdicts(config: Config, store: Store, spec_a: str, spec_b: str, suite_specs: list[str],
                     comparison: Comparison, progress: Any, command: str) -> None:
    """Re-run one workload on both sides, B first, then again A first, and keep a timing or memory verdict only if
    every fresh pair agrees with the first pass.

    The rank test compares the samples of one run of each side. Those samples share the state of the moment (the
    load, and whatever the run's one warm worker, which every workload of the run is forked from, brought with
    it), so a difference between the A run and the B run passes the test though it is not the builds': on a
    shared 2-core runner two compares of torch 2.13 against 2.14 flagged different workloads (docs/zoo.md), and on
    an idle one the first pass of a compare of paddle found every workload of B faster. Running the workload again
    in the order B, A makes the sequence A B B A, so a trend that favoured one side in the first pass favours the
    other in the second. But one fresh pair is one more draw of that state: on an idle machine two passes of one
    compare agreed on a train step 0.70x/0.72x faster that the next compare measured at 1.09x
    (docs/verdicts.md). So a difference the first pair confirms must be seen once more, in a pair run in the
    order A B: the sequence A B | B A | A B, each side's state drawn three times. A pair runs only while some
    difference still stands, so the common case (the first pair rejects it, or nothing differs) costs what it
    did. Peak memory is one sample per run and moves by about 10% between runs of paddle (docs/zoo.md), so its
    differences are confirmed the same way, and gate only once confirmed. The fresh runs are stored as part of
    B's run (`purpose="confirmation"`), not judged on their own; the verdict's numbers keep every pass
    (`numbers.confirmation`: the second pass, with `passes` listing each confirming pass).
    """
    flagged = [f for f in comparison.findings if confirmable(f)]
    if not flagged or comparison.baseline is None:
        return
    workload = comparison.result.workload
    parent = comparison.result.id and store.run_of_result(comparison.result.id)
    progress.note(f"{workload}: {', '.join(f.metric for f in flagged)} differ; running both sides again to confirm")
    standing = {id(f) for f in flagged}
    seen: dict[int, list[checks.Finding | None]] = {id(f): [] for f in flagged}
    passes: list[dict[str, Any]] = []
    for number in range(CONFIRMATION_PAIRS):
        order = (("b", spec_b), ("a", spec_a)) if number % 2 == 0 else (("a", spec_a), ("b", spec_b))
        again = {}
        for side, spec in order:
            outcome = run(config, spec, suite_specs, workload, progress=progress, command=command, alarms=False,
                          judge=False, purpose="confirmation", parent_run_id=parent or None, store=store)
            again[side] = next((r for r in outcome.results if r.workload == workload), None)
        if again["a"] is None or again["b"] is None or again["a"].status != "ok" or again["b"].status != "ok":
            found: dict[str, checks.Finding] = {}
        else:
            found = {f.metric: f for f in checks.evaluate(again["b"], again["a"], policy_for(config, store, workload))
                     if f.check in CONFIRMED_CHECKS}
        passes.append({"order": "".join(side.upper() for side, _ in order),
                       "result_ids": {side: (r.id if r is not None else None) for side, r in again.items()}})
        for finding in flagged:
            if id(finding) in standing:
                check = found.get(finding.metric)
                seen[id(finding)].append(check)
                same_way = check is not None and check.verdict == finding.verdict
                if not same_way or passes_apart(finding, *seen[id(finding)]) is not None:
                    standing.discard(id(finding))
        if not standing:
            break
    flagged_ids = {id(f) for f in flagged}
    for index, finding in enumerate(comparison.findings):
        if id(finding) in flagged_ids:
            comparison.findings[index] = _confirmed(finding, seen[id(finding)], passes, id(finding) in standing)


def _confirmed(finding: checks.Finding, seen: list[checks.Finding | None], passes: list[dict[str, Any]],
               confirmed: bool) -> checks.Finding:
    """The finding as its confirmation left it: its verdict if every fresh pass agreed, else `ok`, not counted;
    its numbers keep the first pass's, and `confirmation` those of the second (with every pass in `passes`)."""
    second = seen[0]
    numbers = dict(finding.numbers, confirmation={
        "confirmed": confirmed, **(second.numbers if second else {}), "result_ids": passes[0]["result_ids"],
        "passes": [dict(passes[i], verdict=c.verdict if c else None, ratio=c.numbers.get("ratio") if c else None,
                        p_value=c.numbers.get("p_value") if c else None) for i, c in enumerate(seen)]})
    first = finding.numbers.get("reason", "")
    described = [f"a {_PASS_NAMES[i]} run of both{'' if i == 0 else ', ' + passes[i]['order'] + ' this time'} "
                 f"({c.message if c else 'which did not finish ok'})" for i, c in enumerate(seen)]
    if confirmed:
        message = f"{finding.message}; confirmed by {' and by '.join(described)}"
        numbers["reason"] = (f"{first}; confirmed by " + " and by ".join(
            f"a {_PASS_NAMES[i]} run of both ({c.numbers.get('reason', '')})" for i, c in enumerate(seen)))
    else:
        last = seen[-1]
        agreed, why = described[:-1], described[-1]
        apart = passes_apart(finding, *seen) if last is not None and last.verdict == finding.verdict else None
        if apart is not None:
            why = why[:-1] + f"; {apart})"
        message = f"{finding.message}; not confirmed by {why}, so not counted"
        if agreed:
            message += f" (confirmed by {' and by '.join(agreed)} before)"
        numbers["reason"] = f"not confirmed by {why}, so not counted; first pass: {first}"
    # a confirmed difference gates as its check says, and a memory one that waited on the second pass gates now
    gating = finding.gating or (confirmed and bool(finding.numbers.get("needs_confirmation")))
    return checks.Finding(finding.check, finding.metric, finding.verdict if confirmed else "ok", numbers, message,
                          gating)
