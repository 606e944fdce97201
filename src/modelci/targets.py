"""Target specs → Target: what framework build is under test and how to install it.

A target is a requirement (`numpy==2.0.0`), a wheel file, a git commit (`git+URL@REF`, built by
`modelci.builds`), or `current` (the running interpreter as it is). Its identity in the history is what
actually got installed: name, version, and the wheel's sha256 or the commit where there is one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlparse, urlsplit
from urllib.request import url2pathname

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from modelci.errors import UserError
from modelci.records import redacted


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
    #: git targets: where the commit comes from, the ref asked for, and how it is built (builds.BuildPlan text)
    repo: str | None = None
    ref: str | None = None
    build: str = ""
    subdirectory: str = ""
    author: str | None = None
    #: pythonpath builds: folders every process of the run puts first on its path (set by builds.prepare)
    paths: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """A short human name: `numpy==2.0.0`, `fakefw==1.1 (wheel ab12cd34)`, `current` (see `label`)."""
        return label(self.kind, self.name, self.version, self.commit, self.wheel_sha256, self.spec)

    def identity(self) -> dict[str, str]:
        """The fields that make two targets the same build, as the store keeps them ("" for absent)."""
        fields = {"kind": self.kind, "name": self.name, "version": self.version, "commit": self.commit,
                  "wheel_sha256": self.wheel_sha256}
        return {key: value or "" for key, value in fields.items()}


def label(kind: str, name: str, version: str | None, commit: str | None, wheel_sha256: str | None,
          spec: str) -> str:
    """The short name users see for a target, from the fields the store keeps: `numpy==2.0.0`,
    `fakefw==1.1 (wheel ab12cd34)`, `torch==2.5@0123456789`, `fakefw@0123456789` (a commit whose version is
    not known), `current`.

    The one place a target is named: the console, the history, the alarms and the dashboard all call it, so one
    target has one name everywhere.
    """
    if kind == "current":
        return "current"
    text = f"{name}=={version}" if version else name if kind == "git" and name else spec
    if commit:
        text += f"@{commit[:10]}"
    elif wheel_sha256:
        text += f" (wheel {wheel_sha256[:8]})"
    return text


def parse_version(text: str | None) -> Version | None:
    """A release version without its local part (`2.1.0+git.ab12` -> 2.1.0); None when absent or unparsable."""
    if not text:
        return None
    try:
        return Version(Version(text).public)
    except InvalidVersion:
        return None


def order_key(version: str | None, commit_date: str | None, first_run: int, target_id: int = 0) -> tuple:
    """Sort key of a stored target in release order: its version (the public part, so local `+git...` tags do not
    sort by hash; none or unparsable sorts as 0), then its commit date, then its first run's id, then its own id.

    The one target order: baselines, `modelci history`, the alarms' change points and the dashboard's trends all
    sort by it, so they agree on which target came first.
    """
    return parse_version(version) or Version("0"), commit_date or "", first_run, target_id


#: the longest target name and version the history stores (its columns: PostgreSQL refuses longer ones)
NAME_MAX, VERSION_MAX = 200, 100


def resolve(spec: str, *, cache_dir: str | Path | None = None, example: str = "--target numpy==2.0.0") -> Target:
    """Parse a target spec; a bad one is a UserError that names it and says what is accepted, with `example`: how
    the option the user gave (`--target`, `bisect --versions`) takes a target.

    A git spec is resolved to its commit through a mirror in `cache_dir` (default ~/.cache/modelci); the build
    itself happens later, in `builds.prepare`, when the environment is made. A name or version longer than
    the history holds is refused here, before any work, not by the database after every workload ran.
    """
    target = _resolve(spec, cache_dir, example)
    for what, value, most in (("name", target.name, NAME_MAX), ("version", target.version or "", VERSION_MAX)):
        if len(value) > most:
            raise UserError(f"target {redacted(spec)[:60]!r}...: its {what} is {len(value)} characters long; the "
                            f"history holds at most {most}")
    return target


def _resolve(spec: str, cache_dir: str | Path | None, example: str) -> Target:
    """`resolve` without the length check."""
    text = spec.strip()
    if not text:
        raise UserError("the target is empty; give a requirement (numpy==2.0.0), a .whl path, git+URL@REF or "
                        "current")
    if text == "current":
        return Target(spec=text, kind="current", name="current")
    if text.startswith("git+"):  # first: a build command may end in ".whl" (`cp ... $MODELCI_DIST_DIR/x.whl`)
        return _git_target(text, cache_dir)
    if text.endswith(".whl"):
        return _wheel_target(text)
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        raise UserError(
            f"target {spec!r} is not a requirement, a wheel path or 'current' ({exc}); "
            f"for example {example}"
        ) from None
    if requirement.marker is not None:
        # a marker that excludes this machine would build an environment without the target and record the
        # run as that target's; one that includes it says nothing a run needs
        raise UserError(f"target {redacted(spec)!r} has an environment marker ({requirement.marker}); a target is one "
                        "build to install here: drop the '; ...' part")
    version = None
    pins = [s for s in requirement.specifier if s.operator in ("==", "===") and "*" not in s.version]
    if len(pins) == 1:
        version = pins[0].version
    return Target(spec=text, kind="requirement", name=canonicalize_name(requirement.name),
                  requirements=[text], version=version)


def check(spec: str) -> None:
    """Refuse a bad target spec before any work starts (a UserError, as `resolve` gives it), without resolving a
    git spec's ref, which needs its repository: `compare` checks both sides before it runs the first."""
    if spec.strip().startswith("git+"):
        parse_git_spec(spec.strip())
    else:
        resolve(spec)


def _wheel_target(text: str) -> Target:
    """A wheel given as a path, a file:// URL, or a direct reference (`numpy @ file:///.../numpy-2.1.3-...whl`)."""
    raw = text.split(" @ ", 1)[1].strip() if " @ " in text else text
    if raw.startswith("file://"):  # the file is what a user means; reading it as a path found none
        raw = url2pathname(urlparse(raw).path)
    path = Path(raw).expanduser().resolve()
    if not path.is_file():
        raise UserError(f"target {redacted(text)!r}: no such wheel file; give the path of a built .whl")
    try:
        name, version, _, _ = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        raise UserError(f"target {redacted(text)!r}: {redacted(str(exc))}") from None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return Target(spec=text, kind="wheel", name=canonicalize_name(name), requirements=[str(path)],
                  version=str(version), wheel_sha256=digest)


def git_spec(repo: str, ref: str, build: str | None = None, subdirectory: str | None = None) -> str:
    """The target spec of commit `ref` of `repo` (a path or URL) built with `build`: `git+URL@REF#build=...`."""
    from modelci.gitrepo import normalize_url

    url, _ = normalize_url(repo)
    fragment = []
    if build and build.strip() != "wheel":
        fragment.append("build=" + quote(build.strip(), safe=":/"))
    if subdirectory:
        fragment.append("subdirectory=" + quote(subdirectory.strip("/"), safe="/"))
    return f"git+{url}@{ref}" + ("#" + "&".join(fragment) if fragment else "")


def parse_git_spec(text: str) -> tuple[str, str, dict[str, str]]:
    """`git+URL[@REF][#build=...&subdirectory=...]` -> (URL, REF or "HEAD", fragment options)."""
    body, _, fragment = text.removeprefix("git+").partition("#")
    options = dict(parse_qsl(fragment, keep_blank_values=True))
    unknown = sorted(set(options) - {"build", "subdirectory", "egg"})
    if unknown:
        raise UserError(f"target {redacted(text)!r}: unknown option(s) {', '.join(unknown)} after '#'; "
                        "known: build=wheel|pythonpath|CMD, subdirectory=FOLDER")
    # the ref follows the last "@" of the path, so ssh://git@host/repo.git@v1 keeps its user
    scheme_end = body.find("://")
    path_start = body.find("/", scheme_end + 3) if scheme_end >= 0 else 0
    url, ref = body, "HEAD"
    if "@" in body[max(path_start, 0):]:
        url, _, ref = body.rpartition("@")
    if not url or not ref:
        raise UserError(f"target {redacted(text)!r}: expected git+URL@REF (a path, file://, https:// or ssh:// URL)")
    return url, ref, options


def _git_target(text: str, cache_dir: str | Path | None) -> Target:
    from modelci.gitrepo import GitRepo

    url, ref, options = parse_git_spec(text)
    repo = GitRepo(url, cache_dir or Path("~/.cache/modelci").expanduser())
    sha = repo.resolve(ref)
    commit = repo.commit(sha)
    subdirectory = options.get("subdirectory", "").strip("/")
    name = _project_name(lambda file: repo.show(sha, f"{subdirectory}/{file}" if subdirectory else file))
    name = name or urlsplit(repo.url).path.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git") or "project"
    return Target(spec=text, kind="git", name=canonicalize_name(name), commit=sha, commit_date=commit.date,
                  subject=commit.subject, author=commit.author, repo=repo.url, ref=ref,
                  build=options.get("build", ""), subdirectory=subdirectory)


def _project_name(read: Callable[[str], str | None]) -> str | None:
    """The package name the commit's metadata gives without running anything (pyproject.toml, setup.cfg); None
    when it needs setup.py or is unreadable: the build finds it then and renames the target (builds.prepare)."""
    from modelci import projectmeta

    try:
        return projectmeta.static(read).name
    except projectmeta.MetadataError:
        return None
