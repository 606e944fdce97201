"""Which stored result a new result is judged against: the nearest earlier target, where an order is known.

The rule used to be "the latest good result of the same workload on the same runner with a different target",
which follows the order in which runs were made. Re-running an old release after a new one then judged the old one
against the new one, and the older release "regressed" against its successor. The order of the targets is
what matters:

- git commits of one repository: the nearest ancestor of the commit with a good result (the commit graph, read
  from the repository's mirror);
- releases and wheels of one distribution with a version: the nearest lower version with a good result; where
  only other builds of the same version have one (nightly wheels that keep their version), the latest of those;
- anything else (`current`, a distribution whose versions do not parse, no earlier target): no order is known,
  and the latest good result of another target by run time stands in, as before.

Every choice comes with the rule that made it, said in words, so that the report can tell which rule chose a
baseline (`Comparison.baseline_rule`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from modelci.targets import parse_version


@dataclass
class Candidate:
    """A good stored result of the workload on the runner, with the target it ran against."""

    result_id: int
    started_at: datetime
    kind: str
    name: str
    version: str
    commit: str
    wheel_sha256: str
    label: str


class Chooser:
    """Picks the baseline among candidates for one target; remembers the commit graph's answers across workloads."""

    def __init__(self, target: Any, cache_dir: str | Path | None = None):
        self.target = target
        self.cache_dir = cache_dir
        self._distance: dict[str, int | None] = {}
        self._repo: Any = None

    def choose(self, candidates: list[Candidate]) -> tuple[Candidate | None, str]:
        """The baseline among `candidates` (newest first by run time) and the rule that chose it, in words."""
        target = self.target
        label = getattr(target, "label", "") or target.spec
        if target.kind == "git" and target.commit and getattr(target, "repo", None):
            ancestors = [(self._commits_between(c.commit), c) for c in candidates if c.kind == "git" and c.commit]
            ancestors = [(d, c) for d, c in ancestors if d is not None]
            if ancestors:
                distance, chosen = min(ancestors, key=lambda pair: (pair[0], -pair[1].started_at.timestamp()))
                return chosen, (f"nearest earlier commit with a good result: {chosen.label}, {distance} commit"
                                f"{'s' if distance != 1 else ''} before {label} (commit graph)")
            if self._repository() is not None:
                return None, f"no earlier commit of {label}'s repository has a good result (commit graph)"
        version = parse_version(target.version)
        if version is not None and target.kind in ("requirement", "wheel", "git"):
            name = canonicalize_name(target.name)
            same = [c for c in candidates if canonicalize_name(c.name) == name and parse_version(c.version)]
            earlier = [c for c in same if parse_version(c.version) < version]
            if earlier:
                chosen = max(earlier, key=lambda c: (parse_version(c.version), c.started_at, c.result_id))
                return chosen, f"nearest earlier version with a good result: {chosen.label} (version order)"
            builds = [c for c in same if parse_version(c.version) == version]
            if builds:
                chosen = builds[0]
                return chosen, (f"another build of version {version} ({chosen.label}), the latest by run time: "
                                "no order is known between builds of one version")
            if same:
                return None, f"no earlier version of {target.name} than {version} has a good result (version order)"
        if candidates:
            chosen = candidates[0]
            return chosen, (f"no order is known for {label}: the latest good result of another target by run time "
                            f"({chosen.label})")
        return None, "no other target has a good result"

    def _repository(self) -> Any:
        if self._repo is None:
            from modelci.gitrepo import GitRepo

            try:
                repo = GitRepo(self.target.repo, self.cache_dir or Path("~/.cache/modelci").expanduser())
            except Exception:  # noqa: BLE001 - a mirror that cannot be opened only means no graph order is known
                repo = None
            # resolving the target made the mirror; without it no graph order is known
            self._repo = repo if repo is not None and (repo.mirror / "HEAD").exists() else False
        return self._repo or None

    def _commits_between(self, commit: str) -> int | None:
        """How many commits `commit` lies before the target's, when it is an earlier commit of its graph."""
        if commit not in self._distance:
            repo = self._repository()
            found = None
            if repo is not None and commit != self.target.commit and repo.is_ancestor(commit, self.target.commit):
                from modelci.gitrepo import git

                counted = git(["rev-list", "--count", f"{commit}..{self.target.commit}"], cwd=repo.mirror,
                              check=False)
                found = int(counted.stdout.strip()) if counted.returncode == 0 else None
            self._distance[commit] = found
        return self._distance[commit]
