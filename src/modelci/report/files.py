"""The output files a command writes (`--json`, `--junit`, `--markdown`, `-o`): checked before the run, written whole.

`prepare` runs before any workload: a path that cannot be written is a usage error that costs nothing, where it
used to be a traceback after the run. It refuses a path that is the history database (a report written over it
destroyed every stored run), two options given the same file (one report silently replaced the other), and a
file there that the command did not write before (`Output`: a user's module, notes, the config). It also
removes the file a previous run left there, so that a run that ends without writing its report (the harness
failed, or it was cancelled before anything finished) never leaves an older report in place to be read as this
run's. `write_text` writes under a temporary name and renames, so a reader never sees half a file.

Only regular files are removed or renamed over. CI points reports at `/dev/stdout`, a FIFO or a symlink: such a
path is written through (a symlink keeps being one, its target is replaced whole), where removing it and renaming
a regular file into its place broke the pipe, the link, or even the system's /dev/stdout.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from modelci.errors import UserError

#: a link that names one of this process's own descriptors (/dev/stdout is a link to /proc/self/fd/1)
_DESCRIPTOR = re.compile(r"/(?:proc/(?:self|thread-self|(?P<pid>\d+))/fd|dev/fd)/(?P<fd>\d+)")

#: the files of a SQLite database beside the main one: each is part of the history
_SQLITE_SIDES = ("", "-wal", "-shm", "-journal")


class WriteError(UserError):
    """An output file that could not be written (a full disk, a closed pipe): a message, not a traceback.
    `writing` adds the option that named it and what was done before."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path}: cannot write the file ({reason})")
        self.path = str(path)
        self.reason = reason


def prepare(paths: dict[str, str | None], remove: bool = True, *, db: str | None = None,
            inputs: dict[str, str | None] | None = None, config: Path | None = None,
            kind: Output | None = None) -> None:
    """Check that each output path (option name -> path, None when not asked for) can be written, and remove what
    a previous run left there; a UserError names the option, the path and the reason. Without `remove` the file
    there stays until the new one replaces it whole (an output that is not a run's report: a lock, a diff).

    `db` is the history as configured (`cfg.db`): an output path that is its SQLite file, or one of the files
    SQLite keeps beside it, is refused; so is one that is a file the command reads (`inputs`,
    option name -> path: `run --lock l.lock --json l.lock` removed the lock before reading it), and the config
    file (`config`, `cfg.file`), which every command reads. A file there that is not what the command writes
    (`kind`: a report by default, else a lock, a constraints file, an `env diff` JSON...) is refused too, and so
    is one that cannot be read: `run -k typo --json modelci.toml` (or a workload's file, or a user's notes) removed
    it and then failed, `env lock latest -o tool.py` replaced a user's module by a lock; only what the same
    command wrote before is ours to replace, or an empty file. Every path is checked before any file is removed,
    so a refusal leaves every file as it was."""
    given = {option: path for option, path in paths.items() if path is not None}
    for option, path in given.items():
        if not str(path):
            raise UserError(f"{option} '': give a file path")
    for option, path in given.items():
        _refuse_history(option, path, db)
        _refuse_input(option, path, {**(inputs or {}), "the config": str(config) if config else None})
        problem = _problem(Path(path))
        if problem:
            raise UserError(f"{option} {path}: cannot write the file there, {problem}; give a path in a folder "
                            "you can write")
        _refuse_foreign(option, path, kind or REPORT)
    _refuse_shared(given)
    if not remove:
        return
    for option, path in given.items():
        real = Path(os.path.realpath(path))
        if _descriptor(path) is not None or not real.is_file():
            continue  # a pipe, a terminal, a device: nothing of an older run is kept there to remove
        try:
            real.unlink(missing_ok=True)  # the file a symlink points at: the link stays, the new report lands there
        except OSError as exc:
            raise UserError(f"{option} {path}: cannot replace the file there ({exc.strerror or exc}); give a path "
                            "you can write") from None


@contextlib.contextmanager
def writing(paths: dict[str, str | None], done: str = "") -> Iterator[None]:
    """Turn a file the block could not write into a UserError that names its option (option name -> path, as
    given to `prepare`) and says what was done before it (`done`: "the run is stored as run 7"), so a full
    disk after a long run is a message, not a traceback that leaves the user wondering what was kept."""
    try:
        yield
    except WriteError as exc:
        option = next((o for o, p in paths.items() if p is not None and str(p) == exc.path), "")
        after = f"; {done}" if done else ""
        raise UserError(f"{option + ' ' if option else ''}{exc.path}: cannot write the file ({exc.reason}){after}") \
            from None


def write_text(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` whole (`write_bytes`)."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` whole: into a temporary file beside it, then renamed over it. A symlink stays a link:
    the file it points at is the one replaced. What is not a regular file (/dev/stdout, a FIFO, a device) is written
    through, in place. A failure is a WriteError naming the path."""
    try:
        fd = _descriptor(path)
        if fd is not None:
            _write_descriptor(fd, data)
            return
        real = Path(os.path.realpath(path))
        try:
            mode = real.stat().st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            with open(path, "wb") as fh:  # noqa: PTH123 (the path as given: a FIFO, a terminal, a device)
                fh.write(data)
            return
        _replace(real, data)
    except OSError as exc:
        raise WriteError(path, exc.strerror or str(exc)) from None


def _replace(target: Path, data: bytes) -> None:
    """Write `data` into a temporary file in `target`'s folder, then rename it over `target`."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_descriptor(fd: int, data: bytes) -> None:
    """Write to one of this process's descriptors (/dev/stdout) after what Python holds for it: opening the path
    again would truncate a redirected log, or write at its start over what the console printed."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _descriptor(path: str | Path) -> int | None:
    """The descriptor of this process that `path` names through its links (/dev/stdout, /dev/fd/3,
    /proc/self/fd/1), or None."""
    current = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        match = _DESCRIPTOR.fullmatch(current)
        if match and (match["pid"] is None or int(match["pid"]) == os.getpid()):
            return int(match["fd"])
        if not os.path.islink(current):
            return None
        current = os.path.join(os.path.realpath(os.path.dirname(current)), os.readlink(current))
        current = os.path.normpath(current)
    return None


def _problem(target: Path) -> str:
    """Why `target` cannot be written, or ""."""
    if _descriptor(target) is not None:
        return ""
    real = Path(os.path.realpath(target))
    if real.is_dir():
        return "it is a folder"
    if real.exists() and not real.is_file():  # a FIFO, a device: written through, its folder is not written
        return "" if os.access(real, os.W_OK) else "it cannot be written (permission denied)"
    folder = real.parent
    if not folder.exists():
        return f"its folder {folder} does not exist"
    if not folder.is_dir():
        return f"{folder} is not a folder"
    try:
        probe = tempfile.NamedTemporaryFile(dir=folder, prefix=f".{real.name}.", delete=True)
        probe.close()
    except OSError as exc:
        return f"its folder cannot be written ({exc.strerror or exc})"
    return ""


def refuse_overwrite(option: str, path: str, *, db: str | None, config: Path | None, foreign: bool) -> None:
    """A UserError when writing `path` would destroy what is not a report: the history (or SQLite's files beside
    it), the config file, or (`foreign`, for a writer that replaces the file whole) a file no modelci command
    wrote; and for a FIFO, where a write waits for a reader for ever. For the file notifiers (`[[notify]]` junit
    and markdown), whose paths come from the config or the environment, not from a checked option."""
    _refuse_history(option, path, db)
    _refuse_input(option, path, {"the config": str(config) if config else None})
    if foreign:
        _refuse_foreign(option, path)
    try:
        if stat.S_ISFIFO(os.stat(path).st_mode):
            raise UserError(f"{option} is a FIFO: a write there waits for a reader, for ever; give a regular file")
    except OSError:
        pass


def _refuse_history(option: str, path: str, db: str | None) -> None:
    """Refuse an output path that is the history database (`db`: a path or URL), or one of SQLite's files
    beside it. A server's history has no file to refuse."""
    if not db or ("://" in db and not db.startswith("sqlite")):
        return
    if "://" in db:
        from modelci.store import sqlite_file  # SQLAlchemy's URL parsing, for a sqlite:/// URL only

        history = sqlite_file(db)
        if history is None:
            return
    else:
        # a path, made absolute by config.load: no SQLAlchemy import here, which `run` would pay (0.6 s) before
        # its worker starts, where it otherwise overlaps the worker's import of the framework
        history = Path(db)
    real = Path(os.path.realpath(path))
    for side in _SQLITE_SIDES:
        database = Path(str(history) + side)
        if _same(real, database):
            what = "the history database" + (f"'s {side[1:]} file" if side else "")
            raise UserError(f"{option} {path} is {what}; give another path")


def _refuse_input(option: str, path: str, inputs: dict[str, str | None]) -> None:
    """Refuse an output path that is a regular file the command reads."""
    for source, read in inputs.items():
        if read and os.path.isfile(read) and _same(Path(path), Path(read)):
            what = "the config file" if source == "the config" else f"the file {source} reads"
            raise UserError(f"{option} {path} is {what}; give another path")


@dataclass(frozen=True)
class Output:
    """What an output option writes, as far as replacing a file at its path goes: how such a file begins (`head`,
    matched against its first 4 kB), and how a refusal names it (`what`: "a modelci report") and the new file
    (`noun`: "the report"). A file that begins otherwise is the user's, not ours to replace."""

    head: re.Pattern[bytes]
    what: str
    noun: str


def _schema(name: str) -> re.Pattern[bytes]:
    """A JSON file modelci wrote, whose first key is its schema `modelci.NAME/VERSION` (any version: the next
    modelci replaces an older one's file)."""
    return re.compile(rb'\A(?:\xef\xbb\xbf)?\s*\{\s*"schema"\s*:\s*"modelci\.(?:' + name.encode() + rb')/')


#: the reports (the JSON reports, compat's with a schema of its own, JUnit XML, the Markdown summaries of run,
#: compare, alarms and compat): run, compare, calibrate, compat and bisect each replace any of them
REPORT = Output(re.compile(
    rb'\A(?:\xef\xbb\xbf)?\s*(?:\{\s*"schema"\s*:\s*"modelci\.(?:report|compat)/'
    rb'|<\?xml[^>]*\?>\s*<testsuites\s+name="modelci"|<testsuites\s+name="modelci"'
    rb'|## modelci\b|# Compatibility: )'), "a modelci report", "the report")
#: `env lock -o` (its title line, lockfile._TITLE), `env constraints -o` (its first line, constraints.derive),
#: `env diff --json` and `env consistency --json`
LOCK = Output(re.compile(rb"\A(?:\xef\xbb\xbf)?# modelci lock: "), "a lock that modelci wrote", "the lock")
CONSTRAINTS = Output(re.compile(rb"\A(?:\xef\xbb\xbf)?# modelci: derived from "),
                     "a constraints file that modelci derived", "the constraints")
ENV_DIFF = Output(_schema("envdiff"), "an `env diff` JSON file", "the diff")
CONSISTENCY = Output(_schema("consistency"), "an `env consistency` JSON file", "the result")


def _refuse_foreign(option: str, path: str, kind: Output = REPORT) -> None:
    """Refuse an output path where a regular file is that the command did not write before (`kind`): replacing
    it (as a report of an older run is replaced) would lose it. An empty file is taken (`mktemp`, a CI's
    step-summary file)."""
    if _descriptor(path) is not None:
        return
    real = Path(os.path.realpath(path))
    try:
        if not real.is_file() or real.stat().st_size == 0:
            return
        with real.open("rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise UserError(f"{option} {path}: cannot read the file there ({exc.strerror or exc}) to see whether it is "
                        f"{kind.what}; give another path") from None
    if not kind.head.match(head):
        raise UserError(f"{option} {path}: the file there is not {kind.what}, and {kind.noun} would replace it; "
                        "give another path, or remove that file first if it may go")


def _refuse_shared(given: dict[str, str]) -> None:
    """Refuse two options given the same regular file: the second would replace the first. A pipe or a terminal
    (/dev/stdout for both) takes one after the other."""
    seen: dict[Path, tuple[str, str]] = {}
    for option, path in given.items():
        if _descriptor(path) is not None:
            continue
        real = Path(os.path.realpath(path))
        if real.exists() and not real.is_file():
            continue
        for other, (first, first_path) in seen.items():
            if _same(real, other):
                raise UserError(f"{first} {first_path} and {option} {path} are the same file; give each its own "
                                "path")
        seen[real] = (option, path)


def _same(a: Path, b: Path) -> bool:
    """Whether two paths are one file: the same inode when both exist, else the same resolved path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(os.path.realpath(a)) == Path(os.path.realpath(b))
