"""The fork executor: one warm worker per environment imports the suites' frameworks once, then forks a
fresh child per workload (`import torch` took 4 s per workload, users should pay for their models).

The worker (modelci.workload.worker) runs inside the environment. Each child is a fork of it that runs the
same entry point as a spawned child (`modelci.workload.child run ...`) and writes the same files, so the
results are those of `execute.local`: crash isolation (a signal is `crashed`), timeouts (this process
kills the child's process group), the stderr tail and peak RSS per workload (see worker.py on memory).

It falls back to a fresh process per workload, with the reason in `Result.info["isolation_reason"]`, where
forking is unsafe: `isolation = "spawn"`, a platform other than Linux, a worker that initialised a GPU
runtime or started threads while importing, or a worker that keeps dying. Rank 0 of a `devices > 1` workload
forks the other ranks from itself after the prologue (`--ranks fork`, see workload/child.py), except with
`isolation = "spawn"`, where every process is fresh.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from modelci.errors import UserError
from modelci.execute import base, local, supervisor
from modelci.execute.local import WorkloadInfo
from modelci.records import Result
from modelci.workload.processes import kill_group, signal_name

#: the `isolation` option's values
ISOLATIONS = ("fork", "spawn")
#: the entry module of a workload child
CHILD = "modelci.workload.child"
#: a worker that dies this many times in one run is not started again; the rest of the run spawns
MAX_WORKER_DEATHS = 3
#: seconds a worker may take to reap a child that was just killed, or to exit once told to
GRACE_S = 30.0
#: how long a worker asked to stop may take to end its children before its process group is killed
STOP_S = 2.0


class WorkerDied(Exception):
    """The worker process ended (or never became ready); the message ends with its log's tail."""


def fork_unavailable() -> str:
    """Why this platform does not fork workers, or "" when it does."""
    if not hasattr(os, "fork"):
        return "this platform has no fork()"
    if not sys.platform.startswith("linux"):
        # macOS: system frameworks (Accelerate, the Objective-C runtime) are not fork-safe; Python's own
        # multiprocessing stopped forking there for the same reason
        return f"fork isolation is used on Linux only, not on {sys.platform}"
    return ""


class Worker:
    """One worker process inside an environment, and the JSON-lines pipes to it."""

    def __init__(self, python: Path, env: dict[str, str], log: Path, suites: list[Path], preload: list[str],
                 timeout: float):
        cmd = [str(python), "-m", "modelci.workload.worker"]
        cmd += [arg for module in preload for arg in ("--preload", module)]
        cmd += [arg for folder in suites for arg in ("--suite", str(folder))]
        self.log = log
        with open(log, "wb") as err:
            # its own session: a Ctrl-C at the terminal reaches only us, and we stop the worker
            # it dies with us, whatever kills us: the parent-death signal and EOF on its stdin (workload/lifeline.py)
            self.proc = subprocess.Popen(cmd, env=supervisor.with_parent(env), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, start_new_session=True)
        self._buffer = b""
        self.timeout = timeout
        #: the worker's "ready" message, once `wait_ready` has read it
        self.ready: dict[str, Any] | None = None
        # jobs from several threads at once (a pool's executors sharing this worker): answers by job id
        self._cond = threading.Condition()
        self._reading = False
        self._answers: dict[Any, list[dict[str, Any]]] = {}
        self._died = ""
        self._jobs = itertools.count(1)
        self._send_lock = threading.Lock()
        self._ready_lock = threading.Lock()

    def wait_ready(self) -> dict[str, Any]:
        """The worker's "ready" message, waiting for it (the frameworks' import) the first time; a worker that
        sends none within its timeout is killed and raises WorkerDied."""
        with self._ready_lock:
            return self._wait_ready()

    def _wait_ready(self) -> dict[str, Any]:
        if self.ready is None:
            try:
                ready = self.receive(time.monotonic() + self.timeout)
            except BaseException:
                self.kill()
                raise
            if ready is None or ready.get("event") != "ready":
                self.kill()
                raise WorkerDied(f"no ready message within {self.timeout:g} s" + self._log_tail())
            self.ready = ready
        return self.ready

    @property
    def pid(self) -> int:
        """The worker's process id."""
        return self.proc.pid

    def send(self, **message: Any) -> None:
        """Send one job."""
        try:
            with self._send_lock:
                self.proc.stdin.write((json.dumps(message) + "\n").encode())
                self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise WorkerDied(f"the worker's pipe is closed ({exc})" + self._log_tail()) from None

    def submit(self, **message: Any) -> int:
        """Send one job with a fresh id, which the worker's answers about it repeat; returns the id."""
        job = next(self._jobs)
        self.send(id=job, **message)
        return job

    def answer(self, job: int, deadline: float) -> dict[str, Any] | None:
        """The next message about `job`, or None when `deadline` (time.monotonic) passes first; raises WorkerDied.

        Several threads may wait at once: one reads the pipe and files each message under its job as it comes,
        waking the others; when its own deadline passes, another takes over."""
        while True:
            with self._cond:
                while True:
                    queue = self._answers.get(job)
                    if queue:
                        return queue.pop(0)
                    if self._died:
                        raise WorkerDied(self._died)
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    if not self._reading:
                        self._reading = True
                        break
                    self._cond.wait(min(remaining, 0.05))
            message = None
            try:
                message = self.receive(deadline)
            except WorkerDied as exc:
                with self._cond:
                    self._died = str(exc)
                raise
            finally:
                with self._cond:
                    self._reading = False
                    if message is not None:
                        self._answers.setdefault(message.get("job"), []).append(message)
                    self._cond.notify_all()

    def receive(self, deadline: float) -> dict[str, Any] | None:
        """The next message, or None when `deadline` (time.monotonic) passes first; EOF raises WorkerDied."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            readable, _, _ = select.select([fd], [], [], None if remaining == float("inf") else remaining)
            if not readable:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                code = self.proc.wait()
                raise WorkerDied(f"the worker exited with {describe_code(code)}" + self._log_tail())
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def close(self) -> None:
        """Let the worker end (EOF on its stdin); kill it if it does not within the grace period."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            self.kill()
        self.proc.stdout.close()

    def kill(self) -> None:
        """Stop the worker now: SIGTERM first, which it takes as the harness going away (it ends its children and,
        as their subreaper, what they started outside their groups: workload/lifeline.py), then SIGKILL to its
        process group, after STOP_S at most."""
        try:
            os.kill(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + STOP_S
        while time.monotonic() < deadline and not supervisor.ended(self.proc.pid):
            time.sleep(0.01)
        kill_group(self.proc.pid)
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass

    def _log_tail(self) -> str:
        text = local.tail(self.log, 1500)
        return f"; its log ends with:\n{text}" if text else ""




def describe_code(code: int) -> str:
    """An exit code (negative: a signal) in words."""
    if code < 0:
        return signal_name(-code)
    return f"code {code}"


@dataclass
class ForkOutcome:
    """How one forked child ended: exit code (None: timed out or its worker died), seconds, worker facts."""

    code: int | None
    seconds: float
    died: str = ""
    worker_rss: int = 0


class Executor(base.Executor):
    """The local executor: runs the workloads of one environment on this machine, forked from a warm worker or
    (fallback) in fresh processes.

    The worker starts on first use, or earlier with `start`, and `close()` stops it; use the executor as a
    context manager. Results and saved models stay in its scratch folder (`files`).
    """

    name = "local"

    def __init__(self, python: Path, scratch: Path, *, seed: int = 0, threads: int = 0, isolation: str = "fork",
                 start_timeout: float = 600.0, paths: list[str] = (), home: Path | None = None):
        if isolation not in ISOLATIONS:
            raise UserError(f"isolation must be one of {', '.join(ISOLATIONS)}, got {isolation!r}")
        self.python = Path(python)
        self.scratch = Path(scratch)
        #: folders each job puts first on its path (a pythonpath build's checkout); never the worker's own, so
        #: that one worker serves every commit of a bisect
        self.paths = [str(p) for p in paths]
        #: where the worker's log and the `modelci` shim live: the scratch folder, or a folder that outlives it
        #: when a pool keeps the worker across runs
        self.home = Path(home) if home is not None else self.scratch
        #: an executor whose worker this one shares (`borrow`): jobs of both are forked from one warm worker
        self.lender: Executor | None = None
        #: runs the worker's start in a thread that outlives this executor's callers (see `_launch`)
        self.launcher: Callable[[Callable[[], Worker]], Worker] | None = None
        self._lock = threading.RLock()
        self.seed, self.threads, self.start_timeout = seed, threads, start_timeout
        #: the isolation asked for; `isolation` is the one in force
        self.configured = isolation
        #: why this executor spawns instead of forking; "" while it forks
        self.reason = fork_unavailable() if isolation == "fork" else 'isolation = "spawn" in the configuration'
        self.worker: Worker | None = None
        self.deaths = 0
        #: the process id of the last forked child (it is its own process group)
        self.child_pid: int | None = None
        self.suite_folders: list[Path] = []
        self._launched = 0.0
        #: seconds spent starting workers (process start plus the frameworks' import)
        self.timings: dict[str, float] = {"worker_start": 0.0}

    @property
    def isolation(self) -> str:
        """The isolation in force: `fork` while workloads are forked from the worker, else `spawn`."""
        return "spawn" if self.reason else "fork"

    @property
    def files(self) -> Path:
        """The scratch folder: each workload's child writes its result and saved models there."""
        return self.scratch

    def rebind(self, scratch: Path, paths: list[str] = ()) -> None:
        """Serve another run: its scratch folder and its paths; the warm worker stays."""
        self.scratch, self.paths = Path(scratch), [str(p) for p in paths]
        self.suite_folders = []
        self.timings = {"worker_start": 0.0}

    def borrow(self, scratch: Path, paths: list[str] = ()) -> Executor:
        """An executor for another run at the same time that forks from this one's worker (which may still be
        starting): `--jobs K` probes of one environment then cost one import of the framework, not K. Closing it
        leaves the worker to this executor."""
        other = Executor(self.python, scratch, seed=self.seed, threads=self.threads, isolation=self.configured,
                         start_timeout=self.start_timeout, paths=paths, home=self.home)
        other.lender, other.reason = self, self.reason
        return other

    @property
    def alive(self) -> bool:
        """Whether a worker is running (started, or ready)."""
        if self.lender is not None:
            return self.lender.alive
        return self.worker is not None and self.worker.proc.poll() is None

    def close(self) -> None:
        """Stop the worker, if one runs."""
        if self.lender is not None:
            return  # the worker is the lender's
        if self.worker is not None:
            worker, self.worker = self.worker, None
            if worker.ready is None:  # still importing: nothing to finish, and no reason to wait for it
                worker.kill()
            else:
                worker.close()

    # -- the steps the workflow calls ------------------------------------------------------------------

    def discover(self, suites: dict[str, Path], timeout: float = base.DISCOVERY_TIMEOUT) -> dict[str, Any]:
        """Discovery inside the environment, as `local.discover`, but in a child of the worker when it forks.

        The worker is started with the modules the suite files import, so that discovery and every workload
        after it share one import of the framework.
        """
        self.suite_folders = list(suites.values())
        out = self.scratch / "discovery.json"
        log_dir = self.scratch / "discovery"
        argv = ["list", "--out", str(out)]
        argv += [arg for name, folder in suites.items() for arg in ("--suite", f"{name}={folder}")]
        ended = self._fork(CHILD, argv, log_dir, timeout)
        if ended is None:
            return local.discover(self.python, suites, self.scratch, timeout)
        if ended.code != 0 or not out.exists():
            timed_out = timeout if ended.code is None and not ended.died else None
            raise local.discovery_failed(self.python, log_dir / "stderr.txt", timed_out, ended.died)
        return json.loads(out.read_text())

    def run_workload(self, suites: dict[str, Path], workload: WorkloadInfo, *, timeout: float = 1800,
                     repeats: int | None = None, save: bool = True, node: local.NodeRole | None = None,
                     watch: Callable[[], bool] | None = None) -> Result:
        """Execute one workload, forked when that is safe, and turn whatever happened into a Result.

        A workload whose ranks span several nodes runs only given its `node` role (a cluster executor gives
        it); without one it is `skipped` with the reason. `watch`, when given, is called while the workload runs,
        and its processes are killed once it returns True (the result is then a timeout's: no result)."""
        skipped = None if node else local.needs_nodes(workload)
        if skipped:
            return skipped
        if not self.suite_folders:
            self.suite_folders = list(suites.values())
        out = Path(tempfile.mkdtemp(prefix=local.scratch_prefix(workload.name), dir=self.scratch))
        # with isolation = "spawn" every process is fresh, the other ranks of a `devices > 1` workload too
        argv = local.run_args(suites, workload, out, seed=self.seed, repeats=repeats, save=save,
                              ranks="spawn" if self.configured == "spawn" else "fork", node=node)
        ended = None if self.reason else self._fork(CHILD, argv, out, timeout, workload.framework, watch)
        if ended is None:
            cmd = [str(self.python), "-m", "modelci.workload.child", *argv]
            code, seconds = local.spawn(cmd, self._env(with_paths=True), out, timeout, watch)
            result = local.child_outcome(workload, out, code, seconds, timeout)
            result.info.update(isolation="spawn", isolation_reason=self.reason)
            return result
        if ended.died:
            result = local.child_outcome(workload, out, None, ended.seconds, timeout)
            result.status = "crashed"
            result.reason = f"the worker process died while the workload ran: {ended.died}"
        else:
            result = local.child_outcome(workload, out, ended.code, ended.seconds, timeout)
        result.info.update(isolation="fork", worker_rss=ended.worker_rss)
        return result

    def run_module(self, module: str, argv: list[str], log_dir: Path, timeout: float | None,
                   framework: str = "", watch: Callable[[], bool] | None = None) -> tuple[int | None, float]:
        """Run another in-environment entry point (`python -m module argv...`, e.g. compat_child) the same way.

        Returns (exit code, or None on timeout, a dead worker or `watch`; seconds), as `local.spawn` does; logs
        go to `log_dir`. `framework` names the helper whose prologue the worker runs first. `watch` is called
        while the child runs, and the child is killed once it returns True (as in `local.spawn`).
        """
        ended = self._fork(module, argv, log_dir, timeout, framework, watch)
        if ended is None:
            return local.spawn([str(self.python), "-m", module, *argv], self._env(with_paths=True), log_dir, timeout,
                               watch)
        return ended.code, ended.seconds

    # -- the worker ------------------------------------------------------------------------------------

    def _env(self, with_paths: bool = False) -> dict[str, str]:
        """A process's environment; `with_paths` for a spawned child (a forked one is given the paths by its job)."""
        shim = local.shim_dir(self.home)
        extra = {"PYTHONPATH": os.pathsep.join([*self.paths, str(shim)])} if with_paths and self.paths else None
        return local.child_env(shim, self.seed, self.threads, extra)

    def start(self, suites: dict[str, Path]) -> None:
        """Start the worker for these suites now, without waiting for it: it imports the frameworks while the
        caller does its own work (the harness imports its store and checks meanwhile). Discovery and
        the first workload wait for it to be ready. Nothing happens when the executor spawns."""
        self.suite_folders = list(suites.values())
        if self.lender is not None:
            self.lender.start(suites)
            return
        with self._lock:
            if self.worker is None and not self.reason:
                self._launch()

    def _launch(self) -> None:
        start = time.monotonic()
        log = self.home / f"worker-{self.deaths}.log"

        def make() -> Worker:
            return Worker(self.python, self._env(), log, self.suite_folders, ["modelci.workload.child"],
                          self.start_timeout)

        # the worker's parent-death signal follows the thread that starts it (lifeline.py): a worker that
        # outlives the run's thread (a pool's, used by the threads of one bisect round) is started by the
        # pool's own long-lived thread
        self.worker = self.launcher(make) if self.launcher is not None else make()
        self._launched = start

    def _worker(self) -> Worker | None:
        """The running worker, started now if needed and ready; None (with `reason` set) when none can run."""
        if self.lender is not None:
            worker = self.lender._worker()
            self.reason = self.reason or self.lender.reason
            return None if self.reason else worker
        with self._lock:
            return self._own_worker()

    def _own_worker(self) -> Worker | None:
        if self.reason:
            return self.worker
        if self.worker is None:
            self._launch()
        worker = self.worker
        if worker.ready is not None:
            return worker
        try:
            ready = worker.wait_ready()
        except WorkerDied as exc:
            self.worker = None
            self.reason = f"the worker did not start: {exc}"
            return None
        finally:
            # from its launch: with `start`, part of that time overlapped the caller's own work
            self.timings["worker_start"] += time.monotonic() - self._launched
        if ready.get("unsafe"):
            self.reason = ready["unsafe"]
            self.worker = None
            worker.close()
            return None
        return worker

    def _fork(self, module: str, argv: list[str], log_dir: Path, timeout: float | None, framework: str = "",
              watch: Callable[[], bool] | None = None) -> ForkOutcome | None:
        """Run `module.main(argv)` in a fork of the worker; None when it must be spawned instead."""
        worker = self._worker()
        if worker is None:
            return None
        start = time.monotonic()
        deadline = start + timeout if timeout is not None else float("inf")
        pid = None
        try:
            job = worker.submit(module=module, argv=argv, log_dir=str(log_dir), cwd=os.getcwd(),
                                framework=framework, seed=self.seed, path=self.paths)
            message = worker.answer(job, deadline)  # "started" comes at once, after the framework's warm-up
            if message is None:  # a warm-up that hangs: only the worker can be killed
                self._discard_worker()
                return ForkOutcome(None, time.monotonic() - start)
            if message["event"] == "refused":
                self.reason = message["reason"]
                self.close()
                return None
            pid = self.child_pid = message["pid"]
            message = self._wait(worker, job, deadline, watch)
            if message is None:
                kill_group(pid)
                if worker.answer(job, time.monotonic() + GRACE_S) is None:
                    self._discard_worker()
                return ForkOutcome(None, time.monotonic() - start)
            code = os.waitstatus_to_exitcode(message["status"])
            return ForkOutcome(code, time.monotonic() - start, worker_rss=int(message.get("rss", 0)))
        except WorkerDied as exc:
            if pid is not None:
                kill_group(pid)  # its parent is gone; nothing else would stop it
            self._discard_worker()
            self.deaths += 1
            if self.deaths >= MAX_WORKER_DEATHS:
                self.reason = f"the worker died {self.deaths} times in this run"
            return ForkOutcome(None, time.monotonic() - start, died=str(exc))
        except BaseException:
            if pid is not None:
                kill_group(pid)  # Ctrl-C: what finished is kept, the running child is stopped
            self._discard_worker()  # its next message would answer this job, not the next one
            raise

    @staticmethod
    def _wait(worker: Worker, job: int, deadline: float,
              watch: Callable[[], bool] | None) -> dict[str, Any] | None:
        """The worker's next message about `job`; None when `deadline` passes or `watch` returns True first."""
        if watch is None:
            return worker.answer(job, deadline)
        while True:
            message = worker.answer(job, min(deadline, time.monotonic() + supervisor.WATCH_INTERVAL))
            if message is not None or time.monotonic() >= deadline or watch():
                return message

    def _discard_worker(self) -> None:
        if self.lender is not None:
            self.lender._discard_worker()
            return
        if self.worker is not None:
            worker, self.worker = self.worker, None
            worker.kill()
