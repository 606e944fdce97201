"""Git repositories behind git-commit targets: a mirror per repository, a worktree per commit, history queries.

The user's repository is never written to: it is cloned once as a bare mirror under `<cache_dir>/git/`, and each
commit is checked out with `git worktree add --detach` into `<cache_dir>/worktrees/<sha>`. Worktrees rather than
`git archive`: a build that asks git for its version (setuptools-scm, versioneer, torch's setup.py) still finds a
`.git`, and the objects stay shared with the mirror instead of being copied per commit. A worktree is valid only
once `<sha>.ok` sits beside it (docs/design.md: "Mark a cache valid only once it is complete").
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from modelci import locks
from modelci.errors import HarnessError, UserError
from modelci.records import REDACTED, redacted

GIT_TIMEOUT = 900
_FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
_PR_PATTERNS = (re.compile(r"^Merge pull request #(\d+)"), re.compile(r"\(#(\d+)\)\s*$"), re.compile(r"\(#(\d+)\)"))


@dataclass
class Commit:
    """One commit: sha, committer date (ISO 8601), subject, author, full message and parents."""

    sha: str
    date: str
    subject: str
    author: str
    message: str = ""
    parents: list[str] = field(default_factory=list)

    @property
    def pr(self) -> int | None:
        """The pull request the message names (`Merge pull request #N`, a squash-merge `(#N)`), if any."""
        for pattern in _PR_PATTERNS:
            match = pattern.search(self.subject)
            if match:
                return int(match.group(1))
        return None

    def to_json(self) -> dict:
        """A plain dict for reports."""
        return {"sha": self.sha, "date": self.date, "subject": self.subject, "author": self.author,
                "pr": self.pr, "parents": list(self.parents)}


def git(args: list[str], cwd: Path | str | None = None, check: bool = True,
        supervised: bool = False) -> subprocess.CompletedProcess[str]:
    """Run git with a fixed locale and no prompts; a failure raises HarnessError unless `check` is False.

    `supervised`: under the lifeline supervisor (execute/supervisor.py), for the commands that talk to a remote
    and may run for minutes (clone, fetch): a cancelled or killed run ends git and the transport and pack
    processes it started. Under subprocess.run a SIGTERM ended git alone, and a SIGKILL of the harness left the
    whole clone running. The quick local queries are not: the supervisor costs an interpreter's start each."""
    env = dict(os.environ, LC_ALL="C", GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="echo")
    if supervised:
        proc = _supervised_git(args, cwd, env)
    else:
        try:
            proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env,
                                  timeout=GIT_TIMEOUT)
        except FileNotFoundError:
            raise HarnessError("git was not found on PATH; git-commit targets and bisect need it") from None
        except subprocess.TimeoutExpired:
            raise HarnessError(f"git {' '.join(args[:2])} took more than {GIT_TIMEOUT} s") from None
    if check and proc.returncode != 0:
        raise HarnessError(f"git {' '.join(args)} failed: {proc.stderr.strip()[-1500:]}")
    return proc


def _supervised_git(args: list[str], cwd: Path | str | None, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """git(..., supervised=True): its output through files, which a supervised command writes to directly."""
    import tempfile

    from modelci.execute import supervisor

    if shutil.which("git", path=env.get("PATH")) is None:
        raise HarnessError("git was not found on PATH; git-commit targets and bisect need it")
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        code, _ = supervisor.run(["git", *args], env, out, err, GIT_TIMEOUT,
                                 cwd=Path(cwd) if cwd is not None else None)
        if code is None:
            raise HarnessError(f"git {' '.join(args[:2])} took more than {GIT_TIMEOUT} s; it was ended, with every "
                               "process it started")
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(["git", *args], code, out.read(), err.read())


def normalize_url(url: str) -> tuple[str, Path | None]:
    """A repository location as (canonical text, local path or None): local paths and file:// URLs become
    absolute paths, so `./repo`, `/abs/repo` and `file:///abs/repo` share one mirror."""
    if url.startswith("file://"):
        path = Path(unquote(urlsplit(url).path))
        return str(path.resolve()), path.resolve()
    if "://" in url or re.match(r"^[\w.-]+@[\w.-]+:", url):  # https://, ssh://, git@host:path
        return url, None
    path = Path(url).expanduser().resolve()
    return str(path), path


class GitRepo:
    """A repository reached through a cached bare mirror; local paths are read directly for ref names."""

    def __init__(self, url: str, cache_dir: Path | str):
        self.url, self.local = normalize_url(url)
        #: the URL as messages show it and the history keeps it: without its password (records.redacted)
        self.shown = redacted(self.url)
        #: the URL git is given: a password that was redacted (a spec read back from the history) is left out, so
        #: that git asks its credential helper rather than send "***"
        self.remote = self.url.replace(f":{REDACTED}@", "@") if self.shown == self.url else self.url
        self._checked = False  # the local folder is the repository's (_check_local)
        self.cache_dir = Path(cache_dir).expanduser().absolute()
        slug = re.sub(r"[^\w.-]+", "-", self.url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git"))[:40] or "repo"
        # named without the password: a token that is renewed, or a spec read back redacted, finds the same mirror
        self.mirror = self.cache_dir / "git" / f"{slug}-{hashlib.sha256(self.shown.encode()).hexdigest()[:12]}.git"
        self._synced = False

    # -- the mirror ---------------------------------------------------------------------------------------

    def sync(self) -> None:
        """Clone the mirror if it is missing, else fetch every ref; an unreachable URL is a UserError."""
        if self._synced:
            return
        self._check_local()
        with self._lock():
            if not (self.mirror / "HEAD").exists():
                shutil.rmtree(self.mirror, ignore_errors=True)
                self.mirror.parent.mkdir(parents=True, exist_ok=True)
                # under the mirror's lock no clone of it is under way: a .tmp folder here is what a killed one
                # left (a SIGKILL cannot clean up), and each would stay in the cache for good
                for stale in self.mirror.parent.glob(glob.escape(self.mirror.name) + ".tmp*"):
                    shutil.rmtree(stale, ignore_errors=True)
                tmp = self.mirror.with_name(self.mirror.name + f".tmp{os.getpid()}")
                proc = git(["clone", "--mirror", "--quiet", self.remote, str(tmp)], check=False, supervised=True)
                if proc.returncode != 0:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise UserError(f"repository {self.shown} cannot be reached: {_git_reason(proc.stderr)}; "
                                    "check the URL or path and your access to it")
                os.replace(tmp, self.mirror)  # a half-cloned mirror never sits at the final path
            else:
                if self.url != self.shown:  # a password given now: the mirror's may be a token since renewed
                    git(["remote", "set-url", "origin", self.remote], cwd=self.mirror, check=False)
                proc = git(["fetch", "--prune", "--quiet", "origin"], cwd=self.mirror, check=False,
                           supervised=True)
                if proc.returncode != 0:
                    raise UserError(f"repository {self.shown} cannot be reached: {_git_reason(proc.stderr)}; "
                                    "check the URL or path and your access to it")
        self._synced = True

    def _check_local(self) -> None:
        """A local repository must be a folder git recognises, and the repository's own folder (its work tree or
        its git folder): a folder inside one passed this check, and then failed as "does not exist" when the
        mirror was cloned from it."""
        if self.local is None or self._checked:
            return
        found = git(["rev-parse", "--absolute-git-dir"], cwd=self.local, check=False) if self.local.is_dir() else None
        if found is None or found.returncode != 0:
            raise UserError(f"repository {self.shown}: no git repository there; pass the folder of a git clone "
                            "or a URL git can clone")
        git_dir = Path(found.stdout.strip()).resolve()
        top = git(["rev-parse", "--show-toplevel"], cwd=self.local, check=False)  # fails in a bare repository
        root = Path(top.stdout.strip()).resolve() if top.returncode == 0 and top.stdout.strip() else git_dir
        if self.local.resolve() not in (root, git_dir):
            raise UserError(f"repository {self.shown}: a folder inside the git repository {root}; give {root} itself "
                            "(a package in a subfolder is built with --build pythonpath:SUBFOLDER)")
        self._checked = True

    def has(self, sha: str) -> bool:
        """Whether the mirror holds commit `sha`."""
        return (self.mirror / "HEAD").exists() and git(
            ["cat-file", "-e", f"{sha}^{{commit}}"], cwd=self.mirror, check=False).returncode == 0

    def resolve(self, ref: str) -> str:
        """The full sha of `ref` (branch, tag, sha, `HEAD~3`); a ref that does not exist is a UserError.

        A local repository answers for its own names (its HEAD, its unpushed branches); a remote one through
        the mirror after a fetch. A full sha already in the mirror needs no fetch at all.
        """
        ref = ref.strip() or "HEAD"
        if _FULL_SHA.match(ref) and self.has(ref):
            return ref
        if self.local is not None:
            self._check_local()
            proc = git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd=self.local, check=False)
            if proc.returncode != 0:
                raise UserError(self._no_ref(ref))
            sha = proc.stdout.strip()
            if not self.has(sha):
                self.sync()
                if not self.has(sha):  # a detached commit on no branch: fetch it by name
                    with self._lock():
                        git(["fetch", "--quiet", "origin", sha], cwd=self.mirror, check=False, supervised=True)
            return sha
        self.sync()
        proc = git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd=self.mirror, check=False)
        if proc.returncode != 0:
            raise UserError(self._no_ref(ref))
        return proc.stdout.strip()

    def _no_ref(self, ref: str) -> str:
        return (f"ref {ref!r} does not exist in repository {self.shown}; give a branch, tag or commit "
                f"(`git -C {self.local or self.shown} log --oneline` lists them)")

    # -- reading history ----------------------------------------------------------------------------------

    def commit(self, sha: str) -> Commit:
        """The commit's metadata."""
        return self.commits([sha])[0]

    def commits(self, shas: list[str]) -> list[Commit]:
        """Metadata of several commits in one git call, in the order given."""
        if not shas:
            return []
        fmt = "%H%x1f%P%x1f%cI%x1f%an <%ae>%x1f%s%x1f%B%x1e"
        proc = git(["log", "--no-walk=unsorted", f"--format={fmt}", *shas], cwd=self.mirror)
        found = {}
        for record in proc.stdout.split("\x1e"):
            parts = record.strip("\n").split("\x1f")
            if len(parts) == 6:
                sha, parents, date, author, subject, message = parts
                found[sha] = Commit(sha, date, subject, author, message.strip(), parents.split())
        return [found[sha] for sha in shas]

    def graph(self, good: list[str], bad: str, first_parent: bool = False) -> dict[str, list[str]]:
        """The commits that may hold the first bad one: ancestors of `bad` that are not ancestors of any good
        commit, oldest first, each with its parents inside that set (first parents only with `first_parent`)."""
        args = ["rev-list", "--topo-order", "--reverse", "--parents"]
        if first_parent:
            args.append("--first-parent")
        proc = git([*args, bad, "--not", *good], cwd=self.mirror)
        graph: dict[str, list[str]] = {}
        for line in proc.stdout.splitlines():
            sha, *parents = line.split()
            graph[sha] = parents[:1] if first_parent else parents
        return {sha: [p for p in parents if p in graph] for sha, parents in graph.items()}

    def is_ancestor(self, older: str, newer: str) -> bool:
        """Whether `older` is an ancestor of (or equal to) `newer`."""
        return git(["merge-base", "--is-ancestor", older, newer], cwd=self.mirror, check=False).returncode == 0

    def show(self, sha: str, path: str) -> str | None:
        """The text of `path` at commit `sha`, or None when the commit has no such file."""
        proc = git(["show", f"{sha}:{path}"], cwd=self.mirror, check=False)
        return proc.stdout if proc.returncode == 0 else None

    # -- worktrees ----------------------------------------------------------------------------------------

    def worktree(self, sha: str) -> Path:
        """A checkout of `sha` in `<cache_dir>/worktrees/<sha>`, made once and reused; never half-made."""
        root = self.cache_dir / "worktrees"
        root.mkdir(parents=True, exist_ok=True)
        path, marker = root / sha, root / f"{sha}.ok"
        if marker.exists() and path.is_dir():
            return path
        with self._lock():
            if marker.exists() and path.is_dir():
                return path
            if path.exists():  # left by a killed checkout: it may be partial
                shutil.rmtree(path, ignore_errors=True)
            git(["worktree", "prune"], cwd=self.mirror, check=False)
            proc = git(["worktree", "add", "--detach", "--force", str(path), sha], cwd=self.mirror, check=False)
            if proc.returncode != 0:
                shutil.rmtree(path, ignore_errors=True)
                raise HarnessError(f"could not check out {sha[:12]} of {self.shown}: {_git_reason(proc.stderr)}")
            marker.write_text(self.shown + "\n")
        return path

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """One process at a time changes the mirror (fetch, worktree add): git's own locks would make a second
        one fail rather than wait."""
        self.mirror.parent.mkdir(parents=True, exist_ok=True)
        with locks.exclusive(self.mirror.with_name(self.mirror.name + ".lock")):
            yield


def _git_reason(stderr: str) -> str:
    """git's own words, at most three lines, for a message."""
    lines = [redacted(line.strip()) for line in stderr.splitlines() if line.strip()]
    return " / ".join(lines[-3:]) or "git failed without a message"
