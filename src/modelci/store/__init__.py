"""The history: SQLAlchemy over SQLite (default) or PostgreSQL, plus the artifact store for arrays.

A run is ingested in one transaction, so an interrupted run leaves either nothing or a whole run
marked `interrupted` (docs/design.md, "Storage").
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import time
import uuid
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from sqlalchemy import create_engine, distinct, event, func, insert, inspect, make_url, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

import modelci
from modelci import cancel
from modelci.errors import HarnessError, UserError, nearly_full
from modelci.targets import label as target_label, order_key
from modelci.records import Metric, Result, clean, clean_result, clean_text, redacted, redacted_json
from modelci.store import alarms_schema  # noqa: F401  (registers its tables with Base)
from modelci.store import bisect_schema  # noqa: F401  (registers its table with Base)
from modelci.store import compat_schema  # noqa: F401  (registers its tables with Base)
from modelci.store import noise_schema  # noqa: F401  (registers its table with Base)
from modelci.store.artifacts import ArtifactStore
from modelci.store import migrate
from modelci.store.schema import (
    ArtifactRow,
    EnvironmentRow,
    FindingRow,
    HistoryRow,
    MetricRow,
    OutputRow,
    ResultRow,
    RunFingerprintRow,
    RunJournalRow,
    RunLinkRow,
    RunRow,
    TargetRow,
    utcnow,
)
from modelci.store.series import RunPoint, RunSeries, load_series

__all__ = ["RunPoint", "RunSeries", "Store", "StoredRun", "database_url"]


#: the advisory lock key of `Store.write` on PostgreSQL ("modelciw" in ASCII; the schema lock has its own)
WRITE_LOCK_KEY = 0x6D6F64656C636977

#: how many of the latest matching results `reusable` looks through for one with the same settings
REUSE_CANDIDATES = 20
#: results never reused: an `error` is the harness's, and a `timeout` says as much about the timeout it ran
#: under as about the target (one run with --timeout 0.001 made every later --reuse run and bisect a timeout)
NOT_REUSED = ("error", "timeout")
#: the status of a run stored without its output arrays (the artifact store could not take them): its timings,
#: losses and statuses are kept, but it is no baseline, no point of a series, and no result of it is reused
INCOMPLETE = "incomplete"


#: the (table, privilege) pairs a PostgreSQL role needs to store a run (`Store.check_privileges`), and those
#: of the other commands that write: checked when the command opens the history, before its work
RUN_WRITES = tuple((table, "INSERT") for table in ("targets", "environments", "runs", "run_journals", "run_links",
                                                   "results", "metrics", "artifacts", "outputs", "findings"))
ALARM_WRITES = (("alarms", "UPDATE"), ("alarm_events", "INSERT"))
#: what a run's alarm step writes besides (a role without them had its run stored, then failed in the step)
ALARM_STEP_WRITES = (("alarms", "INSERT"), *ALARM_WRITES)
COMPAT_WRITES = (("saved_models", "INSERT"), ("compat_results", "INSERT"))
BISECT_WRITES = (("bisects", "INSERT"),)
NOISE_WRITES = (("noise_profiles", "INSERT"),)


class StoreWriteError(HarnessError):
    """The history database refused a run (a full disk, a server gone away): nothing of the run is in it. `full`
    says whether it was for want of space (SQLite's SQLITE_FULL, PostgreSQL's disk_full or quota errors), `lost`
    whether the server went away or could not be reached (and stayed so while `ingest` tried again)."""

    def __init__(self, message: str, full: bool, lost: bool = False) -> None:
        super().__init__(message)
        self.full, self.lost = full, lost


#: how long `ingest` tries again to store a run whose PostgreSQL connection was lost (a restart, a failover): the
#: hour of workloads it holds is worth a minute's wait, and a server back within it loses nothing
STORE_RETRY_S = 60.0
#: PostgreSQL's SQLSTATEs of a connection lost (class 08) or ended by the server going down (57P01 admin shutdown,
#: 57P02 crash shutdown, 57P03 cannot connect now: starting up)
_PG_LOST = ("57P01", "57P02", "57P03")


def _pause(seconds: float) -> None:
    """Sleep, but no longer than until a cancelling signal arrives: one held while the run is stored (`cancel`)
    must not wait out a retry's back-off, or a CI system's grace period may end first."""
    deadline = time.monotonic() + seconds
    while cancel.received() is None and time.monotonic() < deadline:
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def _connection_lost(exc: SQLAlchemyError) -> bool:
    """Whether `exc` says the server went away or could not be reached (so that trying again may store the run),
    rather than that it refused what was written (a constraint, a full disk: trying again would fail the same)."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    orig = getattr(exc, "orig", None)
    state = getattr(orig, "sqlstate", None)
    if state:
        return state.startswith("08") or state in _PG_LOST
    # psycopg's own errors of a connection that failed or broke carry no SQLSTATE
    return isinstance(exc, OperationalError)


#: SQLite's words for SQLITE_FULL, and PostgreSQL's SQLSTATEs for a full disk or an exhausted resource
_SQLITE_FULL = "database or disk is full"
_PG_FULL = ("53100", "53200", "53400")


#: the query arguments the pysqlite driver takes itself; the others are SQLite URI parameters (mode, immutable,
#: cache, ...), which it takes only with uri=true
_PYSQLITE_ARGUMENTS = {"timeout", "isolation_level", "detect_types", "check_same_thread", "cached_statements", "uri"}


def database_url(value: str, readonly: bool = False, create: bool = True) -> str:
    """A SQLAlchemy URL from a URL or a file path (a path means SQLite); `readonly` opens a SQLite file read-only
    (SQLite's `mode=ro`), which refuses every write, as a history on a read-only share needs. Without `create` a
    SQLite file that does not exist is a UserError, not a new empty history: a command that only reads the
    history must not answer "no runs, no alarms" (and pass in CI) for a mistyped path.

    `postgresql://` (and `postgres://`) mean psycopg 3, the driver of the `postgres` extra, not SQLAlchemy's
    default psycopg2. A value that is no URL, or a folder that cannot be made, is a UserError."""
    if "://" in value:
        try:
            url = make_url(value)
        except (ArgumentError, ValueError) as exc:  # SQLAlchemy's ValueError is a port that is no number
            why = " (its port is not a number)" if isinstance(exc, ValueError) else ""
            raise UserError(f"db = {shown_db(value)!r} is not a database URL{why}; give a SQLite file path, "
                            "sqlite:///PATH or postgresql://USER@HOST:PORT/DATABASE") from None
        if url.get_backend_name() not in ("sqlite", "postgresql", "postgres"):
            # the schema and its migrations are written and tested for these two; another server's driver was
            # looked for, and its absence reported as if installing it would help
            raise UserError(f"db = {shown_db(value)!r}: modelci keeps its history in SQLite (a file path or "
                            "sqlite:///PATH) or PostgreSQL (postgresql://USER@HOST:PORT/DATABASE), not "
                            f"{url.get_backend_name()}")
        if url.port is not None and not 0 < url.port < 65536:
            raise UserError(f"db = {shown_db(value)!r}: port {url.port} is no TCP port (1-65535)")
        if url.drivername in ("postgresql", "postgres"):
            return url.set(drivername="postgresql+psycopg").render_as_string(False)
        if url.get_backend_name() == "sqlite" and (not url.database or url.database == ":memory:"):
            # a run stored there was gone when the command ended, and a reader found an empty history
            raise UserError(f"db = {shown_db(value)!r} is an in-memory database, gone when the command ends; give a "
                            "SQLite file path or a postgresql:// URL")
        if url.get_backend_name() != "sqlite":
            return value
        uri_only = sorted(set(url.query) - _PYSQLITE_ARGUMENTS)
        if uri_only and url.query.get("uri") != "true":
            # the driver ignored them with a warning: ?mode=ro opened the history for writing
            raise UserError(f"db = {shown_db(value)!r}: SQLite takes {', '.join(uri_only)} only in a URI; write "
                            "sqlite:///file:PATH?" + redacted("&".join(f"{k}={url.query[k]}" for k in uri_only))
                            + "&uri=true, or leave them out")
        if not create and not url.database.startswith("file:"):
            _must_exist(Path(url.database).expanduser().resolve())
        if not readonly and url.drivername == "sqlite" and not url.query and not url.database.startswith("file:"):
            value = url.database  # sqlite:///PATH is PATH: its folder is made (or refused) below, as a path's is
        elif not readonly or url.query.get("mode") == "ro":
            return value
        elif url.database.startswith("file:"):  # already a SQLite URI: it only lacks the mode
            return url.update_query_dict({"mode": "ro", "uri": "true"}).render_as_string(False)
        else:
            value = url.database  # a plain file: opened read-only below, as a path is
    path = Path(value).expanduser().resolve()
    if path.exists() and not path.is_file() and not path.is_dir():
        # /dev/null was "disk I/O error" (exit 3) to a run and "there is no history database" to a reader
        raise UserError(f"the history database {path} is not a regular file (a device or a pipe); give a file path "
                        "(db in modelci.toml, MODELCI_DB or --db)")
    if readonly:
        if not path.is_file():
            raise UserError(f"there is no history database {path} to read; give the file that `modelci run` "
                            "writes (db in modelci.toml, MODELCI_DB or --db)")
        return f"sqlite:///file:{quote(str(path))}?mode=ro&uri=true"
    if not create:
        _must_exist(path)
        if not os.access(path.parent, os.W_OK):
            # a reader of a history on a read-only share, or in a folder of another user's: SQLite cannot make the
            # WAL's shared-memory file beside it, and even mode=ro fails to open ("unable to open database
            # file"). Nobody can write it through this path either, so it is read as immutable, without locks
            return f"sqlite:///file:{quote(str(path))}?mode=ro&immutable=1&uri=true"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the folder {path.parent} of the history database {path}: "
                        f"{exc.strerror or exc}; give a db path in a folder you can write (db in modelci.toml, "
                        "MODELCI_DB or --db)") from None
    if path.is_dir():
        raise UserError(f"the history database {path} is a folder; give a file path (db in modelci.toml, "
                        "MODELCI_DB or --db)")
    return f"sqlite:///{path}"


def shown_db(value: str) -> str:
    """A `db` value (a URL or a path) as a message shows it: without its password, in whatever form the URL holds
    it (`user:password@`, which SQLAlchemy hides, or a query argument such as `?password=`, which it shows)."""
    try:
        value = make_url(value).render_as_string(hide_password=True) if "://" in value else value
    except (ArgumentError, ValueError):
        pass  # no URL SQLAlchemy reads: redacted as text
    return redacted(value)


def sqlite_file(value: str) -> Path | None:
    """The file of a SQLite history given as a path or a `sqlite:///PATH` URL; None for a server, an in-memory
    database, a SQLite URI (`file:...`) or a value that is no URL (opening it says what is wrong)."""
    if "://" in value:
        try:
            url = make_url(value)
        except (ArgumentError, ValueError):
            return None
        if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:" \
                or url.database.startswith("file:"):
            return None
        value = url.database
    return Path(value).expanduser().resolve()


def _must_exist(path: Path) -> None:
    if path.is_dir():
        raise UserError(f"the history database {path} is a folder; give the file in it that `modelci run` writes "
                        "(history.db by default; db in modelci.toml, MODELCI_DB or --db)")
    if not path.is_file():
        raise UserError(f"there is no history database {path}: `modelci run` creates it; check the path (db in "
                        "modelci.toml, MODELCI_DB or --db)")


def row_id(value: str | int) -> int | None:
    """A run or alarm id as the database stores it (a positive 64-bit integer), or None for anything else: a
    lookup of "abc" or of 99999999999999999999999 finds nothing rather than overflow the driver."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if 0 < number < 2**63 else None


#: libpq's settings for a PostgreSQL history, unless its URL sets them: a bounded connect (a server that accepts
#: and never answers, a hung postmaster, kept `run` waiting before any workload, for ever), and TCP keepalives
#: and a user timeout, so that a server whose host went away (a crash, a partition) ends a query in about a
#: minute, not the kernel's 15 minutes or more
PG_CONNECT_ARGS = {"connect_timeout": 15, "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
                   "keepalives_count": 3, "tcp_user_timeout": 60_000}


#: how a JSON column on PostgreSQL holds a float that JSON cannot (NaN, an infinity): PostgreSQL refuses the bare
#: `NaN` token that Python writes (and SQLite keeps), and with it the whole run, for one diverging loss
_NONFINITE = "$nonfinite"


def _pg_json_dumps(value: Any) -> str:
    """JSON for PostgreSQL: a non-finite float as {"$nonfinite": "nan" | "inf" | "-inf"} (rare: tried plain first)."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(_encode_nonfinite(value), allow_nan=False)


def _encode_nonfinite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return {_NONFINITE: repr(value)}
    if isinstance(value, dict):
        return {k: _encode_nonfinite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode_nonfinite(v) for v in value]
    return value


def _pg_json_loads(text: str | bytes) -> Any:
    """What `_pg_json_dumps` wrote, its non-finite floats floats again."""
    return json.loads(text, object_hook=_decode_nonfinite)


def _decode_nonfinite(obj: dict[str, Any]) -> Any:
    return float(obj[_NONFINITE]) if len(obj) == 1 and _NONFINITE in obj else obj


def make_engine(url: str) -> Engine:
    """The engine of a database URL; an unknown dialect or a driver that is not installed is a UserError.

    A server's connections are tested before each use (`pool_pre_ping`) and made again when dead: the store
    connects before the workloads run, and a server restart, a failover or a proxy's idle timeout while they ran
    left a dead connection in the pool, which refused the whole run at the end. They are bounded in time too
    (PG_CONNECT_ARGS), where the URL does not say otherwise."""
    try:
        parsed = make_url(url)
        if parsed.get_backend_name() == "postgresql":
            chosen = {k: v for k, v in PG_CONNECT_ARGS.items() if k not in parsed.query}
            return create_engine(url, pool_pre_ping=True, connect_args=chosen, json_serializer=_pg_json_dumps,
                                 json_deserializer=_pg_json_loads)
        return create_engine(url)
    except NoSuchModuleError:
        raise UserError(f"{make_url(url).drivername!r} in db = {shown_db(url)} is not a database modelci can use; "
                        "give a SQLite file path or a postgresql:// URL") from None
    except ImportError as exc:
        if make_url(url).get_backend_name() == "postgresql":
            driver = make_url(url).get_driver_name()
            if driver != "psycopg":  # the extra installs psycopg 3, not the driver this URL names
                raise UserError(f"the PostgreSQL driver {driver} that {make_url(url).drivername}:// names is not "
                                f"installed ({exc}); install it, or write postgresql:// for psycopg 3, which pip "
                                "install 'modelci[postgres]' installs") from None
            raise UserError(f"the PostgreSQL driver is not installed ({exc}); install it with "
                            "pip install 'modelci[postgres]'") from None
        raise UserError(f"the database driver of {shown_db(url)} is not installed: {exc}") from None


class LazyOutputs(Mapping):
    """Output arrays of a stored result, read (and verified) from the artifact store on first access."""

    def __init__(self, artifacts: ArtifactStore, digests: dict[str, str]):
        self._artifacts = artifacts
        self._digests = digests
        self._cache: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._cache:
            self._cache[name] = self._artifacts.get_array(self._digests[name])
        return self._cache[name]

    def __contains__(self, name: object) -> bool:
        # Mapping's own reads the array (and raised for a corrupt one where the caller only asked whether it is)
        return name in self._digests

    def __iter__(self) -> Iterator[str]:
        return iter(self._digests)

    def __len__(self) -> int:
        return len(self._digests)

    def digests(self) -> dict[str, str]:
        """Output name -> sha256 of its stored array, without reading any array."""
        return dict(self._digests)


@dataclass
class StoredRun:
    """A run as read back: its row, target, and results."""

    row: RunRow
    results: list[Result]
    #: the machine's fingerprint for this run: its own where it differs from the environment's, else that one
    fingerprint: dict = field(default_factory=dict)


class Store:
    """The history database and the artifact store behind one object."""

    def __init__(self, db: str, artifacts: str, *, artifacts_options: dict[str, Any] | None = None,
                 artifacts_readonly: bool = False, readonly: bool = False, schema: str = "ensure",
                 create: bool = True):
        """`schema`: "ensure" brings the history to this modelci's schema where that is safe (store/migrate.py),
        "upgrade" applies every pending revision (`modelci db upgrade`), "inspect" only reads where it stands.
        Without `create` the history must already exist (the commands that read it): a missing SQLite file, or
        a database without modelci's tables, is a UserError, and nothing is created in it."""
        self.url = database_url(db, readonly, create)
        self.create = create
        #: the URL as messages show it: without a password, a query argument's (`?password=`) included
        self.shown = shown_db(self.url)
        #: opened read-only: a SQLite URL with mode=ro, which `readonly` makes of a path; then nothing is created
        #: or changed, not even the tables a newer modelci adds (readers find them absent)
        self.readonly = make_url(self.url).query.get("mode") == "ro"
        self.artifacts = ArtifactStore(artifacts, artifacts_options, artifacts_readonly)
        self.engine = make_engine(self.url)
        # its connections are closed when the store goes, or at the latest when the process exits (atexit runs
        # finalizers): closing the last one is when SQLite moves its WAL into the database file, and the `modelci`
        # command ends without tearing the interpreter down (cli.entry)
        weakref.finalize(self, self.engine.dispose)
        if self.engine.dialect.name == "sqlite":
            pragmas = _sqlite_pragmas_readonly if self.readonly else _sqlite_pragmas if create else \
                _sqlite_pragmas_existing
            event.listen(self.engine, "connect", pragmas)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        if self.readonly:  # any ORM write (alarm actions, findings, compat results) stops with the reason
            event.listen(self.sessions, "before_flush", lambda *_: self.refuse_write())
        self._check_schema(schema)

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reading (the ORM's rows and queries); what is read stays usable after it closes."""
        with self.sessions() as session:
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session in a transaction that first takes the history's write lock, for a read-then-write that two
        runners must not interleave (alarm updates): PostgreSQL takes an advisory lock held until commit,
        SQLite its write lock (`BEGIN IMMEDIATE`), so the second writer waits and then reads what the first
        wrote. Commits at the end, rolls back on an exception. On a read-only store any write is refused.
        The writes of other packages (alarms, compat) go through here."""
        if self.readonly:  # no lock to take: the first flush is refused with the reason (before_flush)
            with self.sessions.begin() as session:
                yield session
            return
        with self.sessions.begin() as session:
            connection = session.connection()
            if self.engine.dialect.name == "sqlite":
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            elif self.engine.dialect.name == "postgresql":
                migrate.bound_idle(connection)
                connection.execute(select(func.pg_advisory_xact_lock(WRITE_LOCK_KEY)))
            yield session

    def check_writable(self, writes: tuple[tuple[str, str], ...] = ()) -> None:
        """Refuse, before a run, a history it could not store in: one opened read-only, a SQLite file that this
        user cannot write (its mode, a read-only mount) in a folder that can be written, or a PostgreSQL role
        without a privilege of `writes` (default RUN_WRITES: what storing a run needs; `check_privileges`). The
        file used to be found read-only only at the ingest, after every workload had run, and the run was lost."""
        if self.readonly:
            self.refuse_write()
        self.check_privileges(writes or RUN_WRITES)
        path = sqlite_file(self.url)
        if path is None or not path.is_file():
            return
        # access(2), not an open and a close of the file: closing any descriptor of a SQLite file drops every POSIX
        # lock this process holds on it, and a connection's locks gone that way corrupted a history under load
        if not os.access(path, os.W_OK):
            raise UserError(f"cannot write the history database {path} (permission denied, or a read-only "
                            "filesystem), so a run could not store what it measures; make the file writable, or "
                            "give a db you can write. `history`, `show`, `alarms` and `report` can read it as it is")

    def check_privileges(self, writes: tuple[tuple[str, str], ...]) -> None:
        """Refuse, before a command does its work, a PostgreSQL history whose role lacks a privilege it writes with
        (`writes`: (table, privilege) pairs, such as RUN_WRITES): a role that may only read ran every workload of
        a run, and the run was refused only as it was stored. One query; nothing to do on SQLite, whose file
        `check_writable` checks.

        A UserError (exit 2), as for a SQLite file that cannot be written: the role is part of the `db` setting,
        known to fall short before anything ran, and fixed by whoever configures it (a GRANT, another role), not
        by running again as for a harness failure (exit 3). A refusal met later, one this does not foresee, is
        exit 3 (`failed`)."""
        if self.engine.dialect.name != "postgresql" or not writes:
            return
        pairs = ", ".join(f"(:table{i}, :privilege{i}, {i})" for i in range(len(writes)))
        values = {f"{key}{i}": value for i, pair in enumerate(writes) for key, value in zip(("table", "privilege"),
                                                                                           pair)}
        # a serial id's sequence needs USAGE besides INSERT on its table: GRANT ... ON ALL TABLES alone leaves it
        # out, and that refusal too came only at the end ("permission denied for sequence runs_id_seq")
        query = text(f"""
            SELECT current_user, w.name || ' (' || w.privilege || ')', w.n, 0
            FROM (VALUES {pairs}) AS w(name, privilege, n)
            WHERE to_regclass(w.name) IS NOT NULL AND NOT has_table_privilege(to_regclass(w.name), w.privilege)
            UNION ALL
            SELECT current_user, 'sequence ' || s.relname || ' (USAGE)', w.n, 1
            FROM (VALUES {pairs}) AS w(name, privilege, n)
            JOIN pg_depend d ON d.refobjid = to_regclass(w.name) AND d.classid = 'pg_class'::regclass
                AND d.deptype = 'a'
            JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
            -- the planner may test a row before the join's relkind: CASE keeps other objects from the test
            WHERE w.privilege = 'INSERT'
                AND NOT has_sequence_privilege(CASE WHEN s.relkind = 'S' THEN s.oid END, 'USAGE')
            ORDER BY 4, 3""")
        with self.engine.connect() as connection:
            missing = connection.execute(query, values).all()
        if missing:
            named = list(dict.fromkeys(what for _, what, *_ in missing))
            lacks = ", ".join(named[:4]) + (f" and {len(named) - 4} more" if len(named) > 4 else "")
            role = missing[0][0]
            raise UserError(f"the database role {role} cannot write the history {self.shown}: it lacks {lacks}; "
                            f"have the database's owner grant them (GRANT INSERT, UPDATE ON ALL TABLES IN SCHEMA "
                            f"public TO {role}; GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}), or give a "
                            "db whose role can write. `history`, `show`, `alarms list` and `report` can read it "
                            "as it is")

    def refuse_write(self) -> None:
        """Raise the UserError for a write to a store opened read-only."""
        if make_url(self.url).query.get("immutable") == "1":
            folder = Path(unquote(make_url(self.url).database.removeprefix("file:"))).parent
            raise UserError(f"the history {self.shown} is read-only here: its folder {folder} cannot be written, "
                            "so nothing can be stored or changed in it; run this where the folder can be written")
        raise UserError(f"the history {self.shown} is opened read-only, so nothing can be stored or changed in it; "
                        "open it without mode=ro to write")

    @classmethod
    def from_config(cls, config: Any, **options: Any) -> Store:
        """The store a configuration names: `db`, `artifacts` with its storage options and read-only flag."""
        return cls(config.db, config.artifacts, artifacts_options=config.artifacts_options,
                   artifacts_readonly=config.artifacts_readonly, **options)

    def _check_schema(self, how: str) -> None:
        try:
            if how == "upgrade":
                if self.readonly:
                    self.refuse_write()
                self.schema = migrate.upgrade(self.engine, self.shown)
            elif how == "inspect":
                self.schema = migrate.inspect_state(self.engine)
            else:
                self.schema = migrate.ensure(self.engine, self.shown, self.readonly, self.create)
        except DBAPIError as exc:
            path = sqlite_file(self.url) if not self.readonly else None
            if path is not None and path.parent.is_dir() and not os.access(path.parent, os.W_OK):
                raise UserError(f"cannot write the history database {path}: its folder {path.parent} cannot be "
                                "written (SQLite keeps its journal beside it); give a db in a folder you can write. "
                                "`history`, `show`, `alarms` and `report` can read it where it is") from None
            # a refused connection, a file that is not a database, a server gone away: the harness cannot run
            why = _first_line(exc.orig)
            free = nearly_full(sqlite_file(self.url))
            if free is not None:  # SQLite says "disk I/O error" of a full disk
                why += f" (the disk holding it has {free // 1024} KiB free: free space there, or give a db elsewhere)"
            if "timeout expired" in why:
                why += (" (the server took the connection and did not answer: is it up, not overloaded, and is "
                        "that its port?)")
            raise HarnessError(f"cannot open the history database {self.shown}: {why}") from None

    # -- writing ----------------------------------------------------------------------------------

    def ingest(
        self,
        *,
        target: Any,
        environment: Any,
        runner: str,
        results: list[Result],
        status: str = "complete",
        suites: list[str] | None = None,
        selection: str = "",
        command: str = "",
        started_at: datetime | None = None,
        purpose: str = "",
        parent_run_id: int | None = None,
        journal: str = "",
    ) -> int:
        """Store a run and all its results in one transaction; sets each result's id; returns the run id.

        `journal`: the name of the journal that kept the results while the run went on (modelci.journal),
        stored with the run so that a journal left behind by a kill just after the commit is not stored twice
        (`run_for_journal`). A run kept in no journal (a build that failed, a confirmation run) gets a random
        name in its place: the retry after a lost answer asks for that name, so it is stored once too.

        A run made as part of another (`purpose="confirmation"`: `compare` re-running a workload to confirm a
        verdict of `parent_run_id`) is stored with that link (schema.RunLinkRow), so readers can leave it out.
        """
        if self.readonly:
            self.refuse_write()
        # any string is stored: what a workload or the command line holds is made storable here, the one door
        for result in results:
            clean_result(result)
        # a command line given through the API, not the CLI, loses its passwords here too (records.redacted)
        suites, selection = [clean_text(s) for s in suites or []], clean_text(selection)
        command = clean_text(redacted(command))
        # blobs first: content-addressed, so a blob without a row is harmless, a row without a blob is not
        digests = [{name: self.artifacts.put_array(array) for name, array in r.outputs.items()} for r in results]
        journal = journal or uuid.uuid4().hex
        began = time.monotonic()
        for attempt in itertools.count(1):
            try:
                return self._ingest_once(target, environment, runner, results, digests, status, suites, selection,
                                         command, started_at, purpose, parent_run_id, journal)
            except SQLAlchemyError as exc:
                orig = getattr(exc, "orig", None) or exc
                waited = time.monotonic() - began
                lost = self.engine.dialect.name == "postgresql" and _connection_lost(exc)
                # a server restarted, failed over or briefly away as the run was stored: the transaction was rolled
                # back whole, so it is tried again, for a while; a cancelled command does not wait for it
                if lost and waited < STORE_RETRY_S and cancel.received() is None:
                    _pause(min(2.0 ** (attempt - 1), STORE_RETRY_S - waited, 8.0))
                    # the connection may have broken after the commit, before its answer came: then the run is
                    # stored, and storing it again would make a duplicate of every point. The name it was stored
                    # under says so
                    stored = self._stored_from(journal, results)
                    if stored is not None:
                        return stored
                    continue
                full = _SQLITE_FULL in str(orig) or getattr(orig, "sqlstate", None) in _PG_FULL
                tried = f" (tried {attempt} times over {waited:.0f} s)" if attempt > 1 else ""
                raise StoreWriteError(f"could not store the run in {self.shown}{tried}: {_first_line(orig)}", full,
                                      lost) from None
        raise AssertionError("unreachable")

    def _ingest_once(self, target: Any, environment: Any, runner: str, results: list[Result],
                     digests: list[dict[str, Any]], status: str, suites: list[str], selection: str, command: str,
                     started_at: datetime | None, purpose: str, parent_run_id: int | None, journal: str) -> int:
        """One transaction of `ingest`."""
        with self.sessions.begin() as session:
            # a new target's or environment's row is locked until commit: a runner frozen here stops the others
            migrate.bound_idle(session.connection())
            target_row = self._target_row(session, target)
            stored_fingerprint = self._environment_row(session, environment)
            run = RunRow(
                target_id=target_row.id, environment_id=environment.id, runner=runner, status=status,
                suites=list(suites or []), selection=selection, command=command,
                modelci_version=modelci.__version__, started_at=started_at or utcnow(), finished_at=utcnow(),
            )
            session.add(run)
            session.flush()
            if environment.fingerprint and stored_fingerprint != environment.fingerprint:
                session.add(RunFingerprintRow(run_id=run.id, fingerprint=environment.fingerprint))
            if purpose:
                session.add(RunLinkRow(run_id=run.id, parent_run_id=parent_run_id, purpose=purpose))
            session.add(RunJournalRow(journal=journal, run_id=run.id))
            ids = self._insert_results(session, run.id, results, digests)
            for result, result_id in zip(results, ids):
                result.id = result_id
            return run.id

    @functools.cached_property
    def identity(self) -> str:
        """The history's own id (schema.HistoryRow): what names it outside the database, where its URL may name
        another history on another machine (a SQLite file at the same path)."""
        with self.sessions() as session:
            found = session.scalar(select(HistoryRow.id))
        if found is None:  # made by a revision, so only a history damaged by hand lacks it
            raise HarnessError(f"the history {self.shown} has no row in its table `history_identity`; restore it "
                               "from a backup, or insert one id (any 32 characters) to use it as it is")
        return found

    def _stored_from(self, journal: str, results: list[Result]) -> int | None:
        """The run stored from `journal` by an attempt whose answer was lost, with its results' ids set on
        `results` (inserted in their order, so their ids ascend in it); None when there is none, or when the
        history cannot be asked yet."""
        try:
            run_id = self.run_for_journal(journal)
            if run_id is None:
                return None
            with self.sessions() as session:
                ids = list(session.scalars(select(ResultRow.id).where(ResultRow.run_id == run_id)
                                           .order_by(ResultRow.id)))
        except SQLAlchemyError:
            return None
        for result, result_id in zip(results, ids):
            result.id = result_id
        return run_id

    def run_for_journal(self, journal: str) -> int | None:
        """The id of the run stored from the journal named `journal`, or None when none was."""
        with self.sessions() as session:
            return session.scalar(select(RunJournalRow.run_id).where(RunJournalRow.journal == journal))

    def insert_ignoring_duplicates(self, table: Any) -> Any:
        """An INSERT that skips a row whose key is stored already (ON CONFLICT DO NOTHING): of two runners
        storing the same new target, environment or artifact at once, one inserts it and the other uses it."""
        dialect = self.engine.dialect.name
        if dialect == "postgresql":
            return postgresql.insert(table).on_conflict_do_nothing()
        if dialect == "sqlite":
            return sqlite.insert(table).on_conflict_do_nothing()
        return insert(table)

    def _target_row(self, session: Session, target: Any) -> TargetRow:
        ident = target.identity()
        row = session.scalars(select(TargetRow).filter_by(**ident)).first()
        if row is None:
            session.execute(self.insert_ignoring_duplicates(TargetRow).values(
                spec=redacted(target.spec), commit_date=target.commit_date or "", subject=target.subject or "",
                created_at=utcnow(), **ident))
            row = session.scalars(select(TargetRow).filter_by(**ident)).one()
        return row

    def _environment_row(self, session: Session, environment: Any) -> dict:
        """Store the environment if it is new; returns the fingerprint its row holds."""
        row = session.get(EnvironmentRow, environment.id)
        if row is None:
            session.execute(self.insert_ignoring_duplicates(EnvironmentRow).values(
                id=environment.id, python=str(environment.python), isolated=environment.isolated,
                lock=environment.lock, fingerprint=environment.fingerprint, created_at=utcnow()))
            row = session.scalars(select(EnvironmentRow).where(EnvironmentRow.id == environment.id)).one()
        return dict(row.fingerprint or {})

    def _insert_results(self, session: Session, run_id: int, results: list[Result],
                        digests: list[dict[str, tuple[str, int]]]) -> list[int]:
        """Insert the results with their metrics, outputs and new artifacts; returns the result ids in order.

        A few bulk INSERTs instead of one ORM flush per row: a run of 100 results took seconds.
        """
        if not results:
            return []
        ids = list(session.scalars(
            insert(ResultRow).returning(ResultRow.id, sort_by_parameter_order=True),
            [dict(run_id=run_id, workload=r.workload, code_hash=r.code_hash, status=r.status, reason=r.reason,
                  traceback=r.traceback, stderr_tail=r.stderr_tail, framework=r.framework, domain=r.domain,
                  duration=r.duration, info=r.info) for r in results],
        ))
        metrics = [
            dict(result_id=result_id, name=m.name, kind=m.kind, unit=m.unit, values=m.values, n=len(m.values),
                 median=m.median, minimum=min(m.values) if m.values else None,
                 maximum=max(m.values) if m.values else None, final=m.values[-1] if m.values else None)
            for result, result_id in zip(results, ids) for m in result.metrics.values()
        ]
        if metrics:
            session.execute(insert(MetricRow), metrics)
        sizes = {digest: size for found in digests for digest, size in found.values()}
        known: set[str] = set()
        wanted = sorted(sizes)
        for start in range(0, len(wanted), 500):  # stay below the bound-parameter limit of older SQLite
            chunk = wanted[start:start + 500]
            known.update(session.scalars(select(ArtifactRow.sha256).where(ArtifactRow.sha256.in_(chunk))))
        if len(known) < len(sizes):
            # another runner may store the same arrays at the same time (the same deterministic workloads);
            # inserted in digest order, so two such transactions wait for each other instead of deadlocking
            session.execute(self.insert_ignoring_duplicates(ArtifactRow),
                            [dict(sha256=digest, size=sizes[digest], created_at=utcnow())
                             for digest in wanted if digest not in known])
        outputs = [
            dict(result_id=result_id, name=name, sha256=digest, dtype=str(result.outputs[name].dtype),
                 shape=list(result.outputs[name].shape))
            for result, result_id, found in zip(results, ids, digests) for name, (digest, _) in found.items()
        ]
        if outputs:
            session.execute(insert(OutputRow), outputs)
        return ids

    def add_findings(self, result_id: int, baseline_id: int | None, findings: list[Any]) -> None:
        """Attach the checks' findings to a stored result."""
        with self.sessions.begin() as session:
            session.add_all(
                FindingRow(result_id=result_id, baseline_result_id=baseline_id, check=f.check, metric=f.metric,
                           verdict=f.verdict, gating=f.gating, numbers=f.numbers, message=f.message)
                for f in findings
            )

    # -- reading ----------------------------------------------------------------------------------

    def to_result(self, row: ResultRow) -> Result:
        """A stored result as a Result whose outputs load lazily from the artifact store."""
        return Result(
            id=row.id, run_id=row.run_id, workload=row.workload, status=row.status, reason=row.reason,
            traceback=row.traceback,
            stderr_tail=row.stderr_tail, code_hash=row.code_hash, framework=row.framework, domain=row.domain,
            duration=row.duration, info=dict(row.info or {}),
            metrics={m.name: Metric(name=m.name, kind=m.kind, unit=m.unit, values=list(m.values)) for m in row.metrics},
            outputs=LazyOutputs(self.artifacts, {o.name: o.sha256 for o in row.outputs}),
        )

    def baseline(self, workload: str, runner: str, target: Any, chooser: Any = None) -> Result | None:
        """The result `workload` is judged against on `runner`: the nearest earlier target with a good result
        where the targets' order is known, else the latest good result of another target (modelci.baselines)."""
        return self.choose_baseline(workload, runner, target, chooser)[0]

    def choose_baseline(self, workload: str, runner: str, target: Any,
                        chooser: Any = None) -> tuple[Result | None, str]:
        """The baseline of `workload` on `runner` for `target`, and the rule that chose it, in words."""
        from modelci import baselines

        chooser = chooser or baselines.Chooser(target)
        chosen, rule = chooser.choose(self.baseline_candidates(workload, runner, target))
        if chosen is None:
            return None, rule
        with self.sessions() as session:
            return self.to_result(session.get(ResultRow, chosen.result_id)), rule

    def baseline_candidates(self, workload: str, runner: str, target: Any) -> list[Any]:
        """The good results of `workload` on `runner` with another target, the latest of each target, newest first:
        complete runs that are runs of their own (a confirmation run belongs to the run it confirms)."""
        from modelci.baselines import Candidate

        ident = target.identity()
        with self.sessions() as session:
            same = select(TargetRow.id).filter_by(**ident).scalar_subquery()
            # the latest good result of each other target, grouped in the database: one row per target, however
            # long the history (result ids grow with the runs that hold them)
            latest = (
                select(func.max(ResultRow.id).label("result_id"))
                .select_from(ResultRow).join(RunRow, ResultRow.run_id == RunRow.id)
                .where(ResultRow.workload == workload, ResultRow.status == "ok", RunRow.runner == runner,
                       RunRow.status == "complete", RunRow.target_id.is_distinct_from(same),
                       RunRow.id.not_in(select(RunLinkRow.run_id)))
                .group_by(RunRow.target_id)
            )
            stmt = (
                select(ResultRow.id, RunRow.started_at, TargetRow.kind, TargetRow.name, TargetRow.version,
                       TargetRow.commit, TargetRow.wheel_sha256, TargetRow.spec)
                .select_from(ResultRow).join(RunRow, ResultRow.run_id == RunRow.id)
                .join(TargetRow, RunRow.target_id == TargetRow.id)
                .where(ResultRow.id.in_(latest))
                .order_by(RunRow.started_at.desc(), ResultRow.id.desc())
            )
            return [Candidate(row.id, row.started_at, row.kind, row.name, row.version or "", row.commit or "",
                              row.wheel_sha256 or "", target_label(row.kind, row.name, row.version, row.commit,
                                                                   row.wheel_sha256, row.spec))
                    for row in session.execute(stmt)]

    def add_bisect(self, runner: str, result: dict[str, Any], command: str = "") -> int:
        """Keep a bisect's outcome (`BisectResult.to_json()`); returns its id."""
        from modelci.store.bisect_schema import BisectRow

        culprit = (result.get("culprit") or {}).get("item", "")
        row = BisectRow(runner=runner, workload=result["workload"], check=result["check"],
                        direction=result.get("direction", "regression"), status=result["status"], culprit=culprit,
                        result=clean(redacted_json(result)), command=clean_text(redacted(command)))
        with self.write() as session:
            session.add(row)
            session.flush()
            return row.id

    def bisects(self, limit: int = 100) -> list[Any]:
        """The latest bisects' outcomes (BisectRow), newest first; none in a history from before they were kept."""
        from modelci.store.bisect_schema import BisectRow

        if not self.has_table("bisects"):
            return []
        with self.read() as session:
            return list(session.scalars(select(BisectRow).order_by(BisectRow.id.desc()).limit(limit)))

    def run_of_result(self, result_id: int) -> int | None:
        """The id of the run that holds a stored result."""
        with self.sessions() as session:
            return session.scalar(select(ResultRow.run_id).where(ResultRow.id == result_id))

    def parts_of(self, run_ids: list[int] | None = None) -> dict[int, tuple[int | None, str]]:
        """Run id -> (the run it is part of, why) for the runs stored as part of another (confirmation runs)."""
        with self.sessions() as session:
            stmt = select(RunLinkRow.run_id, RunLinkRow.parent_run_id, RunLinkRow.purpose)
            if run_ids is not None:
                stmt = stmt.where(RunLinkRow.run_id.in_(run_ids))
            return {row.run_id: (row.parent_run_id, row.purpose) for row in session.execute(stmt)}

    def reusable(self, target: Any, environment_id: str, runner: str, workload: str, code_hash: str,
                 settings: dict[str, Any] | None = None) -> Result | None:
        """The latest stored result for the same target, environment, runner and workload code, if any; with
        `settings`, only one measured with the same harness settings (`info["settings"]`: seed, threads,
        repeats), so a result taken with 4 threads never stands in for one with 1."""
        ident = target.identity()
        with self.sessions() as session:
            stmt = (
                select(ResultRow).join(RunRow).join(TargetRow)
                .where(ResultRow.workload == workload, ResultRow.code_hash == code_hash,
                       RunRow.environment_id == environment_id, RunRow.runner == runner,
                       ResultRow.status.not_in(NOT_REUSED), RunRow.status != INCOMPLETE)
                .filter_by(**ident)
                .order_by(RunRow.started_at.desc(), ResultRow.id.desc()).limit(REUSE_CANDIDATES)
            )
            for row in session.scalars(stmt):
                if settings is None or (row.info or {}).get("settings") == settings:
                    return self.to_result(row)
            return None

    def run(self, run_id: str | int) -> StoredRun:
        """A stored run by id, or the latest run of its own for `latest`; an unknown id is a UserError."""
        with self.sessions() as session:
            if str(run_id) == "latest":
                # the latest run of its own: a confirmation run is part of the run it confirms
                row = session.scalars(select(RunRow).where(RunRow.id.not_in(select(RunLinkRow.run_id)))
                                      .order_by(RunRow.id.desc()).limit(1)).first()
                if row is None:
                    raise UserError(f"the history {self.shown} holds no runs yet; start with `modelci run`")
            else:
                number = row_id(run_id)
                row = session.get(RunRow, number) if number is not None else None
                if row is None:
                    raise UserError(f"no run {run_id!r} in {self.shown}; `modelci history` lists the runs")
            results = [self.to_result(r) for r in row.results]
            findings = {r.id: list(r.findings) for r in row.results}
            _ = row.environment, row.target
            own = session.get(RunFingerprintRow, row.id)
            fingerprint = dict(own.fingerprint if own is not None else row.environment.fingerprint or {})
        stored = StoredRun(row=row, results=results, fingerprint=fingerprint)
        for result in results:
            result.info["findings"] = [_finding_dict(f) for f in findings[result.id]]
        return stored

    def runs(self, runner: str | None = None, limit: int = 20) -> list[RunRow]:
        """The most recent runs of their own, newest first (a confirmation run is part of the run it confirms)."""
        with self.sessions() as session:
            stmt = (select(RunRow).where(RunRow.id.not_in(select(RunLinkRow.run_id)))
                    .order_by(RunRow.id.desc()).limit(limit))
            if runner:
                stmt = stmt.where(RunRow.runner == runner)
            return list(session.scalars(stmt))

    def runners(self) -> list[str]:
        """The runners that stored a run, sorted: what a command names when asked for one that never ran."""
        with self.sessions() as session:
            return list(session.scalars(select(RunRow.runner).distinct().order_by(RunRow.runner)))

    def latest_failed_run(self, target: Any, runner: str) -> int | None:
        """The id of the latest run of `target` on `runner` that stored an `error` result (a commit that did not
        build stores one per workload), or None when there is none: a bisect that skips a commit remembered as
        unbuildable still names the run that recorded the failure."""
        with self.sessions() as session:
            return session.scalar(
                select(RunRow.id).join(ResultRow, ResultRow.run_id == RunRow.id)
                .join(TargetRow, TargetRow.id == RunRow.target_id)
                .where(RunRow.runner == runner, ResultRow.status == "error").filter_by(**target.identity())
                .order_by(RunRow.id.desc()).limit(1))

    def targets_run(self, runner: str) -> int:
        """How many targets this runner has run: the most points a series of its history can have."""
        with self.sessions() as session:
            return int(session.scalar(select(func.count(distinct(RunRow.target_id))).where(RunRow.runner == runner)))

    def series(self, workload: str, metric: str, runner: str | None = None) -> RunSeries:
        """One metric of one workload across the history, one point per run, oldest first (store/series.py)."""
        with self.engine.connect() as connection:
            return load_series(connection, workload, metric, runner)

    def metric_names(self, workload: str | None, runner: str | None = None) -> list[str]:
        """The metrics a workload (None: any workload) recorded (on `runner`), sorted: what `modelci history` says
        when asked for one that it has not."""
        with self.sessions() as session:
            stmt = (select(MetricRow.name).distinct().join(ResultRow, MetricRow.result_id == ResultRow.id)
                    .order_by(MetricRow.name))
            if workload is not None:
                stmt = stmt.where(ResultRow.workload == workload)
            if runner:
                stmt = stmt.join(RunRow, ResultRow.run_id == RunRow.id).where(RunRow.runner == runner)
            return list(session.scalars(stmt))

    def workloads(self, runner: str | None = None) -> list[dict[str, Any]]:
        """Each workload in the history with its latest status and run, for `modelci history`: the latest result of
        its newest target in target order (a release re-run after a newer one is not the latest), from runs of
        their own (confirmation runs are part of the run they confirm, and not counted)."""
        with self.sessions() as session:
            stmt = (
                select(ResultRow.workload, ResultRow.status, RunRow.id, RunRow.runner, TargetRow.name,
                       TargetRow.version, TargetRow.kind, TargetRow.commit, TargetRow.wheel_sha256,
                       TargetRow.commit_date, RunRow.target_id, TargetRow.spec)
                .join(RunRow, ResultRow.run_id == RunRow.id).join(TargetRow, RunRow.target_id == TargetRow.id)
                .where(RunRow.id.not_in(select(RunLinkRow.run_id)))
                .order_by(ResultRow.workload, RunRow.id)
            )
            if runner:
                stmt = stmt.where(RunRow.runner == runner)
            rows = session.execute(stmt).all()
        first_seen: dict[int, int] = {}
        for row in sorted(rows, key=lambda r: r.id):
            first_seen.setdefault(row.target_id, row.id)
        latest: dict[str, Any] = {}
        counts: dict[str, int] = {}
        for row in rows:
            counts[row.workload] = counts.get(row.workload, 0) + 1
            key = (order_key(row.version, row.commit_date, first_seen[row.target_id], row.target_id), row.id)
            if row.workload not in latest or key >= latest[row.workload][0]:
                latest[row.workload] = (key, row)
        entries = []
        for name, (_, row) in sorted(latest.items()):
            entry = {k: v for k, v in row._asdict().items() if k not in ("commit_date", "target_id")}
            entry["target"] = target_label(row.kind, row.name, row.version, row.commit, row.wheel_sha256, row.spec)
            entry["results"] = counts[name]
            entries.append(entry)
        return entries

    def signature(self) -> tuple:
        """Something that changes whenever the history does, on every backend: the newest id of each table
        that only grows (runs, findings, alarm events, compat results, noise profiles, saved models) and how
        many runs are complete. Every change of an alarm appends an event, and a run's status only ever
        changes to complete, so an update in place moves it too; one query, no file times."""
        from modelci.store.alarms_schema import AlarmEventRow
        from modelci.store.compat_schema import CompatResultRow, SavedModelRow
        from modelci.store.noise_schema import NoiseProfileRow

        present = set(inspect(self.engine).get_table_names()) if self.readonly else None
        columns = [select(func.count(RunRow.id)).where(RunRow.status == "complete").scalar_subquery()]
        for table in (RunRow, FindingRow, AlarmEventRow, CompatResultRow, NoiseProfileRow, SavedModelRow):
            if present is None or table.__tablename__ in present:  # a read-only older history may lack some
                columns.append(select(func.max(table.id)).scalar_subquery())
        with self.engine.connect() as connection:
            return tuple(connection.execute(select(*columns)).one())

    def has_table(self, name: str) -> bool:
        """Whether the history holds a table (a read-only history made by an older modelci may lack one)."""
        return inspect(self.engine).has_table(name)

    def connect(self) -> Any:
        """A Core connection for read queries (`with store.connect() as connection:`)."""
        return self.engine.connect()

    def before_fork(self) -> None:
        """Let a forked child open its own connections: the pooled ones stay the parent's."""
        self.engine.dispose(close=False)

    def target_id(self, target: Any) -> int | None:
        """The id of a stored target by its identity; None when it was never stored."""
        with self.sessions() as session:
            return session.scalars(select(TargetRow.id).filter_by(**target.identity())).first()

    def run_target_id(self, run_id: int) -> int | None:
        """The id of the target a stored run ran against."""
        with self.sessions() as session:
            return session.scalar(select(RunRow.target_id).where(RunRow.id == run_id))

    def add_noise_profiles(self, rows: list[Any]) -> None:
        """Store noise-profile rows (`modelci calibrate`) in one transaction."""
        with self.sessions.begin() as session:
            session.add_all(rows)

    def noise_profiles(self, runner: str, workload: str) -> list[Any]:
        """The noise-profile rows of one workload on one runner, oldest first."""
        from modelci.store.noise_schema import NoiseProfileRow

        with self.sessions() as session:
            return list(session.scalars(
                select(NoiseProfileRow).where(NoiseProfileRow.runner == runner, NoiseProfileRow.workload == workload)
                .order_by(NoiseProfileRow.created_at, NoiseProfileRow.id)))

    # -- environments (env lock / diff / consistency / check) ------------------------------

    def environment(self, env_id: str) -> EnvironmentRow | None:
        """A stored environment by id, or by a unique prefix of at least 6 characters; None when unknown."""
        with self.sessions() as session:
            row = session.get(EnvironmentRow, env_id)
            if row is None and len(env_id) >= 6:
                rows = list(session.scalars(select(EnvironmentRow).where(EnvironmentRow.id.startswith(env_id))
                                            .limit(2)))
                row = rows[0] if len(rows) == 1 else None
            return row

    def run_environments(self, runner: str | None = None) -> list[dict[str, Any]]:
        """Every run with its runner, status, target and environment id, newest first (no lock text)."""
        with self.sessions() as session:
            stmt = (
                select(RunRow.id.label("run_id"), RunRow.runner, RunRow.status, RunRow.started_at, RunRow.suites,
                       RunRow.selection, RunRow.environment_id, TargetRow.spec.label("target_spec"),
                       TargetRow.kind.label("target_kind"), TargetRow.name.label("target_name"),
                       TargetRow.version.label("target_version"))
                .join(TargetRow, RunRow.target_id == TargetRow.id).order_by(RunRow.id.desc())
            )
            if runner:
                stmt = stmt.where(RunRow.runner == runner)
            return [row._asdict() for row in session.execute(stmt)]


def _first_line(error: BaseException) -> str:
    """The database's own words, and for a SQLite history that stayed locked, who holds a lock that long."""
    lines = str(error).strip().splitlines()
    said = redacted(lines[0]) if lines else type(error).__name__
    if said == "database is locked":  # SQLite's words once busy_timeout is spent: no writer takes that long
        said += (f" (another process kept its write lock past the {SQLITE_BUSY_TIMEOUT_MS // 1000} s a writer "
                 "waits: a process stopped or hung in a transaction, or a sqlite3 shell that began one; `fuser` on "
                 "the file names it; end it)")
    return said


def failed(exc: DBAPIError, shown: str) -> str:
    """What a command says when the history fails under it after it opened (a server gone mid-query, a privilege
    the role lacks): the database's first line, without a password, and what to do, as `run` says of a run the
    history refused (workflow._ingest). `shown` names the history (`shown_db`)."""
    orig = getattr(exc, "orig", None) or exc
    state = getattr(orig, "sqlstate", None)
    on_server = type(orig).__module__.startswith("psycopg")  # SQLite's "database is locked" is no lost server
    if _SQLITE_FULL in str(orig) or state in _PG_FULL:
        fix = "free space for the history (or point db elsewhere) and run again"
    elif on_server and _connection_lost(exc):
        fix = "run again once the server answers"
    elif state == "42501":  # insufficient_privilege
        fix = "grant the database role what it lacks, or give a db whose role has it, and run again"
    else:
        fix = "fix what the history refused and run again"
    return f"the history database {shown + ' ' if shown else ''}failed: {_first_line(orig)}; {fix}"


def _finding_dict(row: FindingRow) -> dict[str, Any]:
    return {"check": row.check, "metric": row.metric, "verdict": row.verdict, "gating": row.gating,
            "numbers": row.numbers, "message": row.message, "baseline_result_id": row.baseline_result_id}


#: how long a SQLite writer waits for another one: a CI burst of runners all storing at once queues up here;
#: a run is stored in well under a second, so minutes cover dozens of writers on a slow disk
SQLITE_BUSY_TIMEOUT_MS = 300_000


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers (dashboard, history) work while a run ingests; busy_timeout waits for a writer. The
    # timeout comes first: switching a new file to WAL needs a lock that another process may hold
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    # only on a new database or a history: switching rewrote the header of another application's database (a
    # mistyped --db) before the store refused it, and that application's journal mode is not modelci's to set
    tables = {row[0] for row in cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables or tables & {"schema_info", "alembic_version"}:
        cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_pragmas_existing(dbapi_connection: Any, _record: Any) -> None:
    # a store of a history that must exist (the commands that read it, and the alarm actions) sets no journal
    # mode: setting one writes the file, which turned an empty file into a 4 KiB database and another
    # application's database to WAL, only to refuse them. The history's creator set WAL, which the file keeps
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_pragmas_readonly(dbapi_connection: Any, _record: Any) -> None:
    # the journal mode is the writer's to set (changing it writes the file); a reader only waits for a writer
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.close()
