"""Build, cache and lock environments with uv (docs/design.md, vocabulary: "environment").

An environment is a uv venv in `<cache_dir>/envs/<spec id>/`, where the spec id is the hash of its spec. The
spec is written into the venv last, once install, lock and fingerprint have succeeded, and a venv is reused only
when that file matches (docs/design.md: "Mark a cache valid only once it is complete"). Anything else in its place
is a half-built environment from a killed build: it is deleted and built again.

The environment's own id is defined by its content (`lockfile` explains why), so an environment rebuilt
from a lock (`EnvSpec.lock`, installed with `uv pip sync`) carries the same id as the one it was locked from.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from modelci import locks
from modelci.envs import lockfile
from modelci.envs.fingerprint import collect, numerics_env, parse_lock
from modelci.envs.pipconfig import IndexConfig
from modelci.errors import HarnessError, UserError, no_space_in
from modelci.execute import supervisor
from modelci.workload.lifeline import CANNOT_RUN

#: bump when the layout of an environment or the meaning of its spec changes: old environments then rebuild
SPEC_SCHEMA = 1
SPEC_FILE = "modelci-env.json"
LOCK_FILE = "modelci-lock.txt"
FINGERPRINT_FILE = "modelci-fingerprint.json"
#: what the build noted of the requirements (an extra the package does not have), said again at each reuse
NOTES_FILE = "modelci-notes.txt"
#: touched each time a cached environment is handed out, so `gc` knows what is in use
LAST_USED_FILE = "modelci-last-used"
#: beside `<id>/`: the file every process that uses the environment holds a shared lock on (`env gc` skips it)
IN_USE_SUFFIX = ".use"

_ARCHIVE_SUFFIXES = (".whl", ".tar.gz", ".zip", ".tar.bz2", ".tgz")


@dataclass
class EnvSpec:
    """What an environment holds: requirements installed over a base interpreter, from the given indexes."""

    requirements: list[str]
    python: str = sys.executable
    index: IndexConfig = field(default_factory=IndexConfig)
    #: when set, the environment is exactly this lock (`uv pip sync`) and `requirements` must be empty
    lock: lockfile.Lock | None = None

    def __post_init__(self) -> None:
        # uv runs in the cache folder, so relative paths must be made absolute while the user's cwd is known.
        self.requirements = [_absolute_if_path(req) for req in self.requirements]
        if os.sep in self.python:
            self.python = os.path.abspath(self.python)

    def to_json(self) -> dict:
        """The canonical spec; local wheel files are included by content, so a rebuilt wheel gets a new id."""
        # constraint files too: editing one must not hand out an environment built under the old text
        local = [*self.requirements, *self.index.constraints]
        files = {path: sha256_file(path) for path in local if os.path.isfile(path)}
        spec = {
            "schema": SPEC_SCHEMA,
            "requirements": list(self.requirements),
            "python": self.python,
            "index": self.index.to_json(),
            "files": files,
        }
        if self.lock is not None:
            spec["lock"] = self.lock.to_json()
        return spec

    def id(self) -> str:
        """The spec id, which names the cache folder: 16 hex digits of the sha256 of the canonical spec JSON."""
        return _digest(self.to_json())

    def build_info(self) -> dict:
        """How the environment was made, kept in its fingerprint: requested requirements, local wheels, constraints."""
        if self.lock is not None:
            return {"requested": list(self.lock.requested), "target": self.lock.target, "wheels": self.lock.wheels,
                    "constraints": _files(self.index.constraints), "from_lock": self.lock.environment}
        wheels = []
        for req in self.requirements:
            if req.endswith(".whl") and os.path.isfile(req):
                name, version, _, _ = parse_wheel_filename(os.path.basename(req))
                wheels.append({"name": canonicalize_name(str(name)), "version": str(version), "path": req,
                               "sha256": sha256_file(req)})
        return {"requested": list(self.requirements), "wheels": wheels, "constraints": _files(self.index.constraints)}


@dataclass
class Environment:
    """An environment ready to run workloads: its id (by content), interpreter, exact pins (lock), fingerprint."""

    id: str
    path: Path | None
    python: Path
    spec: EnvSpec | None
    lock: str
    fingerprint: dict
    isolated: bool
    #: folders every process in it puts first on its path: a pythonpath build's checkout and metadata, which the
    #: environment itself does not hold, so that commits declaring the same dependencies share it
    paths: list[str] = field(default_factory=list)


def ensure(spec: EnvSpec, cache_dir: Path, *, log: Callable[[str], object] = print,
           environ: Mapping[str, str] | None = None, compile_bytecode: bool = True) -> Environment:
    """Return the cached environment for `spec`, building it if needed (uv venv + uv pip install, or sync).

    `environ` is what the workloads will see (thread variables and the like); the fingerprint is probed under
    it, and probed again when a cached environment is handed out under other numerics variables.
    Without `compile_bytecode` the packages are installed without compiling their modules to bytecode (uv's
    default): for an environment that lives only for a bisect, where `--compile-bytecode` took 10.9 s of an
    install that takes 0.4 s from a warm uv cache without it; Python compiles what it imports instead. The
    environment is the same either way (the same spec, the same id), so it is not built again for a run.
    A requirement whose extra the package does not have (`numpy[bogus]`) installs the package without it, as
    pip and uv do; the build says so in a `note:` line, and so does each reuse of the environment.
    Raises UserError when a requirement cannot be installed or a lock cannot be rebuilt exactly, and
    HarnessError when uv cannot be found.
    """
    cache_dir = Path(cache_dir).absolute()
    environ = dict(os.environ if environ is None else environ)
    spec_json = spec.to_json()
    spec_id = _digest(spec_json)
    envs_dir = cache_dir / "envs"
    envs_dir.mkdir(parents=True, exist_ok=True)
    path = envs_dir / spec_id
    # in use from here until this process ends: `env gc` skips it. A run's workloads started from this
    # environment lost their python to a gc, and the run ended in a traceback with nothing stored
    locks.hold_shared(envs_dir / f"{spec_id}{IN_USE_SUFFIX}")
    with _build_lock(envs_dir / f"{spec_id}.lock", log):
        env = _load(path, spec, spec_json, environ, log)
        if env is not None:
            return env
        if path.exists():
            log(f"removing incomplete environment {path}")
            shutil.rmtree(path)
        return _build(path, spec, spec_json, cache_dir, log, environ, compile_bytecode)


def current(cache_dir: Path, *, environ: Mapping[str, str] | None = None) -> Environment:
    """The running interpreter as it is, without isolation (target `current`); id derives from its lock + python."""
    cache_dir = Path(cache_dir).absolute()
    cache_dir.mkdir(parents=True, exist_ok=True)
    python = Path(sys.executable)
    lock = _lock(find_uv(), python, cache_dir)
    return Environment(
        id=_digest({"python": str(python), "lock": lock}),
        path=None,
        python=python,
        spec=None,
        lock=lock,
        fingerprint=collect(python, lock, environ=environ),
        isolated=False,
    )


def installed_version(env: Environment, dist_name: str) -> str | None:
    """The version of distribution `dist_name` pinned in the environment's lock, or None if absent."""
    return parse_lock(env.lock).get(canonicalize_name(dist_name))


def find_uv() -> str:
    """The uv binary: MODELCI_UV if set, else the one from the `uv` package, else uv on PATH."""
    explicit = os.environ.get("MODELCI_UV")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise HarnessError(f"MODELCI_UV={explicit} is not an executable uv binary; fix or unset it.")
        return explicit
    try:
        import uv as uv_package

        return uv_package.find_uv_bin()
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("uv")
    if found:
        return found
    raise HarnessError("uv was not found: install it with `pip install uv` (a dependency of modelci).")


# --- building ---------------------------------------------------------------------------------------------


def _build(
    path: Path, spec: EnvSpec, spec_json: dict, cache_dir: Path, log: Callable[[str], object],
    environ: dict[str, str], compile_bytecode: bool = True,
) -> Environment:
    uv = find_uv()
    what = f"from lock {spec.lock.environment}" if spec.lock else ", ".join(spec.requirements) or "no requirements"
    log(f"building environment in {path} ({what})")
    start = time.monotonic()
    try:
        # No --seed: the environment holds the requirements and nothing else, not even pip.
        proc = _run_uv(uv, ["venv", "--python", spec.python, "--no-project", str(path)], cache_dir)
        if proc.returncode != 0:
            raise UserError(
                f"could not create environment {path} from python {spec.python}: {_uv_reason(proc.stderr)}\n"
                "Point the environment's python at an existing interpreter."
            )
        python = _env_python(path)
        if spec.lock is not None:
            _check_lock_platform(spec.lock, python)
            _sync(uv, python, spec, path, cache_dir, log)
        elif spec.requirements:
            compiling = ["--compile-bytecode"] if compile_bytecode else []
            args = ["pip", "install", *compiling, "--python", str(python), *spec.index.uv_args(), *spec.requirements]
            proc = _run_uv(uv, args, cache_dir, log)
            if proc.returncode != 0:
                raise UserError(
                    f"could not install {_culprits(spec.requirements, proc.stderr)} into environment {path}: "
                    f"{_uv_reason(proc.stderr)}\n"
                    "Check the requirement and where packages come from "
                    "(`pip config list`, MODELCI_INDEX_URL, MODELCI_FIND_LINKS)."
                )
            notes = unknown_extras(spec.requirements, proc.stderr)
            for note in notes:
                log(f"note: {note}")
            if notes:
                (path / NOTES_FILE).write_text("".join(f"{note}\n" for note in notes))
        lock = _lock(uv, python, cache_dir)
        fingerprint = collect(python, lock, environ=environ, build=spec.build_info())
        if spec.lock is not None:
            _check_rebuilt(spec.lock, lock, fingerprint, log)
        (path / LOCK_FILE).write_text(lock)
        (path / FINGERPRINT_FILE).write_text(json.dumps(fingerprint, indent=2, sort_keys=True) + "\n")
        # Last, and atomically: its presence is what marks the environment complete.
        _write_atomic(path / SPEC_FILE, json.dumps(spec_json, indent=2, sort_keys=True) + "\n")
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    (path / LAST_USED_FILE).touch()
    env_id = lockfile.id_of(lock, fingerprint)  # the id by content that runs and reports show, not the folder's
    log(f"built environment {env_id} in {time.monotonic() - start:.1f}s")
    return Environment(env_id, path, python, spec, lock, fingerprint, isolated=True)


def _load(path: Path, spec: EnvSpec, spec_json: dict, environ: dict[str, str],
          log: Callable[[str], object] = print) -> Environment | None:
    """The complete environment at `path` if its stored spec equals `spec_json`, else None; what its build
    noted is said again."""
    try:
        stored = json.loads((path / SPEC_FILE).read_text())
        lock = (path / LOCK_FILE).read_text()
        fingerprint = json.loads((path / FINGERPRINT_FILE).read_text())
    except (OSError, ValueError):
        return None
    python = _env_python(path)
    if stored != spec_json or not python.exists():
        return None
    if fingerprint.get("numerics_env") != numerics_env(environ) or fingerprint.get("cpu_usable") != _usable_cpus():
        # thread counts follow these: the fingerprint must describe what the workloads will see
        fingerprint = collect(python, lock, environ=environ, build=fingerprint.get("build") or spec.build_info())
        _write_atomic(path / FINGERPRINT_FILE, json.dumps(fingerprint, indent=2, sort_keys=True) + "\n")
    try:
        notes = (path / NOTES_FILE).read_text().splitlines()
    except OSError:  # none: the build noted nothing
        notes = []
    for note in notes:
        log(f"note: {note}")
    (path / LAST_USED_FILE).touch()
    return Environment(lockfile.id_of(lock, fingerprint), path, python, spec, lock, fingerprint, isolated=True)


def _sync(uv: str, python: Path, spec: EnvSpec, path: Path, cache_dir: Path,
          log: Callable[[str], object] | None = None) -> None:
    """Install exactly the lock's pins (`uv pip sync`); local wheels the lock names are found where they were."""
    assert spec.lock is not None
    pins = path / "modelci-sync.txt"
    pins.write_text(spec.lock.body())
    folders, missing = [], []
    for wheel in spec.lock.wheels:
        where = str(wheel.get("path", ""))
        if os.path.isfile(where) and sha256_file(where) == wheel.get("sha256"):
            folders.append(os.path.dirname(where))
        else:
            missing.append(f"{where} ({'changed since' if os.path.isfile(where) else 'not there'})")
    index = dataclasses.replace(spec.index, find_links=[*spec.index.find_links, *dict.fromkeys(folders)])
    proc = _run_uv(uv, ["pip", "sync", "--compile-bytecode", "--python", str(python), *index.uv_args(), str(pins)],
                   cache_dir, log)
    pins.unlink()
    if proc.returncode != 0:
        # a lock made on another machine, or whose wheels were moved: uv says only that no version fits
        gone = (f"\nThe lock's local wheel files are not where it says: {', '.join(missing)}; put them back, or add "
                "the folder that holds them to MODELCI_FIND_LINKS.") if missing else ""
        raise UserError(
            f"could not rebuild environment {spec.lock.environment} from its lock into {path}: "
            f"{_uv_reason(proc.stderr)}\nThe locked versions must be available from the configured indexes "
            f"(`pip config list`, MODELCI_FIND_LINKS) or the lock's wheel files.{gone}"
        )


def _check_lock_platform(lock: lockfile.Lock, python: Path) -> None:
    code = "import json, platform, sysconfig; print(json.dumps([platform.python_implementation(), " \
           "platform.python_version(), sysconfig.get_platform()]))"
    proc = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise HarnessError(f"could not run the environment's python {python}: {proc.stderr.strip()[-500:]}")
    implementation, version, platform = json.loads(proc.stdout)
    where = lock.file or f"the lock of environment {lock.environment}"
    lockfile.check_platform(lock, where, implementation, version, platform, str(python))


def _check_rebuilt(lock: lockfile.Lock, lock_text: str, fingerprint: dict, log: Callable[[str], object]) -> None:
    """Raise a UserError unless the rebuilt environment is exactly the locked one (same versions and files)."""
    rebuilt = lockfile.Lock.of(lock_text, fingerprint)
    if rebuilt.pins != lock.pins:
        changed = sorted(n for n in set(lock.pins) | set(rebuilt.pins) if lock.pins.get(n) != rebuilt.pins.get(n))
        raise UserError("the environment rebuilt from the lock differs from it: " + ", ".join(
            f"{n} {lock.pins.get(n, '(absent)')} -> {rebuilt.pins.get(n, '(absent)')}" for n in changed))
    files = sorted(n for n, digest in lock.digests.items() if rebuilt.digests.get(n, digest) != digest)
    if files:
        raise UserError(
            f"the environment rebuilt from the lock has the locked versions but other files for {', '.join(files)}: "
            "the wheels found now are not the ones locked (a rebuilt wheel with the same version?). "
            "Put the original wheels where the configured indexes find them"
        )
    if rebuilt.id() != lock.environment:
        log(f"the rebuilt environment is {rebuilt.id()}, the lock says {lock.environment}: an edited lock, or one "
            "from an older modelci")


def _lock(uv: str, python: Path, cache_dir: Path) -> str:
    """Exact pins of everything installed for `python`, one "name==version" per line, sorted by name."""
    # `uv pip list`, not `uv pip freeze`: freeze prints "name @ file:///..." for local wheels, not pins.
    proc = _run_uv(uv, ["pip", "list", "--python", str(python), "--format", "json"], cache_dir)
    if proc.returncode != 0:
        raise HarnessError(f"could not list the packages of {python}: {_uv_reason(proc.stderr)}")
    packages = json.loads(proc.stdout or "[]")
    pins = sorted((canonicalize_name(pkg["name"]), pkg["version"]) for pkg in packages)
    return "".join(f"{name}=={version}\n" for name, version in pins)


@contextmanager
def _build_lock(lock_path: Path, log: Callable[[str], object]) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path`: of two processes building one environment, one waits."""
    # The lock file is left in place: deleting it would let a third process lock a different inode.
    with locks.exclusive(lock_path, log=log, waiting=f"waiting for the environment in {lock_path.with_suffix('')}: "
                                                     "another process is building it"):
        yield


# --- uv ---------------------------------------------------------------------------------------------------


def _run_uv(uv: str, args: list[str], cache_dir: Path,
            log: Callable[[str], object] | None = None) -> subprocess.CompletedProcess[str]:
    """Run uv and keep what it printed; with `log`, each of its progress lines (`Resolved 12 packages in 1.2s`,
    `Downloading torch (170.3MiB)`, `Installed ...`) is passed on as uv prints it, so that a build of minutes
    is not silent. The list of packages it installs (` + name==version`) is not: the lock says it."""
    env = dict(os.environ)
    # Runs share uv's cache, but a user's own UV_CACHE_DIR wins.
    env.setdefault("UV_CACHE_DIR", str(cache_dir / "uv-cache"))
    env["NO_COLOR"] = "1"  # plain "error:" / "cause:" lines, which _uv_reason reads
    # Supervised (execute/supervisor.py): a cancelled run ends uv and the sdist builds it started. Under a plain
    # Popen a SIGTERM waited for uv to finish (minutes, for a download or a build), and a SIGKILL left it running.
    # cwd=cache_dir: the project around the user's cwd (pyproject, uv.toml) must not steer the build.
    proc = supervisor.start([uv, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cache_dir)
    reader = None
    try:
        if log is None:
            out, err = proc.communicate()
        else:
            stdout: list[str] = []
            reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)
            reader.start()
            stderr = []
            for line in proc.stderr:
                stderr.append(line)
                text = line.strip()
                if text and not line.startswith((" + ", " - ", " ~ ")) and not text.startswith(
                        ("error:", "×", "╰", "│")) and not _UNKNOWN_EXTRA.match(text):  # the caller notes those
                    log(f"uv: {text}")
            reader.join()
            out, err = "".join(stdout), "".join(stderr)
        code = proc.wait()
    except BaseException:
        supervisor.stop(proc)
        raise
    finally:
        if reader is not None:
            reader.join(timeout=10)  # uv is gone, so its pipe ends: the reader must not find its file closed
        for stream in (proc.stdout, proc.stderr):
            stream.close()
    if code == 127 and err.startswith(CANNOT_RUN):
        raise HarnessError(f"could not run uv ({uv}): {err.strip()}")
    if code != 0 and no_space_in(err):
        # not the requirement's fault nor the index's, which is what each caller's message would advise
        raise HarnessError(f"uv found no room on the disk of the environments' cache ({cache_dir}): "
                           f"{_uv_reason(err)}\nFree space there, or set cache_dir (MODELCI_CACHE_DIR) to a folder "
                           "on a bigger disk; `modelci env gc` removes the environments no run needs")
    return subprocess.CompletedProcess([uv, *args], code, out, err)


def _uv_reason(stderr: str) -> str:
    """The meaningful lines of uv's stderr: from its first "error:" on, at most six of them."""
    lines = [line.strip().lstrip("×╰─▶│ ").strip() for line in stderr.splitlines()]
    lines = [line for line in lines if line]
    starts = [i for i, line in enumerate(lines) if line.startswith("error:")]
    reason = lines[starts[0] :] if starts else lines[-4:]
    if reason:
        reason[0] = reason[0].removeprefix("error:").strip()  # the caller's message already says it failed
    return "\n  ".join(reason[:6]) or "uv failed without a message"


#: uv's warning for a requested extra that the package does not define; it installs the package without it
#: (uv quotes with backticks, and ends it with a period in some versions)
_UNKNOWN_EXTRA = re.compile(r"warning: The package [`'](?P<package>[^`']+)[`'] does not have an extra named "
                            r"[`'](?P<extra>[^`']+)[`']")


def unknown_extras(requirements: list[str], stderr: str) -> list[str]:
    """What to say of each extra uv warned the package does not have (`numpy[bogus]==2.1.3`): the environment
    holds the package without it, which nothing else says. Named by the requirement that asked for it, where one
    of `requirements` did (a dependency's extra, or one of a wheel path, is named by its package alone)."""
    notes = []
    for found in _UNKNOWN_EXTRA.finditer(stderr):
        package, extra = found["package"], canonicalize_name(found["extra"])
        name = canonicalize_name(re.split(r"[=<>!~ @\[;]", package, maxsplit=1)[0])
        asked = [req for req in requirements if _asks_for(req, name, extra)]
        if asked:
            notes.append(f"{asked[0]} asks for the extra {extra!r}, which {package} does not have: the environment "
                         f"holds {name} without it; check the extra's name")
        else:  # a dependency's, or a requirement written as a wheel path or URL
            notes.append(f"the extra {extra!r} of {name} was asked for, but {package} does not have it: the "
                         f"environment holds {name} without it")
    return list(dict.fromkeys(notes))


def _asks_for(req: str, name: str, extra: str) -> bool:
    """Whether requirement `req` names package `name` with `extra` (both normalized, as uv prints them)."""
    try:
        parsed = Requirement(req)
    except InvalidRequirement:  # a wheel path or a URL: uv's warning then names the package, not this text
        return False
    return canonicalize_name(parsed.name) == name and extra in {canonicalize_name(e) for e in parsed.extras}


def _culprits(requirements: list[str], stderr: str) -> str:
    """The requirements uv's message names, or all of them when it names none."""
    named = [req for req in requirements if req in stderr or _requirement_name(req) in stderr]
    return ", ".join(named or requirements)


def _requirement_name(req: str) -> str:
    for stop in "<>=!~;[@ ":
        req = req.split(stop, 1)[0]
    return req.strip() or "\0"  # "\0" never appears in stderr, so an empty name matches nothing


# --- small helpers ----------------------------------------------------------------------------------------


def _usable_cpus() -> int | None:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _files(paths: list[str]) -> list[dict]:
    return [{"path": p, "sha256": sha256_file(p) if os.path.isfile(p) else ""} for p in paths]


def _env_python(path: Path) -> Path:
    return path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _absolute_if_path(req: str) -> str:
    looks_like_path = os.sep in req or req.endswith(_ARCHIVE_SUFFIXES)
    return os.path.abspath(req) if looks_like_path and os.path.exists(req) else req


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks (wheels are large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _digest(obj: dict) -> str:
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
