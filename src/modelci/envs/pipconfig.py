"""Where packages come from: the user's pip configuration, turned into uv arguments.

docs/design.md, "Conventions": the user's pip configuration (index, extra index, find-links) is honoured when
environments are built with uv. uv does not read pip's files, so we ask pip what it sees and pass it on.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from modelci.records import redacted

#: pip config sections in increasing precedence: a command's own section beats `global`, env vars beat files.
_SECTIONS = ("global", "install", ":env:")
_TRUE = {"1", "true", "yes", "on", "y"}


@dataclass
class IndexConfig:
    """The package indexes, find-links folders and constraint files an environment is installed from."""

    index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)
    find_links: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    no_index: bool = False

    @classmethod
    def from_pip(
        cls,
        extra_find_links: Iterable[str] = (),
        no_index: bool = False,
        *,
        python: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> IndexConfig:
        """Read the user's pip configuration (`<python> -m pip config list` and PIP_* env vars).

        MODELCI_INDEX_URL, MODELCI_EXTRA_INDEX_URL and MODELCI_FIND_LINKS override pip's values; values may be
        space-separated lists. `extra_find_links` are added after the configured ones.
        """
        environ = os.environ if environ is None else environ
        config = _pip_config_list(python or sys.executable, environ)
        # pip lists PIP_* vars as ":env:" entries, but read them directly too: the interpreter may lack pip.
        for key in ("index-url", "extra-index-url", "find-links", "constraint", "no-index"):
            value = environ.get("PIP_" + key.upper().replace("-", "_"))
            if value is not None:
                config[key] = value
        overrides = {
            "index-url": "MODELCI_INDEX_URL",
            "extra-index-url": "MODELCI_EXTRA_INDEX_URL",
            "find-links": "MODELCI_FIND_LINKS",
        }
        for key, var in overrides.items():
            if environ.get(var) is not None:
                config[key] = environ[var]

        index_urls = config.get("index-url", "").split()
        find_links = [_local(link) for link in config.get("find-links", "").split()]
        for link in extra_find_links:
            if _local(link) not in find_links:
                find_links.append(_local(link))
        return cls(
            index_url=index_urls[0] if index_urls else None,
            extra_index_urls=config.get("extra-index-url", "").split(),
            find_links=find_links,
            constraints=[_local(path) for path in config.get("constraint", "").split()],
            no_index=no_index or config.get("no-index", "").strip().lower() in _TRUE,
        )

    def uv_args(self) -> list[str]:
        """Arguments for `uv pip install` that make uv look where pip would look."""
        args: list[str] = []
        if self.no_index:
            args.append("--no-index")
        else:
            if self.index_url:
                args += ["--index-url", self.index_url]
            for url in self.extra_index_urls:
                args += ["--extra-index-url", url]
        for link in self.find_links:
            args += ["--find-links", link]
        for path in self.constraints:
            args += ["--constraint", path]
        # uv stops at the first index that has a name; pip takes the best version across all of them.
        args += ["--index-strategy", "unsafe-best-match"]
        return args

    def to_json(self) -> dict:
        """A plain dict for the environment spec JSON, which names the environment (its id) and is kept in its
        folder: without the indexes' passwords (records.redacted), so that a renewed index token neither
        rebuilds every environment nor is written into the cache (uv still gets it, `uv_args`)."""
        return {
            "index_url": redacted(self.index_url) if self.index_url else self.index_url,
            "extra_index_urls": [redacted(url) for url in self.extra_index_urls],
            "find_links": [redacted(link) for link in self.find_links],
            "constraints": list(self.constraints),
            "no_index": self.no_index,
        }


def prefetch(python: str | None = None, environ: Mapping[str, str] | None = None) -> None:
    """Start `pip config list` now, in the background, for `IndexConfig.from_pip` with the same arguments to
    read later. A command that will build or find an environment calls this first: pip takes 0.15 s to answer,
    which then passes while the command imports what it needs."""
    python, environ = python or sys.executable, os.environ if environ is None else environ
    key = _key(python, environ)
    if key not in _PIP_CONFIG_CACHE and key not in _PENDING:
        _PENDING[key] = _start_pip_config_list(python, environ)


def _key(python: str, environ: Mapping[str, str]) -> tuple:
    relevant = tuple(sorted((k, v) for k, v in environ.items()
                            if k.startswith(("PIP_", "VIRTUAL_ENV", "XDG_CONFIG")) or k == "HOME"))
    return python, relevant


def _pip_config_list(python: str, environ: Mapping[str, str]) -> dict[str, str]:
    """Run `pip config list` (or read the answer `prefetch` asked for) and merge its sections by pip's
    precedence; {} when pip cannot be run.

    The answer is kept per interpreter and pip-related variables: pip takes 0.15 s to answer, and a bisect asks
    once per probe.
    """
    key = _key(python, environ)
    if key not in _PIP_CONFIG_CACHE:
        pending = _PENDING.pop(key, None)
        if pending is None:
            pending = _start_pip_config_list(python, environ)
        _PIP_CONFIG_CACHE[key] = _answer(pending)
    return dict(_PIP_CONFIG_CACHE[key])


#: (interpreter, pip-related variables) -> what `pip config list` said; the files it reads do not change
#: while one modelci command runs
_PIP_CONFIG_CACHE: dict[tuple, dict[str, str]] = {}
#: the same key -> a `pip config list` started by `prefetch` and not read yet
_PENDING: dict[tuple, subprocess.Popen | None] = {}


def _start_pip_config_list(python: str, environ: Mapping[str, str]) -> subprocess.Popen | None:
    try:
        return subprocess.Popen([python, "-m", "pip", "config", "list"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env=dict(environ))
    except OSError:
        return None


def _answer(proc: subprocess.Popen | None) -> dict[str, str]:
    """What a `pip config list` process printed, parsed; {} when it failed or took longer than 120 s."""
    if proc is None:
        return {}
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {}
    return parse_pip_config_list(out) if proc.returncode == 0 else {}


def parse_pip_config_list(text: str) -> dict[str, str]:
    """Turn `pip config list` output (`section.key='value'` lines) into {key: value} by pip's precedence."""
    by_section: dict[str, dict[str, str]] = {section: {} for section in _SECTIONS}
    for line in text.splitlines():
        name, sep, raw = line.partition("=")
        if not sep:
            continue
        # ":env:" contains no dot, so the last dot before "=" separates the section from the key.
        section, dot, key = name.strip().rpartition(".")
        if not dot or section not in by_section:
            continue
        by_section[section][key] = _unquote(raw.strip())
    merged: dict[str, str] = {}
    for section in _SECTIONS:
        merged.update(by_section[section])
    return merged


def _unquote(raw: str) -> str:
    # pip prints values with repr(); fall back to the raw text if a future pip stops doing so.
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw
    return value if isinstance(value, str) else raw


def _local(location: str) -> str:
    """Make a relative local path absolute: uv runs in the cache folder, not in the user's directory."""
    if "://" in location:
        return location
    return os.path.abspath(os.path.expanduser(location))
