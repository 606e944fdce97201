"""Build a git-commit target into something an environment can install.

Three strategies, named by `BuildPlan`:
- `wheel` (default): a PEP 517 build with `uv build --wheel`, from the indexes the user's pip config names;
- `pythonpath`: no build. The environment holds only the package's static dependencies, so every commit that
  declares the same ones shares one environment (and one warm worker); the checkout (`src/` or the given folder)
  and a folder holding the package's metadata (`<name>-<version>+g<sha>.dist-info`, so that
  `importlib.metadata` still finds it) go on each process's path (`Target.paths`). Each commit costs a checkout
  and a few KiB; a tiny wheel with the same metadata and a `.pth` file is kept beside them for who wants to
  install the commit by hand;
- a custom command run in the checkout, which must leave a wheel in `$MODELCI_DIST_DIR` (or `dist/`).

A built wheel that holds only modules and metadata is also unpacked into the build folder (`site/`), and the
environment holds only its dependencies, with that folder on the path: as with pythonpath, the commits that
declare the same dependencies share one environment and one warm worker. A wheel that carries more (scripts,
data files, a `.pth` file) is installed as it is.

Built wheels are cached by commit and plan in `<cache_dir>/builds/<key>/`, written to a temporary folder and
renamed into place only after a successful build. A failed build leaves `<key>.failed.json` with its log tail,
which bisect reads so that a resumed search does not build a broken commit again.
"""

from __future__ import annotations

import base64
import email.parser
import hashlib
import json
import os
import shutil
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from modelci import locks, projectmeta, selection
from modelci.execute import supervisor
from modelci.errors import UserError
from modelci.gitrepo import GitRepo
from modelci.projectmeta import PROJECT_FILES
from modelci.workload.processes import signal_name

#: bump when the layout of a build folder changes: old builds are then built again
BUILD_SCHEMA = 2
#: pythonpath builds: the folder beside the wheel that holds the package's dist-info, put on the path
METADATA_DIR = "site"
LOG_TAIL_CHARS = 3000


class BuildError(UserError):
    """A commit that did not build: the message names the commit and how it was built; `log_tail` holds the end
    of the build log. `run` turns it into `error` results and bisect into a skipped probe."""

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(message)
        self.log_tail = log_tail


@dataclass(frozen=True)
class BuildPlan:
    """How a commit becomes installable: `wheel`, `pythonpath[:FOLDER]` or a shell command."""

    strategy: str  # "wheel" | "pythonpath" | "command"
    command: str = ""
    #: pythonpath only: the folder that goes on the path, relative to the project ("" = src/ if present, else .)
    path: str = ""
    #: the project folder inside the repository (pip's `#subdirectory=`)
    subdirectory: str = ""

    @classmethod
    def parse(cls, text: str | None, subdirectory: str = "") -> BuildPlan:
        """`wheel` (also for empty), `pythonpath`, `pythonpath:FOLDER`, or any other text as a shell command."""
        text = (text or "").strip() or "wheel"
        subdirectory = subdirectory.strip("/")
        folder = text.partition(":")[2].strip("/") if text.startswith("pythonpath:") else ""
        for what, value in (("#subdirectory=", subdirectory), ("--build pythonpath:", folder)):
            if ".." in PurePosixPath(value).parts:  # the build must be the commit's: nothing outside is checked out
                raise UserError(f"{what}{value} leads out of the checkout with '..'; give a folder inside the "
                                "repository, relative to its root")
        if text == "wheel":
            return cls("wheel", subdirectory=subdirectory)
        if text == "pythonpath" or text.startswith("pythonpath:"):
            return cls("pythonpath", path=text.partition(":")[2].strip("/"), subdirectory=subdirectory)
        return cls("command", command=text, subdirectory=subdirectory)

    @property
    def text(self) -> str:
        """The plan as `--build` spells it."""
        if self.strategy == "pythonpath":
            return "pythonpath" + (f":{self.path}" if self.path else "")
        return self.command if self.strategy == "command" else "wheel"

    def key(self, sha: str, python: str) -> str:
        """The cache key of this plan for one commit; the interpreter counts for builds that compile."""
        plan = {"schema": BUILD_SCHEMA, "plan": self.text, "subdirectory": self.subdirectory,
                "python": python if self.strategy != "pythonpath" else ""}
        digest = hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()[:12]
        return f"{sha[:16]}-{digest}"


def build_dir(target: Any, cache_dir: Path | str, python: str) -> tuple[Path, BuildPlan]:
    """Where the build of a git target is cached, and its plan."""
    plan = BuildPlan.parse(target.build, target.subdirectory or "")
    return Path(cache_dir).expanduser().absolute() / "builds" / plan.key(target.commit, python), plan


def is_built(target: Any, cache_dir: Path | str, python: str) -> bool:
    """Whether a complete build of this target is cached."""
    folder, _ = build_dir(target, cache_dir, python)
    return (folder / "build.json").is_file()


def remembered_failure(target: Any, cache_dir: Path | str, python: str) -> dict[str, Any] | None:
    """The failure recorded by the last build of this target ({"reason", "log_tail", "at"}), or None."""
    folder, _ = build_dir(target, cache_dir, python)
    try:
        return json.loads(folder.with_name(folder.name + ".failed.json").read_text())
    except (OSError, ValueError):
        return None


def prepare(target: Any, cache_dir: Path | str, *, python: str, index: Any = None,
            timeout: float, log: Callable[[str], object] = print) -> list[str]:
    """Build a git target (or take its cached build) and return the requirements that install it.

    Sets the target's name and version from what was built. A pythonpath build returns the package's
    dependencies and sets `target.paths`, the folders each process puts first on its path (the checkout and the
    package's metadata). Raises BuildError when the commit does not build, or when its build runs past `timeout`
    seconds (config's `build_timeout`, which owns the default).
    """
    folder, plan = build_dir(target, cache_dir, python)
    done = _load(folder)
    if done is None:
        folder.parent.mkdir(parents=True, exist_ok=True)
        # of two processes building one commit, one builds and the other waits for it
        shown = target.commit[:12] if target.commit else target.spec
        with locks.exclusive(folder.with_name(folder.name + ".lock"), log=log,
                             waiting=f"waiting for the build of {shown}: another process is building it"):
            done = _load(folder) or _build(target, folder, plan, cache_dir, python, index, log, timeout)
    wheel = folder / done["wheel"]
    name, version, _, _ = parse_wheel_filename(wheel.name)
    target.name, target.version = canonicalize_name(name), str(version)
    if plan.strategy == "pythonpath":
        target.paths = [done["path"], str(folder / METADATA_DIR)]
        return list(done["requires"])
    if done.get("unpacked"):
        target.paths = [str(folder / METADATA_DIR)]
        return list(done["requires"])
    return [str(wheel)]


def _load(folder: Path) -> dict[str, Any] | None:
    try:
        done = json.loads((folder / "build.json").read_text())
    except (OSError, ValueError):
        return None
    if done.get("schema") != BUILD_SCHEMA or not (folder / done["wheel"]).is_file():
        return None
    if done.get("path") is not None and not Path(done["path"]).is_dir():
        return None  # the checkout a pythonpath build points at was removed (`modelci env gc`): check it out again
    return done


def _build(target: Any, folder: Path, plan: BuildPlan, cache_dir: Path | str, python: str, index: Any,
           log: Callable[[str], object], timeout: float) -> dict[str, Any]:
    memo = folder.with_name(folder.name + ".failed.json")
    label = f"commit {target.commit[:12]}" + (f" ({target.subject})" if target.subject else "")
    start = time.monotonic()
    tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        checkout = GitRepo(target.repo, cache_dir).worktree(target.commit)
        project = checkout / plan.subdirectory if plan.subdirectory else checkout
        if not any((project / name).is_file() for name in PROJECT_FILES) and plan.strategy != "command":
            raise BuildError(f"{label} did not build: it has no "
                             f"{plan.subdirectory + '/' if plan.subdirectory else ''}pyproject.toml, setup.cfg or "
                             "setup.py; pass the project folder with #subdirectory= or build it with --build CMD")
        log(f"building {label} ({plan.text})")
        extra: dict[str, Any] = {}
        if plan.strategy == "pythonpath":
            wheel, extra = _pythonpath_build(project, plan, target.commit, tmp, label, python)
        else:
            wheel = _build_wheel(project, plan, target, tmp, cache_dir, python, index, label, timeout)
            extra = _unpack(wheel, tmp / METADATA_DIR)
        done = {"schema": BUILD_SCHEMA, "commit": target.commit, "plan": plan.text, "wheel": wheel.name,
                "python": python, "seconds": round(time.monotonic() - start, 3), **extra}
        (tmp / "build.json").write_text(json.dumps(done, indent=1) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)  # the build becomes visible whole, or not at all
    except BuildError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        memo.write_text(json.dumps({"reason": str(exc), "log_tail": exc.log_tail, "at": time.time()}) + "\n")
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    memo.unlink(missing_ok=True)
    log(f"built {label} in {time.monotonic() - start:.2f}s")
    return done


def _build_wheel(project: Path, plan: BuildPlan, target: Any, tmp: Path, cache_dir: Path | str, python: str,
                 index: Any, label: str, timeout: float) -> Path:
    """`uv build --wheel` or the user's command, in the checkout; the one wheel it made is moved into `tmp`.

    It runs supervised (execute/supervisor.py): past `timeout`, on a cancelled run, or when this process is
    killed, the build ends with every process it started. Under subprocess.run a timeout or a SIGTERM ended the
    shell alone, and the compilers it had started ran on after the run was over."""
    dist = tmp / "dist"
    dist.mkdir()
    env = dict(os.environ, MODELCI_DIST_DIR=str(dist), MODELCI_COMMIT=target.commit, PYTHON=python, NO_COLOR="1")
    env.setdefault("UV_CACHE_DIR", str(Path(cache_dir).expanduser().absolute() / "uv-cache"))
    if plan.strategy == "wheel":
        from modelci.envs import find_uv

        cmd = [find_uv(), "build", "--wheel", "--out-dir", str(dist), "--python", python, *_index_args(index), "."]
        how = "`uv build --wheel`"
    else:
        cmd = ["sh", "-c", plan.command]
        how = f"the build command {plan.command!r}"
    log_path = tmp / "build.log"
    started = time.time()
    with open(log_path, "wb") as out:
        code, _ = supervisor.run(cmd, env, out, out, timeout, cwd=project)
    tail = _tail(log_path)
    if code != 0:
        what = (f"no result after {timeout:g} s (build_timeout; every process it started was ended)" if code is None
                else f"killed by {signal_name(-code)}" if code < 0 else f"exit code {code}")
        log = f"the build log ends with:\n{tail}" if tail.strip() else "the build printed nothing"
        raise BuildError(f"{label} did not build with {how}: {what}; {log}", tail)
    wheels = sorted(dist.glob("*.whl"))
    if not wheels and plan.strategy == "command":
        wheels = sorted(p for p in (project / "dist").glob("*.whl") if p.stat().st_mtime >= started - 1)
    if len(wheels) != 1:
        found = "no wheel" if not wheels else f"{len(wheels)} wheels ({', '.join(p.name for p in wheels)})"
        raise BuildError(f"{label} did not build: {how} succeeded but left {found}; it must leave one .whl in "
                         "$MODELCI_DIST_DIR (or dist/)", tail)
    return Path(shutil.move(str(wheels[0]), tmp / wheels[0].name))


def _unpack(wheel: Path, site: Path) -> dict[str, Any]:
    """Unpack a built wheel into `site` when that is all installing it would do, so that the commit can go on the
    path of the environment of its dependencies, shared by the commits that declare the same ones (one
    environment and one warm worker for a whole bisect, as with pythonpath builds). A wheel that carries more
    than modules and metadata (a `.data` folder: scripts, headers, data files; or a `.pth` file, which works only
    inside site-packages) is installed as it is instead; returns what build.json keeps."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        if any(n.split("/", 1)[0].endswith(".data") or ("/" not in n and n.endswith(".pth")) for n in names):
            return {}
        info = next((n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")), None)
        if info is None:
            return {}
        metadata = email.parser.Parser().parsestr(archive.read(info).decode("utf-8", "replace"))
        archive.extractall(site)
    requires = []
    for text in metadata.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            return {}  # uv will say what is wrong with it when it installs the wheel itself
        # what an extra asks for is not installed with the package; the rest (markers on the python version or
        # the platform) uv judges for the environment's interpreter
        if requirement.marker is not None and "extra" in str(requirement.marker):
            if not requirement.marker.evaluate({"extra": ""}):
                continue
        requires.append(text)
    return {"unpacked": True, "requires": requires}


def _index_args(index: Any) -> list[str]:
    """The user's index options for `uv build`: `uv pip install`'s, less the runtime constraints."""
    if index is None:
        return []
    args, skip = [], False
    for arg in index.uv_args():
        if skip:
            skip = False
        elif arg == "--constraint":
            skip = True
        else:
            args.append(arg)
    return args


def _pythonpath_build(project: Path, plan: BuildPlan, sha: str, tmp: Path, label: str,
                      python: str) -> tuple[Path, dict[str, Any]]:
    """The package's metadata as a dist-info folder in `tmp/site`, and a wheel holding it and a `.pth` file that
    puts the checkout (or a folder of it) on the path; returns the wheel and what build.json keeps: the folder
    that goes on the path and the static dependencies the environment must hold.

    Its name is the project's own (`projectmeta`), so every commit of one project pairs up in compat, baselines
    and bisect; a project whose metadata names no package does not build, with the reason."""
    try:
        meta = projectmeta.of_checkout(project, python)
    except projectmeta.UnparsableFile as exc:
        # not a nameless project: naming the package or building a wheel cannot help, a wheel build reads the
        # same broken file
        raise BuildError(f"{label} did not build: its {exc}, so no build of this commit can read its metadata "
                         "(--build wheel neither); the commit is untestable", str(exc)) from None
    except projectmeta.MetadataError as exc:
        raise BuildError(f"{label} did not build: {exc}; give the package a name in pyproject.toml "
                         "([project] name) or setup.cfg, or build it with --build wheel", str(exc)) from None
    name = str(meta.name)
    try:
        version = Version(str(meta.version or "0")).public
    except InvalidVersion:
        version = "0"
    root = (project / plan.path) if plan.path else (project / "src" if (project / "src").is_dir() else project)
    if not root.is_dir():
        raise BuildError(f"{label} did not build: the pythonpath folder {plan.path!r} is not in the checkout")
    dependencies = list(meta.dependencies)
    dist = canonicalize_name(name).replace("-", "_")
    files = {f"_modelci_checkout_{dist}.pth": f"{root.resolve()}\n"}
    wheel = write_wheel(tmp, name, f"{version}+g{sha[:12]}", files, dependencies)
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp / METADATA_DIR, [n for n in archive.namelist() if ".dist-info/" in n])
    return wheel, {"path": str(root.resolve()), "requires": dependencies}


def write_wheel(directory: Path, name: str, version: str, files: dict[str, str], requires: list[str] = ()) -> Path:
    """Write a pure-Python wheel by hand (no build backend, no network) and return its path."""
    dist = canonicalize_name(name).replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    metadata += [f"Requires-Dist: {req}" for req in requires]
    contents = {path: text.encode() for path, text in files.items()}
    contents[f"{info}/METADATA"] = ("\n".join(metadata) + "\n").encode()
    contents[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: modelci\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for path, data in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    contents[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    wheel = directory / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, data in contents.items():
            entry = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))  # same inputs, same bytes, same env id
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, data, compress_type=zipfile.ZIP_DEFLATED)
    return wheel


def _tail(path: Path, limit: int = LOG_TAIL_CHARS) -> str:
    text = path.read_bytes()[-limit * 2:].decode("utf-8", "replace") if path.exists() else ""
    return text[-limit:].strip()


def declared_workloads(suites: dict[str, Path], pattern: str | None = None) -> list[tuple[str, str]]:
    """(workload id, code hash) of the workloads the suite files declare, read without importing them.

    Discovery imports the suite files inside the environment; when the environment could not be built, the
    classes deriving from `Workload` are read from the source instead (a class assigning `name = "..."` is
    stored under that name). A suite where none is found gets one `<suite>/(build)` entry.
    """
    import ast

    from modelci.workload.child import code_hash, helper_files, suite_files

    found: list[tuple[str, str]] = []
    for suite, folder in suites.items():
        declared = []
        # a base class that a helper (`_common.py`) derives from Workload makes its subclasses workloads too
        helper_bases = {name for helper in helper_files(folder) for name in _workload_bases(helper)}
        for path in suite_files(folder):
            data = path.read_bytes()
            try:
                tree = parse_source(data)
            except SyntaxError:
                continue
            workloads = {"Workload", *helper_bases}
            for node in tree.body:
                if not isinstance(node, ast.ClassDef):
                    continue
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if bases & workloads:
                    workloads.add(node.name)
                    if not node.name.startswith("_"):
                        declared.append((f"{suite}/{_declared_name(node)}", code_hash(path)))
        found += declared or [(f"{suite}/(build)", "")]
    if pattern:
        found = selection.select(pattern, found, lambda entry: entry[0]) or [(f"{suite}/(build)", "")
                                                                              for suite in suites]
    return found


#: CPython 3.11 (seen on 3.11.7) keeps the AST converter's recursion depth in state shared by threads, so
#: two threads parsing at once can fail with "SystemError: AST constructor recursion depth mismatch": bisect's
#: parallel probes read their suites' sources together and one failed so. One parse at a time.
_PARSE_LOCK = threading.Lock()


def parse_source(source: bytes) -> Any:
    """`ast.parse(source)`, one thread at a time (see _PARSE_LOCK)."""
    import ast

    with _PARSE_LOCK:
        return ast.parse(source)


def _workload_bases(path: Path) -> set[str]:
    """Names of the classes a helper file derives from Workload, read from its source."""
    import ast

    try:
        tree = parse_source(path.read_bytes())
    except (SyntaxError, ValueError):
        return set()
    found = {"Workload"}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                                               for b in node.bases} & found:
            found.add(node.name)
    return found - {"Workload"}


def _declared_name(node: Any) -> str:
    import ast

    for statement in node.body:
        if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name) and statement.targets[0].id == "name"
                and isinstance(statement.value, ast.Constant) and isinstance(statement.value.value, str)):
            return statement.value.value
    return node.name


def declared_needs(suites: dict[str, Path], pattern: str | None = None, provided: tuple[str, ...] = ()) -> list[str]:
    """What the selected workloads of the suites need besides the target, read from their source without
    importing it: each workload class's literal `requires` and the distributions of its `framework`, following
    class attributes through base classes (a `_Base` in the file, or one in a `_*.py` helper of the suite).

    A git target's first environment gets these, so that the suite's pins are in it before discovery: a package
    that depends on `torch` must not pull a default torch build first when the suite pins `torch==2.13.0`, only
    to be replaced in a second environment once discovery names the pin. What cannot be read statically (a
    computed `requires`) is still found by discovery and added then. `provided`: the distributions the target
    itself is (a framework built from source needs no release of itself).
    """
    import ast

    from modelci.workload.child import helper_files, suite_files
    from modelci.workload import frameworks

    def literal(node: Any) -> Any:
        try:
            return ast.literal_eval(node)
        except (ValueError, SyntaxError, TypeError):
            return None

    needs: list[str] = []
    for suite, folder in suites.items():
        classes: dict[str, tuple[list[str], dict[str, Any]]] = {}
        files = []
        for path in [*helper_files(folder), *suite_files(folder)]:
            try:
                tree = parse_source(path.read_bytes())
            except (SyntaxError, ValueError, OSError):
                continue
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                    attrs = {s.targets[0].id: literal(s.value) for s in node.body if isinstance(s, ast.Assign)
                             and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)}
                    classes[node.name] = (bases, attrs)
                    if path.name in {p.name for p in suite_files(folder)}:
                        files.append(node.name)

        def lookup(name: str, attr: str, seen: frozenset = frozenset()) -> Any:
            if name not in classes or name in seen:
                return None
            bases, attrs = classes[name]
            if attr in attrs:
                return attrs[attr]
            return next((v for b in bases if (v := lookup(b, attr, seen | {name})) is not None), None)

        def is_workload(name: str, seen: frozenset = frozenset()) -> bool:
            bases = classes.get(name, ([], {}))[0]
            return "Workload" in bases or any(b not in seen and is_workload(b, seen | {name}) for b in bases)

        declared = {f"{suite}/{lookup(name, 'name') or name}": name for name in files
                    if not name.startswith("_") and is_workload(name)}
        for workload_id in selection.select(pattern, declared):
            name = declared[workload_id]
            requires = lookup(name, "requires")
            framework = lookup(name, "framework")
            wanted = [r for r in requires if isinstance(r, str)] if isinstance(requires, (list, tuple)) else []
            wanted += frameworks.requirements(framework if isinstance(framework, str) else "numpy", provided)
            needs += [r for r in wanted if r not in needs]
    return needs
