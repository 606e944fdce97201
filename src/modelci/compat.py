"""Backward compatibility: models saved by one framework build must load in another and give the same outputs.

Two steps:

    record_saved_models: after a run, each saved model → an immutable blob + manifest in the artifact store
    check:  manifests → select producers → verify sha256 → load + infer in the consumer's environment
            → precision check against the producer's outputs → entries (the matrix) → history → exit code

A manifest names its producer build, format, sha256 and size, the seed and the producer's inputs and outputs,
the platform fingerprint and the date. Inputs come back from the seed: the consumer calls `setup(ctx)` with the
producer's seed, which makes the data again, then `load` and `infer`. When the workload has `example_inputs()`,
the inputs are also kept as arrays and compared, so a changed random stream is told apart from a changed model.
"""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from fsspec.implementations.local import LocalFileSystem
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

import modelci
from modelci import cancel, selection, steps, targets
from modelci.checks.policy import Finding, decided
from modelci.checks.precision import check_outputs
from modelci.errors import UserError
from modelci.execute import local
from modelci.gitrepo import GitRepo
from modelci.lineage import Lineage, sort_key, version_of
from modelci.records import redacted
from modelci.store import Store
from modelci.store import compat_schema as records
from modelci.store.artifacts import CorruptArtifact
from modelci.store.schema import utcnow
from modelci.workload.child import helper_files
from modelci.workload.processes import signal_name

#: outcomes of one (producer, consumer, workload, format); all but `ok`, `missing`, `save_failed` and `not_saved`
#: are regressions. `unreadable` (the stored bytes are missing or do not match their sha256) is a finding of its
#: own: a producer whose artifacts cannot be read is a finding, not a skip. `save_failed` and `not_saved`: the
#: producer's run declared the format but saved nothing of it (its `save` failed or wrote nothing at its path;
#: the format was skipped), so there is no model to load; shown, so that compat never passes on silence.
#: `not_checked`: the consumer build could not be set up here (its wheel was moved away, its environment does not
#: install), so nothing was loaded in it.
OUTCOMES = ("ok", "load_failed", "outputs_differ", "unsupported", "missing", "unreadable", "save_failed",
            "not_saved", "not_checked")
#: a workload deleted from the suite is the suite author's choice, not a break of the framework; a save that
#: failed was the producer's run's failure, reported there: reported only. A consumer that could not be set up
#: says nothing about whether the model loads: a setup problem, which fails the command as one (exit 2), not as a
#: regression, and opens no alarm
NOT_GATING = ("ok", "missing", "save_failed", "not_saved", "not_checked")
#: the entry outcome of a producer's save status other than ok (result info["saved"])
UNSAVED = {"failed": "save_failed", "skipped": "not_saved"}
DIRECTIONS = ("backward", "forward", "both")


@dataclass
class CompatEntry:
    """One saved model checked in one consumer build: the cell of the matrix and why it holds what it holds."""

    workload: str
    format: str
    producer: dict[str, Any]
    consumer: dict[str, Any]
    direction: str
    outcome: str
    error: str = ""
    #: output name -> the precision numbers; `inputs` -> whether the regenerated inputs matched
    numbers: dict[str, Any] = field(default_factory=dict)
    #: the format can execute code on load (torch_pickle, torchscript, paddle_state…)
    unsafe: bool = False
    key: str = ""
    sha256: str = ""
    size: int = 0
    traceback: str = ""
    times: dict[str, float] = field(default_factory=dict)
    #: how the producer's run saved the format: ok, failed or skipped (result info["saved"])
    saved: str = "ok"

    @property
    def gating(self) -> bool:
        """Whether this entry fails the check (exit 1)."""
        return self.outcome not in NOT_GATING

    @property
    def reason(self) -> str:
        """Why the entry holds its outcome: what differed and by how much, why it could not load, or that it
        loaded and matched (with the largest difference seen)."""
        if self.outcome == "ok":
            return "loaded; every output matches the producer's" + _closest(self.numbers)
        if self.outcome == "missing":
            return self.error or "no workload of the suite loads it any more (deleted or renamed)"
        return self.error or self.outcome.replace("_", " ")


@dataclass
class CompatOutcome:
    """What one `compat` check found, entry by entry, and where it was kept."""

    target: targets.Target
    direction: str
    entries: list[CompatEntry]
    check_id: str = ""
    artifacts: str = ""
    #: cancelled: the entries are those checked before the signal
    interrupted: bool = False

    @property
    def regressed(self) -> bool:
        """Whether any entry is a regression."""
        return any(e.gating for e in self.entries)

    @property
    def unchecked(self) -> str:
        """Why some models were not checked because a consumer build could not be set up, in one line for the
        command's error ("" when every consumer was): once per consumer."""
        why = {e.consumer.get("label", "?"): e.error for e in self.entries if e.outcome == "not_checked"}
        if not why:
            return ""
        count = sum(1 for e in self.entries if e.outcome == "not_checked")
        return (f"compat could not check {count} saved model(s): " + "; ".join(why.values()) + ". Nothing was "
                "loaded there, so this is not a pass: make that build installable again (its spec is kept in the "
                "saved models' manifests), or leave it out with --from")


def target_dict(target: Any) -> dict[str, Any]:
    """The fields of a target that a manifest or an entry keeps; `spec` is what installs it again (a wheel's
    absolute path), for `--direction forward`."""
    spec = target.requirements[0] if target.kind == "wheel" and target.requirements else target.spec
    more = {}
    if target.kind == "git" and target.commit and target.repo:
        # the commit itself, not the ref asked for: a branch moves, and `forward` must install this very build
        spec = targets.git_spec(target.repo, target.commit, target.build or None, target.subdirectory or None)
        more = {"repo": target.repo, "commit_date": target.commit_date or ""}
    return {"kind": target.kind, "name": target.name, "version": target.version or "", "commit": target.commit or "",
            "wheel_sha256": target.wheel_sha256 or "", "spec": spec, "label": target.label, **more}


# -- recording ------------------------------------------------------------------------------------


def record_saved_models(store: Any, target: Any, env: Any, results: list[Any], *, seed: int = 0,
                        suites: dict[str, Path] | None = None, workloads: list[Any] | None = None,
                        scratch: Path | None = None, runner: str = "", threads: int = 0,
                        executor: Any = None) -> list[dict[str, Any]]:
    """Store each saved model of the fresh ok results, with its manifest; returns the manifests.

    Runs before the run's scratch folder is deleted. A `current` target has no version for compat to order
    by, so nothing is recorded for it. Saving the same bytes twice stores them once, and a manifest with the
    same key (same producer, workload, format, bytes, seed, inputs and outputs) is written once. `executor` is
    the run's executor for `env`: the producer's example inputs are then made in a fork of its warm worker
    rather than in a fresh process (see `run_jobs`).
    """
    saved = [(r, e) for r in results if not r.reused and r.status == "ok" for e in r.info.get("saved", [])
             if e.get("status") == "ok" and e.get("path") and Path(e["path"]).exists()]
    if target.kind == "current" or not saved:
        return []
    store.artifacts.check_writable()
    infos = {w.id: w for w in workloads or []}
    files = {w.id: w.file for w in infos.values()}
    wanted = sorted({r.workload for r, _ in saved if _mentions_inputs(files.get(r.workload))})
    frameworks = {infos[w].framework for w in wanted if w in infos}
    framework = frameworks.pop() if len(frameworks) == 1 else ""
    inputs = (_producer_inputs(store, env, suites, files, wanted, scratch, seed, threads, executor, framework)
              if suites and scratch else {})
    producer, outputs, manifests = target_dict(target), {}, []
    for result, entry in saved:
        if id(result) not in outputs:
            outputs[id(result)] = {name: _put_array(store, array) for name, array in result.outputs.items()}
        saved = Path(entry["path"])
        if saved.is_file():
            (digest, size), layout = store.artifacts.put_file(saved), "file"
        else:
            data, layout = records.pack(saved)
            digest, size = store.artifacts.put(data), len(data)
        manifest = {
            "producer": producer, "workload": result.workload, "suite": result.workload.partition("/")[0],
            "file": Path(files.get(result.workload, "")).name, "framework": result.framework,
            "requires": list(getattr(infos.get(result.workload), "requires", [])),
            "code_hash": result.code_hash, "format": entry["format"], "unsafe": bool(entry.get("unsafe")),
            "sha256": digest, "size": size, "layout": layout, "seed": seed,
            "inputs": {"seed": seed, "arrays": inputs.get(result.workload, {})},
            "outputs": outputs[id(result)], "fingerprint": env.fingerprint, "environment": env.id,
            "runner": runner, "result_id": result.id, "recorded_at": utcnow().isoformat(),
            "modelci_version": modelci.__version__,
        }
        manifests.append(records.write_manifest(store.artifacts, manifest)[0])
    with store.write() as session:  # the write lock: two runners saving the same model mirror it once
        records.add_saved_models(session, manifests)
    return manifests


def _put_array(store: Any, array: Any) -> dict[str, Any]:
    array = np.asarray(array)
    digest, _ = store.artifacts.put_array(array)
    return {"sha256": digest, "dtype": str(array.dtype), "shape": list(array.shape)}


def _mentions_inputs(file: str | None) -> bool:
    """Whether a suite file, or a helper beside it (`_*.py`, where a base class may define it), may define
    `example_inputs`; saves a process for the suites that cannot."""
    try:
        return bool(file) and any("example_inputs" in path.read_text(errors="replace")
                                  for path in [Path(file), *helper_files(Path(file).parent)])
    except OSError:
        return False


def _producer_inputs(store: Any, env: Any, suites: dict[str, Path], files: dict[str, str], wanted: list[str],
                     scratch: Path, seed: int, threads: int, executor: Any = None,
                     framework: str = "") -> dict[str, dict[str, Any]]:
    """The producer's `example_inputs()` as stored arrays, per workload (one process for all of them)."""
    if not wanted:
        return {}
    jobs = [{"index": i, "workload": w, "file": files.get(w), "seed": seed} for i, w in enumerate(wanted)]
    folder = Path(tempfile.mkdtemp(prefix="inputs-", dir=scratch))
    done = run_jobs(env.python, suites, jobs, folder, command="inputs", timeout=600, threads=threads,
                    paths=getattr(env, "paths", []),
                    executor=executor, framework=framework)
    found = {}
    for job in jobs:
        record = done.get(job["index"], {})
        base = Path(record.get("_folder", folder))
        if record.get("status") == "ok" and record.get("inputs"):
            found[job["workload"]] = {name: _put_array(store, np.load(base / entry["file"], allow_pickle=False))
                                      for name, entry in record["inputs"].items()}
    return found


# -- running jobs in an environment ----------------------------------------------------------------


def run_jobs(python: Path, suites: dict[str, Path], jobs: list[dict[str, Any]], folder: Path, *,
             command: str = "load", timeout: float = 1800.0, threads: int = 0,
             on_job: Callable[[dict[str, Any]], object] | None = None, executor: Any = None,
             framework: str = "", paths: list[str] = (),
             records: dict[int, dict[str, Any]] | None = None) -> dict[int, dict[str, Any]]:
    """Run compat_child jobs, one process per seed for all its jobs; returns index -> the job's record.

    A job that kills or hangs its process gets a `load_failed` record naming the signal or the timeout, and a
    fresh process takes the jobs after it: one bad model never hides the others. `on_job` hears of each job as
    it starts (progress). One process per seed, because the producer's process had PYTHONHASHSEED = its seed.

    With `executor` (the run's `execute.forked.Executor` for this environment), the process is a fork of its
    warm worker, which has imported the framework already (a fresh process cost `import torch` again,
    4.8 s of a zoo:torch run); `framework` names the helper whose prologue the worker runs first. Jobs whose
    seed is not the executor's get a process of their own, since a fork keeps the worker's hash seed. `paths`
    go first on a fresh process's path (the environment's `paths`: a pythonpath build's checkout).

    `records`, when given, is filled in place, also when a cancelling signal stops the jobs (a KeyboardInterrupt,
    `cancel`): it then holds the jobs that finished before it, for the caller to keep.
    """
    records = {} if records is None else records
    for seed in sorted({int(job.get("seed", 0)) for job in jobs}):
        pending = [job for job in jobs if int(job.get("seed", 0)) == seed]
        attempt = 0
        while pending:
            attempt += 1
            out = folder / f"{command}-{seed}-{attempt}"
            out.mkdir(parents=True, exist_ok=True)
            (out / "jobs.json").write_text(json.dumps(pending))
            argv = [command, "--jobs", str(out / "jobs.json"), "--out", str(out)]
            argv += [arg for name, path in suites.items() for arg in ("--suite", f"{name}={path}")]
            by_index = {job["index"]: job for job in pending}
            watchdog = _Watchdog(out, timeout, lambda i: on_job and i in by_index and on_job(by_index[i]))
            started = len(records)
            try:
                if executor is not None and executor.seed == seed:
                    code, _ = executor.run_module(COMPAT_CHILD, argv, out, None, framework, watch=watchdog)
                else:
                    shim = local.shim_dir(folder)
                    extra = {"PYTHONPATH": os.pathsep.join([*paths, str(shim)])} if paths else None
                    env = local.child_env(shim, seed, threads, extra)
                    code, _ = local.spawn([str(python), "-m", COMPAT_CHILD, *argv], env, out, None, watch=watchdog)
            finally:  # cancelled too: the jobs this process finished are kept
                _harvest(pending, out, records)
            hung = watchdog.fired
            left = [job for job in pending if job["index"] not in records]
            if not left:
                break
            current = _current(out)
            culprit = next((job for job in left if job["index"] == current), None)
            why = _exit_reason(code, hung, timeout)
            stderr = local.tail(out / "stderr.txt", 1500)
            if culprit is None and len(records) == started:
                # nothing ran in this process (it failed at start-up): every job left gets the reason
                for job in left:
                    records[job["index"]] = _failed(job, f"the compat process {why} before it loaded anything",
                                                    stderr, out)
                break
            if culprit is not None:
                records[culprit["index"]] = _failed(culprit, f"the process {why} while loading it", stderr, out)
            pending = [job for job in left if job is not culprit]
    return records


def _harvest(jobs: list[dict[str, Any]], out: Path, records: dict[int, dict[str, Any]]) -> None:
    """Add to `records` each of `jobs` whose record the child wrote whole under `out`."""
    for job in jobs:
        result = out / str(job["index"]) / "result.json"
        try:
            # the record's file names are relative to the job's own folder
            records[job["index"]] = dict(json.loads(result.read_text()), _folder=str(result.parent))
        except (OSError, ValueError):  # none, or cut short by a crash: the job did not finish
            pass


#: the in-environment entry point that loads saved models and writes example inputs
COMPAT_CHILD = "modelci.workload.compat_child"


class _Watchdog:
    """Called while a compat child runs: True once one job has run longer than `timeout` (the child is then
    killed); tells `started` of each job the child announces in OUT/current."""

    def __init__(self, out: Path, timeout: float, started: Callable[[int], object]):
        self.out, self.timeout, self.started = out, timeout, started
        self.began, self.seen, self.fired = time.monotonic(), None, False

    def __call__(self) -> bool:
        current = _current(self.out)
        if current != self.seen:
            self.began, self.seen = time.monotonic(), current
            if current is not None:
                self.started(current)
        self.fired = time.monotonic() - self.began > self.timeout
        return self.fired


def _current(out: Path) -> int | None:
    """The index of the job the child announced last, or None before the first one."""
    try:
        return int((out / "current").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _exit_reason(code: int | None, hung: bool, timeout: float) -> str:
    if hung:
        return f"was killed after {timeout:g} s without finishing"
    if code is not None and code < 0:
        return f"was killed by {signal_name(-code)}"
    return f"exited with code {code}"


def _failed(job: dict[str, Any], reason: str, stderr: str, out: Path) -> dict[str, Any]:
    return {"index": job["index"], "workload": job["workload"], "format": job.get("format", ""),
            "status": "load_failed", "reason": reason, "traceback": stderr, "outputs": {}, "inputs": None,
            "unsafe": False, "times": {}, "_folder": str(out / str(job["index"]))}


# -- selecting what to check ----------------------------------------------------------------------


class Producers:
    """Which producer builds a check takes, from `--from` and the history (`lineage`).

    - nothing: every build older than the target (the commit graph for commits of the target's repository,
      version order otherwise);
    - a version (`1.2`): that version and later ones, still older than the target;
    - a specifier set (`>=1.2,<2`, `==2.13.0`): exactly the versions it contains, older or not, so a build can
      check the models saved by its own version;
    - a ref of the target's repository (`v2.3`, a sha, `HEAD~5`) or a target spec (`git+URL@REF`, a wheel path,
      `fakefw==1.1`): the models saved by that one build.
    """

    def __init__(self, from_spec: str | None, target: Any, cache_dir: Path | str, option: str = "--from"):
        #: the option the user gave it with, as messages name it (a forward bisect's --into)
        self.option = option
        self.text = (from_spec or "").strip()
        self.target = target_dict(target)
        self.lineage = Lineage(cache_dir)
        self.minimum: Version | None = None
        self.specifier: SpecifierSet | None = None
        self.build: dict[str, Any] | None = None
        if self.text:
            self._parse(target, cache_dir)

    def _parse(self, target: Any, cache_dir: Path | str) -> None:
        text = self.text
        if target.kind == "git" and not _looks_like_specifier(text):
            sha = _ref_in(target, text, cache_dir)
            if sha is not None:
                self.build = {"commit": sha}
                return
        try:
            self.minimum = Version(text)
            return
        except InvalidVersion:
            pass
        try:
            self.specifier = SpecifierSet(text)
            return
        except InvalidSpecifier:
            pass
        refs = " a ref of the target's repository (v2.3, a sha)," if target.kind == "git" else ""
        try:
            other = targets.resolve(text, cache_dir=cache_dir)
            if other.kind == "requirement" and not other.version:
                raise UserError("a requirement names one build only with ==VERSION")
        except UserError as exc:
            raise UserError(f"{self.option} {text!r} is neither a version (1.2), a version specifier (>=1.2,<2, "
                            f"==2.13.0),{refs} nor a target spec of one build (git+URL@REF, a wheel path, "
                            f"name==1.2): {exc}") from None
        if other.kind == "current":
            raise UserError(f"{self.option} current: the running interpreter saves no models; name a version or "
                            "a build")
        if other.kind == "git":
            self.build = {"commit": other.commit}
        elif other.kind == "wheel":
            self.build = {"wheel_sha256": other.wheel_sha256}
        else:
            # the release: not a commit that happens to carry the same version
            self.build = {"name": other.name, "version": other.version, "commit": ""}

    def names(self, build: dict[str, Any]) -> bool:
        """Whether the selection names `build` itself: `--from` its ref or spec, or a specifier set holding its
        version (a plain minimum version only ever takes older builds)."""
        return (self.build is not None or self.specifier is not None) and self.takes(build)

    def describe(self) -> str:
        """The selection in words, for messages."""
        if self.build is not None:
            return f"build {self.text}"
        if self.specifier is not None:
            return f"versions {self.specifier}"
        since = f"versions {self.minimum} and later, " if self.minimum is not None else "builds "
        return f"{since}older than {self.target['label']}"

    def takes(self, producer: dict[str, Any]) -> bool:
        """Whether the models of this producer build are checked."""
        if self.build is not None:
            return all(str(producer.get(k) or "") == str(v or "") for k, v in self.build.items())
        version = lineage_version(producer)
        if self.specifier is not None:
            return version is not None and self.specifier.contains(version, prereleases=True)
        if self.minimum is not None and (version is None or version < self.minimum):
            return False
        return self.lineage.older(producer, self.target)

    @staticmethod
    def sort_key(producer: dict[str, Any]) -> tuple:
        """Oldest first: the order of the report's rows."""
        return sort_key(producer)


def lineage_version(build: dict[str, Any]) -> Version | None:
    """A build's version (None when not PEP 440)."""
    return version_of(build)


def _looks_like_specifier(text: str) -> bool:
    return text[:1] in "<>=!~" or "," in text


def _ref_in(target: Any, text: str, cache_dir: Path | str) -> str | None:
    """The sha `text` names in the target's repository, or None when it names no ref there."""
    if text.startswith("git+") or text.endswith(".whl"):
        return None
    try:
        return GitRepo(target.repo, cache_dir).resolve(text)
    except UserError:
        return None


def _same_build(producer: dict[str, Any], target: dict[str, Any]) -> bool:
    return all(str(producer.get(k) or "") == str(target.get(k) or "") for k in ("name", "version", "commit"))


def _same_commit(producer: dict[str, Any], target: dict[str, Any]) -> bool:
    """Two builds of one commit (built as a wheel and with pythonpath, say)."""
    return bool(target.get("commit")) and producer.get("commit") == target.get("commit")


def how_built(build: dict[str, Any]) -> str:
    """How a commit's build was made, from its spec: `pythonpath`, `wheel` or `build command`; "" for a build that
    is not a commit (a release, a wheel file)."""
    if not build.get("commit") or not str(build.get("spec", "")).startswith("git+"):
        return ""
    try:
        way = targets.parse_git_spec(str(build["spec"]))[2].get("build", "") or "wheel"
    except UserError:
        return ""
    return way.split(":", 1)[0] if way.split(":", 1)[0] in ("pythonpath", "wheel") else "build command"


def shown_labels(builds: list[dict[str, Any]]) -> dict[str, str]:
    """label -> the name to show for it among `builds`: its label, and for a commit that appears built more than
    one way (a pythonpath run and a wheel run of it) also how, so the two are told apart (their labels differ only
    in the version's local part)."""
    labels: dict[str, set[str]] = {}
    for build in builds:
        if build.get("commit"):
            labels.setdefault(str(build["commit"]), set()).add(str(build.get("label", "?")))
    shown = {}
    for build in builds:
        label = str(build.get("label", "?"))
        way = how_built(build) if len(labels.get(str(build.get("commit") or ""), ())) > 1 else ""
        shown[label] = f"{label} [{way}]" if way else label
    return shown


def alarm_name(build: dict[str, Any]) -> str:
    """The name a compat alarm gives a build: a commit is named by the commit alone (`tinynet@0123456789`), so the
    same commit built two ways is one producer, one alarm and one bisect; anything else by its label."""
    if build.get("commit") and build.get("name"):
        return targets.label("git", str(build["name"]), None, str(build["commit"]), None, str(build.get("spec", "")))
    return str(build.get("label", "?"))


def _selected(manifests: list[dict[str, Any]], suites: dict[str, Path], pattern: str | None) -> list[dict[str, Any]]:
    """The manifests whose workload is in the chosen suites and that -k selects (`selection.select`)."""
    return selection.select(pattern, [m for m in manifests if m.get("suite") in suites], lambda m: m["workload"])


def latest(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest manifest per (producer build, workload, format): what that build saves today."""
    newest: dict[tuple, dict[str, Any]] = {}
    for manifest in sorted(manifests, key=lambda m: (m.get("recorded_at", ""), m["key"])):
        ident = tuple(records.identity(manifest["producer"]).values())
        newest[(ident, manifest["workload"], manifest["format"])] = manifest
    return sorted(newest.values(), key=_order)


def _order(manifest: dict[str, Any]) -> tuple:
    return manifest["workload"], manifest["format"], sort_key(manifest["producer"])


def describe_store(manifests: list[dict[str, Any]]) -> str:
    """What the store holds, in one line, for the message when nothing matches."""
    builds: dict[str, set[str]] = {}
    for manifest in manifests:
        builds.setdefault(manifest["producer"].get("label") or "?", set()).add(manifest["workload"])
    return "; ".join(f"{label} ({len(w)} workload(s))" for label, w in sorted(builds.items())) or "nothing"


# -- checking -------------------------------------------------------------------------------------


def check(config: Any, target_spec: str, suite_specs: list[str], pattern: str | None = None, *,
          from_spec: str | None = None, direction: str = "backward", progress: Any = None,
          store: Any = None, from_option: str = "--from") -> CompatOutcome:
    """Load every selected stored model into the consumer build(s), infer, compare, and keep the outcome.

    `backward`: models saved by older builds (or those `from_spec` picks) load in the target. `forward`: models
    saved by the target load in those builds. `both`: the two. Finding nothing to check is a UserError (exit 2),
    never a pass.
    """
    from modelci.report.console import Progress

    if direction not in DIRECTIONS:
        raise UserError(f"--direction {direction!r}: choose one of {', '.join(DIRECTIONS)}")
    progress = progress or Progress()
    suites = steps.resolve_suites(suite_specs, config.root)
    target = targets.resolve(target_spec, cache_dir=config.cache_dir)
    if target.kind == "current":
        raise UserError("compat needs a target with a version (numpy==2.0.0, a wheel or a git commit), not "
                        "'current': saved models are ordered by the version that saved them")
    # a bad --from is said before the environment; `from_option` is how the caller's user gave it
    producers = Producers(from_spec, target, config.cache_dir, from_option)
    store = store or Store.from_config(config)
    manifests, problems = records.read_manifests(store.artifacts)
    progress.note(f"target {redacted(target.spec)}: preparing the environment")
    env = steps.environment_for(config, target, log=progress.note)
    consumer = target_dict(target)
    ours = _selected([m for m in manifests if m["producer"].get("name") == target.name], suites, pattern)
    plan: list[tuple[dict[str, Any], Any, list[dict[str, Any]], str]] = []
    if direction in ("backward", "both"):
        chosen = latest([m for m in ours if producers.takes(m["producer"])])
        if chosen:
            plan.append((consumer, env, chosen, "backward"))
    own: list[dict[str, Any]] = []
    ordered: list[dict[str, Any]] = []
    if direction in ("forward", "both"):
        own = latest([m for m in ours if _same_build(m["producer"], consumer)])
        # a selection that names the target's own build (`--from`/`--into` its ref or spec, or a specifier set
        # holding its version) has it load its own models, as the backward way does: the good end of `bisect
        # --into` the very build it starts from is then trivially good rather than "no stored builds". The
        # target stands for its commit, so another build of that commit (wheel beside pythonpath) is not
        # checked a second time
        itself = producers.names(consumer)
        others = {m["producer"]["label"]: m["producer"] for m in latest(ours)
                  if producers.takes(m["producer"]) and not _same_build(m["producer"], consumer)
                  and not (itself and _same_commit(m["producer"], consumer))}
        ordered = sorted(others.values(), key=producers.sort_key) + ([consumer] if itself else [])
        plan += [(producer, env if producer is consumer else None, own, "forward")
                 for producer in ordered] if own else []
    unsaved = []
    if direction in ("backward", "both"):
        unsaved += unsaved_entries(store, target.name, producers.takes, consumer, "backward", suites, pattern,
                                   [m for _, _, chosen, way in plan if way == "backward" for m in chosen])
    for older in ordered:  # forward: what the target itself did not save, in each build it would have loaded in
        unsaved += unsaved_entries(store, target.name, lambda p: _same_build(p, consumer), older, "forward",
                                   suites, pattern, own)
    if not plan and not problems:
        unsaid = "".join(f"; {e.workload} {e.format} of {e.producer.get('label')}: {e.reason}" for e in unsaved)
        raise UserError(_nothing_message(store, target, manifests, direction, producers, suites, pattern,
                                         bool(own)) + unsaid)
    return check_stored(config, store, target, plan, problems, suites, direction, progress, unsaved)


def unsaved_entries(store: Any, name: str, takes: Callable[[dict[str, Any]], bool], consumer: dict[str, Any],
                    direction: str, suites: dict[str, Path], pattern: str | None,
                    manifests: list[dict[str, Any]]) -> list[CompatEntry]:
    """An entry (`save_failed`, `not_saved`) for each format that a producer build `takes` accepts declared in
    its latest run of a selected workload but saved nothing of, and that has no stored model to check: its
    status and reason come from the run's result (info["saved"]). Without them such a format was simply absent
    from the matrix, and a check whose producers saved nothing passed on silence."""
    from sqlalchemy import select

    from modelci.store.schema import ResultRow, RunRow, TargetRow

    checked = {(tuple(records.identity(m["producer"]).values()), m["workload"], m["format"]) for m in manifests}
    latest: dict[tuple, tuple[dict[str, Any], dict[str, Any]]] = {}
    with store.read() as session:
        rows = session.execute(
            select(ResultRow.workload, ResultRow.info, TargetRow).join(RunRow, ResultRow.run_id == RunRow.id)
            .join(TargetRow, RunRow.target_id == TargetRow.id)
            .where(TargetRow.name == name, TargetRow.kind != "current", ResultRow.status == "ok")
            .order_by(RunRow.started_at, ResultRow.id))
        rows = [(workload, info, row) for workload, info, row in rows if (info or {}).get("saved")]
        selected = {m["workload"] for m in _selected([{"suite": workload.partition("/")[0], "workload": workload}
                                                       for workload, _, _ in rows], suites, pattern)}
        for workload, info, row in rows:
            if workload not in selected:
                continue
            producer = target_dict(targets.Target(spec=row.spec, kind=row.kind, name=row.name, version=row.version,
                                                  commit=row.commit, wheel_sha256=row.wheel_sha256,
                                                  commit_date=row.commit_date))
            if not takes(producer):
                continue
            for entry in info["saved"]:
                ident = (tuple(records.identity(producer).values()), workload, str(entry.get("format")))
                latest[ident] = (producer, entry)  # a later run of the same build wins
    entries = []
    for ident, (producer, saved) in sorted(latest.items(), key=lambda item: item[0]):
        status, (_, workload, fmt) = saved.get("status"), ident
        if status not in UNSAVED or ident in checked:
            continue
        what = "the save failed" if status == "failed" else "the format was skipped"
        entries.append(CompatEntry(workload=workload, format=fmt, producer=producer, consumer=consumer,
                                   direction=direction, outcome=UNSAVED[status], saved=status,
                                   error=f"{what} in the producer's run, so there is no model to load: "
                                         f"{saved.get('reason') or 'no reason given'}"))
    return entries


def check_stored(config: Any, store: Any, target: Any, plan: list[tuple[dict[str, Any], Any, list[dict], str]],
                 problems: list[dict[str, str]], suites: dict[str, Path], direction: str,
                 progress: Any, unsaved: list[CompatEntry] = ()) -> CompatOutcome:
    """Verify, load and judge the planned models, and keep the outcome as history.

    `plan` holds (consumer, its environment or None to build it, its manifests, direction); `problems` are the
    manifests that could not be read, each an `unreadable` entry; `unsaved` the formats the producers saved
    nothing of (`unsaved_entries`), shown beside the models that were checked.
    """
    consumer = target_dict(target)
    own_scratch = local.Scratch(config.cache_dir, "compat-")
    scratch = own_scratch.path
    entries = [CompatEntry(workload="(unreadable manifest)", format="", producer={"label": "?"},
                           consumer=consumer, direction=direction, outcome="unreadable", error=p["error"])
               for p in problems]
    checked = 0  # models loaded (or refused) in a consumer, the unreadable manifests and unsaved formats aside
    cancelled = False
    try:
        fetched = fetch(store, [m for _, _, chosen, _ in plan for m in chosen], scratch / "models")
        for number, (who, who_env, chosen, way) in enumerate(plan):
            progress.note(f"{way}: {len(chosen)} saved model(s) into {who['label']}")
            finished: list[CompatEntry] = []
            try:
                found = check_in(config, who, who_env, chosen, fetched, suites, scratch / f"in-{number}", way,
                                 progress, finished)
            except KeyboardInterrupt:
                entries += finished
                checked += len(finished)
                raise
            entries += found
            checked += len(found)
    except KeyboardInterrupt:
        # what was checked before the signal is kept, as a run keeps the workloads that finished
        if not checked:
            raise
        cancelled = True
    finally:
        own_scratch.remove()
    entries += unsaved
    outcome = CompatOutcome(target=target, direction=direction, entries=entries, check_id=uuid.uuid4().hex,
                            artifacts=store.artifacts.root, interrupted=cancelled)
    with cancel.deferred(), store.write() as session:
        records.add_compat_results(session, outcome.check_id, config.runner, entries)
    if cancelled:
        raise Interrupted(outcome, checked)
    return outcome


class Interrupted(KeyboardInterrupt):
    """A check cancelled (Ctrl-C, SIGTERM, SIGHUP: `cancel`) after some models were checked: those are stored,
    and `outcome` holds them, marked interrupted, for the command's report files. A KeyboardInterrupt, so that a
    caller that only knows the cancel (a bisect's probe) stops as it does for any other."""

    def __init__(self, outcome: CompatOutcome, checked: int):
        super().__init__(f"interrupted by {cancel.signal_name()}; the {checked} saved model(s) checked before it are "
                         f"stored (check {outcome.check_id[:12]}), the rest were not checked")
        self.outcome = outcome


def _nothing_message(store: Any, target: Any, manifests: list[dict[str, Any]], direction: str,
                     producers: Producers, suites: dict[str, Path], pattern: str | None, has_own: bool) -> str:
    """Why nothing was selected, what the store holds, and what to do."""
    if direction == "forward" and has_own:
        what = f"builds of {target.name} ({producers.describe()}) to load the models of {target.label} in"
    elif direction == "forward":
        what = f"models saved by {target.label}"
    else:
        what = f"models saved by {target.name} {producers.describe()}"
    selection = f"suites {', '.join(suites)}" + (f", -k {pattern!r}" if pattern else "")
    return (f"compat found no stored {what} for {selection} in the artifact store {store.artifacts.root} (it holds: "
            f"{describe_store(manifests)}). Nothing was checked, so this is not a pass: run `modelci run --target "
            f"<version> --suite ...` to record saved models (workloads need `formats`), or widen {producers.option}")


def fetch(store: Any, manifests: list[dict[str, Any]], folder: Path) -> dict[str, dict[str, Any]]:
    """Read and verify each saved model and its stored arrays; key -> {path, outputs, inputs} or {error}.

    The sha256 is checked here, in the parent, before any byte reaches a deserialiser; a blob that is missing
    or does not match is refused and becomes an `unreadable` entry.
    """
    local_store = isinstance(store.artifacts.fs, LocalFileSystem)
    fetched: dict[str, dict[str, Any]] = {}
    for manifest in manifests:
        key = manifest["key"]
        if key in fetched:
            continue
        try:
            data = store.artifacts.get(manifest["sha256"])
            if manifest["layout"] == "file" and local_store and not manifest.get("unsafe"):
                # verified just now, on the user's own disk: the child reads the blob in place, saving a copy.
                # Not for a format that executes code on load: it gets the very bytes verified here, in a scratch
                # file, so nothing can change the blob between the check and the unpickling
                path = Path(store.artifacts.path(manifest["sha256"]))
            else:
                path = records.unpack(data, manifest["layout"], folder / key[:16], manifest["format"])
            outputs = {n: store.artifacts.get_array(e["sha256"]) for n, e in manifest["outputs"].items()}
            arrays = (manifest.get("inputs") or {}).get("arrays") or {}
            inputs = {n: store.artifacts.get_array(e["sha256"]) for n, e in arrays.items()}
            fetched[key] = {"path": path, "outputs": outputs, "inputs": inputs}
        except CorruptArtifact as exc:
            fetched[key] = {"error": f"{exc} (from {manifest['producer'].get('label')})"}
        except (tarfile.TarError, ValueError) as exc:
            fetched[key] = {"error": f"saved model {manifest['sha256'][:12]} cannot be unpacked: {exc}"}
        except OSError as exc:  # PermissionError from a bucket made private, a network error, a full disk
            fetched[key] = {"error": f"saved model {manifest['sha256'][:12]} of {manifest['producer'].get('label')} "
                                     f"cannot be read from {store.artifacts.root}: {type(exc).__name__}: {exc}"}
    return fetched


def check_in(config: Any, consumer: dict[str, Any], env: Any, manifests: list[dict[str, Any]],
             fetched: dict[str, dict[str, Any]], suites: dict[str, Path], folder: Path, direction: str,
             progress: Any, finished: list[CompatEntry] | None = None) -> list[CompatEntry]:
    """Check stored models in one consumer build (its environment is built here when `env` is None).

    There is no separate discovery: the child finds each workload in the file the manifest names (or, when
    the class moved, anywhere in its suite) and reports `missing` when it is gone, or the import error.

    A cancelling signal (KeyboardInterrupt) while the models load is raised again, after the models judged
    before it are added to `finished`.
    """
    folder.mkdir(parents=True, exist_ok=True)
    try:
        env = _consumer_env(config, consumer, env, manifests, progress)
    except UserError as exc:  # HarnessError too
        # not a break of compatibility: nothing was loaded, so each model is `not_checked`, with the reason
        return [_entry(m, consumer, direction, "not_checked",
                       f"the environment of {consumer['label']} could not be prepared: {exc}") for m in manifests]
    entries: dict[int, CompatEntry] = {}
    jobs = []
    for index, manifest in enumerate(manifests):
        got = fetched[manifest["key"]]
        if "error" in got:
            entries[index] = _entry(manifest, consumer, direction, "unreadable", got["error"])
            continue
        suite = suites.get(manifest["suite"])
        file = suite / manifest["file"] if suite and manifest.get("file") else None
        if file is not None and (Path(str(manifest["file"])).name != str(manifest["file"])
                                 or not file.resolve().is_relative_to(Path(suite).resolve())):
            # the manifest's file is not among its hashed fields: `../../evil.py` was imported as the workload's
            entries[index] = _entry(manifest, consumer, direction, "unreadable",
                                    f"its manifest names the workload file {str(manifest['file'])[:80]!r}, which is "
                                    f"not a file of suite {manifest['suite']!r}; the manifest was changed")
            continue
        jobs.append({"index": index, "workload": manifest["workload"], "file": str(file) if file else None,
                     "format": manifest["format"], "path": str(got["path"]), "seed": int(manifest.get("seed") or 0),
                     "inputs": bool(got["inputs"])})

    def started(job: dict[str, Any]) -> None:
        manifest = manifests[job["index"]]
        # polled, so a fast model may pass unseen: the count shows how far the child got
        progress.note(f"  [{job['index'] + 1}/{len(manifests)}] {manifest['workload']} {manifest['format']} saved by "
                      f"{manifest['producer'].get('label')}")

    done: dict[int, dict[str, Any]] = {}
    try:
        if jobs:
            run_jobs(env.python, suites, jobs, folder, timeout=config.timeout, paths=getattr(env, "paths", []),
                     threads=config.threads, on_job=started, records=done)
    except KeyboardInterrupt:
        if finished is not None:
            for job in jobs:
                if job["index"] in done:
                    manifest = manifests[job["index"]]
                    entries[job["index"]] = judge(config, manifest, consumer, direction, done[job["index"]],
                                                  fetched[manifest["key"]])
            finished.extend(entries[i] for i in sorted(entries))
        raise
    for job in jobs:
        manifest = manifests[job["index"]]
        entries[job["index"]] = judge(config, manifest, consumer, direction, done[job["index"]],
                                      fetched[manifest["key"]])
    return [entries[i] for i in range(len(manifests))]


def _consumer_env(config: Any, consumer: dict[str, Any], env: Any, manifests: list[dict[str, Any]],
                  progress: Any) -> Any:
    """The consumer's environment, with what the workloads needed besides the framework when they were
    recorded (as `run` adds them); a workload that needs more now fails to import, and says so."""
    target = targets.resolve(consumer["spec"], cache_dir=config.cache_dir)
    if env is None:
        env = steps.environment_for(config, target, log=progress.note)
    needs = [SimpleNamespace(requires=m.get("requires") or [], framework=m.get("framework") or "") for m in manifests]
    extra = steps.missing_requirements(env, needs, {target.name: target.version or ""} if env.paths else None)
    if extra and consumer.get("kind") != "current":
        progress.note(f"the workloads also need {', '.join(extra)}")
        env = steps.environment_for(config, target, extra, log=progress.note)
    return env


def _entry(manifest: dict[str, Any], consumer: dict[str, Any], direction: str, outcome: str, error: str = "",
           unsafe: bool = False, **more: Any) -> CompatEntry:
    """An entry for one stored model in one consumer; unsafe when the producer or the consumer says so."""
    return CompatEntry(workload=manifest["workload"], format=manifest["format"], producer=manifest["producer"],
                       consumer=consumer, direction=direction, outcome=outcome, error=error,
                       unsafe=bool(manifest.get("unsafe") or unsafe), key=manifest["key"],
                       sha256=manifest["sha256"], size=int(manifest.get("size") or 0), **more)


def judge(config: Any, manifest: dict[str, Any], consumer: dict[str, Any], direction: str, record: dict[str, Any],
          stored: dict[str, Any]) -> CompatEntry:
    """Turn one child record into an entry: outputs compared with the producer's by the precision check."""
    status, unsafe = record["status"], bool(record.get("unsafe"))
    if status != "ok":
        return _entry(manifest, consumer, direction, status, record.get("reason", ""),
                      traceback=record.get("traceback", ""), unsafe=unsafe)
    folder, policy = Path(record["_folder"]), config.policy_for(manifest["workload"])

    def arrays(written: dict[str, Any]) -> dict[str, Any]:
        return {name: np.load(folder / e["file"], allow_pickle=False) for name, e in written.items()}

    findings = check_outputs(arrays(record["outputs"]), stored["outputs"], policy)
    numbers: dict[str, Any] = {f.metric: f.numbers for f in findings}
    bad = [f for f in findings if f.verdict == "regression" and f.gating]
    error = "; ".join(f.message for f in bad)
    if record.get("inputs") and stored["inputs"]:
        again = check_outputs(arrays(record["inputs"]), stored["inputs"], policy)
        same = not any(f.verdict == "regression" for f in again)
        numbers["inputs"] = {"match": same, "messages": [f.message for f in again if f.verdict != "ok"]}
        if bad and not same:
            error += (" (the inputs made again from the seed differ from the producer's too: the data changed, "
                      "maybe not only the model)")
    return _entry(manifest, consumer, direction, "outputs_differ" if bad else "ok", error, numbers=numbers,
                  times=record.get("times", {}), unsafe=unsafe)


def _closest(numbers: dict[str, Any]) -> str:
    """`(largest difference: output:y max_rel=1e-07)` from an ok entry's precision numbers, or ""."""
    worst = [(n.get("max_rel"), name) for name, n in numbers.items()
             if name != "inputs" and isinstance(n, dict) and isinstance(n.get("max_rel"), (int, float))]
    if not worst:
        return ""
    value, name = max(worst)
    return " exactly" if value == 0 else f" (largest difference: {name} max_rel={value:.3g})"


def findings(outcome: CompatOutcome) -> list[Finding]:
    """The entries as check findings (check "compat"), for alarms and notifications like any other regression;
    each says why (`CompatEntry.reason`) in `numbers["reason"]`, as every check's finding does."""
    out = []
    for e in outcome.entries:
        metric = f"compat:{e.format}:{e.producer.get('label', '?')}->{e.consumer.get('label', '?')}"
        verdict = "regression" if e.gating else "ok"
        what = f"{e.workload} {e.format} saved by {e.producer.get('label')} in {e.consumer.get('label')}: {e.outcome}"
        numbers = {"outcome": e.outcome, "saved": e.saved, **({"error": e.error} if e.error else {})}
        out.append(decided("compat", metric, verdict, numbers, what, e.reason, gating=e.gating))
    return out


def raise_alarms(config: Any, store: Any, outcome: CompatOutcome) -> tuple[list[Any], list[Any]]:
    """The alarm step of `modelci compat`: each entry that fails opens (or updates) the alarm of its saved model,
    one that passes again is its recovery; then the notifiers hear of it. Returns (events, deliveries).

    The alarm's key is the runner, the workload, check `compat` and the metric `compat:FORMAT:saved by
    PRODUCER` (forward: `FORMAT:PRODUCER->CONSUMER`): the next build that still cannot load the same model is the
    same alarm, seen again, not a new one. A commit is named by the commit alone (`alarm_name`), so its builds
    (pythonpath, wheel) are one producer. Its numbers keep the producer's spec, which `--bisect-on-alarm` hands
    to `bisect --check compat --from`. A workload deleted from the suite (`missing`) is no alarm.
    """
    from modelci.alarms import lifecycle, notify

    shown = shown_labels([b for e in outcome.entries for b in (e.producer, e.consumer)])
    found: dict[tuple[str, str], list[Any]] = {}
    for e in outcome.entries:
        # nothing was loaded: it neither breaks nor heals
        if e.outcome in ("missing", "save_failed", "not_saved", "not_checked"):
            continue
        producer, consumer = alarm_name(e.producer), alarm_name(e.consumer)
        metric = (f"compat:{e.format}:saved by {producer}" if e.direction == "backward"
                  else f"compat:{e.format}:{producer}->{consumer}")
        found.setdefault((e.workload, metric), []).append(e)
    observations = []
    for (workload, metric), same in found.items():
        # the builds of one commit (a pythonpath and a wheel run of it) are one producer: one observation, which
        # fires when any of them fails, and whose numbers name that build for `--bisect-on-alarm --from`
        e = next((x for x in same if x.gating), same[0])
        message = (f"{e.workload} {e.format} saved by {shown.get(e.producer.get('label'), '?')} in "
                   f"{shown.get(e.consumer.get('label'), '?')}: {e.outcome}")
        if e.error:
            message += f" - {e.error.splitlines()[0]}"
        others = [x for x in same if x is not e]
        if others:
            message += "; the same commit built another way: " + "; ".join(
                f"{shown.get(x.producer.get('label'), '?')} in {shown.get(x.consumer.get('label'), '?')}: "
                f"{x.outcome}" for x in others)
        numbers = {"outcome": e.outcome, "producer": e.producer.get("spec", ""), "consumer": e.consumer.get("spec", ""),
                   "direction": e.direction, "reason": e.reason.splitlines()[0] if e.reason else "",
                   **({"error": e.error.splitlines()[0]} if e.error else {})}
        observations.append(lifecycle.Observation(config.runner, workload, "compat", metric,
                                                  any(x.gating for x in same), message=message, numbers=numbers))
    events = lifecycle.apply(store, config, observations, target_label=outcome.target.label)
    return events, notify.deliver(config, events, store=store)
