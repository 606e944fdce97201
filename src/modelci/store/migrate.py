"""The history's schema: made and migrated by Alembic revisions (store/migrations), safe when many runners start
at once.

Every change of the tables is a revision in `store/migrations/versions`. A store that opens a history checks its
revision without any lock (the common case: it is current), and only when something is to be done takes the
schema lock (PostgreSQL: an advisory lock; SQLite: the write lock of `BEGIN IMMEDIATE`), looks again, and does
it: so of N processes that start together on a new database one creates the tables and the others wait and use
them. A history made before the revisions existed (by the hand-written schema code, `schema_info` version 1)
is upgraded from nothing: the first revision creates only what is missing.

A revision that only adds (tables, indexes, nullable columns) is marked `additive = True`: code of the previous
revision keeps working on the upgraded history, so the store applies it by itself. Any other revision waits for
`modelci db upgrade`, which a team runs once every runner has the new modelci. A history at a revision this
modelci does not know was upgraded by a newer modelci; it is refused with what to do.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from typing import TYPE_CHECKING

from sqlalchemy import func, inspect, select, text
from sqlalchemy.engine import Connection, Engine

import modelci
from modelci.errors import HarnessError, UserError
from modelci.records import redacted

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

MIGRATIONS = Path(__file__).parent / "migrations"
#: the newest revision in store/migrations/versions (a test checks it is Alembic's head): a history at it is
#: current, known without importing Alembic, which costs more than a command's own work
HEAD = "0006"
#: the form of every revision id modelci writes (0001_baseline.py is revision "0001")
REVISION = re.compile(r"\d{4}")
#: the advisory lock key of the schema lock on PostgreSQL (any constant; "modelci" in ASCII)
PG_LOCK_KEY = 0x6D6F64656C6369
#: on PostgreSQL, the longest a transaction that holds a lock other runners wait for (the schema lock, the write
#: lock, a new target's row) may sit idle before the server ends its session, in seconds. A runner frozen there
#: (its VM suspended, its process stopped, its host cut off) held the lock for ever, or for the hours the
#: server's own keepalives take, and every other runner's command waited behind it. modelci's own transactions
#: never pause between statements for more than milliseconds of Python, so a minute is ample
LOCK_IDLE_S = 60


def bound_idle(connection: Connection) -> None:
    """On PostgreSQL, end this connection's transaction if it sits idle past LOCK_IDLE_S (SET LOCAL: this
    transaction only; a reader's long-lived session holds no lock a runner waits for, and is left alone)."""
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SET LOCAL idle_in_transaction_session_timeout = {int(LOCK_IDLE_S * 1000)}")


@dataclass(frozen=True)
class SchemaState:
    """Where a history stands: its Alembic revision (None before any), whether it holds modelci's tables at
    all, and the revisions this modelci would apply to bring it to the head."""

    revision: str | None
    has_history: bool
    head: str
    pending: tuple[str, ...]
    known: bool
    #: the tables of a database that holds no modelci history (another application's), by name
    foreign: tuple[str, ...] = ()

    @property
    def current(self) -> bool:
        return self.known and not self.pending


def config(connection: Connection | None = None) -> Config:
    """An Alembic configuration of the shipped revisions, running on `connection`."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


@lru_cache(maxsize=1)
def scripts() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(config())


def at_head(engine: Engine) -> bool:
    """Whether the history is at this modelci's revision: the check of every command, in two small queries."""
    with engine.connect() as connection:
        if not inspect(connection).has_table("alembic_version"):
            return False
        return connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [HEAD]


def state(connection: Connection) -> SchemaState:
    """The schema state of the database behind `connection` (reads only)."""
    from alembic.runtime.migration import MigrationContext

    tables = set(inspect(connection).get_table_names())
    if "alembic_version" in tables:
        rows = connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
        if len(rows) > 1:
            # Alembic's own error ("more than one head present") reached the user as a traceback on every command
            shown = ", ".join(sorted(map(str, rows)))
            raise HarnessError(
                f"the history {redacted(connection.engine.url.render_as_string(hide_password=True))}: its schema "
                f"table alembic_version holds {len(rows)} revisions ({shown}), where it holds "
                "the one revision its tables are at; it was changed by hand or by another tool. Keep the row of "
                "the revision the tables are at (the highest, if an upgrade ran: DELETE FROM alembic_version "
                "WHERE version_num <> 'THAT ONE'), or restore the database from a backup")
    revision = MigrationContext.configure(connection).get_current_revision() if "alembic_version" in tables else None
    directory = scripts()
    head = directory.get_current_head()
    known = revision is None or _known(directory, revision)
    pending: tuple[str, ...] = ()
    if known:
        pending = tuple(s.revision for s in reversed(list(directory.walk_revisions("base", "heads")))
                        if revision is None or s.revision not in _ancestry(directory, revision))
    has_history = "schema_info" in tables or revision is not None
    foreign = () if has_history else tuple(sorted(tables))
    return SchemaState(revision, has_history, head, pending, known, foreign)


def _known(directory: ScriptDirectory, revision: str) -> bool:
    try:
        return directory.get_revision(revision) is not None
    except Exception:  # alembic raises its own CommandError/ResolutionError for an unknown id
        return False


def _ancestry(directory: ScriptDirectory, revision: str) -> set[str]:
    """The revision and every revision before it."""
    return {s.revision for s in directory.walk_revisions("base", revision)}


def additive(revisions: tuple[str, ...]) -> bool:
    """Whether every one of these revisions only adds, so older code keeps working after it."""
    directory = scripts()
    return all(getattr(directory.get_revision(r).module, "additive", False) for r in revisions)


@contextmanager
def schema_lock(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that holds the history's schema lock until it commits."""
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            # the write lock now, not at the first write: a second process waits here (busy_timeout), then
            # reads the schema the first one made
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        elif engine.dialect.name == "postgresql":
            bound_idle(connection)
            connection.execute(select(func.pg_advisory_xact_lock(PG_LOCK_KEY)))
        yield connection
        connection.commit()


def inspect_state(engine: Engine) -> SchemaState:
    """Where the history stands, changing nothing."""
    with engine.connect() as connection:
        return state(connection)


def ensure(engine: Engine, url: str, readonly: bool, create: bool = True) -> SchemaState:
    """Bring the history to this modelci's schema where that is safe, or say why not (a UserError). Without
    `create` a database that holds no modelci history is refused rather than given modelci's tables."""
    if at_head(engine):
        return SchemaState(HEAD, True, HEAD, (), True)
    found = inspect_state(engine)
    refuse_newer(found, url)
    if found.current:
        return found
    if not found.has_history and not create:
        raise UserError(f"{url} holds no modelci history (no schema_info table); give the database that "
                        "`modelci run` writes (db in modelci.toml, MODELCI_DB or --db)")
    refuse_foreign(found, url)
    if readonly:
        if not found.has_history:
            raise UserError(f"{url} holds no modelci history (no schema_info table), and it is opened read-only, "
                            "so none is created; give the database that `modelci run` writes")
        return found  # readers find what a newer revision adds absent, as a history made before it
    if found.has_history and not additive(found.pending):
        raise UserError(f"the history {url} is at schema revision {found.revision or 'from before revisions'}, "
                        f"this modelci {modelci.__version__} needs {found.head}, and the upgrade changes what "
                        "older modelci versions read; once every runner has this modelci, run `modelci db "
                        "upgrade` once")
    return upgrade(engine, url)


def upgrade(engine: Engine, url: str) -> SchemaState:
    """Apply the pending revisions under the schema lock (nothing when another process just did)."""
    with schema_lock(engine) as connection:
        found = state(connection)
        refuse_newer(found, url)
        refuse_foreign(found, url)
        if found.pending:
            from alembic import command

            command.upgrade(config(connection), "head")
        return state(connection)


def refuse_newer(found: SchemaState, url: str) -> None:
    refuse_damaged(found, url)
    if not found.known:
        raise UserError(f"the history {url} is at schema revision {found.revision}, which a newer modelci made; "
                        f"this modelci {modelci.__version__} knows revisions up to {found.head}. Upgrade modelci "
                        "on this machine (pip install -U modelci) to use this history")


def refuse_damaged(found: SchemaState, url: str) -> None:
    """Refuse a revision no modelci writes (`db current` too, which shows a newer one and goes on)."""
    if not found.known and not REVISION.fullmatch(str(found.revision)):
        # no modelci names a revision so: telling the user to upgrade modelci would not help
        raise HarnessError(f"the history {url} is at schema revision {found.revision!r}, which no modelci made (its "
                           "revisions are four digits, this one knows up to "
                           f"{found.head}); the alembic_version table was changed by hand or by another tool. Put "
                           "back the revision the tables are at, or restore the database from a backup")


def refuse_foreign(found: SchemaState, url: str) -> None:
    """Refuse to add modelci's tables to another application's database (a mistyped --db, a shared file): its
    tables could clash with modelci's (runs, results), and it is not modelci's to change."""
    if found.foreign:
        shown = ", ".join(found.foreign[:5]) + (f" and {len(found.foreign) - 5} more" if len(found.foreign) > 5 else "")
        raise UserError(f"{url} holds no modelci history but other tables ({shown}), so modelci adds none of its "
                        "own to it; give a new or empty database for the history (a new SQLite file, or on "
                        "PostgreSQL one made for it: CREATE DATABASE modelci)")
