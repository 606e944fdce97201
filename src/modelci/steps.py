"""The steps that `run`, `compare`, `calibrate`, `compat` and `bisect` share: suites, environments, selection,
the store. They live below `workflow` and `compat`, which call them, so neither imports the other back.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

import modelci
from modelci import builds, envs, selection, targets
from modelci.config import Config
from modelci.envs.fingerprint import parse_lock
from modelci.errors import UserError
from modelci.execute import local
from modelci.execute.local import WorkloadInfo
from modelci.records import Result, fit
from modelci.workload import frameworks

if TYPE_CHECKING:
    from modelci.store import Store

ZOO = Path(modelci.__file__).resolve().parent / "zoo"


def resolve_suites(specs: list[str], root: Path) -> dict[str, Path]:
    """Suite specs (`zoo:NAME` or a folder) to name -> folder; a missing one is a UserError."""
    if not specs:
        raise UserError("no suite given; pass --suite zoo:numpy (or a folder of workload files), "
                        "or set `suites` in modelci.toml")
    suites: dict[str, Path] = {}
    for spec in specs:
        if spec.startswith("zoo:"):
            name = spec[4:]
            folder = ZOO / name
            if not name or not folder.is_dir():
                known = sorted(p.name for p in ZOO.iterdir() if p.is_dir() and not p.name.startswith("_"))
                raise UserError(f"unknown built-in suite {spec!r}; built-in suites: "
                                + ", ".join(f"zoo:{k}" for k in known))
        else:
            folder = (root / spec).resolve() if not Path(spec).is_absolute() else Path(spec)
            if not spec.strip():
                raise UserError("an empty --suite; pass a folder of workload files or zoo:NAME")
            if folder.is_file():
                raise UserError(f"suite {spec!r} is a file; a suite is the folder that holds workload files (pass "
                                f"{str(Path(spec).parent)!r}) or zoo:NAME")
            if folder.exists() and not folder.is_dir():  # /dev/null, a pipe: "does not exist" was wrong
                raise UserError(f"suite {spec!r} is not a folder; pass a folder of workload files or zoo:NAME")
            if not folder.is_dir():
                raise UserError(f"suite folder {spec!r} does not exist; pass a folder of workload files or zoo:NAME")
            from modelci.workload.child import suite_files

            if not suite_files(folder):
                # a wrong folder, not a build that broke: said now, rather than stored as an error that alarms
                raise UserError(f"suite folder {spec!r} holds no workload files (*.py not starting with _); pass "
                                "the folder of your workload files or zoo:NAME")
            name = folder.name
            if len(name) > SUITE_NAME_MAX:
                raise UserError(f"suite folder name {name[:40]!r}... is {len(name)} characters long; the most is "
                                f"{SUITE_NAME_MAX} (workload ids are the suite's name and the workload's, and the "
                                "history holds 300 characters of them): rename the folder")
        if name in suites and suites[name] != folder:
            raise UserError(f"two suites are both named {name!r} ({suites[name]} and {folder}); rename one folder")
        suites[name] = folder
    return suites


def locked_environment(target: targets.Target, lock: envs.lockfile.Lock, python: str, index: envs.IndexConfig,
                       cache: Path, environ: dict[str, str], log: Any = print, *,
                       build_timeout: float) -> envs.Environment:
    """Exactly the environment of `lock`, for `target` (built, or taken from the cache); a git target's commit
    is built first (a pythonpath build's package is not in the lock: it goes on the path)."""
    if target.kind == "git":
        builds.prepare(target, cache, python=python, index=index, log=log, timeout=build_timeout)
    env = envs.ensure_locked(lock, target, python, index, cache, log=log, environ=environ,
                             on_path=bool(target.paths))
    env.paths = list(target.paths)
    return env


def index_for(config: Config) -> envs.IndexConfig:
    """Where the environments' packages come from: pip's configuration, plus the configured constraints."""
    index = envs.IndexConfig.from_pip()
    index.constraints += envs.constraints.for_config(config.env, Path(config.cache_dir), sysconfig.get_platform())
    return index


def environment_for(config: Config, target: targets.Target, extra: list[str] = (), log: Any = print, *,
                    lock: envs.lockfile.Lock | None = None, compile_bytecode: bool = True,
                    index: envs.IndexConfig | None = None) -> envs.Environment:
    """The environment for a target plus extra requirements, or exactly `lock`; `current` is this interpreter.

    A pythonpath build of a commit gives the environment of its dependencies, shared by every commit that
    declares the same ones, with the commit's checkout in `paths` (see builds.prepare). `index` (default:
    `index_for(config)`) is where packages come from: a Ray node rebuilds the run's lock from the driver's."""
    cache = local.cache_folder(config.cache_dir)
    environ = workload_environ(config)
    if target.kind == "current" and lock is None:
        return envs.current(cache, environ=environ)
    index = index or index_for(config)
    if lock is not None:
        return locked_environment(target, lock, config.python, index, cache, environ, log,
                                  build_timeout=config.build_timeout)
    requirements = list(target.requirements)
    if target.kind == "git":  # build the commit (or take its cached build); builds.BuildError if it fails
        requirements = builds.prepare(target, cache, python=config.python, index=index, log=log,
                                      timeout=config.build_timeout)
    # a pythonpath build's dependencies are the frameworks its workloads use (a library on torch): what their
    # helpers need goes into the first environment too, not into a second one found only at discovery
    provided = [target.name, *(Requirement(req).name for req in requirements)] if target.paths else [target.name]
    needs = [need for name in provided for need in helper_needs(name)]
    extra = list(dict.fromkeys([*needs, *extra]))
    spec = envs.EnvSpec(requirements=[*requirements, *extra], python=config.python, index=index)
    env = envs.ensure(spec, cache, log=log, environ=environ, compile_bytecode=compile_bytecode)
    env.paths = list(target.paths)
    target.version = envs.installed_version(env, target.name) or target.version
    return env


def static_needs(target: targets.Target, suites: dict[str, Path], pattern: str | None) -> list[str]:
    """The selected workloads' declared needs (builds.declared_needs), less what names the target itself."""
    own = canonicalize_name(target.name)
    found = []
    for text in builds.declared_needs(suites, pattern, provided=(own,)):
        try:
            if canonicalize_name(Requirement(text).name) != own:
                found.append(text)
        except ValueError:  # packaging's InvalidRequirement: discovery reports the workload's bad `requires`
            continue
    return found


def helper_needs(dist: str) -> list[str]:
    """What the environment needs next to the framework that the target `dist` provides (its helper's `needs`:
    numpy for torch, setuptools for paddle).

    Added to the first environment, because found only at discovery it cost a second environment and a second
    worker that imported the framework again. The environment is the one discovery would have led to.
    """
    helper = frameworks.providing(canonicalize_name(dist))
    return list(helper.needs) if helper else []


def workload_environ(config: Config) -> dict[str, str]:
    """The variables the workloads will see (thread counts, hash seed), so the fingerprint describes them."""
    return local.child_env(Path(config.cache_dir), config.seed, config.threads)


def missing_requirements(env: envs.Environment, workloads: list[WorkloadInfo],
                         provided: dict[str, str] | None = None) -> list[str]:
    """The workloads' needs (their `requires` and their framework) that the environment does not satisfy;
    `provided` (name -> version) is what is on the path besides it (a pythonpath build's package).

    Discovery refuses a workload whose `requires` is no list of valid requirement strings (`select`), so each
    entry parses here; one that does not anyway (a saved model's manifest, written by an older modelci) is a
    UserError naming the workload and the entry, never a traceback, and is never handed to the installer.
    """
    given = {canonicalize_name(name): version for name, version in (provided or {}).items()}
    pins = parse_lock(env.lock)
    pins.update({name: version for name, version in given.items() if version})
    needed: list[str] = []
    for workload in workloads:
        who = f"workload {workload.id}" if getattr(workload, "id", "") else "a saved model's workload"
        requires = workload.requires
        if isinstance(requires, str) or not isinstance(requires, (list, tuple)):
            raise UserError(f"{who}: `requires` must be a list of requirement strings, not {requires!r}")
        wants = list(requires)
        framework = workload.framework if isinstance(workload.framework, str) else ""
        wants.extend(frameworks.requirements(framework, pins))
        for text in wants:
            try:
                requirement = Requirement(text)
            except (InvalidRequirement, TypeError):
                why = requirement_problem(text) if isinstance(text, str) else "not a string"
                raise UserError(f"{who}: `requires` holds {text!r}, which is not a valid requirement ({why}); "
                                "give requirement strings such as \"numpy>=1.26\"") from None
            have = pins.get(canonicalize_name(requirement.name))
            if have is None and canonicalize_name(requirement.name) in given:
                continue  # on the path, version unknown: it is the target itself
            if (have is None or not requirement.specifier.contains(have, prereleases=True)) and text not in needed:
                needed.append(text)
    return sorted(needed)


def requirement_problem(text: str) -> str:
    """Why `text` is not a requirement string, or "" (packaging's reading, its first line: it adds the text and
    a caret below)."""
    try:
        Requirement(text)
    except InvalidRequirement as exc:
        return (str(exc).splitlines() or ["unreadable"])[0]
    return ""


def requirement_errors(found: dict[str, Any]) -> dict[str, Any]:
    """Discovery's result with each workload whose `requires` holds a string that is not a requirement moved to
    its errors, as an `error` of that workload alone. The child checks that `requires` is a list of strings; the
    grammar is packaging's, read here in the parent (the environment under test may not have packaging), before
    the installer is handed a line such as "numpy\\n--index-url http://...", and before it stopped the run."""
    workloads, errors = [], list(found["errors"])
    for workload in found["workloads"]:
        bad = next(((text, why) for text in workload["requires"] if (why := requirement_problem(text))), None)
        if bad is None:
            workloads.append(workload)
            continue
        errors.append({key: workload.get(key) for key in ("suite", "file", "line", "code_hash")}
                      | {"workload": workload["id"],
                         "message": f"class {workload['class']}: `requires` holds {bad[0]!r}, which is not a valid "
                                    f"requirement ({bad[1]}); write each as a package name with optional extras, "
                                    'version specifiers and marker ("numpy>=1.26,<3")'})
    return found | {"workloads": workloads, "errors": errors}


def select(found: dict[str, Any], pattern: str | None) -> tuple[list[WorkloadInfo], list[dict[str, Any]]]:
    """Filter discovered workloads with -k (`selection.select`); a pattern that selects none is a UserError.
    A workload whose `requires` is not requirements is an error of its own (`requirement_errors`)."""
    found = requirement_errors(found)
    workloads = [WorkloadInfo.from_json(w) for w in found["workloads"]]
    errors = list(found["errors"])
    if pattern:
        workloads = selection.select(pattern, workloads, lambda w: w.id)
        if any(w.id == pattern for w in workloads):
            return workloads, []
        matched_errors = [e for e in errors
                          if selection.matches(pattern, Path(e["file"]).stem) or selection.matches(pattern, e["suite"])]
        # a workload that -k names may sit in a file that failed to import: then show every import error
        errors = matched_errors if workloads or matched_errors else errors
        if not workloads and not errors:
            names = ", ".join(w["id"] for w in found["workloads"]) or "none"
            raise UserError(f"-k {pattern!r} matches no workload; the suites hold: {names}")
    return workloads, errors


#: the longest suite name: with "/" and a workload name (at most 100), a workload id fits the history's 300
SUITE_NAME_MAX = 199
#: the longest workload id the history stores
WORKLOAD_ID_MAX = 300


def error_results(errors: list[dict[str, Any]], suites: dict[str, Path], workloads: list[WorkloadInfo]) -> list[Result]:
    """Import failures and empty suites as `error` results, so they are stored and never pass."""
    results = []
    for error in errors:
        where = f"{error['file']}, line {error['line']}" if error.get("line") else error["file"]
        # an error of a class in a file with a long name (`suite/FILE.py:CLASS`) may pass the history's limit:
        # cut here, so the console and the report files name it as the history keeps it
        results.append(Result(workload=fit(error.get("workload") or f"{error['suite']}/{Path(error['file']).name}",
                                  WORKLOAD_ID_MAX),
                              status="error",
                              reason=f"{where}: {error['message']}", traceback=error.get("traceback", ""),
                              code_hash=error.get("code_hash", "")))
    for name, folder in suites.items():
        if not any(w.suite == name for w in workloads) and not any(e["suite"] == name for e in errors):
            results.append(Result(workload=f"{name}/(suite)", status="error",
                                  reason=f"suite {name!r} ({folder}) yields no workloads; a suite must define at "
                                         "least one modelci.Workload subclass"))
    return results


def check_artifacts(config: Config) -> None:
    """That the configured artifact store opens and takes writes (ArtifactStore.check_usable); a UserError if not.

    Checked before the environment is built and any workload runs: a store that cannot take the run's outputs
    used to fail only at the ingest, with a traceback, after every workload had run.
    """
    from modelci.store.artifacts import ArtifactStore

    ArtifactStore(config.artifacts, config.artifacts_options, config.artifacts_readonly).check_usable()


def history_is_new(config: Config) -> bool:
    """Whether the history is a SQLite file not made yet: a run then opens it, and so creates it, only once its
    selection holds a workload, so that a mistyped -k on a first run leaves no empty history behind."""
    from modelci.store import sqlite_file

    path = sqlite_file(config.db)
    return path is not None and not path.exists()


def open_store(config: Config, alarms: bool = False) -> Store:
    """The history store, refusing one opened read-only: a run must be able to store what it measures, and with
    `alarms` (its alarm step runs) update the alarms."""
    from modelci.store import ALARM_STEP_WRITES, RUN_WRITES, Store

    store = Store.from_config(config)
    store.check_writable(RUN_WRITES + (ALARM_STEP_WRITES if alarms else ()))
    store.artifacts.check_writable()
    return store


