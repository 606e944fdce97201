"""Executors: where a run's workloads execute (the interface is `execute.base.Executor`).

The `executor` option chooses one: `local` (the default: this machine, `execute.forked`) or `ray` (the nodes of a
Ray cluster, `execute.ray_executor`; `pip install 'modelci[ray]'`, docs/ray.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: the `executor` option's values
EXECUTORS = ("local", "ray")


def create(config: Any, env: Any, target: Any, scratch: Path) -> Any:
    """The executor the configuration names, for one run of `target` in `env`, its local files under `scratch`.

    The Ray executor holds a local one too: discovery and compat's jobs run on this machine, in the environment
    the driver built; the workloads run on the cluster's nodes.
    """
    from modelci.execute import forked

    local = forked.Executor(env.python, scratch, seed=config.seed, threads=config.threads,
                            isolation=config.isolation, start_timeout=config.timeout,
                            paths=env.paths)
    if config.executor == "ray":
        from modelci.execute import ray_executor

        return ray_executor.RayExecutor(config, env, target, local)
    return local
