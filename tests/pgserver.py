"""A real PostgreSQL server for the tests: `initdb` and `pg_ctl` in a temporary folder, on a free loopback port.

The server programs refuse to run as root, so when the tests run as root (CI does) they run as the `postgres`
user, in a folder handed to that user. Authentication is `trust` on 127.0.0.1 only; nothing else can reach it.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from packaging.version import Version

import psycopg


def pg_program(name: str) -> str:
    """The path of a PostgreSQL server program: on PATH, else the newest /usr/lib/postgresql/*/bin (Debian
    installs the server there, off PATH); a clear error when none is installed (`.ci/run` installs it)."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                      key=lambda p: Version(Path(p).parent.parent.name), reverse=True)
    if versions:
        return versions[0]
    raise RuntimeError(f"PostgreSQL's {name} is not installed: install the Debian package postgresql "
                       "(.ci/run does so)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresServer:
    """One server, started by `start`, stopped by `stop`; `database()` makes a fresh database and gives its URL."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="modelci-pg-"))
        self.port = free_port()
        self.created = 0
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            # the folder must be the postgres user's own; the server programs refuse root
            shutil.chown(self.folder, "postgres", "postgres")
            self.folder.chmod(0o700)
            self.as_user = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        done = subprocess.run([*self.as_user, *args], capture_output=True, text=True, timeout=120, cwd=self.folder)
        if done.returncode:
            log = self.folder / "server.log"
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}\n"
                               + (log.read_text() if log.exists() else ""))

    def start(self) -> PostgresServer:
        data = self.folder / "data"
        self._run(pg_program("initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                  "--no-sync", "--no-instructions")
        # no Unix socket (its default folder may not exist or be writable here); fsync off: a test server
        options = f"-p {self.port} -h 127.0.0.1 -k '' -c fsync=off -c max_connections=200"
        self._run(pg_program("pg_ctl"), "start", "-w", "-t", "60", "-D", str(data), "-l",
                  str(self.folder / "server.log"), "-o", options)
        return self

    def restart(self) -> None:
        """Restart the server as an administrator does (`pg_ctl restart -m fast`): every session is ended."""
        # its log to the file, as at the start: on pg_ctl's output the server would hold the pipe read here open
        self._run(pg_program("pg_ctl"), "restart", "-w", "-t", "60", "-m", "fast", "-D", str(self.folder / "data"),
                  "-l", str(self.folder / "server.log"))

    def halt(self) -> None:
        """Stop the server as a crash or an administrator would, keeping its data (`stop` removes it too)."""
        self._run(pg_program("pg_ctl"), "stop", "-w", "-m", "fast", "-D", str(self.folder / "data"))

    def stop(self) -> None:
        if (self.folder / "data" / "postmaster.pid").exists():
            self._run(pg_program("pg_ctl"), "stop", "-w", "-m", "fast", "-D", str(self.folder / "data"))
        shutil.rmtree(self.folder, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """A new, empty database; its SQLAlchemy URL."""
        self.created += 1
        name = f"test_{self.created}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres",
                             autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {name}")
        return self.url(name)
