"""The modelci agent on a Ray node: the run's environment rebuilt from its lock, and the local executor in it.

Ray runs `run_task` in one of its worker processes on the node it placed the task on. That process is modelci's
own Python (the interpreter `ray start` runs with, where `modelci[ray]` is installed), never the environment under
test: the workload runs as it runs locally, in a child of a warm worker inside the environment
(`execute.forked`), and the agent only hands it out and packs up what came back.

An agent is kept per Ray worker process and environment, so the second workload of a run on a node forks from a
worker that imported the framework already. A node builds the environment from the run's lock (or reuses its
cached one) and must arrive at the driver's environment id and software fingerprint; any difference is an `error`
result naming the node and what differs. Everything here runs on the node; nothing in it imports Ray but
`node_facts`, which asks the worker's own runtime context.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import modelci
from modelci.errors import UserError
from modelci.execute import forked, local
from modelci.execute.local import WorkloadInfo
from modelci.records import Result

#: fingerprint keys that describe the machine rather than the software, so nodes of one cluster may differ in
#: them (a GPU node and a CPU node run the same environment); each result keeps its node's
MACHINE_KEYS = frozenset({"cpu", "cpu_count", "cpu_usable", "cpu_flags", "memory_bytes", "gpus", "platform",
                          "os", "hostname", "build", "probe_error"})
#: numerics variables that Ray sets per task (the devices it assigned), not per environment
PER_TASK_VARIABLES = frozenset({"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                                "OMP_NUM_THREADS"})
#: agents kept per Ray worker process (a compare alternates between two environments)
KEEP_AGENTS = 2

_agents: dict[tuple, NodeAgent] = {}
_lock = threading.Lock()


def software(fingerprint: dict[str, Any]) -> dict[str, Any]:
    """The parts of a fingerprint that every node running one environment must share."""
    facts = {k: v for k, v in fingerprint.items() if k not in MACHINE_KEYS}
    facts["numerics_env"] = {k: v for k, v in dict(fingerprint.get("numerics_env") or {}).items()
                             if k not in PER_TASK_VARIABLES}
    # the loaded libraries in any order: the probe lists them as they were loaded, and a node's probe loaded
    # torch's libgomp before numpy's OpenBLAS where the driver's loaded them the other way round
    facts["libraries"] = sorted(fingerprint.get("libraries") or [], key=lambda lib: json.dumps(lib, sort_keys=True))
    return facts


def node_facts() -> dict[str, str]:
    """Which node this is: Ray's node id, its address, and the host's name."""
    import ray

    context = ray.get_runtime_context()
    return {"id": context.get_node_id(), "address": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname()}


def describe_node(node: dict[str, str]) -> str:
    """A node in words, for messages: `node 10.0.0.7 (host gpu-3, id 1a2b3c4d5e6f)`."""
    return f"node {node.get('address', '?')} (host {node.get('hostname', '?')}, id {node.get('id', '?')[:12]})"


def run_task(payload: dict[str, Any], workload: dict[str, Any], timeout: float, repeats: int | None,
             save: bool = True) -> dict[str, Any]:
    """Run one workload on this node; returns {"result": Result, "files": {relative path: bytes}}.

    Never raises for the workload's or the environment's sake: an environment that cannot be built here, or
    differs from the driver's, is an `error` result naming the node, as is any failure of the agent itself.
    """
    node = node_facts()
    info = WorkloadInfo.from_json(workload)
    files: dict[str, bytes] = {}
    try:
        agent = agent_for(payload, node)
        result, files = agent.run(info, timeout, repeats, save)
    except UserError as exc:
        result = _error(info, f"{describe_node(node)}: {exc}")
    except Exception as exc:  # noqa: BLE001 - the agent's own failure is the workload's error result, not lost
        result = _error(info, f"{describe_node(node)}: the modelci agent failed: {type(exc).__name__}: {exc}",
                        traceback.format_exc())
    result.info["node"] = node
    return {"result": result, "files": files}


def _error(info: WorkloadInfo, reason: str, trace: str = "") -> Result:
    return Result(workload=info.id, status="error", reason=reason, traceback=trace, code_hash=info.code_hash,
                  framework=info.framework, domain=info.domain)


def agent_for(payload: dict[str, Any], node: dict[str, str]) -> NodeAgent:
    """This process's agent for the run's environment and settings, made (and its environment built) once."""
    key = (payload["environment"], repr(sorted(payload["settings"].items())), payload["suites_digest"],
           os.environ.get("CUDA_VISIBLE_DEVICES"))
    with _lock:
        agent = _agents.get(key)
        if agent is None:
            agent = NodeAgent(payload, node)
            _agents[key] = agent
            while len(_agents) > KEEP_AGENTS:
                _agents.pop(next(iter(_agents))).close()
        return agent


class NodeAgent:
    """The run's environment on this node and a local executor in it."""

    def __init__(self, payload: dict[str, Any], node: dict[str, str]):
        if payload["modelci"] != modelci.__version__:
            raise UserError(f"this node has modelci {modelci.__version__}, the driver {payload['modelci']}; "
                            "install the same modelci on every node")
        settings = payload["settings"]
        # the node's own MODELCI_CACHE_DIR / MODELCI_PYTHON first, then what the driver configured, then defaults
        self.cache = Path(os.environ.get("MODELCI_CACHE_DIR") or settings["cache_dir"]
                          or "~/.cache/modelci").expanduser()
        self.cache.mkdir(parents=True, exist_ok=True)
        # the folders of this node's agents and runs that were killed (a Ray worker or node lost mid-run), which
        # nothing else on a node that never runs `modelci run` itself would remove; a live one is left alone
        local.sweep_scratch(self.cache)
        self._scratch = local.Scratch(self.cache, "ray-agent-")
        self.home = self._scratch.path
        try:
            self.suites = {name: self._suite(name, entry) for name, entry in payload["suites"].items()}
            self.folders = {name: entry.get("folder", "") for name, entry in payload["suites"].items()}
            self.env = self._environment(payload, settings, node)
            self.executor = forked.Executor(self.env.python, self.home, seed=settings["seed"],
                                            threads=settings["threads"], isolation=settings["isolation"],
                                            start_timeout=settings["start_timeout"], paths=self.env.paths,
                                            home=self.home)
        except BaseException:  # no agent: its folder goes now, not when the Ray worker that holds its lock ends
            self._scratch.remove()
            raise
        # the worker's parent-death signal follows the thread that starts it (workload/lifeline.py): one thread
        # that lives as long as the agent starts it, whichever of Ray's threads runs a task
        self._launcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="modelci-agent")
        self.executor.launcher = lambda make: self._launcher.submit(make).result()

    def _suite(self, name: str, entry: dict[str, Any]) -> Path:
        """This node's copy of a suite: a built-in one from this node's modelci, else the driver's files."""
        if "zoo" in entry:
            folder = Path(modelci.__file__).resolve().parent / "zoo" / entry["zoo"]
            if not folder.is_dir():
                raise UserError(f"this node's modelci has no built-in suite zoo:{entry['zoo']}")
            return folder
        folder = self.cache / "ray-suites" / entry["digest"] / name
        if not folder.is_dir():
            # unpacked in the agent's own folder, so that one killed mid-way leaves nothing behind it
            staging = Path(tempfile.mkdtemp(prefix="suite-", dir=self.home))
            for relative, data in entry["files"].items():
                path = staging / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            folder.parent.mkdir(parents=True, exist_ok=True)
            try:
                staging.rename(folder)
            except OSError:  # another worker of this node unpacked it first: the same files
                shutil.rmtree(staging, ignore_errors=True)
        return folder

    def _environment(self, payload: dict[str, Any], settings: dict[str, Any], node: dict[str, str]) -> Any:
        from modelci import envs, steps

        target = payload["target"]
        python = os.environ.get("MODELCI_PYTHON") or settings["python"] or sys.executable
        environ = local.child_env(self.cache, settings["seed"], settings["threads"])
        log = _quiet
        if target.kind == "current":
            env = envs.current(self.cache, environ=environ)
        else:
            env = steps.locked_environment(target, payload["lock"], python, payload["index"], self.cache,
                                           environ, log, build_timeout=settings["build_timeout"])
        if env.id != payload["environment"]:
            raise UserError(f"the environment here is {env.id}, the driver's {payload['environment']}: "
                            + ("the running interpreters differ (target current)" if target.kind == "current"
                               else "the lock rebuilt to other files"))
        mine, theirs = software(env.fingerprint), payload["fingerprint"]
        differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        if differ:
            details = "; ".join(f"{k}: {_short(mine.get(k))} here, {_short(theirs.get(k))} on the driver"
                                for k in differ[:4])
            raise UserError(f"the environment {env.id} here differs from the driver's in {', '.join(differ)} "
                            f"({details}); results measured here would not be comparable")
        return env

    def run(self, info: WorkloadInfo, timeout: float, repeats: int | None, save: bool = True,
            **node: Any) -> tuple[Result, dict[str, bytes]]:
        """Run one workload in a scratch folder of its own; returns its Result and the files it saved. `node`
        (`node=NodeRole`, `watch=`) runs one node's ranks of a workload that spans several (execute/ray_nodes.py)."""
        scratch = Path(tempfile.mkdtemp(prefix=local.scratch_prefix(info.name), dir=self.home))
        try:
            info.file = str(self._node_path(info))
            self.executor.rebind(scratch, self.env.paths)
            result = self.executor.run_workload(self.suites, info, timeout=timeout, repeats=repeats, save=save,
                                                **node)
            return result, collect_saved(result, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _node_path(self, info: WorkloadInfo) -> Path:
        """Where the workload's file is on this node: the same place in this node's copy of its suite."""
        folder = self.folders.get(info.suite, "")
        path = Path(info.file)
        if folder:
            try:
                return self.suites[info.suite] / path.relative_to(folder)
            except ValueError:
                pass
        return self.suites[info.suite] / path.name

    def close(self) -> None:
        """Stop the warm worker and remove the agent's folder."""
        self.executor.close()
        self._launcher.shutdown(wait=False)
        self._scratch.remove()


def collect_saved(result: Result, scratch: Path) -> dict[str, bytes]:
    """The files of the result's saved models, by path relative to `scratch`; each entry's path is made relative
    too, for the driver to place them under its own folder."""
    files: dict[str, bytes] = {}
    for entry in result.info.get("saved", []):
        if not entry.get("path"):
            continue
        path = Path(entry["path"])
        try:
            relative = path.relative_to(scratch)
        except ValueError:
            continue
        for item in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()):
            files[str(item.relative_to(scratch))] = item.read_bytes()
        entry["path"] = str(relative)
    return files


def suite_payload(folder: Path, zoo: Path) -> dict[str, Any]:
    """How a suite folder travels to the nodes: a built-in suite by name (each node has it), any other folder
    as its files (by relative path; caches and hidden files left out), named by their digest."""
    folder = Path(folder)
    if folder.parent == zoo:
        return {"zoo": folder.name, "folder": str(folder)}
    files: dict[str, bytes] = {}
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder)
        if any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
            continue
        data = path.read_bytes()
        files[relative.as_posix()] = data
        digest.update(relative.as_posix().encode() + b"\0" + hashlib.sha256(data).digest())
    return {"files": files, "digest": digest.hexdigest()[:16], "folder": str(folder)}


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _quiet(text: str) -> None:
    """Environment messages on a node go to its worker's log, not to the driver's console."""
    print(text, file=sys.stderr)
