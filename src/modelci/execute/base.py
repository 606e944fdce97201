"""The executor interface: everything the workflow needs from whatever executes a run's workloads.

`workflow.run` builds the environment, then asks an executor (chosen by the `executor` option, see
`modelci.execute.create`) for discovery, the workloads' results, the in-environment jobs of compat, and its
shutdown. Two implement it: the local one (`execute.forked.Executor`: a warm worker per environment on this
machine, or a fresh process per workload) and the Ray one (`execute.ray_executor.RayExecutor`: a modelci agent on
each node of a Ray cluster, running the local executor there).

What comes back is the executor's business, never an assumption of the workflow: a Result holds its metrics and
outputs, and every saved model a result names (`info["saved"][i]["path"]`) is a file on this machine, under
`files`, until `close()`. The local executor leaves them where its children wrote them; the Ray executor fetches
them from the node that ran the workload.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from modelci.records import Result


#: the least time discovery (importing every suite file in one process) is given; workflow gives it the
#: workload `timeout` when that is longer, so a suite whose imports are slow (a framework on a network disk, a
#: file that compiles at import) is not cut at a fixed limit that no option could raise
DISCOVERY_TIMEOUT = 300.0

class Executor(ABC):
    """Runs the workloads of one run in its environment; use it as a context manager (or call `close`)."""

    #: the value of the `executor` option that chooses it
    name: ClassVar[str] = ""
    #: seconds per harness step spent inside the executor (worker_start, ...), added to the run's timings
    timings: dict[str, float]
    #: the seed the workloads run with (compat runs a producer's jobs of another seed in a process of their own)
    seed: int

    @property
    @abstractmethod
    def files(self) -> Path:
        """The folder on this machine that holds the files results name (saved models) until `close`."""

    def start(self, suites: dict[str, Path]) -> None:
        """Start what takes long (a worker importing the framework, a connection) without waiting for it."""

    @abstractmethod
    def discover(self, suites: dict[str, Path], timeout: float = DISCOVERY_TIMEOUT) -> dict[str, Any]:
        """The suites' workloads as discovery inside the environment finds them (`workload.child list`)."""

    @abstractmethod
    def run_workload(self, suites: dict[str, Path], workload: Any, *, timeout: float = 1800,
                     repeats: int | None = None, save: bool = True) -> Result:
        """Execute one workload and turn whatever happened into a Result."""

    def run(self, suites: dict[str, Path], workloads: list[Any], *, timeout: float = 1800,
            repeats: int | None = None, started: Callable[[Any], object] | None = None) -> Iterator[Result]:
        """Execute `workloads`, yielding each Result as it finishes (an executor may run several at once, so
        not necessarily in the given order); `started` hears of each workload as it is handed out (one that runs
        several at once names one still running again after each result, for the progress line).

        A KeyboardInterrupt (a cancelled command, `cancel`) stops the iteration; the executor ends the work it
        started before it propagates, and what was yielded is kept by the caller.
        """
        for workload in workloads:
            if started is not None:
                started(workload)
            yield self.run_workload(suites, workload, timeout=timeout, repeats=repeats)

    @abstractmethod
    def run_module(self, module: str, argv: list[str], log_dir: Path, timeout: float | None,
                   framework: str = "", watch: Callable[[], bool] | None = None) -> tuple[int | None, float]:
        """Run another in-environment entry point (`python -m module argv...`) on this machine, its logs in
        `log_dir`; returns (exit code, or None on a timeout; seconds). compat makes a producer's inputs so."""

    @abstractmethod
    def close(self) -> None:
        """End everything the executor started (twice is harmless)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
