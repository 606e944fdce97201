"""What differs between two environments: packages and fingerprint fields.

A result that moved may owe it to something besides the target: a dependency that moved a minor version,
another BLAS, another thread count. `diff` puts all of it side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from modelci.envs.fingerprint import parse_lock

#: fingerprint fields that describe the record rather than the machine, or that `packages` already covers
_NOT_COMPARED = ("schema", "distributions", "packages_of_interest", "build.wheels", "build.from_lock")


@dataclass
class PackageChange:
    """One package added, removed or changed, with the size of the version bump."""

    name: str
    change: str  # "added" | "removed" | "changed" | "rebuilt" (same version, other files)
    before: str = ""
    after: str = ""
    bump: str = ""  # "major" | "minor" | "patch" | "pre/post/dev" | "local" | "" ; "downgrade " prefixed when older

    def to_json(self) -> dict[str, str]:
        """A plain dict (also the row format `report.queries.lock_diff` reads)."""
        return {"name": self.name, "change": self.change, "before": self.before, "after": self.after,
                "bump": self.bump}


@dataclass
class FieldChange:
    """One fingerprint field (a dotted path) that differs."""

    field: str
    before: Any
    after: Any

    def to_json(self) -> dict[str, Any]:
        """A plain dict."""
        return {"field": self.field, "before": self.before, "after": self.after}


@dataclass
class EnvDiff:
    """Everything that differs between environment A and environment B."""

    a: str
    b: str
    packages: list[PackageChange] = field(default_factory=list)
    fingerprint: list[FieldChange] = field(default_factory=list)

    @property
    def same(self) -> bool:
        """Whether nothing differs."""
        return not self.packages and not self.fingerprint

    def besides(self, names: set[str]) -> list[PackageChange]:
        """The package changes other than those of `names` (the targets): what else changed."""
        return [p for p in self.packages if p.name not in names]

    def to_json(self) -> dict[str, Any]:
        """A plain dict for JSON reports."""
        return {"a": self.a, "b": self.b, "same": self.same, "packages": [p.to_json() for p in self.packages],
                "fingerprint": [f.to_json() for f in self.fingerprint]}


def bump(before: str, after: str) -> str:
    """The size of a version change: major, minor, patch, pre/post/dev, local; prefixed "downgrade " when older."""
    try:
        old, new = Version(before), Version(after)
    except InvalidVersion:
        return "unknown"
    if old == new:
        return ""
    if old.public == new.public:
        return "local"
    size = "pre/post/dev"
    width = max(len(old.release), len(new.release), 3)
    old_release = old.release + (0,) * (width - len(old.release))
    new_release = new.release + (0,) * (width - len(new.release))
    if old.epoch != new.epoch or old_release[0] != new_release[0]:
        size = "major"
    elif old_release[1] != new_release[1]:
        size = "minor"
    elif old_release[2:] != new_release[2:]:
        size = "patch"
    return ("downgrade " if new < old else "") + size


def diff_packages(lock_a: str, lock_b: str, digests_a: dict | None = None,
                  digests_b: dict | None = None) -> list[PackageChange]:
    """Packages added, removed and changed between two locks; same version with other files is `rebuilt`."""
    old, new = parse_lock(lock_a), parse_lock(lock_b)
    digests_a, digests_b = digests_a or {}, digests_b or {}
    changes = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name), new.get(name)
        if before is None:
            changes.append(PackageChange(name, "added", after=after or ""))
        elif after is None:
            changes.append(PackageChange(name, "removed", before=before))
        elif before != after:
            changes.append(PackageChange(name, "changed", before, after, bump(before, after)))
        elif _digest(digests_a, name, before) and _digest(digests_b, name, after) and \
                _digest(digests_a, name, before) != _digest(digests_b, name, after):
            changes.append(PackageChange(name, "rebuilt", before, after, "same version, other files"))
    return changes


def diff_locks(lock_a: str, lock_b: str) -> list[dict[str, str]]:
    """Rows {name, change, before, after, bump} for two locks ("name==version" lines)."""
    return [change.to_json() for change in diff_packages(lock_a, lock_b)]


def diff_fingerprints(a: dict, b: dict) -> list[FieldChange]:
    """The fingerprint fields (dotted paths; lists compared whole) whose values differ.

    A lock file's facts are partial (no `schema`: interpreter and platform only); against one, only the
    fields both sides have are compared, and Python versions by major.minor.
    """
    flat_a, flat_b = _flatten(a or {}), _flatten(b or {})
    keys = set(flat_a) | set(flat_b)
    if "schema" not in flat_a or "schema" not in flat_b:
        keys = set(flat_a) & set(flat_b)
        for flat in (flat_a, flat_b):
            if "python" in flat:
                flat["python"] = ".".join(str(flat["python"]).split(".")[:2])
    changes = []
    for key in sorted(keys):
        if any(key == skip or key.startswith(skip + ".") for skip in _NOT_COMPARED):
            continue
        if flat_a.get(key) != flat_b.get(key):
            changes.append(FieldChange(key, flat_a.get(key), flat_b.get(key)))
    return changes


def diff(label_a: str, lock_a: str, fingerprint_a: dict, label_b: str, lock_b: str, fingerprint_b: dict) -> EnvDiff:
    """The full difference between two environments given by their locks and fingerprints."""
    digests_a = (fingerprint_a or {}).get("distributions") or {}
    digests_b = (fingerprint_b or {}).get("distributions") or {}
    return EnvDiff(a=label_a, b=label_b, packages=diff_packages(lock_a, lock_b, digests_a, digests_b),
                   fingerprint=diff_fingerprints(fingerprint_a, fingerprint_b))


def between(env_a: Any, env_b: Any) -> EnvDiff:
    """The difference between two `Environment`s (as `compare` holds them)."""
    return diff(env_a.id, env_a.lock, env_a.fingerprint, env_b.id, env_b.lock, env_b.fingerprint)


def _digest(digests: dict, name: str, version: str) -> str:
    entry = digests.get(name)
    return entry[1] if entry and entry[0] == version else ""


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}
