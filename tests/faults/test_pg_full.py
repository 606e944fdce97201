"""A PostgreSQL history that refuses a run: for want of disk (SQLSTATE 53100, disk_full) and for another reason.

The full disk is real: the database's tables live in a tablespace on a small tmpfs (its WAL stays in the server's
own data folder: a full pg_wal makes PostgreSQL PANIC, a full tablespace makes it refuse the write with
disk_full and go on serving), and a workload fills that tmpfs while the run goes on, as another job on the
database machine would.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from probes import QUICK, filler, workload

psycopg = pytest.importorskip("psycopg")


def _connect(server, database: str = "postgres"):
    return psycopg.connect(f"host=127.0.0.1 port={server.port} user=postgres dbname={database}", autocommit=True)


def _runs(server, database: str) -> int:
    with _connect(server, database) as connection:
        return connection.execute("SELECT count(*) FROM runs").fetchone()[0]


@pytest.fixture
def full_tablespace(postgres_server):
    """A new database whose tables go to a tablespace on an 8 MiB tmpfs owned by the postgres user: (its URL, its
    name, the tmpfs). The tmpfs is under /tmp, not tmp_path: the server, not root, must reach it."""
    if shutil.which("runuser") is None or not postgres_server.as_user:
        pytest.skip("needs root (to mount a tmpfs and hand it to the postgres user)")
    mount = Path(tempfile.mkdtemp(prefix="modelci-pg-small-"))
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,uid=postgres,gid=postgres,mode=0700", "tmpfs",
                           str(mount)], capture_output=True, text=True)
    if made.returncode != 0:
        mount.rmdir()
        pytest.skip(f"this machine cannot mount a tmpfs (CI runs as root and can): {made.stderr.strip()}")
    space = f"small_{uuid.uuid4().hex[:12]}"
    url = postgres_server.database()
    database = url.rsplit("/", 1)[1]
    try:
        with _connect(postgres_server) as connection:
            connection.execute(f"CREATE TABLESPACE {space} LOCATION '{mount}'")
            connection.execute(f"ALTER DATABASE {database} SET default_tablespace = {space}")
        yield url, database, mount
    finally:
        with _connect(postgres_server) as connection:
            connection.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
            connection.execute(f"DROP TABLESPACE IF EXISTS {space}")
        subprocess.run(["umount", "-l", str(mount)], check=True)
        mount.rmdir()


def test_a_postgresql_history_on_a_full_disk_shows_and_reports_the_results_it_could_not_store(
        project, postgres_server, full_tablespace):
    url, database, disk = full_tablespace
    project.config(f'db = "{url}"')
    # the run is the history's first: its schema is made when the store opens, before any workload runs, and
    # every table is still empty, so storing the run has to extend a file on the tmpfs (a later run's rows could
    # fit in the pages of an earlier one and never touch the disk)
    project.workloads(QUICK + filler(disk / "filler"))
    done = project.run("--markdown", "summary.md", "--junit", "junit.xml")
    assert shutil.disk_usage(disk).free < 8192, "the filler did not fill the tablespace's disk"
    assert done.returncode == 3, done.stderr
    # PostgreSQL's disk_full (53100): the table file could not be extended
    assert f"could not store the run in {url}: could not extend file" in done.stderr, done.stderr
    assert "No space left on device" in done.stderr
    # the advice only a full history gets, and not the other one
    assert "Nothing of this run is stored; free space for the history (or point db elsewhere)" in done.stderr
    assert "fix what the history refused" not in done.stderr
    assert "the next run on this history stores them from the run's journal" in done.stderr
    assert "https://" not in done.stderr  # no pointer to SQLAlchemy's or the driver's docs
    # said: on the console, and in every report file, with no run id
    assert "run not stored (not compared)" in done.stdout and "suite/Filler" in done.stdout
    assert "becomes the reference" not in done.stdout  # a run the history does not hold is nobody's baseline
    report = project.report()
    assert report["run"]["id"] is None
    assert {r["workload"]: r["status"] for r in report["results"]} == {"suite/Quick": "ok", "suite/Filler": "ok"}
    assert "not stored (the history refused it), not compared" in (project.root / "summary.md").read_text()
    junit = (project.root / "junit.xml").read_text()
    assert '<property name="run_id" value="" />' in junit and 'classname="suite.Filler"' in junit
    project.assert_clean(done)
    # the server refused one transaction and goes on: nothing of the run is in it, and once there is space
    # again the next run is stored
    assert _runs(postgres_server, database) == 0
    (disk / "filler").unlink()
    project.workloads(QUICK)
    again = project.run()
    assert again.returncode == 0, again.stderr
    assert project.report()["run"]["id"] is not None
    # the refused run's results too, from its journal, marked interrupted
    assert "from an earlier run that was not stored" in again.stderr, again.stderr
    assert _runs(postgres_server, database) == 2
    project.assert_clean(again)


REFUSE = """
CREATE FUNCTION refuse_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'runs are frozen by the operator';
END $$;
CREATE TRIGGER refuse_runs BEFORE INSERT ON runs FOR EACH ROW EXECUTE FUNCTION refuse_runs();
"""


def test_a_postgresql_history_that_refuses_a_run_for_another_reason_gets_no_free_space_advice(
        project, postgres_server):
    url = postgres_server.database()
    database = url.rsplit("/", 1)[1]
    project.config(f'db = "{url}"')
    project.workloads(QUICK)
    first = project.run()
    assert first.returncode == 0, first.stderr
    # the server refuses every new run (SQLSTATE P0001, raise_exception): not a disk matter
    with _connect(postgres_server, database) as connection:
        connection.execute(REFUSE)
    done = project.run("--markdown", "summary.md")
    assert done.returncode == 3, done.stderr
    assert f"could not store the run in {url}: runs are frozen by the operator" in done.stderr, done.stderr
    assert "Nothing of this run is stored; fix what the history refused and run again" in done.stderr
    assert "free space" not in done.stderr
    assert "https://" not in done.stderr
    assert "run not stored (not compared)" in done.stdout
    report = project.report()
    assert report["run"]["id"] is None
    assert {r["workload"]: r["status"] for r in report["results"]} == {"suite/Quick": "ok"}
    assert "not stored (the history refused it), not compared" in (project.root / "summary.md").read_text()
    project.assert_clean(done)
    assert _runs(postgres_server, database) == 1
    with _connect(postgres_server, database) as connection:
        connection.execute("DROP TRIGGER refuse_runs ON runs")
    again = project.run()
    assert again.returncode == 0, again.stderr
    assert _runs(postgres_server, database) == 3  # the refused run, from its journal, and this one


def test_a_run_whose_connections_the_server_dropped_while_it_ran_is_stored(project, postgres_server):
    # the store connects before the workloads run; a server restart, a failover or an idle timeout of a proxy
    # while they ran left a dead connection in the pool, and the run was refused at the end: "server closed the
    # connection unexpectedly", nothing stored
    url = postgres_server.database()
    database = url.rsplit("/", 1)[1]
    project.config(f'db = "{url}"')
    dropper = workload("Dropper", f"""
        import psycopg
        with psycopg.connect("host=127.0.0.1 port={postgres_server.port} user=postgres dbname=postgres",
                             autocommit=True) as connection:
            dropped = connection.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '{database}'"
            ).fetchone()[0]
        pathlib.Path(os.environ["PROBE_DIR"], "dropped").write_text(str(dropped))
    """)
    project.workloads(QUICK + dropper)
    done = project.run()
    assert int((project.root / "dropped").read_text()) >= 1  # the run's own connection was among them
    assert done.returncode == 0, done.stderr
    assert project.report()["run"]["id"] is not None
    assert _runs(postgres_server, database) == 1
    project.assert_clean(done)
