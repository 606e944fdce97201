"""The releases a package index offers, for `bisect --package NAME --between A B`.

Where packages come from is the user's pip configuration (envs.IndexConfig): find-links folders and pages are read,
and each configured index is asked through the simple repository API (PEP 691 JSON, or PEP 503 HTML). When no
index is configured, pip itself is asked (`pip index versions`), so its own default applies: modelci names no index.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit
from urllib.request import url2pathname

from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, canonicalize_name, parse_sdist_filename
from packaging.utils import parse_wheel_filename
from packaging.version import InvalidVersion, Version

from modelci.errors import UserError

TIMEOUT = 30
_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"


def between(name: str, first: str, last: str, index: object, python: str | None = None) -> list[str]:
    """`name==V` for every release V with first <= V <= last that the index offers, oldest first.

    Pre-releases count only when an end is one, and an end may be written `name==V`. Raises UserError when an end
    is a release of another package, is not offered, or nothing is found.
    """
    first, last = _end(name, first), _end(name, last)
    try:
        low, high = Version(first), Version(last)
    except InvalidVersion as exc:
        raise UserError(f"--between {first} {last}: {exc}") from None
    if low >= high:
        raise UserError(f"--between {first} {last}: the good release must be older than the bad one")
    offered = versions(name, index, python)
    pre = low.is_prerelease or high.is_prerelease
    chosen = [v for v in offered if low <= v <= high and (pre or not v.is_prerelease)]
    for end in (low, high):
        if end not in offered:
            near = ", ".join(str(v) for v in offered[-8:]) or "none"
            raise UserError(f"release {name}=={end} is not offered by the configured index (latest: {near}); "
                            "check the version or your pip index settings")
    return [f"{name}=={v}" for v in chosen]


def _end(name: str, end: str) -> str:
    """The version an end of `--between` names: the end itself, or V of `name==V`. An end of another package is
    refused before the index is asked: a search orders the releases of one package."""
    package, pinned, version = end.partition("==")
    if not pinned or not package.strip():
        return end
    if canonicalize_name(package.strip()) != canonicalize_name(name):
        raise UserError(f"--between {end}: that is a release of {package.strip()}, but --package is {name}; give "
                        f"two releases of one package, e.g. --package {name} --between 1.23.5 1.24.4")
    return version.strip()


def versions(name: str, index: object, python: str | None = None) -> list[Version]:
    """Every version of `name` the configured find-links and indexes offer, sorted, without yanked files."""
    target = canonicalize_name(name)
    found: set[Version] = set()
    for link in getattr(index, "find_links", []):
        found |= _from_files(_list_location(link), target)
    if not getattr(index, "no_index", False):
        urls = [u for u in [getattr(index, "index_url", None), *getattr(index, "extra_index_urls", [])] if u]
        for url in urls:
            found |= _from_files(_simple_page(url.rstrip("/") + f"/{target}/"), target)
        if not getattr(index, "index_url", None):
            found |= _from_pip(name, python or sys.executable)
    if not found:
        raise UserError(f"no release of {name!r} found in the configured indexes or find-links; "
                        "check the name and `pip config list`")
    return sorted(found)


def _from_files(files: list[str], target: str) -> set[Version]:
    found = set()
    for filename in files:
        try:
            if filename.endswith(".whl"):
                name, version, _, _ = parse_wheel_filename(filename)
            elif filename.endswith((".tar.gz", ".zip")):
                name, version = parse_sdist_filename(filename)
            else:
                continue
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            continue
        if canonicalize_name(name) == target:
            found.add(Version(str(version)))
    return found


def _list_location(link: str) -> list[str]:
    """File names in a find-links folder or page (a local HTML file counts as a page, as pip reads it)."""
    if "://" not in link or link.startswith("file://"):
        folder = Path(url2pathname(urlsplit(link).path) if link.startswith("file://") else link)
        if folder.is_dir():
            return os.listdir(folder)
        return _local_page(folder, folder.as_uri()) if folder.is_file() else []
    return _simple_page(link)


def _local_page(path: Path, url: str) -> list[str]:
    """File names on a simple-API page stored as a file (JSON or HTML, by its content)."""
    try:
        body = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UserError(f"package index page {path} cannot be read: {exc.strerror or exc}") from None
    if body.lstrip().startswith("{"):
        try:
            data = json.loads(body)
        except ValueError:
            raise UserError(f"package index page {path} is neither a PEP 503 HTML page nor PEP 691 JSON") from None
        return [f["filename"] for f in data.get("files", []) if not f.get("yanked")]
    parser = _Links(url)
    parser.feed(body)
    return parser.files


def _simple_page(url: str) -> list[str]:
    """File names on one simple-API page (JSON or HTML); a page that is missing lists nothing.

    A `file://` index is a folder of pages, as pip reads it: the page of a project folder is its `index.html`,
    and a project without a folder there has no releases in that index (not an error).
    """
    if url.startswith("file:"):
        path = Path(url2pathname(urlsplit(url).path))
        if path.is_dir():
            path = path / "index.html"
        return _local_page(path, path.as_uri()) if path.is_file() else []
    request = urllib.request.Request(url, headers={"Accept": _ACCEPT})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            body = response.read().decode("utf-8", "replace")
            kind = response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise UserError(f"package index {url} answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise UserError(f"package index {url} cannot be reached: {getattr(exc, 'reason', exc)}") from None
    if "json" in kind:
        data = json.loads(body)
        return [f["filename"] for f in data.get("files", []) if not f.get("yanked")]
    parser = _Links(url)
    parser.feed(body)
    return parser.files


class _Links(HTMLParser):
    """The file names of a PEP 503 page's anchors, without yanked ones."""

    def __init__(self, base: str):
        super().__init__()
        self.base, self.files = base, []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "a" and values.get("href") and "data-yanked" not in values:
            path = urlsplit(urljoin(self.base, values["href"])).path
            self.files.append(path.rsplit("/", 1)[-1])


def _from_pip(name: str, python: str) -> set[Version]:
    """Ask pip which versions its default index has (`pip index versions`); empty when pip cannot say."""
    try:
        proc = subprocess.run([python, "-m", "pip", "index", "versions", name], capture_output=True, text=True,
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    match = re.search(r"Available versions:\s*(.+)", proc.stdout)
    found = set()
    for text in (match.group(1).split(",") if match else []):
        try:
            found.add(Version(text.strip()))
        except InvalidVersion:
            continue
    return found
