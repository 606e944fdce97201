"""A project's distribution name, version and dependencies, read from its own metadata.

A git-commit target is named after the package it builds, never after the commit or the checkout folder: two
commits of one project must carry the same name, or compat, baselines and bisect cannot pair them up. The
metadata is read where the project keeps it, in this order:

- `pyproject.toml`, `[project]` (PEP 621): name, a static version, static dependencies;
- `pyproject.toml`, `[tool.poetry]`: name and version;
- `setup.cfg`, `[metadata]` and `[options] install_requires` (setuptools' declarative config);
- for a `setup.py` project with none of these: an `*.egg-info` folder left in the checkout, else
  `python setup.py --name --version` run in the checkout (this executes the project's setup.py, as any build of
  it does).

A version or dependencies that the project computes at build time (`dynamic`, `attr:`) are not known without a
build; they are left empty here and a wheel build reads them from the built wheel.
"""

from __future__ import annotations

import configparser
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import Parser
from pathlib import Path

import tomllib

#: the files that make a folder a Python project for a build
PROJECT_FILES = ("pyproject.toml", "setup.cfg", "setup.py")
SETUP_PY_TIMEOUT = 120.0


class MetadataError(Exception):
    """A metadata file that exists but cannot be read (invalid TOML, a setup.py that fails)."""


class UnparsableFile(MetadataError):
    """A metadata file that does not parse: every way of building the commit reads it, so none can."""


@dataclass
class ProjectMeta:
    """What the project's metadata says; `source` names the file and table the name came from."""

    name: str | None = None
    version: str | None = None
    dependencies: list[str] = field(default_factory=list)
    source: str = ""


def static(read: Callable[[str], str | None]) -> ProjectMeta:
    """The metadata written in the project's files, without running anything. `read(name)` gives the text of a
    file at the project's top (None when it has none). Raises MetadataError for a pyproject.toml that is not
    valid TOML."""
    meta = ProjectMeta()
    text = read("pyproject.toml")
    if text is not None:
        try:
            data = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise UnparsableFile(f"pyproject.toml is not valid TOML ({exc})") from None
        project = data.get("project") if isinstance(data.get("project"), dict) else {}
        dynamic = set(project.get("dynamic") or [])
        if isinstance(project.get("name"), str) and project["name"]:
            meta.name, meta.source = project["name"], "pyproject.toml [project]"
            if isinstance(project.get("version"), str) and "version" not in dynamic:
                meta.version = project["version"]
            if "dependencies" not in dynamic:
                meta.dependencies = [d for d in project.get("dependencies") or [] if isinstance(d, str)]
                if not _setup_cfg_wanted(dynamic):
                    return meta
        poetry = (data.get("tool") or {}).get("poetry") if isinstance(data.get("tool"), dict) else None
        if meta.name is None and isinstance(poetry, dict) and isinstance(poetry.get("name"), str):
            meta.name, meta.source = poetry["name"], "pyproject.toml [tool.poetry]"
            meta.version = poetry.get("version") if isinstance(poetry.get("version"), str) else None
            return meta
    cfg = read("setup.cfg")
    if cfg is not None:
        _from_setup_cfg(cfg, meta)
    return meta


def _setup_cfg_wanted(dynamic: set[str]) -> bool:
    """Whether a [project] table leaves its version to setuptools (whose setup.cfg may hold a literal one)."""
    return "version" in dynamic


def _from_setup_cfg(text: str, meta: ProjectMeta) -> None:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return  # setuptools will say what is wrong with it when the project is built
    name = parser.get("metadata", "name", fallback="").strip()
    if meta.name is None and name:
        meta.name, meta.source = name, "setup.cfg [metadata]"
    version = parser.get("metadata", "version", fallback="").strip()
    if meta.version is None and version and not version.startswith(("attr:", "file:")):
        meta.version = version
    if not meta.dependencies:
        requires = parser.get("options", "install_requires", fallback="")
        meta.dependencies = [line.strip() for line in requires.splitlines()
                             if line.strip() and not line.strip().startswith("#")]


def of_folder(project: Path) -> ProjectMeta:
    """The static metadata of a project folder."""

    def read(name: str) -> str | None:
        path = project / name
        return path.read_text(errors="replace") if path.is_file() else None

    return static(read)


def of_checkout(project: Path, python: str) -> ProjectMeta:
    """The metadata of a checkout: static first; for a setup.py project, its egg-info or `setup.py --name
    --version` run with `python`. Raises MetadataError when no name can be found, saying where it looked."""
    meta = of_folder(project)
    if meta.name is not None or not (project / "setup.py").is_file():
        if meta.name is None:
            raise MetadataError("no project name: neither pyproject.toml ([project] or [tool.poetry]) nor "
                                "setup.cfg ([metadata]) names the package, and there is no setup.py")
        return meta
    for info in sorted([*project.glob("*.egg-info/PKG-INFO"), *project.glob("src/*.egg-info/PKG-INFO")]):
        headers = Parser().parsestr(info.read_text(errors="replace"), headersonly=True)
        if headers.get("Name"):
            requires = info.with_name("requires.txt")
            deps = []
            if requires.is_file():
                for line in requires.read_text(errors="replace").splitlines():
                    if line.startswith("["):
                        break  # extras follow; only the plain requirements are always installed
                    if line.strip():
                        deps.append(line.strip())
            return ProjectMeta(headers["Name"], headers.get("Version"), deps or meta.dependencies,
                               f"{info.parent.name}/PKG-INFO")
    try:
        proc = subprocess.run([python, "setup.py", "--name", "--version"], cwd=project, capture_output=True,
                              text=True, timeout=SETUP_PY_TIMEOUT, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MetadataError(f"`setup.py --name --version` could not run: {exc}") from None
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or len(lines) < 2:
        tail = " / ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise MetadataError(f"`setup.py --name --version` failed (exit code {proc.returncode}): {tail}")
    return ProjectMeta(lines[-2], lines[-1], meta.dependencies, "setup.py --name")
