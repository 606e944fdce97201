"""uv-based environments: build, cache, lock, fingerprint, constraints, diff, export (docs/design.md: "environment").

`ensure(spec, cache_dir)` gives an isolated venv holding the target and the suite's needs and nothing of
modelci's own dependencies; `current(cache_dir)` describes the running interpreter as it is;
`ensure_locked(lock, ...)` rebuilds exactly the environment a lock file describes, with the same id.
"""

from modelci.envs import constraints, lockfile
from modelci.envs.build import EnvSpec, Environment, current, ensure, find_uv, installed_version
from modelci.envs.diff import diff_locks
from modelci.envs.locked import ensure_locked, locked_target
from modelci.envs.pipconfig import IndexConfig

__all__ = ["EnvSpec", "Environment", "IndexConfig", "constraints", "current", "diff_locks", "ensure",
           "ensure_locked", "find_uv", "installed_version", "locked_target", "lockfile"]
