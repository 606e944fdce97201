"""Constraint files: reviewed by a human, applied to every environment, and checked.

`[env] constraints = [...]` in modelci.toml names files of `name<specifier>` lines. They are merged, with the
platform's override file (`[env] platform_overrides = {"linux-aarch64" = "FILE"}`, keys may be globs) replacing
every entry of the packages it names, into one file in the cache named by its content, which uv gets through
`--constraint`. The environment's fingerprint records that file, so `check` can tell an environment built
under the current constraints from one that never read them: a constraint file that nothing reads drifts
silently (one project's CI constraints went unread for years).
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from modelci.envs.lockfile import Lock
from modelci.errors import UserError

LEVELS = ("major", "minor", "patch")
#: folders never searched for stray constraint files
_SKIP_DIRS = {".git", ".venv", "venv", "node_modules", ".modelci", "__pycache__", ".tox", ".nox", "build", "dist"}


@dataclass
class Constraint:
    """One constraint line: the requirement it holds and where it was read."""

    requirement: Requirement
    file: str
    line: int

    @property
    def name(self) -> str:
        """The normalized package name."""
        return canonicalize_name(self.requirement.name)

    @property
    def where(self) -> str:
        """`file:line`, for messages."""
        return f"{self.file}:{self.line}"


@dataclass
class ConstraintSet:
    """The constraints that apply on one platform, after the override file replaced what it names."""

    entries: list[Constraint] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The merged constraints file's text, with a header naming its sources."""
        header = [f"# modelci: constraints merged from {source}" for source in self.sources]
        return "\n".join([*header, *(str(c.requirement) for c in self.entries)]) + "\n"

    def digest(self) -> str:
        """16 hex digits of the merged text; an environment built under it records this."""
        return hashlib.sha256(self.text().encode()).hexdigest()[:16]


def platform_key(tag: str) -> str:
    """A platform tag as override keys use it: `linux-x86_64`; macOS drops its version (`macosx-arm64`)."""
    if tag.startswith("macosx-"):
        return "macosx-" + tag.rsplit("-", 1)[-1]
    return tag


def parse_file(path: str | Path) -> list[Constraint]:
    """Read one constraints file; an unreadable file or a line that is not a requirement is a UserError naming it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read constraints file {path}: {exc.strerror}; fix the path in [env] constraints "
                        "(relative paths are from the config file's folder)") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"constraints file {path} is not UTF-8 text (byte {exc.start}); a constraints file is "
                        "pip's requirement lines: fix it, or the path in [env] constraints") from None
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            raise UserError(f"{path}, line {number}: {line!r} is not a constraint like `numpy>=1.26,<2` ({exc})") \
                from None
        if requirement.url or requirement.extras:
            raise UserError(f"{path}, line {number}: {line!r}: a constraint names a package and versions, "
                            "without extras or URLs")
        entries.append(Constraint(requirement, str(path), number))
    return entries


def load(files: list[str], overrides: dict[str, str], platform_tag: str) -> ConstraintSet:
    """The constraints for `platform_tag`: every file's entries, with the matching override file's entries winning."""
    merged = ConstraintSet()
    for file in files:
        merged.entries += parse_file(file)
        merged.sources.append(file)
    key = platform_key(platform_tag)
    for pattern, file in overrides.items():
        if fnmatch.fnmatchcase(key, pattern):
            replacing = parse_file(file)
            names = {c.name for c in replacing}
            merged.entries = [c for c in merged.entries if c.name not in names] + replacing
            merged.sources.append(f"{file} (override for {pattern})")
            break
    return merged


def write_merged(constraints: ConstraintSet, cache_dir: str | Path) -> str | None:
    """Write the merged file into the cache, named by its content, and return its path (None when empty)."""
    if not constraints.entries:
        return None
    folder = Path(cache_dir) / "constraints"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{constraints.digest()}.txt"
    if not path.exists():
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(constraints.text())
        os.replace(tmp, path)
    return str(path)


def for_config(settings: dict, cache_dir: str | Path, platform_tag: str) -> list[str]:
    """The constraint files uv gets for an environment under the `[env]` settings (empty when none are set)."""
    merged = load(list(settings.get("constraints", [])), dict(settings.get("platform_overrides", {})), platform_tag)
    path = write_merged(merged, cache_dir)
    return [path] if path else []


def contradictions(constraints: ConstraintSet, lock: Lock) -> list[str]:
    """Messages for each pin in `lock` that a constraint (whose marker applies on the lock's platform) excludes."""
    environment = marker_environment(lock)
    found = []
    for entry in constraints.entries:
        version = lock.pins.get(entry.name)
        marker = entry.requirement.marker
        if version is None or (marker is not None and not marker.evaluate(environment)):
            continue
        if not entry.requirement.specifier.contains(version, prereleases=True):
            found.append(f"{entry.name}=={version} contradicts `{entry.requirement}` ({entry.where})")
    return found


def unused(constraints: ConstraintSet, locks: list[Lock]) -> list[str]:
    """Messages for constraints that name a package none of `locks` holds: dead entries, or a misspelt name."""
    held = {name for lock in locks for name in lock.pins}
    return [f"`{c.requirement}` ({c.where}) constrains a package that no checked environment holds"
            for c in constraints.entries if c.name not in held]


def marker_environment(lock: Lock) -> dict[str, str]:
    """Marker variables for the lock's interpreter and platform, so `; sys_platform == ...` lines apply right."""
    environment = dict(default_environment())
    system, _, machine = lock.platform.partition("-")
    sys_platform = {"macosx": "darwin", "win": "win32"}.get(system, system)
    if lock.python:
        environment.update(python_version=lock.python, python_full_version=f"{lock.python}.0")
    if sys_platform:
        environment.update(sys_platform=sys_platform,
                           platform_system={"darwin": "Darwin", "win32": "Windows"}.get(sys_platform, "Linux"))
    if machine:
        environment["platform_machine"] = machine.rsplit("-", 1)[-1]
    return environment


def derive(lock: Lock, level: str, only_direct: bool = False, source: str = "") -> str:
    """Loose cross-platform constraints from a pilot platform's lock: `tensorflow==1.6.8` at minor -> `>=1.6,<1.7`.

    Local version labels (`+cpu`) are dropped, so a CUDA build on another runner satisfies the same line.
    """
    if level not in LEVELS:
        raise UserError(f"--level {level!r}: choose one of {', '.join(LEVELS)}")
    names = sorted(lock.pins)
    if only_direct:
        direct = lock.direct()
        if not direct:
            raise UserError(f"{source or 'the lock'} does not say which requirements were asked for "
                            "(no `# requested:` header); drop --only-direct")
        names = [n for n in names if n in direct]
    lines = [f"# modelci: derived from {source or 'a lock'} ({lock.implementation} {lock.python} on {lock.platform})"
             f" at level {level}"]
    for name in names:
        lines.append(f"{name}{_bounds(lock.pins[name], level)}")
    return "\n".join(lines) + "\n"


def _bounds(text: str, level: str) -> str:
    try:
        version = Version(text)
    except InvalidVersion:
        return f"=={text}"  # not PEP 440: nothing looser can be said about it
    keep = LEVELS.index(level) + 1
    release = list(version.release) + [0] * max(0, keep - len(version.release))
    epoch = f"{version.epoch}!" if version.epoch else ""
    lower = ".".join(map(str, release[:keep]))
    if version.is_prerelease or version.is_devrelease:
        lower = version.public  # `>=1.7` would exclude 1.7.0rc1 itself
    upper = release[:keep]
    upper[-1] += 1
    return f">={epoch}{lower},<{epoch}{'.'.join(map(str, upper))}"


def stray_files(root: Path, consumed: set[str], depth: int = 3) -> list[str]:
    """Files under `root` that look like constraint files (`*constraint*.txt`) and that nothing reads."""
    found = []
    root = root.resolve()
    for folder, dirs, files in os.walk(root):
        rel_depth = len(Path(folder).relative_to(root).parts)
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith(".") and rel_depth < depth]
        for name in files:
            if "constraint" in name.lower() and name.endswith(".txt"):
                path = str(Path(folder, name).resolve())
                if path not in consumed:
                    found.append(path)
    return sorted(found)
