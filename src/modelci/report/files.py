"""The report files a command writes (`--json`, `--junit`, `--markdown`): checked before the run, written whole.

`prepare` runs before any workload: a path that cannot be written is a usage error that costs nothing, where it
used to be a traceback after the run. It also removes the file a previous run left there, so that a run that
ends without writing its report (the harness failed, or it was cancelled before anything finished) never leaves
an older report in place to be read as this run's. `write_text` writes under a temporary name and renames, so a
reader never sees half a file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from modelci.errors import UserError


def prepare(paths: dict[str, str | None], remove: bool = True) -> None:
    """Check that each report path (option name -> path, None when not asked for) can be written, and remove what
    a previous run left there; a UserError names the option, the path and the reason. Without `remove` the file
    there stays until the new one replaces it whole (an output that is not a run's report: a lock, a diff)."""
    for option, path in paths.items():
        if not path:
            continue
        target = Path(path)
        folder = target.parent if str(target.parent) else Path(".")
        problem = ""
        if target.is_dir():
            problem = "it is a folder"
        elif not folder.exists():
            problem = f"its folder {folder} does not exist"
        elif not folder.is_dir():
            problem = f"{folder} is not a folder"
        else:
            try:
                probe = tempfile.NamedTemporaryFile(dir=folder, prefix=f".{target.name}.", delete=True)
                probe.close()
            except OSError as exc:
                problem = f"its folder cannot be written ({exc.strerror or exc})"
        if problem:
            raise UserError(f"{option} {path}: cannot write the file there, {problem}; give a path in a folder "
                            "you can write")
        if not remove:
            continue
        try:
            target.unlink(missing_ok=True)
        except OSError as exc:
            raise UserError(f"{option} {path}: cannot replace the file there ({exc.strerror or exc}); give a path "
                            "you can write") from None


def write_text(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` whole: into a temporary file beside it, then renamed over it."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` whole: into a temporary file beside it, then renamed over it."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent if str(target.parent) else ".", prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
