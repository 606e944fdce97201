"""Workloads whose ranks span several machines (`nodes = N`) on a Ray cluster (docs/ray.md, "Models across
machines").

The Ray executor hands such a workload to `run_spanning`. Its nodes are reserved at once: a placement group of N
bundles, each what one node's ranks need (the workload's demand, with a CPU per rank), with the STRICT_SPREAD
strategy, so that no two bundles share a node and no rank starts before every node is there. A cluster that has
fewer such nodes than the workload spans makes it `skipped` with the reason; a workload still waiting for busy
nodes at its timeout is `timeout`.

One `NodeRank` actor per bundle prepares the run's environment on its node, through the modelci agent
(`execute.ray_agent`) as for any workload, and says its node address, the one the cluster knows the node by.
Node 0's actor picks a free port on its address. Every actor then runs its node's ranks with the local executor
there, given its `NodeRole`: its node rank, rank 0's node address and port (never 127.0.0.1), and its own
address, which its ranks' collectives bind to.

The driver waits for the nodes together. Rank 0's result is the workload's (its saved models come back as any
result's do), with every node's status in `info["nodes"]`. A node whose ranks crashed makes the workload
`crashed`, a node still running at the timeout makes it `timeout`, a node that failed fails it; the reason names
the node and its address. Once one node ends badly the others are stopped at once (their ranks would wait in a
collective for a peer that is gone); at the end every actor is killed and the placement group removed, and each
node's ranks die with their actor (workload/lifeline.py): no rank outlives the workload.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from modelci.errors import UserError
from modelci.execute import ray_agent
from modelci.execute.local import NodeRole, WorkloadInfo
from modelci.records import Result

#: seconds between two looks at the nodes' runs
POLL_S = 0.5
#: seconds past the workload's timeout the driver waits for the nodes to report their own timeouts
REPORT_GRACE_S = 60.0


def free_port(address: str) -> int:
    """A TCP port on `address` that nothing listens on now (rank 0's node; torch's store binds it next)."""
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def node_demand(wanted: dict[str, float], workload: WorkloadInfo) -> dict[str, float]:
    """What one node's bundle holds: the workload's demand (`ray_placement.demand`), with at least a CPU for each
    of the node's `devices` ranks."""
    bundle = {name: amount for name, amount in wanted.items() if amount > 0}
    bundle["CPU"] = max(bundle.get("CPU", 0.0), float(max(1, workload.devices)))
    return bundle


def fitting_nodes(bundle: dict[str, float], nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The live nodes (entries of `ray.nodes()`) that can hold `bundle`, busy or not."""
    return [n for n in nodes if n.get("Alive") and all((n.get("Resources") or {}).get(k, 0.0) >= v
                                                       for k, v in bundle.items())]


class NodeRank:
    """One node's part in a multi-node workload, as a Ray actor in its bundle (two calls at a time, so that
    `stop` reaches a running `run`)."""

    def __init__(self, payload: dict[str, Any]) -> None:
        self.payload = payload
        self.stopping = threading.Event()
        self.node: dict[str, str] = {}
        self.agent: Any = None

    def prepare(self) -> dict[str, Any]:
        """Build or reuse the run's environment on this node; this node's facts (`address`), and `error` when
        the environment cannot be had here."""
        self.node = ray_agent.node_facts()
        try:
            self.agent = ray_agent.agent_for(self.payload, self.node)
        except Exception as exc:  # noqa: BLE001 - reported as the workload's error, naming this node
            error = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
            return {"node": self.node, "error": error}
        return {"node": self.node, "error": ""}

    def rendezvous_port(self) -> int:
        """A free port on this node's address, for rank 0's store."""
        return free_port(self.node["address"])

    def run(self, workload: dict[str, Any], role: NodeRole, timeout: float, repeats: int | None,
            save: bool) -> dict[str, Any]:
        """Run this node's ranks; returns {"result", "files", "node", "stopped"} once they end, at the timeout,
        or once `stop` is called (then `stopped` is true)."""
        info = WorkloadInfo.from_json(workload)
        try:
            result, files = self.agent.run(info, timeout, repeats, save and role.node_rank == 0, node=role,
                                           watch=self.stopping.is_set)
        except Exception as exc:  # noqa: BLE001 - the agent's own failure is this node's error, not a lost task
            result = Result(workload=info.id, status="error", code_hash=info.code_hash, framework=info.framework,
                            domain=info.domain, reason=f"the modelci agent failed: {type(exc).__name__}: {exc}")
            files = {}
        stopped = self.stopping.is_set() and result.status == "timeout"
        result.info["node"] = self.node
        return {"result": result, "files": files, "node": self.node, "stopped": stopped}

    def stop(self) -> None:
        """End this node's ranks now; `run` then returns."""
        self.stopping.set()


def run_spanning(ray: Any, payload: Any, workload: WorkloadInfo, wanted: dict[str, float], *, timeout: float,
                 repeats: int | None, save: bool, nodes: list[dict[str, Any]],
                 receive: Callable[[dict[str, Any]], Result]) -> Result:
    """Run `workload` across `workload.nodes` nodes of the cluster and return its Result (see the module's
    docstring). `wanted` is its demand as a single-node workload's; `nodes` the cluster's nodes (`ray.nodes()`);
    `receive` turns rank 0's reply into a Result whose saved models lie on this machine."""
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from modelci.execute.ray_placement import describe_nodes, describe_resources

    count = workload.nodes
    bundle = node_demand(wanted, workload)
    base = dict(workload=workload.id, code_hash=workload.code_hash, framework=workload.framework,
                domain=workload.domain)
    fitting = fitting_nodes(bundle, nodes)
    if len(fitting) < count:
        return Result(status="skipped", **base,
                      reason=f"its ranks span {count} nodes (nodes = {count}), each asking for "
                             f"{describe_resources(bundle)}, and {len(fitting)} node{'s' if len(fitting) != 1 else ''} "
                             "of the Ray cluster can hold that: "
                             f"{describe_nodes([n for n in nodes if n.get('Alive')])}")
    start = time.monotonic()
    group = placement_group([dict(bundle) for _ in range(count)], strategy="STRICT_SPREAD",
                            name=f"modelci {workload.id}")
    actors: list[Any] = []
    try:
        ready, _ = ray.wait([group.ready()], timeout=timeout)
        if not ready:
            return Result(status="timeout", duration=time.monotonic() - start, **base,
                          reason=f"{count} nodes with {describe_resources(bundle)} each were not free within "
                                 f"{timeout:g} s (placement group, strict spread)")
        custom = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU", "memory")}
        actor_class = ray.remote(NodeRank)
        for index in range(count):
            options = dict(num_cpus=bundle.get("CPU", 0), num_gpus=bundle.get("GPU", 0), resources=custom,
                           max_concurrency=2, max_restarts=0,
                           scheduling_strategy=PlacementGroupSchedulingStrategy(group,
                                                                                placement_group_bundle_index=index))
            if bundle.get("memory"):
                options["memory"] = bundle["memory"]
            actors.append(actor_class.options(**options).remote(payload))
        prepared = ray.get([actor.prepare.remote() for actor in actors])
        broken = [(k, p) for k, p in enumerate(prepared) if p["error"]]
        if broken:
            return Result(status="error", duration=time.monotonic() - start, **base,
                          reason="; ".join(f"node {k} ({ray_agent.describe_node(p['node'])}): {p['error']}"
                                           for k, p in broken))
        addresses = [p["node"]["address"] for p in prepared]
        port = ray.get(actors[0].rendezvous_port.remote())
        record = _record(workload)
        started = time.monotonic()
        refs = [actor.run.remote(record, NodeRole(count, k, addresses[0], port, addresses[k]), timeout, repeats,
                                 save)
                for k, actor in enumerate(actors)]
        replies = _gather(ray, refs, actors, started + timeout + REPORT_GRACE_S)
        return combine(workload, replies, prepared, timeout, time.monotonic() - started, receive)
    finally:
        for actor in actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - an actor whose node is gone
                pass
        try:
            remove_placement_group(group)
        except Exception:  # noqa: BLE001 - removed with a node that died, or never made
            pass


def _gather(ray: Any, refs: list[Any], actors: list[Any], deadline: float) -> list[dict[str, Any] | None]:
    """Each node's reply (None: none came by `deadline`, or its actor was lost). Once a node ends other than
    `ok`, the others are told to stop."""
    replies: list[dict[str, Any] | None] = [None] * len(refs)
    index = {ref: k for k, ref in enumerate(refs)}
    pending = list(refs)
    stopping = False
    while pending and time.monotonic() < deadline:
        ready, pending = ray.wait(pending, num_returns=1, timeout=POLL_S)
        for ref in ready:
            k = index[ref]
            try:
                replies[k] = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - the actor or its node died: that node's crash
                replies[k] = {"lost": f"its Ray actor was lost ({type(exc).__name__}: {_first_line(exc)})"}
            if not stopping and (replies[k].get("lost") or replies[k]["result"].status != "ok"):
                stopping = True
                for other in actors:
                    other.stop.remote()
    return replies


def combine(workload: WorkloadInfo, replies: list[dict[str, Any] | None], prepared: list[dict[str, Any]],
            timeout: float, seconds: float, receive: Callable[[dict[str, Any]], Result]) -> Result:
    """The workload's Result from its nodes' replies: rank 0's, judged by the worst node.

    The cause comes first: a node that crashed (or was lost), else a node still running at the timeout, else a
    node that failed; a node that was stopped because another ended badly is never the cause. `info["nodes"]`
    keeps every node's address, status and reason.
    """
    nodes = []
    for k, (reply, prep) in enumerate(zip(replies, prepared)):
        entry = {"node_rank": k, "address": prep["node"]["address"], "hostname": prep["node"].get("hostname", ""),
                 "stopped": False}
        if reply is None:
            entry.update(status="timeout", reason=f"no reply {timeout:g} s after it started; its ranks were ended")
        elif reply.get("lost"):
            entry.update(status="crashed", reason=reply["lost"])
        else:
            result = reply["result"]
            entry.update(status=result.status, reason=result.reason, stopped=bool(reply.get("stopped")),
                         duration=result.duration)
        nodes.append(entry)
    first = replies[0]
    result = receive(first) if first is not None and not first.get("lost") else None
    cause = None
    for status in ("crashed", "timeout", "failed", "error"):
        cause = [n for n in nodes if n["status"] == status and not n["stopped"]]
        if cause:
            break
    if cause and cause[0]["status"] == "timeout":  # a node stopped once another timed out was still running too
        cause = [n for n in nodes if n["status"] == "timeout"]
    if cause and (result is None or cause[0]["node_rank"] != 0 or cause[0]["status"] == "timeout"):
        what = ", ".join(f"node {n['node_rank']} ({n['address']})" for n in cause)
        if cause[0]["status"] == "timeout":
            reason = f"no result after {timeout:g} s: {what} still running; every rank was ended"
        else:
            reason = f"{what}: {cause[0]['reason']}"
        kept = result
        result = Result(workload=workload.id, status=cause[0]["status"], reason=reason,
                        code_hash=workload.code_hash, framework=workload.framework, domain=workload.domain)
        if kept is not None:
            result.info = dict(kept.info)
            result.stderr_tail = kept.stderr_tail
            result.traceback = kept.traceback
    elif result is None:
        result = Result(workload=workload.id, status="error", reason="rank 0's node sent no result",
                        code_hash=workload.code_hash, framework=workload.framework, domain=workload.domain)
    result.duration = seconds
    result.info["nodes"] = nodes
    return result


def _record(workload: WorkloadInfo) -> dict[str, Any]:
    from modelci.execute.ray_placement import workload_json as _workload_json

    return _workload_json(workload)


def _first_line(exc: BaseException) -> str:
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
