"""A PostgreSQL history that fails a command after it opened (the server gone mid-query, a role that may only
read), and a password in the `db` setting: one line saying what the database said and what to do, never a
traceback, and never the password. On a real server (tests/pgserver.py), through the real `modelci` command."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

psycopg = pytest.importorskip("psycopg")

SUITE = '''\
import modelci


class Quick(modelci.Workload):
    framework = "python"
    steps = 2

    def setup(self, ctx):
        open(__file__ + ".ran", "a").close()  # that a workload ran

    def train_step(self, ctx, step):
        return 0.5 / (step + 1)

    def infer(self, ctx):
        return {"y": [0.5, 2.0]}
'''


def modelci(root: Path, db: str | None, *args: str, wait: bool = True, env: dict | None = None):
    """`modelci ARGS` in `root` with MODELCI_DB=db: its CompletedProcess, or its Popen without `wait`."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MODELCI_")}
    environ.update(MODELCI_CACHE_DIR=str(root / "cache"), MODELCI_ARTIFACTS=str(root / "artifacts"), COLUMNS="200",
                   **({"MODELCI_DB": db} if db else {}), **(env or {}))
    command = [sys.executable, "-m", "modelci.cli", *args]
    if not wait:
        return subprocess.Popen(command, cwd=root, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, stdin=subprocess.DEVNULL)
    return subprocess.run(command, cwd=root, env=environ, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def conninfo(port: int, url: str, user: str = "postgres") -> str:
    return f"host=127.0.0.1 port={port} user={user} dbname={url.rsplit('/', 1)[1]}"


def one_line_error(done: subprocess.CompletedProcess, code: int) -> str:
    """The one `error:` line of a command that failed with `code`, no traceback, no password."""
    assert done.returncode == code, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr
    assert "s3cret" not in done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]


@pytest.fixture
def history(postgres_server, tmp_path):
    """A database holding one run and one open alarm (alarm 1), and a suite: (url, suite folder)."""
    from modelci.store import Store
    from modelci.store.alarms_schema import AlarmRow

    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "models.py").write_text(SUITE)
    url = postgres_server.database()
    done = modelci(tmp_path, url, "-q", "run", "--target", "current", "--suite", "suite")
    assert done.returncode == 0, done.stderr
    store = Store(url, str(tmp_path / "artifacts"))
    with store.write() as session:
        session.add(AlarmRow(key="probe", runner="ci", workload="suite/Quick", check="timing", metric="time.infer",
                             kind="regression"))
    store.engine.dispose()
    return url, suite


def test_a_password_in_a_query_argument_of_the_url_is_never_shown(postgres_server, history, tmp_path):
    """`?password=` is a password as much as `user:password@`: SQLAlchemy hides only the latter."""
    url, _ = history
    secret = url + "?password=s3cret"
    current = modelci(tmp_path, secret, "db", "current")
    assert current.returncode == 0, current.stderr
    assert "?password=***: revision" in current.stdout and "s3cret" not in current.stdout
    refused = url.rsplit(":", 1)[0] + ":1/hist?password=s3cret"  # nothing listens on port 1
    said = one_line_error(modelci(tmp_path, refused, "history"), 3)
    assert said.startswith("error: cannot open the history database postgresql+psycopg://postgres@127.0.0.1:1/"
                           "hist?password=***: "), said


def test_a_password_in_a_query_argument_is_stored_with_the_command_line_quoted_as_it_was(postgres_server, history,
                                                                                          tmp_path):
    """The command line is redacted again where the run is stored: the quote that closed `--db '...'` went with
    the password, and the stored line no longer split as the command did."""
    url, _ = history
    secret = url.replace("+psycopg", "") + "?password=s3cret"
    done = modelci(tmp_path, None, "--db", secret, "-q", "run", "--target", "current", "--suite", "suite")
    assert done.returncode == 0, done.stderr
    with psycopg.connect(conninfo(postgres_server.port, url)) as db:
        [(command,)] = db.execute("SELECT command FROM runs ORDER BY id DESC LIMIT 1").fetchall()
    assert "s3cret" not in command
    assert shlex.split(command)[1:4] == ["--db", url.replace("+psycopg", "") + "?password=***", "-q"], command
