"""Lock files and environment ids.

**The environment id is defined by content, not by the request.** It is the hash of the interpreter
(implementation, major.minor version, platform tag) and of every installed distribution: its name, its
version, and a digest of the files its RECORD lists (see `probe.distributions`). So:

- an environment rebuilt from its lock, here or on another machine of the same platform, gets the same id,
  and `ensure` checks that it does: a lock promises exactly those files, not only those versions;
- the same request resolved on another day to other versions gets another id, so results measured on
  different packages never look like the same environment;
- the cache folder of an environment is still named by the hash of its spec (`EnvSpec.id()`), because
  that is known before anything is built; the id is known once the build is complete.

A lock file is a requirements file that `uv pip sync` and `pip install -r` read as they are: one pin per
line, and a header of `# key: value` comments that modelci reads (schema, environment id, interpreter,
platform, the requirements that were asked for, local wheels and file digests). The schema is checked.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from modelci.envs.fingerprint import parse_lock, split_pin
from modelci.errors import UserError

#: bump when the lock file's format or meaning changes; other versions are refused
LOCK_SCHEMA = 1
_TITLE = "# modelci lock: the exact pins of one environment; rebuild it with `modelci run --lock THIS_FILE`"


@dataclass
class Lock:
    """The exact pins of an environment, and what is needed to rebuild and recognise it."""

    pins: dict[str, str]
    implementation: str
    python: str  # major.minor
    platform: str  # sysconfig platform tag, e.g. linux-x86_64
    environment: str = ""
    requested: list[str] = field(default_factory=list)
    target: str = ""
    #: name -> digest of the files of the pinned version (empty when unknown)
    digests: dict[str, str] = field(default_factory=dict)
    #: local wheels installed by path: {"name", "version", "sha256", "path"}
    wheels: list[dict] = field(default_factory=list)
    source: str = ""
    #: the file it was read from, for messages (not part of the lock)
    file: str = ""

    @classmethod
    def of(cls, lock_text: str, fingerprint: dict, environment: str = "", source: str = "") -> Lock:
        """The lock of an environment from its pins ("name==version" lines) and fingerprint."""
        pins = parse_lock(lock_text)
        build = fingerprint.get("build") or {}
        dists = fingerprint.get("distributions") or {}
        digests = {n: dists[n][1] for n, v in pins.items() if n in dists and dists[n][0] == v and dists[n][1]}
        return cls(pins=pins, implementation=str(fingerprint.get("implementation", "")),
                   python=minor(str(fingerprint.get("python", ""))), platform=str(fingerprint.get("platform_tag", "")),
                   environment=environment, requested=list(build.get("requested", [])),
                   target=str(build.get("target", "")), digests=digests,
                   wheels=[dict(w) for w in build.get("wheels", [])],
                   source=source)

    def body(self) -> str:
        """The pins alone, sorted by name: the environment's lock text."""
        return "".join(f"{name}=={version}\n" for name, version in sorted(self.pins.items()))

    def id(self) -> str:
        """The environment id this lock describes (see the module docstring)."""
        return environment_id(self.implementation, self.python, self.platform,
                              {n: (v, self.digests.get(n, "")) for n, v in self.pins.items()})

    def direct(self) -> set[str]:
        """Normalized names of the requirements that were asked for (the rest came in as dependencies)."""
        names = set()
        for text in self.requested:
            try:
                names.add(canonicalize_name(Requirement(text).name))
            except InvalidRequirement:
                if text.endswith(".whl"):
                    names.add(canonicalize_name(str(parse_wheel_filename(Path(text).name)[0])))
        return names

    def render(self) -> str:
        """The lock file's text: the header, then one pin per line."""
        header = [_TITLE, f"# schema: {LOCK_SCHEMA}", f"# environment: {self.environment or self.id()}",
                  f"# python: {self.implementation} {self.python}", f"# platform: {self.platform}"]
        if self.source:
            header.append(f"# source: {self.source}")
        if self.target:
            header.append(f"# target: {self.target}")
        header.append(f"# requested: {json.dumps(self.requested)}")
        header += [f"# wheel: {json.dumps(w, sort_keys=True)}" for w in self.wheels]
        header += [f"# files: {name} {digest}" for name, digest in sorted(self.digests.items())]
        return "\n".join(header) + "\n" + self.body()

    def to_json(self) -> dict:
        """Everything that decides what gets built (for the environment spec); `source` is left out."""
        return {"pins": dict(sorted(self.pins.items())), "implementation": self.implementation, "python": self.python,
                "platform": self.platform, "environment": self.environment, "requested": self.requested,
                "target": self.target, "digests": dict(sorted(self.digests.items())), "wheels": self.wheels}


def environment_id(implementation: str, python: str, platform: str, packages: dict[str, tuple[str, str]]) -> str:
    """16 hex digits naming an environment by content: interpreter, platform and {name: (version, digest)}."""
    canonical = json.dumps({"implementation": implementation.lower(), "python": minor(python), "platform": platform,
                            "packages": {n: list(packages[n]) for n in sorted(packages)}},
                           sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def id_of(lock_text: str, fingerprint: dict) -> str:
    """The id of an environment from its pins and fingerprint."""
    return Lock.of(lock_text, fingerprint).id()


def minor(version: str) -> str:
    """"3.11.7" -> "3.11": wheels are tagged by minor version, so the micro version does not name an environment."""
    return ".".join(version.split(".")[:2])


def write(path: str | Path, lock: Lock) -> None:
    """Write a lock file, whole (an older lock there is replaced only once the new one is written)."""
    from modelci.report import files

    files.write_text(path, lock.render())


def read(path: str | Path) -> Lock:
    """Read a lock file; a missing file, another schema or a line that is not a pin is a UserError naming it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read lock file {path}: {exc.strerror}; write one with `modelci env lock`") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{path} is no lock file: it is not UTF-8 text (byte {exc.start}); give the file that "
                        "`modelci env lock` writes") from None
    lock = parse(text, str(path))
    lock.file = str(path)
    for wheel in lock.wheels:  # an export bundle names its wheels relative to itself
        if wheel.get("path") and not Path(wheel["path"]).is_absolute():
            wheel["path"] = str((path.parent / wheel["path"]).resolve())
    return lock


#: what an environment id in a lock's header may be (ids are 16 hex digits; hand-made locks name their own), and
#: a `# files:` digest
_ENVIRONMENT_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]{0,63}")
_DIGEST = re.compile(r"[0-9a-f]{16,64}")


def parse(text: str, where: str = "lock") -> Lock:
    """Parse a lock file's text (see `read`)."""
    header: dict[str, list[str]] = {}
    pins: dict[str, str] = {}
    lines: dict[str, int] = {}  # name -> the line that pinned it
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            key, sep, value = line[1:].partition(":")
            if sep and key.strip().isidentifier():
                header.setdefault(key.strip(), []).append(value.strip())
            continue
        pin = split_pin(line.split(" #", 1)[0])
        if pin is None or any(c in pin[1] for c in "<>=!~,; "):
            raise UserError(f"{where}, line {number}: {line!r} is not an exact pin `name==version`; "
                            "a lock holds only pins (write one with `modelci env lock`)")
        if pin[0] in pins:
            # the later pin silently won in `env diff`, and a rebuild blamed "a rebuilt wheel with the same version"
            raise UserError(f"{where}, line {number}: {pin[0]} is pinned again ({pins[pin[0]]} at line "
                            f"{lines[pin[0]]}, {pin[1]} here); a lock pins each distribution once (write one with "
                            "`modelci env lock`)")
        pins[pin[0]], lines[pin[0]] = pin[1], number
    schema = (header.get("schema") or [""])[0]
    if not schema:
        raise UserError(f"{where} is not a modelci lock file (it has no `# schema:` line); "
                        "write one with `modelci env lock RUN -o FILE`")
    if schema != str(LOCK_SCHEMA):
        raise UserError(f"{where} has lock schema {schema}; this modelci reads schema {LOCK_SCHEMA}. "
                        "Use the modelci that wrote it, or lock the environment again with this one")
    implementation, _, python = (header.get("python") or [" "])[0].partition(" ")
    try:
        requested = json.loads((header.get("requested") or ["[]"])[0])
        wheels = [json.loads(value) for value in header.get("wheel", [])]
    except ValueError as exc:
        raise UserError(f"{where}: a `# requested:` or `# wheel:` header line is not valid JSON ({exc})") from None
    if not isinstance(requested, list) or not all(isinstance(r, str) for r in requested):
        raise UserError(f"{where}: the `# requested:` line must be a JSON list of requirement strings, not "
                        f"{json.dumps(requested)[:80]}")
    if not all(isinstance(w, dict) for w in wheels):
        raise UserError(f"{where}: each `# wheel:` line must be a JSON object (the wheel's path and sha256)")
    environment = (header.get("environment") or [""])[0]
    if environment and not _ENVIRONMENT_ID.fullmatch(environment):
        raise UserError(f"{where}: `# environment: {environment[:80]}` is no environment id (letters, digits, '.', "
                        "'_' and '-'; `modelci env lock` writes 16 hex digits)")
    digests = {}
    for value in header.get("files", []):
        name, _, digest = value.partition(" ")
        if not _DIGEST.fullmatch(digest.strip()):
            raise UserError(f"{where}: `# files: {value[:80]}` must name a distribution and the digest of its files "
                            "(hex digits), as `modelci env lock` writes it")
        digests[canonicalize_name(name)] = digest.strip()
    return Lock(pins=pins, implementation=implementation, python=python.strip(),
                platform=(header.get("platform") or [""])[0], environment=environment,
                requested=list(requested), target=(header.get("target") or [""])[0], digests=digests,
                wheels=wheels, source=(header.get("source") or [""])[0])


def check_platform(lock: Lock, where: str, implementation: str, python: str, platform: str, interpreter: str) -> None:
    """Refuse a lock made for another interpreter or platform: its pins name wheels that may not exist here."""
    theirs = f"{lock.implementation} {lock.python} on {lock.platform}"
    ours = f"{implementation} {minor(python)} on {platform}"
    if (lock.implementation.lower(), lock.python, lock.platform) != (implementation.lower(), minor(python), platform):
        raise UserError(
            f"{where} was made on {theirs}, but the environment's python ({interpreter}) is {ours}. "
            "Rebuild it on a matching runner or python (the `python` option), or derive portable constraints "
            f"from it with `modelci env constraints --from {where}`"
        )
