"""Tiny fake "framework" wheels made inside the tests, installed offline through find-links (as asv does).

`build_fake_wheel` writes a pure-python wheel by hand, without setuptools or the network, so a test can
make `fakefw 1.0` and `fakefw 1.1` in milliseconds and install them with `IndexConfig(no_index=True,
find_links=[folder])`.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

#: the wheel-writing half of the in-tree PEP 517 backends of the test repositories (fakerepo, tinyrepo): source
#: text, since a backend runs from the repository's own `_build` folder and cannot import the tests. Each backend
#: puts its own metadata reader before it and calls `_write_wheel(wheel_directory, name, version, deps)`.
BACKEND_WHEEL_WRITER = '''\
import base64, hashlib, os, zipfile


def _write_wheel(wheel_directory, name, version, deps):
    """A pure-Python wheel of the package folder `name`, with the standard library only, offline."""
    files = {}
    for root, _, names in os.walk(name):
        for file in sorted(names):
            if file.endswith(".py"):
                path = os.path.join(root, file)
                with open(path, "rb") as handle:
                    files[path] = handle.read()
    info = f"{name}-{version}.dist-info"
    requires = "".join(f"Requires-Dist: {d}\\n" for d in deps)
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n{requires}".encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\\nGenerator: fake\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = ("\\n".join(record) + f"\\n{info}/RECORD,,\\n").encode()
    wheel = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as archive:
        for path, data in files.items():
            archive.writestr(zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return wheel
'''

# A fixed timestamp makes the same inputs give the same bytes, so the same wheel keeps the same hash.
_EPOCH = (2020, 1, 1, 0, 0, 0)


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def build_fake_wheel(
    directory: Path | str,
    name: str,
    version: str,
    files: Mapping[str, str] | None = None,
    *,
    requires: Sequence[str] = (),
) -> Path:
    """Write `<name>-<version>-py3-none-any.whl` into `directory` and return its path.

    `files` maps paths inside the wheel (`"fakefw/__init__.py"`) to their text; when it is None the wheel holds
    one package `<name>/__init__.py` with `__version__ = "<version>"`. `requires` become Requires-Dist lines.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    dist = re.sub(r"[-_.]+", "_", name)  # wheel file names use the escaped distribution name
    if files is None:
        files = {f"{dist}/__init__.py": f'__version__ = "{version}"\n'}
    dist_info = f"{dist}-{version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    metadata += [f"Requires-Dist: {req}" for req in requires]
    contents: dict[str, bytes] = {path: text.encode() for path, text in files.items()}
    contents[f"{dist_info}/METADATA"] = ("\n".join(metadata) + "\n").encode()
    contents[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: modelci-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    ).encode()
    record = [f"{path},{_record_hash(data)},{len(data)}" for path, data in contents.items()]
    record.append(f"{dist_info}/RECORD,,")
    contents[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()

    wheel = directory / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, data in contents.items():
            info = zipfile.ZipInfo(path, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return wheel
