"""How two framework builds relate in history: which one came first.

compat loads models saved by *older* builds into the one under test, so it needs "older" for every kind of
target. Version strings alone do not give it: every commit built with `--build pythonpath` carries the version
`V+g<sha12>`, and two commits of one project usually share `V`. So:

- two commits of **one repository** are ordered by the commit graph: A is older than B when A is an ancestor
  of B; two commits on diverging branches are not ordered;
- anything else (releases, wheels, commits of different repositories) by **version order** (PEP 440); two
  versions that differ only in their local label (`1.0+gabc`, `1.0+gdef`) say nothing about which came first,
  so they are not ordered either.

`Builds` are the dicts compat keeps per producer and consumer (`compat.target_dict`): kind, name, version,
commit, wheel_sha256, spec, label and, for commits, repo.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from modelci.errors import HarnessError, UserError
from modelci.gitrepo import GitRepo, normalize_url
from modelci.targets import parse_git_spec

OLDER, SAME, NEWER, UNORDERED = "older", "same", "newer", "unordered"


def repo_of(build: dict[str, Any]) -> str | None:
    """The repository a commit build came from (normalized), or None for a release or wheel."""
    if not build.get("commit"):
        return None
    if build.get("repo"):
        return normalize_url(build["repo"])[0]
    spec = str(build.get("spec") or "")
    if spec.startswith("git+"):
        try:
            return normalize_url(parse_git_spec(spec)[0])[0]
        except Exception:  # noqa: BLE001 - a record written by another version: fall back to versions
            return None
    return None


def version_of(build: dict[str, Any]) -> Version | None:
    """The build's version, or None when it has none or it is not PEP 440."""
    try:
        return Version(str(build.get("version") or ""))
    except InvalidVersion:
        return None


class Lineage:
    """Answers "is build A older than build B", asking git for commits of one repository (one mirror per
    repository, in the cache) and comparing versions otherwise."""

    def __init__(self, cache_dir: Path | str):
        self.cache_dir = cache_dir
        self._repos: dict[str, Any] = {}
        self._known: dict[tuple[str, str], bool] = {}
        self._graphs: dict[tuple[str, str, str], str | None] = {}

    def relation(self, a: dict[str, Any], b: dict[str, Any]) -> str:
        """OLDER when `a` came before `b`, NEWER after it, SAME for one build, UNORDERED when history cannot
        tell (diverging branches, versions that differ only in a local label)."""
        if a.get("commit") and a.get("commit") == b.get("commit"):
            return SAME
        repo = repo_of(a)
        if repo is not None and repo == repo_of(b):
            key = (repo, a["commit"], b["commit"])
            if key not in self._graphs:  # one question per pair of commits, however many models they saved
                self._graphs[key] = self._graph(*key)
            graph = self._graphs[key]
            if graph is not None:
                return graph
        va, vb = version_of(a), version_of(b)
        if va is None or vb is None:
            return UNORDERED
        if va == vb:
            same = all(str(a.get(k) or "") == str(b.get(k) or "") for k in ("commit", "wheel_sha256"))
            return SAME if same or not (a.get("wheel_sha256") and b.get("wheel_sha256")) else UNORDERED
        if va.public == vb.public and (va.local or vb.local):
            return UNORDERED
        return OLDER if va < vb else NEWER

    def older(self, a: dict[str, Any], b: dict[str, Any]) -> bool:
        """Whether `a` came strictly before `b`."""
        return self.relation(a, b) == OLDER

    def _graph(self, url: str, a: str, b: str) -> str | None:
        """The commit graph's answer, or None when the mirror cannot be reached or lacks one of the commits."""
        try:
            repo = self._repos.get(url) or self._repos.setdefault(url, GitRepo(url, self.cache_dir))
            for sha in (a, b):
                if not repo.has(sha):
                    repo.sync()
                    if not repo.has(sha):
                        return None
            if self._ancestor(repo, a, b):
                return OLDER
            if self._ancestor(repo, b, a):
                return NEWER
            return UNORDERED
        except (UserError, HarnessError):
            return None  # the repository is gone or unreachable: the versions still say something

    def _ancestor(self, repo: Any, a: str, b: str) -> bool:
        if (a, b) not in self._known:
            self._known[(a, b)] = repo.is_ancestor(a, b)
        return self._known[(a, b)]



def sort_key(build: dict[str, Any]) -> tuple:
    """A key that sorts builds oldest first: by version, then by commit date (commits that share a version)."""
    version = version_of(build)
    public = (0, Version(version.public)) if version is not None else (1, str(build.get("version") or ""))
    return public, str(build.get("commit_date") or ""), str(build.get("label") or "")
