"""Helpers of the fault-injection suite (tests/faults): each probe runs the real `modelci` command against a tiny
suite and checks what a careful user would: the status and exit code, that no traceback reached the user, that the
database passes SQLite's integrity check, and that no process of the run is left alive.

Probes run with `--target current` (the test interpreter, no environment to build), so each takes about a
second. The processes of a run are found by a token in their environment: the worker, every workload process and
whatever a workload starts inherit it, whatever their parent or session is now.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

#: a traceback of the harness itself: every one passes through the command's entry point
HARNESS_TRACEBACK = re.compile(r'File "[^"]*modelci/cli\.py", line')
#: the variable whose value marks every process a probe's run starts
TOKEN_VARIABLE = "MODELCI_FAULT_PROBE"
#: how long the processes of a run may take to go once its command ended (a deadline, not a sleep)
GONE_WITHIN_S = 30.0


def processes_with(token: str) -> list[int]:
    """The live processes (not zombies) whose environment holds `TOKEN_VARIABLE=token`."""
    needle = f"{TOKEN_VARIABLE}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle not in fh.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


#: what an earlier run leaves at --json, --junit and --markdown: the older reports a new run must not leave behind
OLDER_REPORTS = {
    "report.json": '{"schema": "modelci.report/1", "kind": "run", "regressed": false, "results": []}\n',
    "junit.xml": '<?xml version="1.0" encoding="utf-8"?>\n<testsuites name="modelci" tests="0"></testsuites>\n',
    "summary.md": "## modelci: ✅ no regression on `older`\n",
}


def one_commit_repo(path: Path) -> Path:
    """A git repository at `path` holding one commit."""
    path.mkdir()
    (path / "README").write_text("a framework\n")
    git = ["git", "-C", str(path), "-c", "user.name=probe", "-c", "user.email=probe@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-qm", "Initial"], check=True)
    return path


def wait_for(condition, timeout: float, what: str, interval: float = 0.05):
    """Poll `condition` until it returns something true, or fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g} s")
        time.sleep(interval)


@dataclass
class Project:
    """A project folder with a suite of workloads written by the probe, run with `--target current`."""

    root: Path
    cache: Path
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def suite(self) -> Path:
        return self.root / "suite"

    @property
    def db(self) -> Path:
        return self.root / ".modelci" / "history.db"

    def config(self, text: str = "", timeout: float = 30) -> None:
        """Write modelci.toml: the shared cache, a runner label, a timeout, plus `text`."""
        text = textwrap.dedent(text)
        own = "" if re.search(r"^timeout\s*=", text, re.M) else f"timeout = {timeout}\n"
        (self.root / "modelci.toml").write_text(f'cache_dir = "{self.cache}"\nrunner = "probe"\n{own}' + text)

    def workloads(self, source: str, name: str = "models.py") -> Path:
        """Write a suite file (modelci imported for it)."""
        self.suite.mkdir(parents=True, exist_ok=True)
        path = self.suite / name
        path.write_text("import modelci\n" + textwrap.dedent(source))
        return path

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MODELCI_")}
        env.update({TOKEN_VARIABLE: self.token, "PROBE_DIR": str(self.root), "COLUMNS": "200"}, **self.extra_env)
        return env

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "modelci.cli", *args]

    def cli(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        """Run `modelci ARGS` in the project folder to its end."""
        return subprocess.run(self.command(*args), cwd=self.root, env=self.env(), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def start(self, *args: str) -> subprocess.Popen:
        """Start `modelci ARGS` in the project folder, in its own session, as a CI runner starts a job."""
        return subprocess.Popen(self.command(*args), cwd=self.root, env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, start_new_session=True)

    def run(self, *extra: str, timeout: float = 180) -> subprocess.CompletedProcess:
        """`modelci run --target current --suite suite --json report.json EXTRA`."""
        return self.cli("run", "--target", "current", "--suite", "suite", "--json", "report.json", *extra,
                        timeout=timeout)

    def report(self, name: str = "report.json") -> dict:
        return json.loads((self.root / name).read_text())

    def statuses(self, name: str = "report.json") -> dict[str, str]:
        """workload -> status, from the JSON report."""
        return {r["workload"]: r["status"] for r in self.report(name)["results"]}

    def stored(self, sql: str, *params) -> list[tuple]:
        with sqlite3.connect(self.db) as db:
            return db.execute(sql, params).fetchall()

    def marker(self, name: str) -> Path:
        return self.root / name

    # -- the checks every probe makes ---------------------------------------------------------------------

    def assert_clean(self, done: subprocess.CompletedProcess | None = None) -> None:
        """No traceback reached the user, the database (if any) is intact, and no process of the run is alive."""
        if done is not None:
            for stream in (done.stdout, done.stderr):
                # a workload's own traceback is shown on purpose; one through the `modelci` command is a bug, and
                # so is one of a harness thread or finalizer, which Python prints on its own
                assert not HARNESS_TRACEBACK.search(stream), stream[-3000:]
                assert "Exception in thread" not in stream and "Exception ignored in" not in stream, stream[-3000:]
        if self.db.exists():
            assert self.stored("PRAGMA integrity_check") == [("ok",)]
        self.assert_no_processes()

    def stop_midway(self, proc: subprocess.Popen, marker: str, processes: int, what: str, signum: int,
                    code: int, within: float = 120) -> None:
        """Once the run `proc` has written `marker` and has `processes` live processes, send it `signum`; it must
        end with `code` (saying so for a SIGTERM) within `within` seconds, and leave nothing behind."""
        wait_for(lambda: self.marker(marker).exists() or proc.poll() is not None, 120, what)
        assert proc.poll() is None, proc.communicate()
        wait_for(lambda: len(processes_with(self.token)) >= processes, 30, f"{what}'s processes")
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=within)
        assert proc.returncode == code, err
        if signum == signal.SIGTERM:
            assert "interrupted (SIGTERM)" in err
        # SIGKILL included: a supervisor gets its parent-death signal and ends what its command started
        self.assert_clean(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))

    def assert_no_processes(self) -> None:
        try:
            wait_for(lambda: not processes_with(self.token), GONE_WITHIN_S, "the run's processes ending")
        except AssertionError:
            left = processes_with(self.token)
            seen = [_described(pid) for pid in left]  # before the kill: what they were, for a rare failure
            for pid in left:  # leave nothing behind for the next test either
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            raise AssertionError(f"processes of the run left alive: {'; '.join(seen)}") from None


def _described(pid: int) -> str:
    """A live process as a failure names it: pid, state, parent, and its command line."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state, parent = fh.read().rsplit(b")", 1)[1].split()[:2]
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            command = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return f"{pid} (gone)"
    return f"{pid} ({state.decode()}, parent {parent.decode()}): {command}"


#: workload sources the probes combine; PROBE_DIR is the project folder (`Project.env`)
QUICK = '''
class Quick(modelci.Workload):
    framework = "python"
    steps = 2

    def setup(self, ctx):
        self.w = 0.5

    def train_step(self, ctx, step):
        return self.w / (step + 1)

    def infer(self, ctx):
        return {"y": [self.w, 2.0]}
'''

def workload(name: str, body: str = "", attrs: str = "", base: str = "modelci.Workload", doc: str = "") -> str:
    """The source of a small workload class `name` whose phases are ok unless `body` (in `setup`) says otherwise."""
    attrs = textwrap.indent(textwrap.dedent(attrs).strip(), "    ") if attrs.strip() else ""
    body = textwrap.indent(textwrap.dedent(body).strip(), "        ") if body.strip() else "        pass"
    doc = f'    """{doc}"""\n\n' if doc else ""
    return f'''
class {name}({base}):
{doc}    framework = "python"
{attrs}

    def setup(self, ctx):
        import os, sys, pathlib, subprocess
{body}

    def train_step(self, ctx, step):
        return 0.25

    def infer(self, ctx):
        return {{"y": [1.0, 2.0]}}
'''


def filler(path: Path) -> str:
    """The source of a workload `Filler` that fills the disk `path` is on while it runs, as another job on the
    machine would (writing `path` until the disk refuses). The refusal is caught around the file's close too:
    a write the disk took in part leaves the rest in the file's buffer, which the close tries again."""
    return workload("Filler", f"""
        try:
            with open({str(path)!r}, "wb") as fh:
                while True:
                    fh.write(b"x" * 65536)
                    fh.flush()
        except OSError:
            pass
    """)


def _spinner(name: str, doc: str, *, spawn: str = "", hang: bool) -> str:
    """A workload that tells the probe a pid in PROBE_DIR/<hanging|background>: its own, or (`spawn` "group" or
    "session") that of a spinning process it starts in its own process group or in a session of its own; then
    it spins at full CPU forever (`hang`) or ends normally."""
    marker = "hanging" if hang else "background"
    if spawn:
        session = ", start_new_session=True" if spawn == "session" else ""
        body = (f'child = subprocess.Popen([sys.executable, "-c", "while True: pass"]{session})\n'
                f'pathlib.Path(os.environ["PROBE_DIR"], "{marker}").write_text(str(child.pid))')
    else:
        body = f'pathlib.Path(os.environ["PROBE_DIR"], "{marker}").write_text(str(os.getpid()))'
    if hang:
        body += "\nwhile True:\n    pass"
    return workload(name, body, doc=doc)


HANG = _spinner("Hang", "Tells the probe it has started, then spins at full CPU forever.", hang=True)
BACKGROUND = _spinner("Background", "Starts a process that outlives it (in its own process group), then ends "
                      "normally.", spawn="group", hang=False)
BACKGROUND_THEN_HANG = _spinner("BackgroundThenHang", "Starts a process of its own, tells the probe, then spins "
                                "forever.", spawn="group", hang=True)
SETSID_BACKGROUND = _spinner("SetsidBackground", "Starts a process in a session of its own (out of the workload's "
                             "process group), then ends normally.", spawn="session", hang=False)
SETSID_THEN_HANG = _spinner("SetsidThenHang", "Starts a process in a session of its own, tells the probe, then "
                            "spins forever.", spawn="session", hang=True)


@dataclass
class SharedRun:
    """One `modelci run` over a suite holding many probes; each probe is a test that reads its own result."""

    project: Project
    done: subprocess.CompletedProcess

    def result(self, workload: str) -> dict:
        found = [r for r in self.project.report()["results"] if r["workload"] == workload]
        assert found, (workload, sorted(r["workload"] for r in self.project.report()["results"]),
                       self.done.stderr[-3000:])
        return found[0]

    def check(self, workload: str, status: str, *texts: str) -> dict:
        """The probe's result has `status` and its reason holds each of `texts`; the run's common checks hold."""
        result = self.result(workload)
        assert result["status"] == status, result
        for text in texts:
            assert text in result["reason"], (text, result["reason"])
        self.project.assert_clean(self.done)
        return result


def shared_run(tmp_path_factory, cache: Path, files: dict[str, str], *args: str, config: str = "",
               folder: str = "suite") -> SharedRun:
    """Write the suite files (name -> source) under `folder`, run modelci once with every report file."""
    project = Project(root=tmp_path_factory.mktemp("shared") / "project", cache=cache)
    project.root.mkdir()
    project.config(config)
    for name, source in files.items():
        target = project.root / folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("import modelci\n" + source)
    done = project.cli("run", "--target", "current", "--suite", folder, "--json", "report.json", "--junit",
                       "junit.xml", "--markdown", "summary.md", *args)
    assert (project.root / "report.json").exists(), done.stderr
    return SharedRun(project, done)


#: the answer the slow receiver trickles, one byte a second: a minute in all
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"


class TricklingReceiver:
    """A real HTTP server on loopback that reads a request, then answers one byte a second."""

    #: what it trickles; `speaks_first`: it does not wait for a request (an SMTP server greets the client)
    answer = ANSWER
    speaks_first = False

    def __init__(self, pause: float = 1.0):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        self.requests = 0
        self.sent: list[int] = []
        self.pause = pause
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.requests += 1
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                if not self.speaks_first:
                    conn.recv(65536)
                sent = 0
                for byte in self.answer:
                    if self.stop.wait(self.pause):
                        break
                    conn.sendall(bytes([byte]))
                    sent += 1
            except OSError:  # the client gave up and closed: what this probe wants to see
                pass
            self.sent.append(sent)

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
