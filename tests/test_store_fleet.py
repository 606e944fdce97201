"""One history for a fleet of runners: many `modelci run` processes writing at once, on SQLite and on a real
PostgreSQL server, never lose a run; bad database settings are a message, never a traceback."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from modelci.errors import UserError
from modelci.store import Store

SUITE = '''\
import modelci


class Fine(modelci.Workload):
    framework = "numpy"
    steps = 2
    repeats = 1
    warmup = 0

    def setup(self, ctx):
        import numpy as np
        self.x = np.arange(8.0) + ctx.seed

    def train_step(self, ctx, step):
        return float(self.x.sum()) / (step + 1)

    def infer(self, ctx):
        return {"y": self.x * 2}


class Broken(modelci.Workload):
    framework = "numpy"
    steps = 1
    repeats = 1
    warmup = 0

    def setup(self, ctx):
        raise RuntimeError("this workload always fails")

    def train_step(self, ctx, step):
        return 0.0

    def infer(self, ctx):
        return {}
'''

#: runner labels of the fleet: two runners share each label, so they update the same alarms at the same time
RUNNERS = ["cpu-a", "cpu-b", "gpu-a", "gpu-b"]


def modelci(root: Path, db: str, *args: str, timeout: float = 300) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELCI_")}
    env.update(MODELCI_DB=db, MODELCI_CACHE_DIR=str(root / "cache"), MODELCI_ARTIFACTS=str(root / "artifacts"))
    return subprocess.Popen([sys.executable, "-m", "modelci.cli", *args], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    return process.returncode, out, err


@pytest.mark.slow
def test_eight_runs_started_together_on_a_new_database_and_target_are_all_stored(history_db, tmp_path):
    suite = tmp_path / "tiny"
    suite.mkdir()
    (suite / "models.py").write_text(SUITE)
    runners = [RUNNERS[i % len(RUNNERS)] for i in range(8)]
    processes = [modelci(tmp_path, history_db, "run", "--target", "current", "--suite", str(suite),
                         "--runner", runner) for runner in runners]
    outcomes = [finish(p) for p in processes]

    for code, out, err in outcomes:
        # the broken workload makes each run exit 1; a lost run would exit 3, a race a traceback
        assert code == 1, (code, out, err)
        assert "Traceback" not in err, err  # (the broken workload's own traceback is part of the report)
        assert "tiny/Broken failed" in out + err
    store = Store(history_db, str(tmp_path / "artifacts"))
    with store.engine.connect() as connection:
        scalar = lambda sql: connection.execute(text(sql)).scalar()  # noqa: E731
        assert scalar("SELECT count(*) FROM runs WHERE status = 'complete'") == 8
        assert scalar("SELECT count(*) FROM results") == 16
        assert sorted(r[0] for r in connection.execute(text("SELECT runner FROM runs"))) == sorted(runners)
        # one row per target and per environment, though all eight stored them as new at once
        assert scalar("SELECT count(*) FROM targets") == 1
        assert scalar("SELECT count(*) FROM environments") == 1
        # one live alarm per series (runner, workload, check, metric), that counted each of its runner's runs
        alarms = connection.execute(text("SELECT key, runner, count FROM alarms WHERE state != 'resolved'")).all()
        keys = [a.key for a in alarms]
        assert len(keys) == len(set(keys))
        broken = {a.runner: a.count for a in alarms if "Broken" in a.key}
        assert broken == {runner: runners.count(runner) for runner in RUNNERS}
        events = connection.execute(text(
            "SELECT e.event, count(*) FROM alarm_events e JOIN alarms a ON e.alarm_id = a.id "
            "WHERE a.key LIKE '%Broken%' GROUP BY e.event")).all()
        assert dict(events) == {"opened": len(RUNNERS), "seen": 8 - len(RUNNERS)}
        assert scalar("SELECT count(*) FROM schema_info") == 1
        assert scalar("SELECT count(*) FROM alembic_version") == 1


# -- bad database settings -----------------------------------------------------------------------------------


def cli(root: Path, db: str, *args: str) -> tuple[int, str]:
    code, out, err = finish(modelci(root, db, *(args or ("history",))))
    assert "Traceback" not in out + err, err
    return code, out + err


def test_an_unknown_dialect_is_a_usage_error(tmp_path):
    code, out = cli(tmp_path, "nosuchdb://localhost/x")
    assert code == 2 and "modelci keeps its history in SQLite (a file path or sqlite:///PATH) or PostgreSQL" in out
    assert "not nosuchdb" in out
    # a server SQLAlchemy knows, whose driver may be missing: the answer is the same, not "install its driver"
    code, out = cli(tmp_path, "mysql://ci:secret@localhost/x")
    assert code == 2 and "db = 'mysql://ci:***@localhost/x': modelci keeps its history in SQLite" in out
    code, out = cli(tmp_path, "sqlite+nosuch:///x.db", "db", "upgrade")
    assert code == 2 and "'sqlite+nosuch' in db = sqlite+nosuch:///x.db is not a database modelci can use" in out


def test_a_missing_postgresql_driver_names_the_extra_to_install(tmp_path):
    # a real interpreter without the driver: the import of psycopg fails as on a machine without the extra
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "psycopg.py").write_text("raise ImportError('No module named psycopg')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELCI_")}
    env.update(PYTHONPATH=str(blocker), MODELCI_DB="postgresql://ci@127.0.0.1:1/history")
    done = subprocess.run([sys.executable, "-m", "modelci.cli", "history"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "pip install 'modelci[postgres]'" in done.stderr and "Traceback" not in done.stderr


def test_a_folder_that_cannot_be_created_is_a_usage_error(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    code, out = cli(tmp_path, str(tmp_path / "file" / "sub" / "history.db"), "db", "upgrade")  # one that creates
    assert code == 2 and "cannot create the folder" in out and str(tmp_path / "file" / "sub") in out


@pytest.mark.parametrize("content", [b"this is not a database at all" * 100, b"SQLite format 3\x00" + b"\xff" * 80])
def test_a_corrupt_history_file_is_a_harness_error_and_stays_as_it_was(tmp_path, content):
    db = tmp_path / "history.db"
    db.write_bytes(content)
    code, out = cli(tmp_path, str(db))
    assert code == 3 and f"cannot open the history database sqlite:///{db}" in out
    assert db.read_bytes() == content


def test_a_server_that_refuses_the_connection_is_a_harness_error(tmp_path):
    from pgserver import free_port

    url = f"postgresql://ci:secret@127.0.0.1:{free_port()}/history"  # nothing listens there
    code, out = cli(tmp_path, url)
    assert code == 3 and "cannot open the history database" in out
    assert "secret" not in out  # the password is not shown


# -- schema revisions ----------------------------------------------------------------------------------------


def legacy_history(db: str) -> None:
    """A history as the hand-written schema code made it (before schema revisions): every table of that time but
    the alarm tables (which it added later, within the same schema version) and the run links (a later revision),
    schema_info version 1, no alembic_version, and without the index a later revision adds."""
    from modelci.store import database_url
    from modelci.store.schema import Base

    engine = create_engine(database_url(db))
    legacy = [t for t in Base.metadata.sorted_tables if t.name not in ("alarms", "alarm_events", "run_links")]
    Base.metadata.create_all(engine, tables=legacy)
    with engine.begin() as connection:
        connection.execute(text("DROP INDEX ix_runs_runner_started"))
        connection.execute(text("INSERT INTO schema_info (id, version, created_at) VALUES (1, 1, '2025-01-01')"))
    engine.dispose()


def index_names(store: Store, table: str) -> set[str]:
    return {index["name"] for index in inspect(store.engine).get_indexes(table)}


def test_a_history_from_before_revisions_is_adopted_and_upgraded(history_db, tmp_path):
    legacy_history(history_db)
    inspected = Store(history_db, str(tmp_path / "a"), schema="inspect")
    assert inspected.schema.revision is None and inspected.schema.has_history
    assert inspected.schema.pending == ("0001", "0002", "0003", "0004", "0005", "0006")
    assert "ix_runs_runner_started" not in index_names(inspected, "runs")
    inspected.engine.dispose()

    store = Store(history_db, str(tmp_path / "a"))  # a writer upgrades it by itself: both revisions only add
    assert store.schema.revision == store.schema.head == "0006" and store.schema.current
    assert "ix_runs_runner_started" in index_names(store, "runs")
    tables = set(inspect(store.engine).get_table_names())
    assert {"alarms", "alarm_events", "run_links", "run_journals", "history_identity"} <= tables
    with store.engine.connect() as connection:
        assert connection.execute(text("SELECT version FROM schema_info")).all() == [(1,)]


def test_a_history_upgraded_from_0005_has_the_passwords_it_held_taken_out(history_db, tmp_path):
    """Runs, targets and bisects stored before the redaction hold passwords as given; revision 0006 redacts
    them, on SQLite and on PostgreSQL, and leaves every other text as it was."""
    store = Store(history_db, str(tmp_path / "a"))
    secret_db, secret_repo = "postgresql://ci:pg-s3cret@db/h", "git+https://ci:gh-s3cret@git.example/fw.git@v1"
    from sqlalchemy import insert

    from modelci.store.bisect_schema import BisectRow
    from modelci.store.schema import EnvironmentRow, RunRow, TargetRow

    with store.engine.begin() as connection:
        connection.execute(insert(TargetRow.__table__), [
            dict(spec=secret_repo, kind="git", name="fw", version="", commit="abc", wheel_sha256=""),
            dict(spec="numpy==2.0", kind="requirement", name="numpy", version="2.0", commit="", wheel_sha256="")])
        connection.execute(insert(EnvironmentRow.__table__).values(id="e", python="py", isolated=True, lock="",
                                                                    fingerprint={}))
        connection.execute(insert(RunRow.__table__), [
            dict(target_id=1, environment_id="e", runner="cpu", status="complete", suites=[], selection="",
                 command=f"modelci --db {secret_db} run --target {secret_repo}", modelci_version="0"),
            dict(target_id=2, environment_id="e", runner="cpu", status="complete", suites=[], selection="",
                 command="modelci run --target numpy==2.0 --db history.db", modelci_version="0")])
        connection.execute(insert(BisectRow.__table__).values(
            runner="cpu", workload="s/w", check="timing", direction="regression", status="found", culprit="v1",
            result={"candidates": [{"spec": secret_repo, "loss": 1.5}]},
            command=f"modelci bisect --repo {secret_repo[4:-3]}"))
        connection.execute(text("UPDATE alembic_version SET version_num = '0005'"))
    store.engine.dispose()
    upgraded = Store(history_db, str(tmp_path / "a"))
    assert upgraded.schema.revision == "0006"
    with upgraded.engine.connect() as connection:
        runs = connection.execute(text("SELECT r.command, t.spec FROM runs r JOIN targets t ON t.id = r.target_id "
                                       "ORDER BY r.id")).all()
        bisects = connection.execute(text("SELECT result, command FROM bisects")).all()
    texts = [str(value) for row in [*runs, *bisects] for value in row]
    assert not any("s3cret" in value for value in texts), texts
    assert texts[0] == "modelci --db postgresql://ci:***@db/h run --target git+https://ci:***@git.example/fw.git@v1"
    assert texts[2:4] == ["modelci run --target numpy==2.0 --db history.db", "numpy==2.0"]
    assert "'loss': 1.5" in texts[4] or '"loss": 1.5' in texts[4]


def test_the_revisions_make_exactly_the_schema_of_the_code(history_db, tmp_path):
    """Upgrading an empty database through every revision gives the tables, columns and indexes the code
    declares: nothing missing, nothing extra (Alembic's own comparison)."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from modelci.store.schema import Base

    store = Store(history_db, str(tmp_path / "a"))
    with store.engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection, opts={"compare_type": True}),
                                       Base.metadata)
    assert differences == []


def test_a_history_upgraded_by_a_newer_modelci_is_refused_with_what_to_do(history_db, tmp_path):
    Store(history_db, str(tmp_path / "a")).engine.dispose()
    engine = create_engine(Store(history_db, str(tmp_path / "a")).url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    code, out = cli(tmp_path, history_db)
    assert code == 2 and "schema revision 9999, which a newer modelci made" in out and "pip install -U modelci" in out
    code, out = cli(tmp_path, history_db, "db", "current")
    assert code == 0 and "revision 9999, newer than this modelci's 0006" in out


@pytest.mark.parametrize("damage, says", [
    ("INSERT INTO alembic_version (version_num) VALUES ('0003')",
     "its schema table alembic_version holds 2 revisions (0003, 0006), where it holds the one revision"),
    ("UPDATE alembic_version SET version_num = 'zzz; drop'",
     "is at schema revision 'zzz; drop', which no modelci made (its revisions are four digits"),
])
def test_a_schema_table_changed_by_hand_is_a_message_on_every_command(history_db, tmp_path, damage, says):
    """Two rows in alembic_version (Alembic's "more than one head present") was a traceback on every command; a
    revision no modelci writes was taken for a newer modelci's, and the advice to upgrade would not help."""
    Store(history_db, str(tmp_path / "a")).engine.dispose()
    engine = create_engine(Store(history_db, str(tmp_path / "a")).url)
    with engine.begin() as connection:
        connection.execute(text(damage))
    engine.dispose()
    for args in (("history",), ("db", "current"), ("db", "upgrade"), ("alarms", "list")):
        code, out = cli(tmp_path, history_db, *args)
        assert code == 3 and says in out and "or restore the database from a backup" in out, (args, out)
        assert "newer modelci" not in out


@pytest.mark.parametrize("loss", ["DELETE FROM alembic_version", "DROP TABLE alembic_version"])
def test_a_history_whose_revision_was_lost_is_adopted_by_db_upgrade(history_db, tmp_path, loss):
    """`db current` said to run `db upgrade`, which then failed: "index ix_runs_runner_started already exists"."""
    suite = tmp_path / "tiny"
    suite.mkdir()
    (suite / "models.py").write_text(SUITE.split("class Broken")[0])
    code, _, err = finish(modelci(tmp_path, history_db, "run", "--target", "current", "--suite", str(suite),
                                  "--runner", "r"))
    assert code == 0, err
    engine = create_engine(Store(history_db, str(tmp_path / "a")).url)
    with engine.begin() as connection:
        connection.execute(text(loss))
    code, out = cli(tmp_path, history_db, "db", "current")
    assert code == 0 and "`modelci db upgrade` applies them" in out
    code, out = cli(tmp_path, history_db, "db", "upgrade")
    assert code == 0, out
    code, out = cli(tmp_path, history_db, "db", "current")
    assert code == 0 and "up to date" in out
    with engine.connect() as connection:
        assert connection.execute(text("SELECT runner FROM runs")).scalars().all() == ["r"]
    engine.dispose()


def test_another_applications_database_is_refused_and_left_as_it_was(history_db, tmp_path):
    """A database with tables but no modelci history (a mistyped URL, a database shared with an application):
    neither a run nor `db upgrade` adds modelci's tables beside the application's, on either backend."""
    from modelci.store import database_url

    engine = create_engine(database_url(history_db))
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE runs (id INTEGER PRIMARY KEY, what TEXT)"))  # a name modelci uses
        connection.execute(text("INSERT INTO runs (id, what) VALUES (1, 'theirs')"))
    with pytest.raises(UserError, match=r"holds no modelci history but other tables \(runs\)"):
        Store(history_db, str(tmp_path / "a"))
    code, out = cli(tmp_path, history_db, "db", "upgrade")
    assert code == 2 and "other tables (runs)" in out and "give a new or empty database for the history" in out
    code, out = cli(tmp_path, history_db)  # a reader
    assert code == 2 and "holds no modelci history" in out
    assert inspect(engine).get_table_names() == ["runs"]
    with engine.connect() as connection:
        assert connection.execute(text("SELECT id, what FROM runs")).all() == [(1, "theirs")]
    engine.dispose()


def test_db_current_of_a_new_database_says_there_is_no_history_and_how_to_make_one(history_db, tmp_path):
    """An empty SQLite file or a new PostgreSQL database, as an operator looks at it before `db upgrade`: it said
    "revision none; this modelci needs ... (pending ...)" with exit 0, and grew the empty file to 4 KiB."""
    from modelci.store import database_url, sqlite_file

    file = sqlite_file(history_db)
    if file is not None:
        file.write_bytes(b"")
    code, out = cli(tmp_path, history_db, "db", "current")
    assert code == 2 and "holds no modelci history yet" in out and "`modelci db upgrade` makes one there" in out
    engine = create_engine(database_url(history_db))
    assert inspect(engine).get_table_names() == []
    engine.dispose()
    if file is not None:
        assert file.read_bytes() == b""
    code, out = cli(tmp_path, history_db, "db", "upgrade")
    assert code == 0 and "up to date" in out
    code, out = cli(tmp_path, history_db, "db", "current")
    assert code == 0 and "up to date" in out


def test_db_current_and_upgrade_through_the_cli(tmp_path):
    db = str(tmp_path / "history.db")
    legacy_history(db)
    code, out = cli(tmp_path, db, "db", "current")
    assert code == 0 and "pending: 0001, 0002, 0003, 0004, 0005, 0006" in out
    code, out = cli(tmp_path, db, "db", "upgrade")
    assert code == 0 and "revision 0006 (this modelci's head): up to date" in out
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() == [("0006",)]


# -- serve notices every change ------------------------------------------------------------------------------


def test_the_live_dashboard_rebuilds_after_an_alarm_changes_state_on_either_backend(history_db, tmp_path):
    """`serve` rebuilds when the history's signature moves: a new run, and an alarm acknowledged in place (on
    PostgreSQL there are no file times to notice it by)."""
    from types import SimpleNamespace

    from test_store import ingest, result

    from modelci.alarms import lifecycle
    from modelci.report.server import LiveSite

    store = Store(history_db, str(tmp_path / "artifacts"))
    site = LiveSite(store, tmp_path / "site", log=lambda text: None)
    ingest(store, "1.0", [result("s/A", 1.0)])
    assert site.refresh() and not site.refresh()
    firing = lifecycle.Observation("cpu", "s/A", "timing", "time.infer", True, message="slower")
    (opened,) = lifecycle.apply(store, SimpleNamespace(alarms={}), [firing])
    assert site.refresh() and not site.refresh()
    lifecycle.acknowledge(store, [opened.alarm.id], "alice")
    assert site.refresh()
    ingest(store, "1.1", [result("s/A", 1.0)], minutes=1)
    assert site.refresh() and not site.refresh()


def test_opening_a_current_history_checks_alembics_head_without_importing_alembic(tmp_path):
    from modelci.store import migrate

    assert migrate.HEAD == migrate.scripts().get_current_head()
    db = tmp_path / "history.db"
    Store(str(db), str(tmp_path / "a")).engine.dispose()
    probe = ("import sys; from modelci.store import Store; "
             f"store = Store({str(db)!r}, {str(tmp_path / 'a')!r}); "
             "print(store.schema.revision, 'alembic' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == [migrate.HEAD, "False"], done.stderr


@pytest.mark.slow
def test_a_server_that_takes_the_connection_and_never_answers_is_a_message_not_a_hang(tmp_path):
    """A hung server (its postmaster stopped: the kernel still accepts the connection) kept every command waiting
    before it began, for ever; the connect is bounded now (store.PG_CONNECT_ARGS), and the message says why."""
    import signal
    import time

    from pgserver import PostgresServer

    from modelci.store import PG_CONNECT_ARGS

    server = PostgresServer().start()
    try:
        url = server.database()
        postmaster = int((server.folder / "data" / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGSTOP)
        try:
            began = time.monotonic()
            code, out = cli(tmp_path, url)
            took = time.monotonic() - began
        finally:
            os.kill(postmaster, signal.SIGCONT)
        assert code == 3 and "cannot open the history database" in out, out
        assert "did not answer: is it up, not overloaded" in out, out
        assert took < PG_CONNECT_ARGS["connect_timeout"] + 30, took  # a bound, not for ever
        code, out = cli(tmp_path, url)  # the same server, answering again: an empty history
        assert code != 3 and "cannot open" not in out, out
    finally:
        server.stop()


@contextmanager
def _a_run_storing_behind_a_lock(tmp_path, *extra: str):
    """A real server holding one run, and a second `modelci run` whose workload is done and whose store waits on a
    lock that another session holds on `runs` (reads go on, its insert waits): (server, url, holder, process)."""
    import time

    import psycopg
    from pgserver import PostgresServer

    suite = tmp_path / "tiny"
    suite.mkdir()
    (suite / "models.py").write_text(SUITE)
    server = PostgresServer().start()
    try:
        url = server.database()
        assert finish(modelci(tmp_path, url, "run", "--target", "current", "--suite", str(suite), "-k", "Fine"))[0] == 0
        holder = psycopg.connect(_conninfo(server, url))
        holder.execute("LOCK TABLE runs IN EXCLUSIVE MODE")
        process = modelci(tmp_path, url, "run", "--target", "current", "--suite", str(suite), "-k", "Fine", *extra)
        for line in process.stderr:  # the workload is done: the run is being stored, behind the lock
            if "tiny/Fine" in line:
                break
        time.sleep(1.0)
        yield server, url, holder, process
    finally:
        server.stop()


def _conninfo(server, url: str) -> str:
    return f"host=127.0.0.1 port={server.port} user=postgres dbname={url.rsplit('/', 1)[1]}"


@pytest.mark.slow
def test_a_run_whose_server_restarts_as_it_is_stored_is_stored_once_the_server_is_back(tmp_path):
    """The server restarts (an administrator, a failover) just as a run is stored: the transaction is rolled back,
    and the run is stored again once the server answers, not lost after its workloads ran."""
    import psycopg

    with _a_run_storing_behind_a_lock(tmp_path) as (server, url, holder, process):
        server.restart()  # ends every session: the holder's, and the run's mid-transaction
        holder.close()
        code, out, err = finish(process)
        assert code == 0, out + err
        assert "Traceback" not in err and "not stored" not in out + err, err
        with psycopg.connect(_conninfo(server, url)) as db:
            assert db.execute("SELECT status FROM runs ORDER BY id").fetchall() == [("complete",), ("complete",)]


def test_a_password_in_the_command_line_is_not_stored_nor_shown(postgres_server, tmp_path):
    """The command line is stored with each run and shown wherever the run is: `--db` with the history's
    password put it in the history, the report files and the published dashboard."""
    suite = tmp_path / "tiny"
    suite.mkdir()
    (suite / "models.py").write_text(SUITE)
    url = postgres_server.database()
    secret = url.replace("postgres@", "postgres:s3cret-pw@", 1)
    assert "s3cret-pw" in secret
    process = subprocess.run([sys.executable, "-m", "modelci.cli", "--db", secret, "run", "--target", "current",
                              "--suite", str(suite), "-k", "Fine", "--json", str(tmp_path / "r.json"),
                              "--markdown", str(tmp_path / "r.md")], cwd=tmp_path, capture_output=True, text=True,
                             env={**{k: v for k, v in os.environ.items() if not k.startswith("MODELCI_")},
                                  "MODELCI_CACHE_DIR": str(tmp_path / "cache")})
    assert process.returncode == 0, process.stdout + process.stderr
    store = Store(url, str(tmp_path / "artifacts"))
    with store.engine.connect() as connection:
        [command] = connection.execute(text("SELECT command FROM runs")).scalars()
    assert "postgres:***@127.0.0.1" in command, command
    shown = subprocess.run([sys.executable, "-m", "modelci.cli", "--db", url, "show", "1"], cwd=tmp_path,
                           capture_output=True, text=True)
    for text_ in (command, process.stdout, process.stderr, shown.stdout, (tmp_path / "r.json").read_text(),
                  (tmp_path / "r.md").read_text()):
        assert "s3cret-pw" not in text_


#: a runner frozen (its VM suspended, its process stopped) while it holds the history's write lock
FROZEN_WITH_THE_LOCK = """
import os, signal, sys
from modelci.store import Store, migrate
migrate.LOCK_IDLE_S = 2
store = Store(sys.argv[1], sys.argv[2])
with store.write():
    print("held", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
"""


def test_a_runner_frozen_while_it_holds_the_write_lock_holds_the_others_up_only_for_a_while(postgres_server,
                                                                                           tmp_path):
    """A runner that stops dead in a transaction holding a lock (the alarm step's write lock) kept every other
    runner's command waiting for ever: its server sees an idle session, not a dead one. The server now ends such a
    session once it has sat idle for LOCK_IDLE_S, and the others go on."""
    import time

    suite = tmp_path / "tiny"
    suite.mkdir()
    (suite / "models.py").write_text(SUITE)
    url = postgres_server.database()
    frozen = subprocess.Popen([sys.executable, "-c", FROZEN_WITH_THE_LOCK, url, str(tmp_path / "artifacts")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert frozen.stdout.readline().strip() == "held"
        state = lambda: Path(f"/proc/{frozen.pid}/stat").read_text().split(")")[1].split()[0]  # noqa: E731
        deadline = time.monotonic() + 30
        while state() != "T" and time.monotonic() < deadline:  # it stops itself just after it says so
            time.sleep(0.05)
        assert state() == "T"  # stopped, the lock held
        code, out, err = finish(modelci(tmp_path, url, "run", "--target", "current", "--suite", str(suite), "-k",
                                        "Fine"), timeout=120)
        assert code == 0, out + err
        assert frozen.poll() is None  # still stopped: its session was ended by the server, not by anyone's kill
    finally:
        frozen.kill()
        frozen.wait()
        frozen.stdout.close()


@pytest.mark.parametrize("journal", ["f" * 32, ""], ids=["journal", "no-journal"])
def test_a_run_whose_commit_was_answered_on_a_connection_that_then_broke_is_stored_once(postgres_server, tmp_path,
                                                                                       monkeypatch, journal):
    """The connection breaks after the server committed the run, before its answer arrived (a restart or a
    failover at that moment): the store tries again, as for any lost connection, and stored the run a second
    time, a duplicate point in every series. The run's journal name, stored with it, tells it the run is in; a
    run kept in no journal (a build that failed, a confirmation run) is stored under a name of its own."""
    import psycopg
    from sqlalchemy.exc import OperationalError

    from modelci import targets
    from modelci.envs import Environment
    from modelci.records import Metric, Result

    store = Store(postgres_server.database(), str(tmp_path / "artifacts"))
    commit = store._ingest_once
    committed: list[int] = []

    def answer_lost(*args):  # the transaction commits; then the answer is lost, once
        committed.append(commit(*args))
        if len(committed) == 1:
            raise OperationalError("COMMIT", {}, psycopg.OperationalError("server closed the connection "
                                                                          "unexpectedly"))
        return committed[-1]

    monkeypatch.setattr(store, "_ingest_once", answer_lost)
    results = [Result(workload=f"s/{name}", status="ok", metrics={"m": Metric("m", "samples", [1.0])})
               for name in "AB"]
    environment = Environment(id="env-1", path=None, python=Path(sys.executable), spec=None, lock="", fingerprint={},
                              isolated=True)
    run_id = store.ingest(target=targets.resolve("fw==1.0"), environment=environment, runner="cpu",
                          results=results, journal=journal)
    assert committed == [run_id]  # not tried again once the journal said the run is in
    with store.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM runs")).scalar() == 1
        stored = connection.execute(text("SELECT id, workload FROM results ORDER BY id")).all()
    assert [(r.id, r.workload) for r in results] == [tuple(row) for row in stored]


@pytest.mark.slow
def test_a_cancel_while_the_store_waits_for_a_server_that_is_gone_ends_at_once_with_the_reports(tmp_path):
    """The server goes down as the run is stored, and the CI job is cancelled while the store waits to try again:
    the command must not wait out its retries (a grace period ends in seconds), and says that nothing is stored,
    with the results in the report file."""
    import signal
    import time

    with _a_run_storing_behind_a_lock(tmp_path, "--json", str(tmp_path / "report.json")) as (server, _, holder,
                                                                                              process):
        server.halt()  # gone, and it stays gone: the store tries again, and again
        holder.close()
        time.sleep(3.0)
        assert process.poll() is None  # still trying
        process.send_signal(signal.SIGTERM)
        began = time.monotonic()
        code, out, err = finish(process, timeout=60)
        assert time.monotonic() - began < 5.0  # not the rest of its minute of retries
        assert code == 143, out + err
        assert "interrupted by SIGTERM; nothing of the run is stored" in err and "Traceback" not in err, err
        report = json.loads((tmp_path / "report.json").read_text())
        assert report["run"] is None or report["run"]["id"] is None, report["run"]
        assert [r["workload"] for r in report["results"]] == ["tiny/Fine"]
