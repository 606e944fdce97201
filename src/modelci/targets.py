"""Target specs → Target: what framework build is under test and how to install it.

A target is a requirement (`numpy==2.0.0`), a wheel file, or `current` (the running interpreter as
it is). Its identity in the history is what actually got installed: name, version, and the wheel's
sha256 or the commit where there is one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from modelci.errors import UserError


@dataclass
class Target:
    """A framework build under test."""

    spec: str
    kind: str  # "requirement" | "wheel" | "current" | "git"
    name: str
    requirements: list[str] = field(default_factory=list)
    version: str | None = None
    commit: str | None = None
    wheel_sha256: str | None = None
    commit_date: str | None = None
    subject: str | None = None

    @property
    def label(self) -> str:
        """A short human name: `numpy==2.0.0`, `fakefw==1.1 (wheel ab12cd34)`, `current`."""
        if self.kind == "current":
            return "current"
        text = f"{self.name}=={self.version}" if self.version else self.spec
        if self.commit:
            text += f"@{self.commit[:10]}"
        elif self.wheel_sha256:
            text += f" (wheel {self.wheel_sha256[:8]})"
        return text

    def identity(self) -> dict[str, str | None]:
        """The fields that make two targets the same build."""
        return {"kind": self.kind, "name": self.name, "version": self.version, "commit": self.commit,
                "wheel_sha256": self.wheel_sha256}


def resolve(spec: str) -> Target:
    """Parse a target spec; a bad one is a UserError that names it and says what is accepted."""
    text = spec.strip()
    if text == "current":
        return Target(spec=text, kind="current", name="current")
    if text.endswith(".whl"):
        return _wheel_target(text)
    if text.startswith("git+"):
        raise UserError(f"target {spec!r}: git targets are not supported yet; build a wheel and pass its path")
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        raise UserError(
            f"target {spec!r} is not a requirement, a wheel path or 'current' ({exc}); "
            "for example --target numpy==2.0.0"
        ) from None
    version = None
    pins = [s for s in requirement.specifier if s.operator in ("==", "===") and "*" not in s.version]
    if len(pins) == 1:
        version = pins[0].version
    return Target(spec=text, kind="requirement", name=canonicalize_name(requirement.name),
                  requirements=[text], version=version)


def _wheel_target(text: str) -> Target:
    path = Path(text).expanduser().resolve()
    if not path.is_file():
        raise UserError(f"target {text!r}: no such wheel file; give the path of a built .whl")
    try:
        name, version, _, _ = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        raise UserError(f"target {text!r}: {exc}") from None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return Target(spec=text, kind="wheel", name=canonicalize_name(name), requirements=[str(path)],
                  version=str(version), wheel_sha256=digest)
