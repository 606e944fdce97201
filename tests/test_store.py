"""The history store: a run ingested in bulk reads back whole, and `series` returns one metric across runs.

A real SQLite file, or a database on a real PostgreSQL server, and a real artifact folder in a temp dir.
"""

from __future__ import annotations

import math
import sqlite3
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from sqlalchemy import event

from modelci import targets
from modelci.errors import UserError
from modelci.envs import Environment
from modelci.records import Metric, Result
from modelci.store import Store

T0 = datetime(2025, 3, 1, tzinfo=timezone.utc)


@pytest.fixture
def store(history_db: str, tmp_path: Path) -> Store:
    """A fresh history on SQLite, and on a real PostgreSQL server (the `history_db` fixture)."""
    return Store(history_db, str(tmp_path / "artifacts"))


def query(store: Store, sql: str) -> list[tuple]:
    """Rows of a plain SQL query on the store's database, whichever it is."""
    with store.engine.connect() as connection:
        return [tuple(row) for row in connection.exec_driver_sql(sql)]


def environment(env_id: str = "env-1") -> Environment:
    return Environment(id=env_id, path=None, python=Path("/usr/bin/python3"), spec=None, lock="fw==1.0\n",
                       fingerprint={"python": "3.11"}, isolated=True)


def result(workload: str, scale: float, *, status: str = "ok", shared: np.ndarray | None = None) -> Result:
    """A result with three sample metrics, a loss curve and two outputs (one of them maybe shared)."""
    outputs = {"prediction": np.arange(12, dtype=np.float32).reshape(4, 3) * scale,
               "shared": shared if shared is not None else np.full(3, scale)}
    return Result(
        workload=workload, status=status, code_hash="abc", framework="numpy", domain="vision", duration=1.5,
        reason="" if status == "ok" else "it broke", stderr_tail="tail", info={"python": "3.11"},
        metrics={"time.infer": Metric("time.infer", "samples", [0.3 * scale, 0.1 * scale, 0.2 * scale], "s"),
                 "mem.peak_rss": Metric("mem.peak_rss", "samples", [1e8 * scale], "bytes"),
                 "loss": Metric("loss", "curve", [1.0, 0.5, 0.25 * scale])},
        outputs=outputs,
    )


def ingest(store: Store, version: str, results: list[Result], *, runner: str = "cpu", minutes: int = 0) -> int:
    return store.ingest(target=targets.resolve(f"fw=={version}"), environment=environment(), runner=runner,
                        results=results, suites=["suite"], started_at=T0 + timedelta(minutes=minutes))


def test_a_run_reads_back_with_every_metric_output_and_status(store):
    shared = np.array([7, 8, 9], dtype=np.int64)
    results = [result("s/A", 1.0, shared=shared), result("s/B", 2.0, shared=shared),
               Result(workload="s/broken.py", status="error", reason="import failed")]
    run_id = ingest(store, "1.0", results)

    assert all(r.id is not None for r in results)
    assert len({r.id for r in results}) == 3 and [r.id for r in results] == sorted(r.id for r in results)
    stored = store.run(run_id)
    assert stored.row.status == "complete" and stored.row.target.version == "1.0"
    by_workload = {r.workload: r for r in stored.results}
    assert [r.workload for r in stored.results] == ["s/A", "s/B", "s/broken.py"]
    for original in results:
        back = by_workload[original.workload]
        assert back.id == original.id and back.status == original.status and back.reason == original.reason
        assert {n: (m.kind, m.unit, m.values) for n, m in back.metrics.items()} == \
            {n: (m.kind, m.unit, m.values) for n, m in original.metrics.items()}
        assert set(back.outputs) == set(original.outputs)
        for name, array in original.outputs.items():
            np.testing.assert_array_equal(back.outputs[name], array)
            assert back.outputs[name].dtype == array.dtype and back.outputs[name].shape == array.shape
    # the array both results share is one artifact, referenced twice
    assert query(store, "select count(*) from outputs") == [(4,)]
    assert query(store, "select count(*) from artifacts") == [(3,)]
    (summary,) = query(store, "select n, median, minimum, maximum, final from metrics m join results r "
                              "on m.result_id = r.id where r.workload = 's/A' and m.name = 'time.infer'")
    assert summary == (3, pytest.approx(0.2), pytest.approx(0.1), pytest.approx(0.3), pytest.approx(0.2))


def test_a_diverging_loss_and_non_finite_numbers_are_stored_on_both_backends(store):
    """A loss that went NaN, a metric at infinity: what the history is for. PostgreSQL refused the bare NaN token
    of a JSON column, and with it the whole run ("invalid input syntax for type json"); SQLite kept it."""
    nan, inf = float("nan"), float("inf")
    diverged = result("s/Diverged", 1.0)
    diverged.metrics["loss"] = Metric("loss", "curve", [1.0, inf, nan])
    diverged.metrics["accuracy"] = Metric("accuracy", "samples", [-inf])
    diverged.info = {"numbers": {"max_rel": nan, "nested": [inf, 1.5]}, "text": "NaN"}
    run_id = ingest(store, "1.0", [diverged, result("s/Fine", 1.0)])
    back = {r.workload: r for r in store.run(run_id).results}
    loss = back["s/Diverged"].metrics["loss"].values
    assert loss[0] == 1.0 and loss[1] == inf and math.isnan(loss[2])
    assert back["s/Diverged"].metrics["accuracy"].values == [-inf]
    numbers = back["s/Diverged"].info["numbers"]
    assert math.isnan(numbers["max_rel"]) and numbers["nested"] == [inf, 1.5]
    assert back["s/Diverged"].info["text"] == "NaN"  # a string stays a string
    assert back["s/Fine"].metrics["loss"].values == [1.0, 0.5, 0.25]
    # the series `history` shows: SQLite stores a NaN summary as NULL, which read back as "nothing measured"
    point, = store.series("s/Diverged", "loss")
    assert math.isnan(point.final) and point.n == 3 and point.maximum is not None, point
    assert store.series("s/Diverged", "accuracy")[0].median == -inf


def test_a_second_run_with_the_same_arrays_stores_them_once(store):
    ingest(store, "1.0", [result("s/A", 1.0)])
    second = ingest(store, "1.1", [result("s/A", 1.0), result("s/B", 3.0)])
    assert query(store, "select count(*) from artifacts") == [(4,)]
    back = store.run(second).results
    np.testing.assert_array_equal(back[1].outputs["shared"], np.full(3, 3.0))


def test_an_empty_run_is_stored(store):
    run_id = ingest(store, "1.0", [])
    assert store.run(run_id).results == []


def test_text_longer_than_its_column_is_stored_cut_with_a_digest_the_same_on_both_backends(store):
    # PostgreSQL refused the whole run for one such value, after every workload had run; SQLite kept it whole
    table = np.zeros(3, dtype=[("alpha_field", "f8"), ("beta_field", "i4"), ("gamma_field", "f4")])
    assert len(str(table.dtype)) > 40  # a structured output's dtype: the dtype column holds 40
    workload, metric = "s/" + "w" * 400, "m" * 250
    long = Result(workload=workload, status="ok", framework="f" * 50, domain="vision",
                  metrics={metric: Metric(metric, "samples", [1.0, 2.0], "u" * 30)}, outputs={"o" * 250: table})
    other = Result(workload="s/" + "w" * 399 + "x", status="ok")  # differs only past the cut
    run_id = ingest(store, "1.0", [long, other])

    (row,) = query(store, f"select length(workload), framework from results where id = {long.id}")
    assert row[0] == 300 and row[1] == "f" * 27 + "-" + row[1][-12:]
    assert query(store, "select count(distinct workload) from results") == [(2,)]
    assert query(store, "select length(name), length(unit) from metrics") == [(200, 16)]
    (output,) = query(store, "select length(name), dtype from outputs")
    assert output[0] == 200 and output[1].startswith(str(table.dtype)[:27]) and len(output[1]) == 40
    # the array itself is whole, and a query by the whole names finds the cut ones
    (back,) = [r for r in store.run(run_id).results if r.id == long.id]
    np.testing.assert_array_equal(next(iter(back.outputs.values())), table)
    assert [point.median for point in store.series(workload, metric)] == [1.5]


def test_series_is_one_metric_of_one_workload_oldest_first_with_its_target(store):
    # ingested out of time order: the series follows started_at, not the run id
    late = ingest(store, "1.2", [result("s/A", 3.0), result("s/B", 30.0)], runner="gpu", minutes=20)
    early = ingest(store, "1.0", [result("s/A", 1.0), result("s/B", 10.0)], minutes=0)
    middle = ingest(store, "1.1", [result("s/A", 2.0, status="failed")], minutes=10)

    series = store.series("s/A", "time.infer")
    assert (series.workload, series.metric, len(series)) == ("s/A", "time.infer", 3)
    assert [p.run_id for p in series] == list(series.run_id) == [early, middle, late]
    assert [p.target.version for p in series] == ["1.0", "1.1", "1.2"]
    assert series.status == ("ok", "failed", "ok") and series.runner == ("cpu", "cpu", "gpu")
    first = series[0]
    assert first.target == ("requirement", "fw", "1.0", "", "", "fw==1.0") and first.target.label == "fw==1.0"
    assert (first.n, first.median, first.minimum, first.maximum, first.final) == \
        (3, pytest.approx(0.2), pytest.approx(0.1), pytest.approx(0.3), pytest.approx(0.2))
    # the same datetime the ORM reads for the run (series parses SQLite's text itself)
    assert first.started_at == store.run(early).row.started_at and isinstance(first.started_at, datetime)
    assert series[-1] == series[2] and series[-2:] == [series[1], series[2]]
    with pytest.raises(IndexError):
        series[3]

    assert [p.run_id for p in store.series("s/A", "time.infer", runner="gpu")] == [late]
    assert store.series("s/B", "time.infer").median == (pytest.approx(2.0), pytest.approx(6.0))
    assert store.series("s/A", "loss").final == (0.25, 0.5, 0.75)
    for empty in (store.series("s/A", "no.such.metric"), store.series("s/C", "time.infer")):
        assert len(empty) == 0 and list(empty) == [] and empty.median == () and not empty


def test_runs_that_started_at_the_same_time_follow_their_run_ids(store):
    first, second = (ingest(store, version, [result("s/A", 1.0)], minutes=5) for version in ("1.1", "1.0"))
    earlier = ingest(store, "0.9", [result("s/A", 1.0)], minutes=1)
    assert store.series("s/A", "time.infer").run_id == (earlier, first, second)


def test_series_reads_indexes_only_and_sorts_nothing_in_sqlite(tmp_path):
    """`history` over 10,000 runs in under 50 ms needs the workload's results and their metric read from
    covering indexes; a plan that reads every metric of that name, or sorts in SQLite, took twice as long."""
    store = Store(str(tmp_path / "history.db"), str(tmp_path / "artifacts"))
    for minutes, version in enumerate(("1.0", "1.1")):
        ingest(store, version, [result("s/A", 1.0), result("s/B", 2.0)], minutes=minutes)
    statements = []
    listen = lambda conn, cursor, statement, params, context, many: statements.append((statement, params))  # noqa: E731
    event.listen(store.engine, "before_cursor_execute", listen)
    try:
        store.series("s/A", "time.infer")
    finally:
        event.remove(store.engine, "before_cursor_execute", listen)
    statement, params = statements[0]
    with store.engine.connect() as connection:
        plan = [row[3] for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", params)]
    assert any("COVERING INDEX ix_results_workload_run" in step for step in plan), plan
    assert any("COVERING INDEX ix_metrics_name_result_summary (name=? AND result_id=?)" in step for step in plan), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan


def alarmed_history(tmp_path: Path) -> tuple[Store, int]:
    """A history with one run and one alarm on it, silenced until tomorrow (a writer's store)."""
    from modelci.alarms import lifecycle

    store = Store(str(tmp_path / "history.db"), str(tmp_path / "artifacts"))
    ingest(store, "1.0", [result("s/A", 1.0)])
    firing = lifecycle.Observation("cpu", "s/A", "timing", "time.infer", True, message="slower")
    (opened,) = lifecycle.apply(store, SimpleNamespace(alarms={}), [firing])
    lifecycle.silence(store, [opened.alarm.id], date.today() + timedelta(days=1), "alice")
    return store, opened.alarm.id


def database_bytes(path: Path) -> bytes:
    """The database with its write-ahead log, as a reader may not change them."""
    return b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")) if not p.name.endswith("-shm"))


@pytest.mark.parametrize("how", ["flag", "flag on a url", "url"])
def test_a_read_only_store_lists_alarms_and_shows_a_lapsed_silence_without_writing(tmp_path, how):
    """The dashboard lists alarms from a history it may only read; listing once recorded lapsed silences."""
    from modelci.alarms import lifecycle

    writer, alarm_id = alarmed_history(tmp_path)
    writer.engine.dispose()
    path = tmp_path / "history.db"
    before = database_bytes(path)
    db = {"flag": str(path), "flag on a url": f"sqlite:///{path}", "url": f"sqlite:///file:{path}?mode=ro&uri=true"}
    reader = Store(db[how], str(tmp_path / "artifacts"), readonly=how != "url")
    assert reader.readonly and reader.url == f"sqlite:///file:{path}?mode=ro&uri=true"

    later = date.today() + timedelta(days=5)
    (alarm,) = lifecycle.list_alarms(reader, today=later)
    assert (alarm.id, alarm.state, alarm.silenced_until) == (alarm_id, "open", None)
    assert [a.id for a in lifecycle.list_alarms(reader, states=["open"], today=later)] == [alarm_id]
    assert lifecycle.list_alarms(reader, states=["silenced"], today=later) == []
    assert lifecycle.get_alarm(reader, alarm_id, today=later).state == "open"
    # before the date it is still silenced, and reads see that too
    assert lifecycle.list_alarms(reader)[0].status == f"silenced until {date.today() + timedelta(days=1)}"
    assert reader.series("s/A", "time.infer").run_id == (1,)
    reader.engine.dispose()
    assert database_bytes(path) == before

    # a writer records the lapse when it next acts
    lifecycle.acknowledge(writer, [alarm_id], "bob", today=later)
    shown = lifecycle.get_alarm(writer, alarm_id)
    assert shown.state == "acknowledged" and [e["event"] for e in shown.events][-2:] == ["unsilenced", "acknowledged"]


def test_a_read_only_store_refuses_writes_with_a_message(tmp_path):
    from modelci.alarms import lifecycle

    writer, alarm_id = alarmed_history(tmp_path)
    reader = Store(str(tmp_path / "history.db"), str(tmp_path / "artifacts"), readonly=True)
    with pytest.raises(UserError, match="opened read-only, so nothing can be stored or changed"):
        ingest(reader, "1.1", [result("s/A", 2.0)])
    with pytest.raises(UserError, match="opened read-only"):
        lifecycle.acknowledge(reader, [alarm_id], "bob")
    assert lifecycle.get_alarm(writer, alarm_id).state == "silenced"
    with pytest.raises(UserError, match="no history database .* to read"):
        Store(str(tmp_path / "nothing.db"), str(tmp_path / "artifacts"), readonly=True)
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(UserError, match="holds no modelci history"):
        Store(str(tmp_path / "other.db"), str(tmp_path / "artifacts"), readonly=True)
    assert [r.id for r in writer.runs()] == [1]


def test_a_read_only_history_from_before_the_alarm_tables_lists_no_alarms(tmp_path):
    from modelci.alarms import lifecycle

    writer, alarm_id = alarmed_history(tmp_path)
    writer.engine.dispose()
    with sqlite3.connect(tmp_path / "history.db") as db:
        db.executescript("DROP TABLE alarm_events; DROP TABLE alarms;")
    reader = Store(str(tmp_path / "history.db"), str(tmp_path / "artifacts"), readonly=True)
    assert lifecycle.list_alarms(reader) == []
    with pytest.raises(UserError, match=f"no alarm {alarm_id}"):
        lifecycle.get_alarm(reader, alarm_id)


def test_a_history_from_before_schema_revisions_gains_the_indexes_added_since_it_was_made(tmp_path):
    db = tmp_path / "history.db"
    Store(str(db), str(tmp_path / "artifacts"))
    with sqlite3.connect(db) as connection:  # as the hand-written schema code left it: no revision recorded
        connection.executescript("DROP INDEX ix_results_workload_run; DROP INDEX ix_runs_runner_started; "
                                 "DROP TABLE alembic_version;")
    Store(str(db), str(tmp_path / "artifacts"))
    with sqlite3.connect(db) as connection:
        names = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "ix_results_workload_run" in names


def test_each_run_keeps_the_fingerprint_of_the_machine_it_ran_on(store, tmp_path):
    from modelci.envs import diff, refs

    first, second = environment(), environment()
    first.fingerprint = {"python": "3.11", "cpu": "Xeon 8375C", "cpu_count": 2}
    second.fingerprint = {"python": "3.11", "cpu": "EPYC 9654", "cpu_count": 96}  # same packages, other machine
    kwargs = dict(target=targets.resolve("fw==1.0"), results=[result("s/A", 1.0)], suites=["suite"])
    a = store.ingest(environment=first, runner="box-a", started_at=T0, **kwargs)
    b = store.ingest(environment=second, runner="box-b", started_at=T0 + timedelta(minutes=1),
                     **dict(kwargs, results=[result("s/A", 1.0)]))
    c = store.ingest(environment=first, runner="box-a", started_at=T0 + timedelta(minutes=2),
                     **dict(kwargs, results=[result("s/A", 1.0)]))
    assert store.run(a).row.environment_id == store.run(b).row.environment_id == "env-1"
    assert store.run(a).fingerprint["cpu"] == store.run(c).fingerprint["cpu"] == "Xeon 8375C"
    assert store.run(b).fingerprint["cpu"] == "EPYC 9654"
    # only the run that differs stores its own
    assert query(store, "SELECT run_id FROM run_fingerprints") == [(b,)]
    ra, rb = refs.from_run(store, a), refs.from_run(store, b)
    fields = {f.field for f in diff.diff(ra.id, ra.lock, ra.fingerprint, rb.id, rb.lock, rb.fingerprint).fingerprint}
    assert {"cpu", "cpu_count"} <= fields


@pytest.mark.parametrize("form", ["path", "url", "server", "memory", "uri", "garbage"])
def test_sqlite_file_names_the_file_of_a_sqlite_history_only(tmp_path, monkeypatch, form):
    """What a first run checks before it makes a history: the file a path or sqlite:/// URL names (relative to
    the working folder, ~ expanded); nothing for a database that is no file modelci would make."""
    from modelci.store import sqlite_file

    monkeypatch.chdir(tmp_path)
    value, expected = {
        "path": ("sub/h.db", tmp_path / "sub" / "h.db"),
        "url": (f"sqlite:///{tmp_path}/h.db", tmp_path / "h.db"),
        "server": ("postgresql://ci@localhost:5432/modelci", None),
        "memory": ("sqlite:///:memory:", None),
        "uri": (f"sqlite:///file:{tmp_path}/h.db?mode=ro&uri=true", None),
        "garbage": ("postgresql://ci@localhost:port/x", None),
    }[form]
    assert sqlite_file(value) == expected


def test_a_bisect_is_stored_without_the_password_of_its_repository(tmp_path):
    """A bisect's outcome names its candidates by spec, each with the repository's URL: a token in that URL was
    stored in the history, and shown by `bisect` listings and the dashboard."""
    store = Store(str(tmp_path / "h.db"), str(tmp_path / "artifacts"))
    spec = "git+https://ci:s3cret@git.example/fw.git@abc123"
    result = {"workload": "s/w", "check": "timing", "status": "found", "culprit": {"item": "abc123", "spec": spec},
              "candidates": [{"item": "abc123", "spec": spec}, {"item": "def456", "spec": spec[:-6] + "def456"}]}
    store.add_bisect("cpu", result, command="modelci bisect --repo https://ci:s3cret@git.example/fw.git")
    with sqlite3.connect(tmp_path / "h.db") as db:
        [(stored, command)] = db.execute("SELECT result, command FROM bisects").fetchall()
    assert "s3cret" not in stored + command
    assert "git+https://ci:***@git.example/fw.git@abc123" in stored and "https://ci:***@git.example" in command


def test_a_run_stored_through_the_api_keeps_no_password_of_its_command_line(tmp_path):
    """`Store.ingest` is the door of every run, the CLI's and a script's: the command line loses its passwords
    there, not only where the CLI builds it."""
    store = Store(str(tmp_path / "h.db"), str(tmp_path / "artifacts"))
    store.ingest(target=targets.resolve("fw==1.0"), environment=environment(), runner="cpu", results=[],
                 command="python ci.py --db postgresql://ci:s3cret@db/h")
    with sqlite3.connect(tmp_path / "h.db") as db:
        assert db.execute("SELECT command FROM runs").fetchall() == [("python ci.py --db postgresql://ci:***@db/h",)]
