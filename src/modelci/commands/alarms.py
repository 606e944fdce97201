"""`modelci alarms [list|show|ack|resolve|silence|check]`: the alarms in the history and what people do with them."""

from __future__ import annotations

import getpass
import os

from modelci.commands import EXIT_OK, EXIT_REGRESSION, Once, check_runner, record_id
from modelci.errors import UserError


def add_parser(sub) -> None:
    """Declare the command and its actions."""
    parser = sub.add_parser("alarms", help="list, show, acknowledge, resolve or silence alarms; check for stale "
                                            "runners")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser("list", help="live alarms grouped by target (the default action)")
    listing.add_argument("--all", action="store_true", help="resolved alarms too")
    listing.add_argument("--state", action="append", choices=("open", "acknowledged", "silenced", "resolved"),
                         help="only alarms in this state; repeatable")
    listing.add_argument("--runner", action=Once, help="only this runner")
    show = actions.add_parser("show", help="one alarm and its events")
    show.add_argument("id", type=record_id)
    for name, text in (("ack", "acknowledge: someone is on it"), ("resolve", "close: fixed or accepted")):
        action = actions.add_parser(name, help=text)
        _people_options(action)
    silence = actions.add_parser("silence", help="mute alarms until a date; they come back after it")
    _people_options(silence)
    silence.add_argument("--until", action=Once, required=True, metavar="DATE",
                         help="last day of the silence, e.g. 2025-07-01")
    actions.add_parser("check", help="check for runners with no recent successful run, and notify (for a scheduler)")


def _people_options(parser) -> None:
    parser.add_argument("ids", nargs="+", type=record_id, metavar="ID", help="alarm ids (see `modelci alarms list`)")
    parser.add_argument("--by", action=Once, help="who (default: $MODELCI_USER, else the login name)")
    parser.add_argument("--note", action=Once, default="", help="why, for the alarm's record")


#: the longest name of who acted on an alarm that the history stores
WHO_MAX = 200
#: room a silence's event needs before its note ("until 2026-12-31: ")
UNTIL_ROOM = 100


def _who(args) -> str:
    """Who acts on an alarm: --by, MODELCI_USER or the login name; a UserError past what the history holds."""
    if args.by is not None and (not args.by.strip() or not args.by.isprintable()):
        raise UserError(f"--by {args.by!r}: give who acts, a name on one line (or leave --by out for "
                        "$MODELCI_USER, else the login name)")
    who = args.by or os.environ.get("MODELCI_USER") or getpass.getuser()
    if not args.by and os.environ.get("MODELCI_USER"):  # held to the rules of --by, which it stands for
        try:
            who.encode("utf-8")
        except UnicodeEncodeError:
            raise UserError(f"MODELCI_USER {os.fsencode(who)!r} is not UTF-8 text; give a name in UTF-8") from None
        if not who.strip() or not who.isprintable():
            raise UserError(f"MODELCI_USER {who!r}: give who acts, a name on one line")
    if len(who) > WHO_MAX:
        source = "--by" if args.by else "MODELCI_USER" if os.environ.get("MODELCI_USER") else "the login name"
        raise UserError(f"{source} {who[:40]!r}... is {len(who)} characters long; the most is {WHO_MAX}")
    return who


def main(args, cfg) -> int:
    """Run one action; `check` exits 1 when it opened an alarm."""
    from modelci.alarms import hooks, lifecycle, settings, views
    from modelci.report import console as consoles
    from modelci.store import Store

    store = Store.from_config(cfg, create=False)
    out = consoles.console()
    action = args.action or "list"
    if action in ("ack", "resolve", "silence", "check"):
        from modelci.store import ALARM_WRITES

        # `check` opens alarms as well as updating them
        store.check_privileges(ALARM_WRITES + ((("alarms", "INSERT"),) if action == "check" else ()))
    if action == "list":
        states = args.state if args.action and args.state else None
        if args.action and args.all:
            if args.state:  # --all listed every state, whatever --state said
                raise UserError("--all lists alarms in every state; give --state (repeatable) or --all, not both")
            states = ["open", "acknowledged", "silenced", "resolved"]
        runner = args.runner if args.action else None
        check_runner(store, runner)
        views.render_alarms(lifecycle.list_alarms(store, states=states, runner=runner), out)
    elif action == "show":
        views.render_alarm(lifecycle.get_alarm(store, args.id), out)
    elif action in ("ack", "resolve", "silence"):
        who, note = _who(args), args.note
        most = lifecycle.EVENT_DETAIL_MAX - UNTIL_ROOM  # what the event keeps: the rest was cut without a word
        if len(note) > most:
            raise UserError(f"--note is {len(note)} characters long; the most is {most} (put a long text "
                            "somewhere else and link it)")
        if action == "ack":
            done = lifecycle.acknowledge(store, args.ids, who, note)
        elif action == "resolve":
            done = lifecycle.resolve(store, args.ids, who, note)
        else:
            until = settings.parse_date(args.until, "--until")
            done = lifecycle.silence(store, args.ids, until, who, note)
        for alarm in done:
            out.print(f"alarm {alarm.id}: {alarm.status}")
    elif action == "check":
        report = hooks.check_now(cfg, store)
        views.render_alarm_report(report, out)
        opened = [e for e in report.events if e.event == "open"]
        out.print(f"{len(opened)} alarm(s) opened, {len(report.events) - len(opened)} recovered")
        if report.resent:  # whether they arrived this time: the warnings above, and `modelci alarms show ID`
            ids = ", ".join(f"#{i}" for i in dict.fromkeys(e.alarm.id for e in report.resent))
            out.print(f"sent again what failed to be delivered before: alarm(s) {ids}")
        return EXIT_REGRESSION if opened else EXIT_OK
    return EXIT_OK
