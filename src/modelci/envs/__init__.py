"""uv-based environments: build, cache, lock and fingerprint (DESIGN.md, vocabulary: "environment").

`ensure(spec, cache_dir)` gives an isolated venv holding the target and the suite's needs and nothing of
modelci's own dependencies; `current(cache_dir)` describes the running interpreter as it is.
"""

from modelci.envs.build import EnvSpec, Environment, current, ensure, find_uv, installed_version
from modelci.envs.pipconfig import IndexConfig

__all__ = ["EnvSpec", "Environment", "IndexConfig", "current", "ensure", "find_uv", "installed_version"]
