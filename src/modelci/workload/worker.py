"""A warm worker for one environment: imports the suites' frameworks once, then forks a child per job.

Runs inside the environment under test (standard library only). The parent (modelci.execute.forked)
talks to it in JSON lines over the worker's stdin and stdout:

    worker -> parent  {"event": "ready", "pid": N, "unsafe": "", "preloaded": [...], "skipped": {...}}
    parent -> worker  {"module": M, "argv": [...], "log_dir": DIR, "cwd": DIR, "framework": F, "seed": N,
                       "path": [DIR, ...]}
    worker -> parent  {"event": "started", "pid": CHILD, "job": ID}  at once, then
                      {"event": "exited", "pid": CHILD, "status": WAIT_STATUS, "rss": WORKER_RSS, "job": ID}
                      or {"event": "refused", "reason": WHY, "job": ID} when forking is not safe (the parent
                      then spawns)

A job may carry an `id`, which every message about it repeats: jobs may overlap (a second is forked while the
first child runs), and the parent matches the answers by id.

Each child runs `M.main(argv)` (M: `modelci.workload.child` unless the job names another entry module) exactly
as `python -m M` would, in its own session, with fd 1 and 2 sent to `stdout.txt` and `stderr.txt` in `log_dir`.
The job's `path` folders go first on the child's sys.path (and PYTHONPATH, for what it starts), as they would
on a spawned child's PYTHONPATH: a bisect over a pythonpath build forks every commit's probe from one worker,
each with its own checkout on the path, while the worker itself never imports the package under test.
EOF on stdin ends the worker.

At start the worker imports the modules that the suite files import at top level (read from their source,
not run), so the framework is imported once; a module that is not installed is skipped, one whose import
fails stops the forking (a half-imported module must not reach a child). A helper module of the suite folder
(`_common.py`) is read the same way, for the modules it imports; the child imports the helper itself.

Before the first job of a framework F the worker does what every child of F does first: it imports F's helper,
seeds it, switches determinism on and runs the helper's fixed warm-up. For torch that prologue imports 800
more modules (torch._dynamo, sympy) and takes about as long as `import torch` itself, and the warm-up
exports a tiny model, the first torch.export of the process. The child repeats the same calls (the warm-up
only once per process), so it ends in the same state as a spawned child, without paying for them again.

Memory: a forked child starts with the worker's anonymous pages already counted in its RSS, but not the
file-backed pages (the framework's shared libraries) that the worker touched while importing; Linux fills
those on demand. A spawned child touches them during its own import, so its peak RSS is higher by the
size of that code (about 70 MiB for torch). The child therefore maps in again the file pages the worker
had resident (MADV_POPULATE_READ) before it runs, and its VmHWM then equals what a spawned child measures.
"""

from __future__ import annotations

import argparse
import ast
import ctypes
import importlib
import importlib.util
import json
import os
import select
import signal
import sys
import traceback
from array import array
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from modelci.workload import lifeline
from modelci.workload.processes import framework_hazard, kill_group, thread_count

#: version of the messages this module exchanges with the parent
PROTOCOL = 1
#: madvise advice that maps in (read-faults) a range of pages: Linux >= 5.14
MADV_POPULATE_READ = 22
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


# -- what to import once ----------------------------------------------------------------------------


def imported_modules(path: Path) -> list[str]:
    """Top-level absolute imports of a suite file (module level, `if` and `try` bodies), without running it."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return []  # discovery reports the error; the worker only skips the preload
    found: list[str] = []
    pending = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, ast.Import):
            found += [alias.name.partition(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module.partition(".")[0])
        elif isinstance(node, (ast.If, ast.Try)):
            pending += [*node.body, *node.orelse, *getattr(node, "finalbody", []),
                        *(stmt for handler in getattr(node, "handlers", []) for stmt in handler.body)]
    return list(dict.fromkeys(found))


def local_module(folder: Path, name: str) -> Path | None:
    """The source of module `name` when a suite file's import of it finds it in the suite folder (`_common.py`,
    a package's `__init__.py`). The folder comes last on the child's sys.path, so an installed module of the same
    name wins (child.enter_suite)."""
    for path in (folder / f"{name}.py", folder / name / "__init__.py"):
        if path.is_file():
            try:
                return None if importlib.util.find_spec(name) is not None else path
            except (ImportError, ValueError):
                return path
    return None


def suite_imports(folders: list[Path]) -> list[str]:
    """The modules that the suite files in `folders` import at top level, in first-seen order.

    A module of the suite folder itself (a helper such as `_common.py`) is not imported here, as no suite code
    runs in the worker; the modules it imports are, read from its source in the same way, so that a suite
    whose files import torch only through `_common` still finds torch imported.
    """
    from modelci.workload.child import suite_files

    names: list[str] = []
    for folder in folders:
        pending = [*suite_files(folder)]
        read: set[Path] = set(pending)
        while pending:
            for name in imported_modules(pending.pop(0)):
                local = local_module(folder, name)
                if local is None:
                    names.append(name)
                elif local not in read:
                    read.add(local)
                    pending.append(local)
    return [n for n in dict.fromkeys(names) if n not in sys.builtin_module_names and n != "__future__"]


def preload(names: list[str], done: list[str], skipped: dict[str, str]) -> str:
    """Import each module once; a missing one is skipped (the child reports it), a failing one is returned.

    A module whose import raises may leave half of itself in sys.modules, and a child forked from that
    would not see what a fresh process sees, so the caller stops forking. The threads each import starts are
    counted (`STARTED_BY`), for `fork_hazard`.
    """
    for name in names:
        if name in done or name in skipped:
            continue
        try:
            if importlib.util.find_spec(name) is None:
                skipped[name] = "not installed"
                continue
            with counting_threads(name):
                importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001 - an import may raise anything, SystemExit included
            from modelci.workload.api import exception_text  # safe against an exception whose str() raises

            return f"importing {name} in the worker failed: {exception_text(exc)}"
        done.append(name)
    return ""


@contextmanager
def counting_threads(module: str) -> Iterator[None]:
    """Add the threads started inside the block to STARTED_BY[module]."""
    before = thread_count()
    try:
        yield
    finally:
        started = thread_count() - before
        if started > 0:
            STARTED_BY[module] = STARTED_BY.get(module, 0) + started


# -- when forking is not safe ------------------------------------------------------------------------

#: module -> the threads its import started in this worker (preload and the frameworks' prologues); of those, a
#: framework's helper tolerates `fork_safe_threads` (threads the library starts again in a forked child and that
#: hold no lock the child's own code takes)
STARTED_BY: dict[str, int] = {}


def warm_up(framework: str, seed: int) -> str:
    """Run the prologue every child of `framework` runs (helper, seed, determinism, the helper's fixed warm-up);
    returns an error or ""."""
    try:
        from modelci.workload.child import freeze_heap
        from modelci.workload.frameworks import get_helper

        with counting_threads(framework):  # the helper imports the framework when no suite file did
            helper = get_helper(framework)
        helper.seed(seed)
        helper.set_determinism(True)
        helper.warm_up()
        freeze_heap()
    except BaseException as exc:  # noqa: BLE001 - the child reports it; this worker must not fork any more
        from modelci.workload.api import exception_text  # safe against an exception whose str() raises

        return f"preparing framework {framework!r} in the worker failed: {exception_text(exc)}"
    return ""


def fork_hazard() -> str:
    """Why forking this process now would be unsafe, or "" when it is safe."""
    if not hasattr(os, "fork"):
        return "this platform has no fork()"
    hazard = framework_hazard()
    if hazard:
        return f"in the worker, {hazard}"
    devices = gpu_device_files()
    if devices:
        return f"the worker holds GPU device files open ({', '.join(devices[:3])}); a forked child cannot share them"
    extra = thread_count() - 1
    tolerated = sum(min(count, fork_safe_threads(module)) for module, count in STARTED_BY.items())
    if extra > tolerated:
        return (f"the worker's imports started {extra - tolerated} extra thread(s); a lock one of them holds at fork "
                "time would deadlock the child (set `threads` to fix the BLAS pools, or use isolation = \"spawn\")")
    return ""


def fork_safe_threads(module: str) -> int:
    """How many of the threads that importing `module` starts are safe to fork with (its framework helper's
    `fork_safe_threads`; 0 for a module of no registered framework)."""
    from modelci.workload import frameworks

    helper = frameworks.by_module(module)
    return helper.fork_safe_threads if helper else 0


def gpu_device_files() -> list[str]:
    """Open file descriptors of this process that point at GPU device nodes (CUDA, ROCm, DRM render nodes)."""
    found = []
    try:
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith(("/dev/nvidia", "/dev/kfd", "/dev/dri/renderD")):
                found.append(target)
    except OSError:
        pass
    return sorted(set(found))


# -- memory --------------------------------------------------------------------------------------------


def rss_bytes() -> int:
    """Current resident set size of this process (0 when /proc is not there)."""
    from modelci.workload.child import proc_status

    return proc_status().get("VmRSS", 0)


def resident_file_pages() -> list[tuple[int, int]]:
    """(address, length) of the pages of readable file mappings that are resident in this process now."""
    ranges: list[tuple[int, int]] = []
    try:
        with open("/proc/self/maps") as maps, open("/proc/self/pagemap", "rb") as pagemap:
            for line in maps:
                parts = line.split(maxsplit=5)
                path = parts[5].strip() if len(parts) > 5 else ""
                if parts[1][0] != "r" or not path.startswith("/") or path.startswith("/dev/"):
                    continue
                low, high = (int(x, 16) for x in parts[0].split("-"))
                pagemap.seek(low // PAGE * 8)
                entries = array("Q")
                entries.frombytes(pagemap.read((high - low) // PAGE * 8))
                start = None
                for index, entry in enumerate(entries):
                    if entry >> 63:  # bit 63: page present
                        start = index if start is None else start
                    elif start is not None:
                        ranges.append((low + start * PAGE, (index - start) * PAGE))
                        start = None
                if start is not None:
                    ranges.append((low + start * PAGE, (len(entries) - start) * PAGE))
    except (OSError, ValueError):
        return []
    return ranges


def populate(ranges: list[tuple[int, int]]) -> None:
    """Map in the given pages in this process, so its RSS counts them as a spawned child's would."""
    if not ranges:
        return
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for address, length in ranges:
        if madvise(address, length, MADV_POPULATE_READ) != 0:
            # an older kernel: touch one byte per page instead
            for page in range(address, address + length, PAGE):
                ctypes.string_at(page, 1)


# -- the child ------------------------------------------------------------------------------------------


def run_child(job: dict[str, Any], channels: tuple[int, ...], ranges: list[tuple[int, int]], worker: int) -> None:
    """In the forked child: a session of its own, logs to files, then the child entry point; never returns.

    It dies with the worker (`worker` is its pid): the worker, on its way out, ends this child's process group.
    """
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the worker's parent-death handler is not the child's
        lifeline.die_with_parent(worker)
        for fd in channels:
            os.close(fd)  # the worker's pipes and pidfds: the parent must see EOF when the worker dies
        os.setsid()
        log_dir = Path(job["log_dir"])
        log_dir.mkdir(parents=True, exist_ok=True)
        for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
            target = os.open(log_dir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        os.chdir(job.get("cwd") or ".")
        paths = [str(p) for p in job.get("path") or []]
        if paths:
            sys.path[0:0] = paths
            os.environ["PYTHONPATH"] = os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
            importlib.invalidate_caches()
        populate(ranges)
        entry = importlib.import_module(job.get("module") or "modelci.workload.child")
        sys.argv = [entry.__file__, *job["argv"]]
        code = entry.main(job["argv"])
    except SystemExit as exc:
        # as the interpreter does: None is 0, an int is the code, anything else is printed and gives 1
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - the child dies here whatever happened, as a fresh process would
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream must not turn exit 0 into a crash
                pass
        os._exit(code if isinstance(code, int) and 0 <= code < 256 else 1)


# -- the loop -------------------------------------------------------------------------------------------


class Channel:
    """The JSON-lines pipe pair to the parent, kept off fd 0/1 so that stray prints cannot corrupt it."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.dup(0), os.dup(1)
        self._buffer = b""
        #: set once the parent closed its end
        self.closed = False
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)  # anything printed by an import goes to the worker's log

    def send(self, **message: Any) -> None:
        """Write one message as one line."""
        os.write(self.write_fd, (json.dumps(message) + "\n").encode())

    def receive(self, watch: list[int] = (), timeout: float | None = None) -> dict[str, Any] | None:
        """The next message; None at EOF (then `closed` is set), or as soon as one of the `watch` file
        descriptors is readable or `timeout` seconds pass, whichever comes first."""
        while b"\n" not in self._buffer:
            if self.closed:
                return None
            readable, _, _ = select.select([self.read_fd, *watch], [], [], timeout)
            if self.read_fd not in readable:
                return None
            chunk = os.read(self.read_fd, 65536)
            if not chunk:
                self.closed = True
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)


#: the forked children running now (each pid is its process group), for `_parent_gone`
_running: dict[int, int | None] = {}  # pid -> a pidfd that is readable once it exits (None: poll)
#: seconds between two looks for a child that ended, where pidfd_open is missing
REAP_INTERVAL = 0.01




def _parent_gone(signum: int, frame: Any) -> None:
    """The harness ended (the parent-death signal, SIGTERM): end the running children's groups and whatever
    they left behind, then this worker."""
    for pid in list(_running):
        kill_group(pid)
    lifeline.end_descendants()
    os._exit(1)


def end_escapees(jobs: dict[int, Any]) -> None:
    """End what finished workloads left behind outside their process group: the worker is a subreaper, so a
    process that left with `setsid` (a daemon) is re-parented here when its parent ends. Run while no job runs
    (an escapee's workload may still run otherwise); processes in the worker's own session (helpers a framework
    started while it was imported) are kept."""
    session = os.getsid(0)

    def keep(pid: int) -> bool:
        try:
            return pid in jobs or os.getsid(pid) == session
        except ProcessLookupError:
            return True  # gone already, or a zombie's session: reaped by the caller's loop

    lifeline.end_descendants(keep)


def serve(channel: Channel, names: list[str]) -> int:
    """Preload, report ready, then fork one child per job; exits the process at EOF, once its children ended.

    Jobs may overlap: a second job is forked while the first child still runs (a bisect with `--jobs K` forks
    its K probes of a round from one worker instead of importing the framework in K workers). Each message about
    a job carries the job's `id`, so the parent can tell them apart. Should the parent's end of the job pipe close
    while children run (the harness was killed; the parent-death signal may not come, as it follows the thread
    that started this worker), the children's groups and this worker end at once.
    """
    done: list[str] = []
    skipped: dict[str, str] = {}
    warmed: set[str] = set()
    broken = preload(names, done, skipped)
    if not broken:
        from modelci.workload.child import freeze_heap

        freeze_heap()  # as each child's prologue ends with, so that forked children do not traverse these objects
    unsafe = broken or fork_hazard()
    ranges = [] if unsafe else resident_file_pages()
    channel.send(event="ready", protocol=PROTOCOL, pid=os.getpid(), unsafe=unsafe, preloaded=done,
                 skipped=skipped, rss=rss_bytes())
    children: dict[int, Any] = {}  # pid -> the job's id
    while True:
        _reap(channel, children)
        pidfds = [fd for fd in _running.values() if fd is not None]
        polling = any(fd is None for fd in _running.values())
        job = channel.receive(pidfds, REAP_INTERVAL if polling else None)
        if channel.closed:
            if children:
                _parent_gone(0, None)
            # EOF: nothing is left to do, and a normal interpreter exit tears torch's modules down for half a
            # second while the parent waits; every child has been reaped already
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        if job is None:
            continue  # a child ended: reaped at the top
        framework = job.get("framework") or ""
        if framework and framework not in warmed and not unsafe:
            warmed.add(framework)
            unsafe = warm_up(framework, int(job.get("seed", 0))) or fork_hazard()
            ranges = [] if unsafe else resident_file_pages()
        if unsafe:
            channel.send(event="refused", reason=unsafe, job=job.get("id"))
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        worker = os.getpid()
        pid = os.fork()
        if pid == 0:
            run_child(job, (channel.read_fd, channel.write_fd, *pidfds), ranges, worker)
        try:
            _running[pid] = os.pidfd_open(pid)  # readable once the child exits: Linux 5.3, Python 3.9
        except (AttributeError, OSError):
            _running[pid] = None
        children[pid] = job.get("id")
        channel.send(event="started", pid=pid, job=job.get("id"))


def _reap(channel: Channel, children: dict[int, Any]) -> None:
    """Tell the parent about each child that ended, once what it started and left running is ended too."""
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        if pid not in children:
            continue
        kill_group(pid)  # what the workload started and left running goes with it
        pidfd = _running.pop(pid, None)
        if pidfd is not None:
            os.close(pidfd)
        channel.send(event="exited", pid=pid, status=status, rss=rss_bytes(), job=children.pop(pid))
        if not children:  # and what it started in a session of its own, before the next job is read
            end_escapees(children)


def main(argv: list[str] | None = None) -> int:
    """Entry point: `python -m modelci.workload.worker [--preload MODULE]... [--suite DIR]...`."""
    from modelci.workload.child import drop_working_directory

    drop_working_directory()  # before the preloads: the project folder must not hide the environment's packages
    signal.signal(signal.SIGTERM, _parent_gone)
    lifeline.from_environment(signal.SIGTERM)  # the worker dies with the harness (lifeline.py)
    lifeline.become_subreaper()  # what a workload leaves outside its group comes back here to be ended
    parser = argparse.ArgumentParser(prog="modelci.workload.worker")
    parser.add_argument("--preload", action="append", default=[], help="a module to import once")
    parser.add_argument("--suite", action="append", default=[], help="a suite folder whose imports to preload")
    args = parser.parse_args(argv)
    channel = Channel()
    names = [*args.preload, *suite_imports([Path(s) for s in args.suite])]
    return serve(channel, list(dict.fromkeys(names)))


if __name__ == "__main__":
    sys.exit(main())
