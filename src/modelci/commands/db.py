"""`modelci db current|upgrade`: where the history's schema stands, and bringing it to this modelci's."""

from __future__ import annotations

from modelci.commands import EXIT_OK


def add_parser(sub) -> None:
    """Declare the command."""
    parser = sub.add_parser("db", help="the history database's schema: its revision, and upgrading it")
    actions = parser.add_subparsers(dest="db_action", required=True, metavar="ACTION")
    actions.add_parser("current", help="the history's schema revision and the one this modelci needs; changes nothing")
    actions.add_parser("upgrade", help="apply every pending schema revision (under a lock, safe while runners run)")


def main(args, cfg) -> int:
    """Show or upgrade the schema."""
    from modelci.errors import UserError
    from modelci.report.console import console
    from modelci.store import Store

    out = console()
    upgrade = args.db_action == "upgrade"
    store = Store.from_config(cfg, schema="upgrade" if upgrade else "inspect", create=upgrade)
    state = store.schema
    from modelci.store import migrate

    if state.foreign:  # `current` gets here (`upgrade` refuses it first): no history, and none will be made
        migrate.refuse_foreign(state, store.shown)
    if not state.has_history and not upgrade:
        # an empty file, or a new PostgreSQL database: "revision none, pending ..." with exit 0 read as a history
        # that needs an upgrade, where there is none, and a mistyped --db passed in CI
        raise UserError(f"{store.shown} holds no modelci history yet (none of its tables); `modelci db upgrade` "
                        "makes one there (so does the first `modelci run`), or give the database that `modelci "
                        "run` writes (db in modelci.toml, MODELCI_DB or --db)")
    migrate.refuse_damaged(state, store.shown)
    revision = state.revision or ("none (a history from before schema revisions)" if state.has_history else "none")
    if not state.known:  # only `current` gets here: `upgrade` refuses a newer history
        out.print(f"{store.shown}: revision {state.revision}, newer than this modelci's {state.head}")
    elif state.pending:
        out.print(f"{store.shown}: revision {revision}; this modelci needs {state.head} "
                  f"(pending: {', '.join(state.pending)}; `modelci db upgrade` applies them)")
    else:
        out.print(f"{store.shown}: revision {revision} (this modelci's head): up to date")
    return EXIT_OK
