"""`modelci env export RUN --out DIR`: a bundle that reproduces a run elsewhere.

The bundle holds the lock (`lock.txt`), the fingerprint (`fingerprint.json`), `bundle.json` (what was run
and the sha256 of every output it gave), a Dockerfile that pins the base image by Python version and
installs the lock, and `reproduce.sh`, which rebuilds the environment from the lock without Docker and
reruns the run's workloads with modelci. Suite folders and the local wheels the lock names are copied in,
so the bundle needs nothing but modelci and the package index.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelci.envs.build import find_uv, sha256_file
from modelci.envs.refs import BUNDLE_FINGERPRINT, BUNDLE_LOCK, EnvRecord, lock_target
from modelci.errors import UserError
from modelci.workload.child import code_hash

#: bump when the bundle's layout or bundle.json's keys change; readers refuse other versions
BUNDLE_SCHEMA = "modelci.bundle/1"
BUNDLE_MANIFEST = "bundle.json"
#: Docker's name for a platform tag's machine (linux only: the image is a linux image)
_DOCKER_PLATFORMS = {"linux-x86_64": "linux/amd64", "linux-aarch64": "linux/arm64"}


@dataclass
class Bundle:
    """An export bundle as written: its folder, and notes the user should read (what could not be included)."""

    path: Path
    notes: list[str] = field(default_factory=list)


def export(record: EnvRecord, out: str | Path, root: Path, settings: dict[str, Any]) -> Bundle:
    """Write the bundle of the run in `record` into the empty or new folder `out`.

    `root` is where the run's relative suite folders are found (the config file's folder); `settings` are
    the options written into the bundle's modelci.toml (seed, timeout, repeats, threads).
    """
    run = record.run
    if run is None:
        raise UserError(f"{record.label} is not a run: export needs a run id (`modelci history` lists them)")
    if run["target_kind"] == "current":
        raise UserError(f"run {run['id']} used the `current` interpreter, not an isolated environment: its lock "
                        "lists the harness's own packages and cannot be rebuilt. Export a run of a target")
    if not str(out).strip():  # Path("") is the current folder: the message named "." as not empty
        raise UserError(f"--out {str(out)!r}: give the folder to export into (a new or empty one)")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file; export into a new or empty folder")
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} is not empty; export into a new or empty folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot make the folder ({exc.strerror or exc}); export into a folder you "
                        "can write") from None
    bundle = Bundle(out)
    lock = record.to_lock()
    lock.target = lock_target(run)
    target_arg = _copy_wheels(lock, out, run, bundle.notes)
    _note_local_repository(run, lock.target, bundle.notes)
    suites = _copy_suites(run, out, root, bundle.notes)
    (out / BUNDLE_LOCK).write_text(lock.render())
    (out / BUNDLE_FINGERPRINT).write_text(json.dumps(record.fingerprint, indent=2, sort_keys=True) + "\n")
    manifest = {
        "schema": BUNDLE_SCHEMA,
        "run": run["id"], "runner": run["runner"], "environment": record.id,
        "target": {"spec": run["target_spec"], "kind": run["target_kind"], "name": run["target_name"],
                   "version": run["target_version"]},
        "suites": suites, "selection": run["selection"], "settings": settings,
        "results": {r.workload: {"status": r.status, "outputs": _digests(r)} for r in run["results"]},
    }
    (out / BUNDLE_MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    (out / "modelci.toml").write_text(_config_text(settings))
    (out / "Dockerfile").write_text(dockerfile(lock, record.fingerprint, run, bool(lock.wheels)))
    script = out / "reproduce.sh"
    script.write_text(reproduce_script(run, target_arg, suites))
    script.chmod(0o755)
    _check_code(run, out, bundle.notes)
    return bundle


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """bundle.json of an export bundle; another schema is a UserError."""
    path = Path(folder) / BUNDLE_MANIFEST
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {path}: {exc}; is {folder} an export bundle (`modelci env export`)?") from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema != BUNDLE_SCHEMA:
        raise UserError(f"{path} has schema {schema!r}; this modelci reads {BUNDLE_SCHEMA!r}. "
                        "Use the modelci that wrote it")
    return data


def dockerfile(lock: Any, fingerprint: dict, run: dict[str, Any], has_wheels: bool) -> str:
    """A Dockerfile whose base image is pinned by the run's Python version and which installs the lock."""
    version = str(fingerprint.get("python") or lock.python)
    platform = _DOCKER_PLATFORMS.get(lock.platform)
    lines = [f"# The environment of run {run['id']} (target {run['target_spec']}, runner {run['runner']}), "
             f"rebuilt from {BUNDLE_LOCK}.", f"# Written by modelci; bundle schema {BUNDLE_SCHEMA}."]
    if platform is None:
        lines.append(f"# The lock was made on {lock.platform}; this linux image may not hold the same wheels.")
    if lock.implementation.lower() != "cpython":
        lines.append(f"# The lock was made on {lock.implementation}; this image runs CPython.")
    lines.append(f"FROM {'--platform=' + platform + ' ' if platform else ''}python:{version}-slim")
    lines.append(f'RUN pip install --no-cache-dir "uv=={_uv_version()}"')
    lines.append("WORKDIR /bundle")
    lines.append(f"COPY {BUNDLE_LOCK} ./")
    find_links = ""
    if has_wheels:
        lines.append("COPY wheels/ ./wheels/")
        find_links = " --find-links /bundle/wheels"
    lines.append(f"RUN uv venv /opt/env && uv pip sync --python /opt/env/bin/python{find_links} {BUNDLE_LOCK}")
    lines.append("ENV VIRTUAL_ENV=/opt/env PATH=/opt/env/bin:$PATH")
    return "\n".join(lines) + "\n"


def reproduce_script(run: dict[str, Any], target_arg: str, suites: list[str]) -> str:
    """reproduce.sh: rebuild the environment from the lock (no Docker) and rerun the run's workloads."""
    suite_args = " ".join(f'--suite "$HERE/{s}"' if not s.startswith("zoo:") else f"--suite {shlex.quote(s)}"
                          for s in suites)
    target = f'"$HERE/{target_arg}"' if target_arg.startswith("wheels/") else shlex.quote(target_arg)
    select = f" -k {shlex.quote(run['selection'])}" if run["selection"] else ""
    return f"""#!/bin/sh
# Reproduce run {run['id']} (target {run['target_spec']}, runner {run['runner']}) without Docker:
# rebuild its environment exactly from lock.txt, then rerun its workloads with modelci.
# Needs modelci (set MODELCI to the command if it is not on PATH, e.g. MODELCI="python -m modelci.cli")
# and a python matching lock.txt (the `python` option, or MODELCI_PYTHON). Results go to a fresh history
# in ./reproduced (MODELCI_REPRODUCE_DIR), or where MODELCI_REPRODUCE_DB / MODELCI_REPRODUCE_ARTIFACTS say;
# bundle.json lists the expected outputs. MODELCI_DB and MODELCI_ARTIFACTS are not read: a CI job that exports
# them for the team's history would otherwise store the reproduction there.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
MODELCI=${{MODELCI:-modelci}}
WORK=${{MODELCI_REPRODUCE_DIR:-$HERE/reproduced}}
mkdir -p "$WORK"
export MODELCI_DB="${{MODELCI_REPRODUCE_DB:-$WORK/history.db}}"
export MODELCI_ARTIFACTS="${{MODELCI_REPRODUCE_ARTIFACTS:-$WORK/artifacts}}"
# MODELCI_REPRODUCE_TARGET: the same build from elsewhere (a clone of a git target's repository on another machine)
TARGET={target}
TARGET=${{MODELCI_REPRODUCE_TARGET:-$TARGET}}
RUNNER={shlex.quote(run['runner'])}
export MODELCI_RUNNER="${{MODELCI_RUNNER:-$RUNNER}}"
cd "$HERE"
exec $MODELCI --config "$HERE/modelci.toml" run --lock "$HERE/{BUNDLE_LOCK}" --target "$TARGET" {suite_args}{select} \\
    --json "$WORK/report.json" "$@"
"""


def _copy_wheels(lock: Any, out: Path, run: dict[str, Any], notes: list[str]) -> str:
    """Copy the lock's local wheels into `out/wheels`; the target argument for reproduce.sh."""
    target_arg = lock.target
    for wheel in lock.wheels:
        source = Path(str(wheel.get("path", "")))
        if not source.is_file() or sha256_file(source) != wheel.get("sha256"):
            notes.append(f"wheel {source} is gone or changed since the run: the bundle relies on the package index "
                         f"for {wheel.get('name')} {wheel.get('version')}")
            continue
        (out / "wheels").mkdir(exist_ok=True)
        shutil.copy2(source, out / "wheels" / source.name)
        wheel["path"] = f"wheels/{source.name}"
        if run["target_kind"] == "wheel" and Path(run["target_spec"]).name == source.name:
            target_arg = wheel["path"]
    return target_arg


def local_repository(spec: str) -> str | None:
    """The folder of a git target's repository when it is a path of this machine (a path or file:// URL, not
    a URL another machine reaches), else None."""
    from modelci.targets import parse_git_spec

    url = parse_git_spec(spec)[0]
    if url.startswith("file://"):
        return url.removeprefix("file://")
    if "://" in url or re.match(r"^[\w.-]+@[\w.-]+:", url):  # https://, ssh://, or scp-like git@host:repo
        return None
    return url


def _note_local_repository(run: dict[str, Any], target: str, notes: list[str]) -> None:
    """A git target built from a folder of this machine is not in the bundle: say what another machine needs."""
    if run["target_kind"] != "git":
        return
    folder = local_repository(run["target_spec"])
    commit = (run.get("target_commit") or "")[:12]
    if folder is not None:
        notes.append(f"the target is built from the git repository {folder}, a folder of this machine: elsewhere, "
                     f"run reproduce.sh with MODELCI_REPRODUCE_TARGET=git+URL@{commit or 'COMMIT'} (a clone that "
                     f"holds that commit, with the same #build option as {target})")
    notes.append("the Dockerfile's image holds the environment without the target, a git build; reproduce.sh "
                 "builds it")


def _copy_suites(run: dict[str, Any], out: Path, root: Path, notes: list[str]) -> list[str]:
    suites = []
    for spec in run["suites"]:
        if spec.startswith("zoo:"):
            suites.append(spec)
            continue
        folder = Path(spec) if Path(spec).is_absolute() else root / spec
        if not folder.is_dir():
            raise UserError(f"run {run['id']} ran suite {spec!r}, which is not a folder under {root}; "
                            "export from the project the run was made in")
        name = f"suites/{folder.resolve().name}"
        shutil.copytree(folder, out / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        suites.append(name)
    return suites


def _check_code(run: dict[str, Any], out: Path, notes: list[str]) -> None:
    """Note workloads whose code changed since the run: reproducing them runs the new code."""
    # a workload's code_hash covers its file and the helpers (`_*.py`) beside it
    hashes = {code_hash(p) for p in (out / "suites").rglob("*.py")} if (out / "suites").is_dir() else set()
    changed = [r.workload for r in run["results"]
               if r.code_hash and hashes and r.code_hash not in hashes and not r.workload.startswith("zoo")]
    if changed:
        notes.append("the code of " + ", ".join(sorted(changed)) + " changed since the run; the bundle holds the "
                     "current code")


def _digests(result: Any) -> dict[str, str]:
    digests = getattr(result.outputs, "digests", None)
    return digests() if callable(digests) else {}


def _config_text(settings: dict[str, Any]) -> str:
    lines = ["# settings at export time; MODELCI_* variables still override them"]
    for key, value in settings.items():
        lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def _uv_version() -> str:
    proc = subprocess.run([find_uv(), "--version"], capture_output=True, text=True, timeout=60)
    parts = proc.stdout.split()
    return parts[1] if proc.returncode == 0 and len(parts) > 1 else "0.5"


