"""`modelci env consistency --target SPEC`: packages whose versions differ between runners.

Pinning only direct dependencies lets CI variants drift apart: `ci-cpu` and `ci-gpu` run the same target
over different numpy builds, and their results stop being comparable without anyone noticing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from modelci.envs.diff import bump
from modelci.envs.fingerprint import parse_lock
from modelci.errors import UserError
from modelci.records import redacted


@dataclass
class Consistency:
    """The latest run of one target on each runner, and the packages whose versions differ between them."""

    target: str
    #: runner -> {"run_id", "environment_id", "target_version"}
    runners: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: rows {"name", "versions": {runner: version or None}, "bump"}
    packages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def consistent(self) -> bool:
        """Whether every runner has the same versions of everything."""
        return not self.packages

    def to_json(self) -> dict[str, Any]:
        """A plain dict."""
        return {"target": self.target, "consistent": self.consistent, "runners": self.runners,
                "packages": self.packages}


def matches(spec: str, row: dict[str, Any]) -> bool:
    """Whether a stored run's target is `spec`: the same spec text, or the same `name==version` (local label aside).
    Versions compare as PEP 440 versions, not as text: `numpy==2.1.3.0` is `numpy==2.1.3`, as it is to `compare`."""
    if row["target_spec"] == redacted(spec):  # stored without its password
        return True
    try:
        requirement = Requirement(spec)
    except InvalidRequirement:
        return False
    pins = [s.version for s in requirement.specifier if s.operator == "=="]
    if len(pins) != 1 or canonicalize_name(requirement.name) != row["target_name"] or not row["target_version"]:
        return False
    version = pins[0]
    try:
        wanted, stored = Version(version), Version(Version(row["target_version"]).public)
    except InvalidVersion:
        return version == row["target_version"]
    return Version(wanted.public) == stored or Version(wanted.base_version) == stored


def consistency(store: Any, spec: str) -> Consistency:
    """Compare the environments of the latest complete run of target `spec` on each runner."""
    latest: dict[str, dict[str, Any]] = {}
    seen_targets = set()
    for row in store.run_environments():
        seen_targets.add(row["target_spec"])
        if row["status"] == "complete" and matches(spec, row):
            latest.setdefault(row["runner"], row)
    if not latest:
        known = ", ".join(sorted(seen_targets)[:10]) or "none"
        raise UserError(f"no complete run of target {spec!r} in the history; targets run so far: {known}")
    result = Consistency(target=spec)
    pins = {}
    for runner, row in sorted(latest.items()):
        env = store.environment(row["environment_id"])
        pins[runner] = parse_lock(env.lock if env is not None else "")
        result.runners[runner] = {"run_id": row["run_id"], "environment_id": row["environment_id"],
                                  "target_version": row["target_version"]}
    names = sorted({name for held in pins.values() for name in held})
    for name in names:
        versions = {runner: held.get(name) for runner, held in pins.items()}
        distinct = sorted({v for v in versions.values() if v is not None})
        if len(set(versions.values())) > 1:
            size = bump(distinct[0], distinct[-1]) if len(distinct) > 1 else "missing on some runners"
            result.packages.append({"name": name, "versions": versions, "bump": size.removeprefix("downgrade ")})
    return result
