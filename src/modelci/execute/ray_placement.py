"""Placement arithmetic of the Ray executor, shared by the driver's two ways of running a workload (one node:
`ray_executor`; several: `ray_nodes`): what a workload asks of a node in Ray's terms, whether a node has it, and
how nodes and resources read in a message."""

from __future__ import annotations

from typing import Any

from modelci.execute.local import WorkloadInfo

#: how Ray names the resources a workload's `resources` may name in lower case
RESOURCE_NAMES = {"cpu": "CPU", "gpu": "GPU"}
#: the resources every node has that say nothing about what it can run (left out of messages)
BOOKKEEPING = ("memory", "object_store_memory")


def demand(resources: dict[str, float], threads: int) -> dict[str, float]:
    """The Ray resources a workload asks for: one CPU per BLAS thread (at least one) unless it says otherwise,
    `gpu` and `cpu` under Ray's names, `memory` in bytes, and any custom resource as it is named."""
    wanted = {"CPU": float(max(threads, 1))}
    for key, amount in resources.items():
        wanted[RESOURCE_NAMES.get(key.lower(), key)] = float(amount)
    return wanted


def fits(wanted: dict[str, float], node: dict[str, Any]) -> bool:
    """Whether a node (an entry of `ray.nodes()`) has at least what `wanted` asks for, in total."""
    have = node.get("Resources") or {}
    return all(have.get(name, 0.0) >= amount for name, amount in wanted.items() if amount > 0)


def node_of(entry: dict[str, Any]) -> dict[str, str]:
    """A node of `ray.nodes()` as a result records it (see `ray_agent.node_facts`)."""
    return {"id": entry.get("NodeID", ""), "address": entry.get("NodeManagerAddress", ""),
            "hostname": entry.get("NodeManagerHostname", "")}


def describe_resources(wanted: dict[str, float]) -> str:
    return ", ".join(f"{name} {amount:g}" for name, amount in sorted(wanted.items()) if amount > 0) or "nothing"


def describe_nodes(nodes: list[dict[str, Any]], limit: int = 6) -> str:
    """The alive nodes and what they offer, for a message."""
    parts = []
    for entry in nodes[:limit]:
        have = {k: v for k, v in (entry.get("Resources") or {}).items()
                if k not in BOOKKEEPING and not k.startswith(("node:", "accelerator_type:"))}
        parts.append(f"{entry.get('NodeManagerAddress', '?')} ({describe_resources(have)})")
    more = f" and {len(nodes) - limit} more" if len(nodes) > limit else ""
    return "; ".join(parts) + more if parts else "none"


def workload_json(workload: WorkloadInfo) -> dict[str, Any]:
    """A WorkloadInfo as discovery's record, which `WorkloadInfo.from_json` reads back on the node."""
    return {"id": workload.id, "name": workload.name, "suite": workload.suite, "file": workload.file,
            "framework": workload.framework, "domain": workload.domain, "steps": workload.steps,
            "formats": workload.formats, "devices": workload.devices, "requires": workload.requires,
            "code_hash": workload.code_hash, "class": workload.cls, "resources": workload.resources,
            "nodes": workload.nodes}
