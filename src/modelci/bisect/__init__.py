"""Bisect: find the commit, merged PR or release that caused a regression.

Library first: `bisect(config, suites, pattern, repo=..., good=..., bad=...) -> BisectResult` is what the CLI calls
and what `run --bisect-on-alarm` can call. Every probe is a normal `workflow.run` with reuse, so it is stored in the
history like any run, and a bisect started again reuses the probes it already has and rebuilds nothing (builds are
cached by commit; a commit that failed to build is remembered and skipped without a new attempt).

The search is in `search.py` (no git, no runs), the verdicts in `judge.py`, the release lists in `releases.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from modelci import builds, targets
from modelci.bisect import compat_probe
from modelci.bisect.judge import CHECKS, BisectRefused, Criterion, choose, confirm, split, verdict
from modelci.bisect.search import Search
from modelci.errors import UserError
from modelci.gitrepo import Commit, GitRepo
from modelci.records import Result

__all__ = ["CHECKS", "BisectRefused", "BisectResult", "Probe", "Suspect", "bisect"]

#: bump when BisectResult.to_json changes meaning
SCHEMA = 1


@dataclass
class Probe:
    """One tested commit or release: its verdict, why, and the stored run behind it."""

    item: str  # commit sha, or the release's target spec
    spec: str
    label: str  # `abc123def0 subject (#12)` for a commit, the spec for a release
    verdict: str  # "good" | "bad" | "skip"
    why: str
    status: str
    round: int  # 0: the ends; -1: the boundary re-run that confirms a timing or memory culprit
    run_id: int | None = None
    built: bool = False  # a build happened for it (it was not in the build cache)
    reused: bool = False  # its result came from the history
    numbers: dict[str, Any] = field(default_factory=dict)
    #: a compat probe: the id of its stored compat check (`--check compat --from` loads models, it runs nothing)
    check_id: str = ""


@dataclass
class Suspect:
    """A commit (with sha, subject, author, date and PR number) or a release that may be the culprit."""

    item: str
    spec: str
    commit: Commit | None = None

    @property
    def label(self) -> str:
        """`abc123def0 subject (#12)` for a commit, the spec for a release."""
        if self.commit is None:
            return self.spec
        pr = f" (PR #{self.commit.pr})" if self.commit.pr and f"#{self.commit.pr}" not in self.commit.subject else ""
        return f"{self.item[:10]} {self.commit.subject}{pr}"

    def to_json(self) -> dict[str, Any]:
        """A plain dict for reports."""
        return {"item": self.item, "spec": self.spec, **(self.commit.to_json() if self.commit else {})}


#: an interrupted bisect's report lists at most this many of the candidates left (a range may hold thousands)
MAX_CANDIDATES_SHOWN = 50


@dataclass
class BisectResult:
    """What a bisect found: the culprit, or the candidates when only untestable commits remain (or, cancelled,
    those still in the range)."""

    status: str  # "found" | "untestable" | "unconfirmed" | "interrupted"
    workload: str
    check: str
    metrics: list[str]
    good: Suspect
    bad: Suspect
    culprit: Suspect | None = None
    last_good: Suspect | None = None
    candidates: list[Suspect] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)
    rounds: int = 0
    range_size: int = 0
    evidence: str = ""
    confirmation: dict[str, Any] | None = None
    inconsistent: list[str] = field(default_factory=list)
    message: str = ""
    #: "regression": the first bad commit; "improvement": the first commit that made it better (--improvement)
    direction: str = "regression"

    @property
    def builds(self) -> int:
        """Distinct commits or releases that had to be built or installed, the two ends included."""
        return len({p.item for p in self.probes})

    @property
    def fresh_builds(self) -> int:
        """Of those, how many were built now rather than taken from the build cache."""
        return len({p.item for p in self.probes if p.built})

    @property
    def skipped(self) -> int:
        """Probes that were untestable."""
        return sum(1 for p in self.probes if p.verdict == "skip")

    @property
    def first(self) -> str:
        """What the culprit is called: `first bad`, or `first improved` for an improvement."""
        return "first improved" if self.direction == "improvement" else "first bad"

    def to_json(self) -> dict[str, Any]:
        """A plain dict for the JSON report."""
        return {
            "bisect_schema": SCHEMA, "status": self.status, "direction": self.direction, "workload": self.workload,
            "check": self.check,
            "metrics": self.metrics, "good": self.good.to_json(), "bad": self.bad.to_json(),
            "culprit": self.culprit.to_json() if self.culprit else None,
            "last_good": self.last_good.to_json() if self.last_good else None,
            "candidates": [c.to_json() for c in self.candidates], "rounds": self.rounds,
            "range_size": self.range_size, "builds": self.builds, "fresh_builds": self.fresh_builds,
            "evidence": self.evidence, "confirmation": self.confirmation, "inconsistent": self.inconsistent,
            "message": self.message,
            "probes": [{"item": p.item, "spec": p.spec, "label": p.label, "verdict": p.verdict, "why": p.why,
                        "status": p.status, "round": p.round, "run_id": p.run_id, "built": p.built, "reused": p.reused,
                        "check_id": p.check_id, "numbers": p.numbers} for p in self.probes],
        }


def bisect(config: Any, suite_specs: list[str], pattern: str | None, *, repo: str | None = None,
           good: str | None = None, bad: str | None = None, versions: list[str] | None = None,
           check: str | None = None, first_parent: bool = False, build: str | None = None, jobs: int = 1,
           log: Callable[[str], object] = print, command: str = "", from_spec: str | None = None,
           improvement: bool = False, pool: Any = None, into_spec: str | None = None,
           store: Any = None) -> BisectResult:
    """Find the first bad commit of `repo` between `good` and `bad` (or the first bad release of `versions`,
    oldest first) for one workload, following `check` or, without it, whichever check fails between the ends.

    With `check="compat"` each probe loads the models that `from_spec` (a ref, a target spec or a version; the
    good end when None) saved into the probe's build (`compat_probe`): the culprit is the first build where they
    no longer load or their outputs differ. With `into_spec` (a consumer: an older build that must read what newer
    ones save) it is the other way round: each probe runs the workload, so that its build saves its models, and
    loads them into the consumer; the culprit is the first build whose own models the consumer no longer loads
    (what a `forward` compat alarm reports).

    With `improvement`, find the first commit that made it better instead: `good` is still the older end and `bad`
    the newer one, but the newer end is the reference and the older end must be worse than it by the check
    (slower, larger, failing, different outputs). Each probe is judged against the newer end: one still worse
    than it is "old", one not worse is "new", and the culprit is the first "new" commit. Skips, statistics,
    confirmation and reporting are those of a regression bisect.

    Probes run in warm workers kept across probes (`workflow.WorkerPool`; `pool` lends one that outlives the
    bisect, as `run --bisect-on-alarm` does with its own run's), and their environments are built without
    bytecode compilation. `store` is an open history to store the probes in (the caller's, when it bisects
    several alarms: each would otherwise pay the schema check and the statements' compilation again).

    Raises BisectRefused when the good end is not good or the bad end is not bad, UserError for bad input.
    """
    if from_spec and check != compat_probe.CHECK:
        raise UserError("--from names the producer of the saved models for --check compat; add --check compat")
    if into_spec and check != compat_probe.CHECK:
        raise UserError("--into names the build that loads each probe's saved models for --check compat; add "
                        "--check compat")
    if into_spec and from_spec:
        raise UserError("give --from (the models one build saved, loaded into each probe) or --into (each probe's "
                        "models, loaded into one build), not both")
    if improvement and check == compat_probe.CHECK:
        raise UserError("--improvement does not apply to --check compat: a model that loads again is found by "
                        "bisecting the regression from the other side")
    from modelci import workflow
    from modelci.store import Store

    own = workflow.WorkerPool(config) if pool is None else None
    # the one history every probe runs on (`_bisect` opens it once the input is checked, unless given one)
    opened: list[Store] = [store] if store is not None else []
    so_far: list[Callable[[], BisectResult]] = []
    try:
        result = _bisect(config, suite_specs, pattern, repo=repo, good=good, bad=bad, versions=versions, check=check,
                         first_parent=first_parent, build=build, jobs=jobs, log=log, command=command,
                         from_spec=from_spec, improvement=improvement, pool=pool or own, into_spec=into_spec,
                         opened=opened, so_far=so_far)
    except (workflow.Interrupted, KeyboardInterrupt) as exc:
        # cut in a probe or between probes: the probes that finished are stored (the same command resumes from
        # them), and `bisect` on the exception says how far the search got, for the report files
        stopped = exc if isinstance(exc, workflow.Interrupted) else workflow.Interrupted(None)
        stopped.bisect = so_far[0]() if so_far else None
        if stopped is exc:
            raise
        raise stopped from None
    finally:
        if own is not None:
            own.close()
    # kept as history, next to the runs its probes stored: the dashboard shows it (report/site.py)
    opened[0].add_bisect(config.runner, result.to_json(), command)
    return result


def _bisect(config: Any, suite_specs: list[str], pattern: str | None, *, repo: str | None, good: str | None,
            bad: str | None, versions: list[str] | None, check: str | None, first_parent: bool, build: str | None,
            jobs: int, log: Callable[[str], object], command: str, from_spec: str | None, improvement: bool,
            pool: Any, into_spec: str | None = None, opened: list[Any] | None = None,
            so_far: list[Callable[[], BisectResult]] | None = None) -> BisectResult:
    if jobs < 1:
        raise UserError(f"--jobs {jobs}: give 1 or more probes per round")
    if versions is not None:
        space: _Space = _Releases(versions)
    else:
        if not (repo and good and bad):
            raise UserError("bisect needs --repo with --good and --bad, or --versions / --package with --between")
        space = _Commits(GitRepo(repo, config.cache_dir), good, bad, first_parent, build)
    from modelci.store import BISECT_WRITES, RUN_WRITES, Store

    # opened once, before parallel probes could race to create the history; every probe runs on it, so none pays
    # the schema check or the compilation of the store's statements again
    if opened:
        store = opened[0]
    else:
        store = Store.from_config(config)
        store.check_writable(RUN_WRITES + BISECT_WRITES)  # before the first probe, not at the first store
        if opened is not None:
            opened.append(store)
    prober = _Prober(config, suite_specs, pattern, space, jobs, command, pool, store)
    if check == compat_probe.CHECK:
        prober.compat = compat_probe.CompatProber(config, suite_specs, pattern, from_spec, space.spec(space.good), log,
                                                  into_spec=into_spec, prober=prober)
        prober.compat.prepare()

    # the size counts the bad end too: "1 release" is the bad end itself, right after the good one
    noun = space.noun if space.size != 1 else space.noun[:-1]
    log(f"bisecting {space.size} {noun} after {space.describe(space.good)} up to {space.describe(space.bad)}")
    ends = prober.run([space.good, space.bad], round=0)
    workload = _one_workload(ends, pattern)
    results = {item: found.get(workload) for item, (found, _) in ends.items()}
    if results[space.good] is None or results[space.bad] is None:
        raise BisectRefused(f"workload {workload} has no result at both ends; check -k")
    way = _Direction(improvement, space)
    if check == compat_probe.CHECK:
        good_result, bad_result = results[space.good], results[space.bad]
        criterion = Criterion(check, [prober.compat.metric], good_result, config.policy_for(workload),
                              prober.compat.evidence(good_result, bad_result, space.describe(space.good),
                                                     space.describe(space.bad)))
    else:
        criterion = choose(results[way.reference], results[way.other], config.policy_for(workload), check,
                           *way.labels, bad_word=way.bad_word)
    log(f"following the {criterion.check} check on {', '.join(criterion.metrics)}: {criterion.evidence}")
    probes = [prober.probe(space.good, ends, workload, way.word("good"), way.why_good(criterion), 0),
              prober.probe(space.bad, ends, workload, way.word("bad"), way.why_bad(criterion), 0)]
    if criterion.noisy:
        _confirm_ends(prober, space, workload, criterion, probes, way)
    else:
        split(criterion)

    search = space.search()
    rounds = 1

    def interrupted() -> BisectResult:
        """How far the search got, for a cancelled bisect's report."""
        left = search.remaining()
        shown = [space.suspect(item) for item in left[:MAX_CANDIDATES_SHOWN]]
        more = f" (the first {len(shown)} listed)" if len(left) > len(shown) else ""
        return BisectResult(status="interrupted", workload=workload, check=criterion.check,
                            metrics=criterion.metrics, good=space.suspect(space.good), bad=space.suspect(space.bad),
                            probes=list(probes), rounds=rounds - 1, range_size=space.size,
                            evidence=criterion.evidence, inconsistent=list(search.inconsistent),
                            direction="improvement" if improvement else "regression", candidates=shown,
                            message=f"interrupted after {rounds - 1} round(s): {len(left)} of {space.size} "
                                    f"{space.noun} still candidates{more}; the same command resumes from the "
                                    "probes already run")

    if so_far is not None:
        so_far.append(interrupted)
    while not search.done:
        batch = search.next_probes(jobs)
        # a probe may build a commit and an environment: say what runs before minutes of it
        log(f"probing {', '.join(space.describe(item) for item in batch)} (round {rounds}, "
            f"{len(search.remaining())} candidates left)")
        ran = prober.run(batch, round=rounds)
        outcomes = {}
        for item in batch:
            word, why, numbers = way.verdict(criterion, ran[item][0].get(workload))
            probe = prober.probe(item, ran, workload, way.word(word), why, rounds, numbers)
            probes.append(probe)
            outcomes[item] = word
            # the probe's own reason where it has one (a release that could not install, a commit remembered as
            # unbuildable), as the table shows it, not the verdict's "no result for the workload"
            log(f"round {rounds}: {space.describe(item)} is {probe.verdict} ({probe.why})")
        search.record(outcomes)
        rounds += 1

    result = BisectResult(status="found", workload=workload, check=criterion.check, metrics=criterion.metrics,
                          good=space.suspect(space.good), bad=space.suspect(space.bad), probes=probes,
                          rounds=rounds, range_size=space.size, evidence=criterion.evidence,
                          inconsistent=list(search.inconsistent),
                          direction="improvement" if improvement else "regression")
    if search.culprit is None:
        result.status = "untestable"
        result.candidates = [space.suspect(item) for item in search.remaining()]
        result.message = (f"only untestable {space.noun} remain: the first bad one is one of "
                          + ", ".join(c.label for c in result.candidates))
        return result
    result.culprit = space.suspect(search.culprit)
    result.last_good = space.suspect(space.parent_of(search.culprit))
    result.message = f"{way.first}: {result.culprit.label}"
    if criterion.noisy:
        _confirm_boundary(prober, workload, criterion, result, way)
    return result


class _Direction:
    """What `--improvement` changes: which end is the reference, and the words the report uses.

    A regression bisect judges each probe against the older (good) end. An improvement bisect judges it against
    the newer end, by the same checks: a probe still worse than the newer end has not got the improvement yet
    ("old", good for the search), one that is not worse has it ("new", bad for the search).
    """

    def __init__(self, improvement: bool, space: _Space):
        self.improvement = improvement
        older, newer = space.describe(space.good), space.describe(space.bad)
        if improvement:
            self.reference, self.other = space.bad, space.good
            self.labels = (f"the newer end {newer}", f"the older end {older}")
            self.bad_word, self.first = "worse than the newer end", "first improved"
        else:
            self.reference, self.other = space.good, space.bad
            self.labels = (f"the good end {older}", f"the bad end {newer}")
            self.bad_word, self.first = "bad", "first bad"

    def word(self, verdict: str) -> str:
        """The search's verdict as the report says it: good/bad, or old/new for an improvement."""
        if not self.improvement or verdict == "skip":
            return verdict
        return "old" if verdict == "good" else "new"

    def verdict(self, criterion: Criterion, result: Result | None) -> tuple[str, str, dict[str, Any]]:
        """The search's verdict of one probe ("good" before the change, "bad" after it)."""
        word, why, numbers = verdict(criterion, result)
        if not self.improvement or word == "skip":
            return word, why, numbers
        # against the newer end: worse than it means the improvement has not come yet
        return ("good" if word == "bad" else "bad"), why, numbers

    def why_good(self, criterion: Criterion) -> str:
        return criterion.evidence if self.improvement else "the good end"

    def why_bad(self, criterion: Criterion) -> str:
        return "the newer end, the reference" if self.improvement else criterion.evidence

    def pair(self, before: str, after: str) -> tuple[str, str]:
        """(reference, judged) of two items in history order."""
        return (after, before) if self.improvement else (before, after)


def _confirm_ends(prober: _Prober, space: _Space, workload: str, criterion: Criterion, probes: list[Probe],
                  way: _Direction) -> None:
    """Timing and memory: both ends run again, fresh; the bad end must still be bad against the new good end
    (with --improvement: the older end must still be worse than the newer one)."""
    again = prober.run([space.good, space.bad], round=0, fresh=True)
    probes += [prober.probe(item, again, workload, way.word(word), "re-run of the end", 0) for item, word in
               ((space.good, "good"), (space.bad, "bad"))]
    reference, judged = (again[item][0].get(workload) for item in (way.reference, way.other))
    if reference is None or judged is None:
        raise BisectRefused(f"re-running the ends gave no result for {workload}")
    confirmed, why, numbers = confirm(criterion, reference, judged)
    if not confirmed:
        raise BisectRefused(f"{way.labels[1]} is not {way.bad_word}: its first runs differed "
                            f"({criterion.evidence}) but fresh runs of both ends do not ({why}); "
                            f"this {criterion.check} difference is noise")
    split(criterion, numbers.get("ratio"))


def _confirm_boundary(prober: _Prober, workload: str, criterion: Criterion, result: BisectResult,
                      way: _Direction) -> None:
    """Re-run the last good and the first bad commit, fresh, and report the culprit only if they still differ."""
    pair = [result.last_good.item, result.culprit.item]
    again = prober.run(pair, round=-1, fresh=True)
    result.probes += [prober.probe(item, again, workload, way.word(word), "boundary re-run", -1)
                      for item, word in zip(pair, ("good", "bad"))]
    before, after = (again[item][0].get(workload) for item in way.pair(*pair))
    ok = before is not None and after is not None
    confirmed, why, numbers = confirm(criterion, before, after) if ok else (False, "no result", {})
    result.confirmation = {"confirmed": confirmed, "why": why, "numbers": numbers}
    if not confirmed:
        result.status = "unconfirmed"
        result.message = (f"{result.culprit.label} looked first bad, but fresh runs of it and "
                          f"{result.last_good.label} do not differ ({why}); no culprit is reported")
        result.culprit = None


def _one_workload(ends: dict[str, tuple[dict[str, Result], Any]], pattern: str | None) -> str:
    """The one workload the bisect follows: -k must select exactly one (an exact id or name wins)."""
    ids = sorted({w for found, _ in ends.values() for w in found})
    exact = [w for w in ids if pattern in (w, w.rpartition("/")[2])] if pattern else []
    if len(exact) == 1:
        return exact[0]
    if len(ids) != 1:
        selection = f"-k {pattern!r} selects" if pattern else "without -k the suite holds"
        raise UserError(f"bisect follows one workload, but {selection} {len(ids)}: "
                        f"{', '.join(ids) or 'none'}; pass -k with one workload id")
    return ids[0]


# --- what is searched: commits of a repository, or an ordered list of releases --------------------------------


class _Space:
    """The items a bisect searches and how each becomes a target spec."""

    noun = "items"
    good: str
    bad: str
    size: int

    def spec(self, item: str) -> str:
        raise NotImplementedError

    def search(self) -> Search:
        raise NotImplementedError

    def suspect(self, item: str) -> Suspect:
        return Suspect(item, self.spec(item))

    def describe(self, item: str) -> str:
        return self.suspect(item).label

    def parent_of(self, item: str) -> str:
        raise NotImplementedError


class _Commits(_Space):
    noun = "commits"

    def __init__(self, repo: GitRepo, good: str, bad: str, first_parent: bool, build: str | None):
        self.repo, self.build = repo, build
        self.good, self.bad = repo.resolve(good), repo.resolve(bad)
        if self.good == self.bad:
            raise UserError(f"--good {good} and --bad {bad} are the same commit ({self.good[:12]}) in {repo.url}; "
                            "give a good commit older than the bad one")
        if not repo.is_ancestor(self.good, self.bad):
            newer = " (it is newer: are --good and --bad swapped?)" if repo.is_ancestor(self.bad, self.good) else ""
            raise UserError(f"--good {good} must be an ancestor of --bad {bad} in {repo.url}{newer}")
        self.graph = repo.graph([self.good], self.bad, first_parent)
        self.size = len(self.graph)
        self.first_parent = first_parent
        self._commits: dict[str, Commit] = {}

    def spec(self, item: str) -> str:
        return targets.git_spec(self.repo.url, item, self.build)

    def search(self) -> Search:
        return Search.over(self.graph, self.bad)

    def suspect(self, item: str) -> Suspect:
        if item not in self._commits:
            self._commits[item] = self.repo.commit(item)
        return Suspect(item, self.spec(item), self._commits[item])

    def parent_of(self, item: str) -> str:
        # first parent: for a merge on the main line that is the main line before the PR came in
        return self.suspect(item).commit.parents[0]


class _Releases(_Space):
    noun = "releases"

    def __init__(self, versions: list[str]):
        self.items = [v.strip() for v in versions if v.strip()]
        if len(self.items) < 2 or len(set(self.items)) != len(self.items):
            raise UserError("--versions needs at least two distinct targets, oldest (good) first")
        first: dict[str, str] = {}  # package -> the first entry of it
        for item in self.items:
            target = targets.resolve(item, example="--versions numpy==1.26.4,numpy==2.0.0")
            if target.kind != "requirement":
                raise UserError(f"--versions entry {item!r} is not a requirement such as numpy==1.24.4")
            first.setdefault(target.name, item)
        if len(first) > 1:
            # the search orders releases of one package: with another package's target as an end, that end was
            # built and run before "it is not bad" said what was wrong
            (one, one_item), (other, other_item) = list(first.items())[:2]
            raise UserError(f"--versions mixes packages: {one_item} is {one}, {other_item} is {other}; a bisect "
                            "searches the releases of one package: give targets of one of them, oldest (good) first")
        self.good, self.bad, self.size = self.items[0], self.items[-1], len(self.items) - 1

    def spec(self, item: str) -> str:
        return item

    def search(self) -> Search:
        return Search.linear(self.items[1:])

    def parent_of(self, item: str) -> str:
        return self.items[self.items.index(item) - 1]


class _Prober:
    """Runs probes as normal runs (with reuse), K at a time in threads; remembers what was built."""

    def __init__(self, config: Any, suite_specs: list[str], pattern: str | None, space: _Space, jobs: int,
                 command: str, pool: Any = None, store: Any = None):
        self.config, self.suite_specs, self.pattern = config, suite_specs, pattern
        self.space, self.jobs, self.command, self.pool, self.store = space, jobs, command, pool, store
        self.built: set[str] = set()
        #: --check compat: probes load the producer's saved models instead of running the workload
        self.compat: compat_probe.CompatProber | None = None

    def run(self, items: list[str], round: int, fresh: bool = False) -> dict[str, tuple[dict[str, Result], Any]]:
        """item -> (workload id -> result, run id); runs at most `jobs` at once."""
        if self.jobs == 1 or len(items) == 1:
            return {item: self._one(item, fresh, round) for item in items}
        with ThreadPoolExecutor(max_workers=min(self.jobs, len(items))) as pool:
            futures = {item: pool.submit(self._one, item, fresh, round) for item in items}
            return {item: future.result() for item, future in futures.items()}

    def _one(self, item: str, fresh: bool, round: int) -> tuple[dict[str, Result], Any]:
        from modelci import workflow
        from modelci.report.console import Progress

        spec = self.space.spec(item)
        if isinstance(self.space, _Commits):
            target = targets.resolve(spec, cache_dir=self.config.cache_dir)
            failure = builds.remembered_failure(target, self.config.cache_dir, self.config.python)
            if failure is not None and not fresh and round > 0:
                # resume: this commit did not build before; its error run is already in the history
                reason = f"did not build (remembered from an earlier attempt): {failure['reason'].splitlines()[0]}"
                run_id = self.store.latest_failed_run(target, self.config.runner) if self.store is not None else None
                return {}, {"run_id": run_id, "reused": True, "why": reason}
            if not builds.is_built(target, self.config.cache_dir, self.config.python):
                self.built.add(item)
        if self.compat is not None:
            return self.compat.probe(spec, round)
        try:
            # environments made for probes live only for the bisect: no bytecode compilation (see envs.ensure)
            outcome = workflow.run(self.config, spec, self.suite_specs, self.pattern, reuse=not fresh,
                                   progress=Progress(quiet=True), command=self.command, alarms=False,
                                   pool=self.pool, compile_bytecode=False, store=self.store)
            outcome.refuse_config_errors()  # a probe has no report to say it after: it stays bad input
        except UserError as exc:
            if round == 0:
                raise  # an end that cannot even be set up is bad input, not an untestable commit
            return {}, {"run_id": None, "reused": False, "why": f"untestable: {str(exc).splitlines()[0]}"}
        found = {r.workload: r for r in outcome.results}
        # a probe whose results all came from the history stores no new run: its id is the stored result's run
        run_id = outcome.run_id or next((r.run_id for r in outcome.results if r.run_id is not None), None)
        return found, {"run_id": run_id, "reused": all(r.reused for r in outcome.results)}

    def probe(self, item: str, ran: dict[str, tuple[dict[str, Result], Any]], workload: str, word: str, why: str,
              round: int, numbers: dict[str, Any] | None = None) -> Probe:
        """The record of one probe from what `run` returned."""
        found, meta = ran[item]
        result = found.get(workload)
        return Probe(item=item, spec=self.space.spec(item), label=self.space.describe(item), verdict=word,
                     why=meta.get("why") or why, status=result.status if result else "error", round=round,
                     run_id=meta.get("run_id"), built=item in self.built, reused=bool(meta.get("reused")),
                     numbers=numbers or {}, check_id=meta.get("check_id") or "")


def log2_bound(size: int, jobs: int = 1) -> int:
    """The rounds a bisect of `size` candidates needs without skips: ceil(log_(K+1) size)."""
    return math.ceil(math.log(size, jobs + 1) - 1e-9) if size > 1 else 0
