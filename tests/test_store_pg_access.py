"""A PostgreSQL history that fails a command after it opened (the server gone mid-query, a role that may only
read), and a password in the `db` setting: one line saying what the database said and what to do, never a
traceback, and never the password. On a real server (tests/pgserver.py), through the real `modelci` command."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
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


def new_role(admin, name: str, url: str) -> str:
    """A new login role for the database of `url`, named after `name` and it: roles are the server's, shared by
    every test's database."""
    role = f"{name}_{url.rsplit('/', 1)[1]}"
    admin.execute(f"CREATE ROLE {role} LOGIN")
    return role


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


def _blocked_then_cut(server, url: str, tmp_path: Path, stop, *args: str, db: str = "") -> subprocess.CompletedProcess:
    """Run `modelci ARGS` on `db` (default `url`) while another session holds `runs` and `alarms` locked, so that
    its query waits; once it waits, `stop(backend pid)` cuts its connection. What the command did."""
    holder = psycopg.connect(conninfo(server.port, url))
    holder.execute("LOCK TABLE runs, alarms IN ACCESS EXCLUSIVE MODE")
    process = modelci(tmp_path, db or url, *args, wait=False)
    try:
        with psycopg.connect(conninfo(server.port, url), autocommit=True) as watcher:
            deadline = time.monotonic() + 60
            while True:  # the command's session, waiting on the lock
                found = watcher.execute("SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                        "AND datname = current_database()").fetchall()
                if found or time.monotonic() > deadline:
                    break
                assert process.poll() is None, process.communicate()
                time.sleep(0.1)
            assert found, "the command never waited on the lock"
            stop(found[0][0])
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        holder.close()
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


@pytest.mark.parametrize("argv", [["history"], ["show", "1"], ["alarms", "list"], ["report", "--out", "site"],
                                  ["alarms", "ack", "1"]])
def test_a_connection_lost_in_the_middle_of_a_command_is_one_line_and_exit_3(postgres_server, history, tmp_path,
                                                                              argv):
    """The server ends the command's session while its query runs (as a restart or a failover does): two
    tracebacks and exit 1, which CI reads as a regression; now the database's words and what to do, exit 3."""
    url, _ = history

    def terminate(pid: int) -> None:
        with psycopg.connect(conninfo(postgres_server.port, url), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

    done = _blocked_then_cut(postgres_server, url, tmp_path, terminate, *argv)
    said = one_line_error(done, 3)
    assert f"error: the history database {url} failed: " in said, said
    assert said.endswith("; run again once the server answers"), said


def test_a_server_stopped_in_the_middle_of_a_query_is_one_line_and_exit_3(tmp_path):
    """`pg_ctl stop -m immediate` while `history` waits on its query: the server is gone, not restarting."""
    from pgserver import PostgresServer, pg_program

    server = PostgresServer().start()
    try:
        url = server.database()
        assert modelci(tmp_path, url, "-q", "db", "upgrade").returncode == 0
        secret = url + "?password=s3cret"

        def crash(_pid: int) -> None:
            server._run(pg_program("pg_ctl"), "stop", "-w", "-m", "immediate", "-D", str(server.folder / "data"))

        done = _blocked_then_cut(server, url, tmp_path, crash, "history", db=secret)
    finally:
        server.stop()
    said = one_line_error(done, 3)
    assert "?password=***" in said and "run again once the server answers" in said, said


def test_a_privilege_refused_in_the_middle_of_a_read_is_one_line_and_exit_3(postgres_server, history, tmp_path):
    """A role that may read the alarms but not their events (a GRANT that missed a table): the server refuses
    the query that `alarms list` makes after the history opened. That is the database's word, and what to do."""
    url, _ = history
    with psycopg.connect(conninfo(postgres_server.port, url), autocommit=True) as admin:
        partial = new_role(admin, "partial", url)
        admin.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {partial}")
        admin.execute(f"REVOKE SELECT ON alarm_events FROM {partial}")
    done = modelci(tmp_path, url.replace("postgres@", f"{partial}@"), "alarms", "list")
    said = one_line_error(done, 3)
    assert "failed: permission denied for table alarm_events; grant the database role what it lacks" in said, said


@pytest.fixture
def reader(postgres_server, history):
    """The history's URL with a role that may only read it (SELECT on every table)."""
    url, _ = history
    with psycopg.connect(conninfo(postgres_server.port, url), autocommit=True) as admin:
        reader = new_role(admin, "reader", url)
        admin.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {reader}")
    return url.replace("postgres@", f"{reader}@")


@pytest.mark.parametrize("argv, lacks", [
    (["run", "--target", "current", "--suite", "suite"], "it lacks targets (INSERT), environments (INSERT)"),
    (["calibrate", "--target", "current", "--suite", "suite", "--runs", "2"], "it lacks targets (INSERT)"),
    (["alarms", "ack", "1"], "it lacks alarms (UPDATE), alarm_events (INSERT), sequence alarm_events_id_seq"),
    (["alarms", "resolve", "1"], "it lacks alarms (UPDATE)"),
])
def test_a_role_that_may_only_read_is_refused_before_any_workload_runs(reader, history, tmp_path, argv, lacks):
    """A SELECT-only role ran every workload of a run before the store refused it ("permission denied for table
    runs", exit 3): now it is refused at the start, naming the role and what it lacks, as a SQLite file that
    cannot be written is."""
    _, suite = history
    ran = Path(str(suite / "models.py") + ".ran")
    ran.unlink(missing_ok=True)
    done = modelci(tmp_path, reader, *argv)
    said = one_line_error(done, 2)
    role = reader.split("//")[1].split("@")[0]
    assert f"error: the database role {role} cannot write the history {reader}: " in said, said
    assert lacks in said and "GRANT" in said, said
    assert not ran.exists(), "a workload ran before the refusal"
    # what it may do, it still does
    assert modelci(tmp_path, reader, "alarms", "list").returncode == 0


def test_a_role_without_the_sequences_is_refused_before_any_workload_runs(postgres_server, history, tmp_path):
    """INSERT on every table, but no USAGE on the id sequences (GRANT ... ON ALL TABLES alone): the run was
    refused as it was stored ("permission denied for sequence ..."). Granted them, the role runs."""
    url, _ = history
    with psycopg.connect(conninfo(postgres_server.port, url), autocommit=True) as admin:
        writer = new_role(admin, "writer", url)
        admin.execute(f"GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO {writer}")
    writer_url = url.replace("postgres@", f"{writer}@")
    said = one_line_error(modelci(tmp_path, writer_url, "run", "--target", "current", "--suite", "suite"), 2)
    assert "it lacks sequence targets_id_seq (USAGE)" in said and "runs (INSERT)" not in said, said
    with psycopg.connect(conninfo(postgres_server.port, url), autocommit=True) as admin:
        admin.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {writer}")
    done = modelci(tmp_path, writer_url, "run", "--target", "current", "--suite", "suite")
    assert done.returncode == 0, done.stderr


def test_a_role_that_may_not_update_the_alarms_is_refused_before_a_run_that_alarms(postgres_server, history,
                                                                                    tmp_path):
    """A role that may store a run but not touch the alarms had its run stored, then failed in the alarm step
    (exit 3). The run's alarm step is part of what is checked first; with --no-alarms it is not needed."""
    url, suite = history
    with psycopg.connect(conninfo(postgres_server.port, url), autocommit=True) as admin:
        writer = new_role(admin, "runonly", url)
        admin.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {writer}")
        admin.execute(f"GRANT INSERT ON targets, environments, runs, run_journals, run_links, results, metrics, "
                      f"artifacts, outputs, findings TO {writer}")
        admin.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {writer}")
    writer_url = url.replace("postgres@", f"{writer}@")
    ran = Path(str(suite / "models.py") + ".ran")
    ran.unlink(missing_ok=True)
    said = one_line_error(modelci(tmp_path, writer_url, "run", "--target", "current", "--suite", "suite"), 2)
    assert "it lacks alarms (INSERT), alarms (UPDATE), alarm_events (INSERT)" in said, said
    assert not ran.exists(), "a workload ran before the refusal"
    done = modelci(tmp_path, writer_url, "run", "--target", "current", "--suite", "suite", "--no-alarms")
    assert done.returncode == 0, done.stderr


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
