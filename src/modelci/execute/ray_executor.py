"""The Ray executor: a run's workloads on the nodes of a Ray cluster (`executor = "ray"`, docs/ray.md).

The driver (the `modelci` command) builds the environment and discovers the workloads as it does locally; each
workload then becomes one Ray task whose resource demand is the workload's `resources` (plus a CPU per BLAS thread),
so Ray chooses the node. The task is the modelci agent of that node (`execute.ray_agent`): it rebuilds the run's
environment from its lock, runs the workload with the local executor there, and returns the Result with the files
of its saved models, which land under this run's folder on the driver (`files`); the driver stores everything in its
own history and artifact store, as for a local run. Each result records its node (`info["node"]`).

A workload that no node of the cluster can place is `skipped` with the reason (Ray would wait for such a node for
ever). A node that dies takes its running workloads with it: each is an `error` result naming the node, and a
queued workload that only the dead node could place is an `error` too; the run goes on with the other nodes.
A cancelled command (Ctrl-C, SIGTERM, SIGHUP: `cancel`) cancels every task still running or queued, which kills
their Ray workers, and with them the warm workers and workloads they started (workload/lifeline.py).
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from modelci import cancel
from modelci.errors import UserError
from modelci.execute import base, local, ray_agent, ray_nodes
from modelci.execute.local import WorkloadInfo
from modelci.execute.ray_placement import demand, describe_nodes, describe_resources, fits, node_of, workload_json
from modelci.records import Result

#: seconds between two looks at the cluster's nodes while no result comes back
POLL_S = 1.0
#: seconds to wait for the cluster to mark a node dead after it lost a task, so the reason can name it
DEATH_NOTICE_S = 10.0

_connection: dict[str, Any] = {"ray": None}


def import_ray() -> Any:
    """The `ray` module; a UserError saying how to install it when it is missing."""
    try:
        import ray
    except ImportError:
        raise UserError("executor = \"ray\" needs Ray next to modelci: pip install 'modelci[ray]' "
                        "(on the driver and on every node of the cluster)") from None
    return ray


def connect(address: str) -> Any:
    """Connect this process to the Ray cluster at `address` once (empty: RAY_ADDRESS, else a Ray instance
    started on this machine for the process); it stays connected until the process ends."""
    if _connection["ray"] is not None:
        return _connection["ray"]
    ray = import_ray()
    if address and address != "auto":
        check_reachable(address)
    # ray.init installs its own SIGTERM handler; cancellation keeps modelci's (cancel.py)
    handlers = {signum: signal.getsignal(signum) for signum in cancel.SIGNALS}
    options: dict[str, Any] = dict(log_to_driver=False, logging_level=logging.ERROR, namespace="modelci")
    # no address: Ray's RAY_ADDRESS, else a Ray instance of our own ("local"), never the last cluster that
    # anyone started on this machine (what ray.init() without an address would join)
    address = address or os.environ.get("RAY_ADDRESS", "")
    if not address:
        options["include_dashboard"] = False
    try:
        ray.init(address=address or "local", **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"the Ray cluster at {address}" if address else "a Ray instance on this machine"
        raise UserError(f"cannot connect to {where}: {exc}; set ray_address (MODELCI_RAY_ADDRESS) to the head "
                        "node's HOST:PORT, as `ray start --head` prints it") from None
    finally:
        for signum, handler in handlers.items():
            if handler is not None:
                signal.signal(signum, handler)
    _connection["ray"] = ray
    atexit.register(disconnect)
    return ray


def disconnect() -> None:
    """Leave the cluster: Ray ends this driver's job, and every worker process it started on the nodes."""
    ray, _connection["ray"] = _connection["ray"], None
    _connection.pop("task", None)
    if ray is not None:
        ray.shutdown()


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """A UserError unless something listens at HOST:PORT (ray.init would retry for a minute first)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        raise UserError(f"ray_address {address!r} is not HOST:PORT (or auto); the head node's address is what "
                        "`ray start --head` prints")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise UserError(f"no Ray cluster answers at {address} ({exc.strerror or exc}); start one with "
                        "`ray start --head`, or fix ray_address (MODELCI_RAY_ADDRESS)") from None


class RayExecutor(base.Executor):
    """Runs a run's workloads as Ray tasks; discovery and compat's jobs use `local` on this machine."""

    name = "ray"

    def __init__(self, config: Any, env: Any, target: Any, local_executor: Any):
        self.config, self.env, self.target, self.local = config, env, target, local_executor
        self.seed = local_executor.seed
        self._connect_s = 0.0
        self.address = config.ray_address
        self._payload_ref: Any = None
        self._fetched = 0

    @property
    def timings(self) -> dict[str, float]:  # type: ignore[override]
        """The local worker's start (discovery) and the seconds spent connecting to the cluster."""
        return {**self.local.timings, "ray_connect": self._connect_s}

    @property
    def files(self) -> Path:
        """The run's folder on this machine: saved models fetched from the nodes land under it."""
        return self.local.files

    @property
    def scratch(self) -> Path:
        return self.local.scratch

    def start(self, suites: dict[str, Path]) -> None:
        """Start the local worker (for discovery) and connect to the cluster meanwhile."""
        self.local.start(suites)
        started = time.perf_counter()
        connect(self.address)
        self._connect_s += time.perf_counter() - started

    def discover(self, suites: dict[str, Path], timeout: float = base.DISCOVERY_TIMEOUT) -> dict[str, Any]:
        """Discovery runs on this machine, in the environment the driver built (the nodes rebuild it)."""
        return self.local.discover(suites, timeout)

    def run_module(self, module: str, argv: list[str], log_dir: Path, timeout: float | None,
                   framework: str = "", watch: Callable[[], bool] | None = None) -> tuple[int | None, float]:
        return self.local.run_module(module, argv, log_dir, timeout, framework, watch)

    def run_workload(self, suites: dict[str, Path], workload: WorkloadInfo, *, timeout: float = 1800,
                     repeats: int | None = None, save: bool = True) -> Result:
        return next(iter(self._run(suites, [workload], timeout, repeats, save, None)))

    def run(self, suites: dict[str, Path], workloads: list[WorkloadInfo], *, timeout: float = 1800,
            repeats: int | None = None, started: Callable[[Any], object] | None = None) -> Iterator[Result]:
        return self._run(suites, workloads, timeout, repeats, True, started)

    def close(self) -> None:
        """Stop the local worker; the connection stays for the next run of this process (`disconnect`)."""
        self._payload_ref = None
        self.local.close()

    # -- the run -----------------------------------------------------------------------------------------

    def _run(self, suites: dict[str, Path], workloads: list[WorkloadInfo], timeout: float, repeats: int | None,
             save: bool, started: Callable[[Any], object] | None) -> Iterator[Result]:
        if not workloads:
            return
        ray = connect(self.address)
        task = _connection.get("task") or _connection.setdefault("task", ray.remote(ray_agent.run_task))
        payload = self._payload(ray, suites)
        known = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}
        threads = self.config.threads
        pending: dict[Any, tuple[WorkloadInfo, dict[str, float]]] = {}
        spanning: list[WorkloadInfo] = []
        try:
            for workload in workloads:
                wanted = demand(workload.resources, threads)
                if workload.nodes > 1:  # its ranks span nodes: reserved and run together (execute/ray_nodes.py)
                    spanning.append(workload)
                    continue
                if not any(fits(wanted, n) for n in known.values()):
                    yield self._unplaceable(workload, wanted, list(known.values()))
                    continue
                ref = self._submit(task, payload, workload, wanted, timeout, repeats, save)
                pending[ref] = (workload, wanted)
                if started is not None:
                    started(workload)
            for workload in spanning:
                if started is not None:
                    started(workload)
                yield ray_nodes.run_spanning(ray, payload, workload, demand(workload.resources, threads),
                                             timeout=timeout, repeats=repeats, save=save, nodes=list(known.values()),
                                             receive=self._receive)
            while pending:
                try:
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
                except Exception as exc:  # noqa: BLE001 - the cluster itself went away (its head): lost, not a hang
                    for workload, _ in pending.values():
                        yield self._error(workload, f"the driver lost the Ray cluster ({type(exc).__name__}: "
                                                    f"{_first_line(exc)})")
                    pending.clear()
                    break
                for ref in ready:
                    workload, _ = pending.pop(ref)
                    try:
                        reply = ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        yield self._lost(ray, workload, exc, known)
                    else:
                        yield self._receive(reply)
                    if pending and started is not None:  # the progress line follows a workload still out there
                        started(next(iter(pending.values()))[0])
                if not ready:
                    yield from self._stranded(ray, pending, known)
        finally:
            for ref in pending:  # cancelled, or the caller stopped early: end the cluster work of this run
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - a task that ended meanwhile, or a node already gone
                    pass

    def _submit(self, task: Any, payload: Any, workload: WorkloadInfo, wanted: dict[str, float], timeout: float,
                repeats: int | None, save: bool) -> Any:
        """Hand one workload to Ray as a task that asks for `wanted`; returns its ObjectRef. Ray runs it again
        only when its node or worker died, `ray_retries` times at most (by default never: a lost workload is
        reported as lost, `_lost`); a workload that fails, crashes or times out is a result, never retried."""
        custom = {k: v for k, v in wanted.items() if k not in ("CPU", "GPU", "memory")}
        options = dict(num_cpus=wanted.get("CPU", 0), num_gpus=wanted.get("GPU", 0), resources=custom,
                       max_retries=self.config.ray_retries, retry_exceptions=False, name=f"modelci {workload.id}")
        if wanted.get("memory"):
            options["memory"] = wanted["memory"]
        return task.options(**options).remote(payload, workload_json(workload), timeout, repeats, save)

    def _payload(self, ray: Any, suites: dict[str, Path]) -> Any:
        """What every task of the run gets (put into the object store once): the environment's lock and
        fingerprint, where packages come from, the settings that shape a result, and the suites."""
        if self._payload_ref is not None:
            return self._payload_ref
        from modelci import steps
        from modelci.envs import lockfile

        env, target, config = self.env, self.target, self.config
        lock = None
        if target.kind != "current":
            lock = lockfile.Lock.of(env.lock, env.fingerprint, environment=env.id,
                                    source=f"the run's environment {env.id}")
        sources = config.sources
        travelling = {name: ray_agent.suite_payload(folder, steps.ZOO) for name, folder in suites.items()}
        digest = hashlib.sha256(repr(sorted((name, entry.get("digest") or entry.get("zoo"))
                                            for name, entry in travelling.items())).encode()).hexdigest()[:16]
        payload = {
            "modelci": _version(), "target": target, "lock": lock, "environment": env.id,
            "fingerprint": ray_agent.software(env.fingerprint),
            "index": steps.index_for(config) if lock is not None else None,
            "settings": {"seed": config.seed, "threads": config.threads, "build_timeout": config.build_timeout,
                         "isolation": config.isolation, "start_timeout": float(config.timeout),
                         "cache_dir": config.cache_dir if sources.get("cache_dir", "default") != "default" else "",
                         "python": config.python if sources.get("python", "default") != "default" else ""},
            "suites": travelling, "suites_digest": digest,
        }
        self._payload_ref = ray.put(payload)
        return self._payload_ref

    def _receive(self, reply: dict[str, Any]) -> Result:
        """A node's reply as a Result whose saved models lie on this machine, under `files`."""
        result: Result = reply["result"]
        files: dict[str, bytes] = reply.get("files") or {}
        if files:
            self._fetched += 1
            name = local.scratch_prefix(result.workload.split('/')[-1])
            folder = self.files / "from-nodes" / f"{self._fetched}-{name}"
            for relative, data in files.items():
                path = folder / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            for entry in result.info.get("saved", []):
                if entry.get("path") and not Path(entry["path"]).is_absolute():
                    entry["path"] = str(folder / entry["path"])
        return result

    def _unplaceable(self, workload: WorkloadInfo, wanted: dict[str, float], nodes: list[dict[str, Any]]) -> Result:
        return Result(workload=workload.id, status="skipped", code_hash=workload.code_hash,
                      framework=workload.framework, domain=workload.domain,
                      reason=f"no node of the Ray cluster can place it: it asks for {describe_resources(wanted)}, "
                             f"and the nodes offer {describe_nodes(nodes)}")

    def _lost(self, ray: Any, workload: WorkloadInfo, exc: Exception, known: dict[str, dict[str, Any]]) -> Result:
        """The `error` result of a task that Ray lost: its node died, its worker was killed, ..."""
        dead = self._dead(ray, known, wait=DEATH_NOTICE_S)
        reason = f"the Ray task running it was lost ({type(exc).__name__}: {_first_line(exc)})"
        if dead:
            reason = (f"{', '.join(ray_agent.describe_node(node_of(n)) for n in dead)} died during the run; "
                      + reason)
        return self._error(workload, reason)

    @staticmethod
    def _error(workload: WorkloadInfo, reason: str) -> Result:
        return Result(workload=workload.id, status="error", reason=reason, code_hash=workload.code_hash,
                      framework=workload.framework, domain=workload.domain)

    def _stranded(self, ray: Any, pending: dict[Any, tuple[WorkloadInfo, dict[str, float]]],
                  known: dict[str, dict[str, Any]]) -> Iterator[Result]:
        """Queued workloads that no node left in the cluster can place (a node died): `error`, not a hang."""
        alive = [n for n in ray.nodes() if n.get("Alive")]
        for ref, (workload, wanted) in list(pending.items()):
            if any(fits(wanted, n) for n in alive):
                continue
            del pending[ref]
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - it may have ended meanwhile
                pass
            dead = self._dead(ray, known)
            gone = f" ({', '.join(ray_agent.describe_node(node_of(n)) for n in dead)} died during the run)" if dead \
                else ""
            yield self._error(workload, f"no node left in the Ray cluster can place it{gone}: it asks for "
                                        f"{describe_resources(wanted)}, and the nodes offer {describe_nodes(alive)}")

    @staticmethod
    def _dead(ray: Any, known: dict[str, dict[str, Any]], wait: float = 0.0) -> list[dict[str, Any]]:
        """The nodes alive when the run started that the cluster now marks dead; waits up to `wait` seconds for
        one (the cluster notices a lost node a moment after the task that ran there fails)."""
        deadline = time.monotonic() + wait
        while True:
            dead = [n for n in ray.nodes() if not n.get("Alive") and n.get("NodeID") in known]
            if dead or time.monotonic() >= deadline:
                return dead
            time.sleep(0.5)


def _first_line(exc: BaseException) -> str:
    """The start of an exception's message: its first line, and of that the first sentence (Ray's messages run
    on for a paragraph of advice about its dashboard)."""
    line = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    head, sep, _ = line.partition(". ")
    return head if sep else line


def _version() -> str:
    import modelci

    return modelci.__version__
