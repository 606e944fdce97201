"""`modelci compat`: models saved by other builds load in the target (or the target's in them) and match."""

from __future__ import annotations

from modelci.commands import EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, Once, add_selection, build, jobs


def add_parser(sub) -> None:
    """Declare the command."""
    parser = sub.add_parser("compat", help="check that models saved by older builds load in the target and match")
    parser.add_argument("--target", action=Once, required=True,
                        help="numpy==2.0.0, a path to a .whl, or a git target")
    add_selection(parser)
    parser.add_argument("--from", dest="from_spec", action=Once, type=build, metavar="VERSION_SPEC",
                        help="producer versions to check: a version (that one and later, older than the target) or "
                             "a specifier set such as '>=1.2,<2' or '==2.13.0' (default: every older version)")
    parser.add_argument("--direction", action=Once, choices=("backward", "forward", "both"), default="backward",
                        help="backward: older models load in the target (default); forward: the target's models "
                             "load in the older builds; both")
    parser.add_argument("--markdown", dest="markdown_path", action=Once, metavar="FILE",
                        help="write the matrix as Markdown")
    parser.add_argument("--no-alarms", dest="alarms", action="store_false",
                        help="open, update and notify no alarm (default: a saved model that no longer loads opens one)")
    chain = parser.add_argument_group("bisect on alarm", "when the check opens an alarm, find the commit that broke "
                                                         "loading")
    chain.add_argument("--bisect-on-alarm", action="store_true",
                       help="bisect each compat alarm this check opens between --good and the target's commit "
                            "(`bisect --check compat --from PRODUCER`; git targets)")
    chain.add_argument("--good", action=Once, metavar="REF",
                       help="with --bisect-on-alarm: a ref of the target's repository where the saved models still "
                            "loaded")
    chain.add_argument("--first-parent", action="store_true", help="with --bisect-on-alarm: search the main line only")
    chain.add_argument("--jobs", type=jobs, default=1, help="with --bisect-on-alarm: probes per round")


def main(args, cfg) -> int:
    """Check, print the matrix, write the reports, open alarms; exit 1 when any saved model fails in a consumer.
    With --bisect-on-alarm, then bisect each compat alarm the check opened (the exit code stays the check's)."""
    from types import SimpleNamespace

    from modelci import cancel, compat, workflow
    from modelci.commands.run import _bisect_alarms, bisect_plan
    from modelci.report import compat_report
    from modelci.report import console as views
    from modelci.store import COMPAT_WRITES, Store

    from modelci.report import files

    chain = bisect_plan(args, args.target)  # refuses --bisect-on-alarm with --no-alarms, or without a git target
    paths = {"--json": args.json_path, "--markdown": args.markdown_path}
    files.prepare(paths, db=cfg.db, config=cfg.file)  # before the check, not after it
    store = Store.from_config(cfg)
    store.check_writable(COMPAT_WRITES)  # before the environments are made and the models loaded
    try:
        outcome = compat.check(cfg, args.target, args.suite or cfg.suites, args.pattern, from_spec=args.from_spec,
                               direction=args.direction, store=store,
                               progress=views.Progress(quiet=args.quiet, every=cfg.progress_every))
    except compat.Interrupted as exc:  # the models checked before the signal are stored: the reports say which
        views.console(stderr=True).print(f"[yellow]{views.escape(str(exc))}[/]")
        compat_report.render(exc.outcome, views.console())
        with cancel.deferred(), files.writing(paths, "the models checked before the signal are stored"):
            _write_reports(args, exc.outcome)
        return EXIT_INTERRUPTED
    compat_report.render(outcome, views.console())
    events: list = []
    if args.alarms:
        events, deliveries = compat.raise_alarms(cfg, store, outcome)
        from modelci.alarms import views as alarm_views
        from modelci.alarms.hooks import AlarmReport

        alarm_views.render_alarm_report(AlarmReport(events=events, deliveries=deliveries), views.console())
    report = compat_report.to_json(outcome)
    with cancel.deferred(), files.writing(paths, "the check's results and alarms are stored"):
        _write_reports(args, outcome)
    if chain is not None:
        checked = SimpleNamespace(target=outcome.target, run_id=None, alarms=SimpleNamespace(events=events))
        try:
            bisects = _bisect_alarms(args, cfg, checked, chain)
        except workflow.Interrupted as exc:
            views.console(stderr=True).print(f"[yellow]{views.escape(str(exc))}; the check is stored, and `modelci "
                                             "bisect` with the same ends resumes from the probes already run[/]")
            return EXIT_INTERRUPTED
        if args.json_path and bisects:
            from modelci.report import json_report

            with files.writing(paths, "the check and the bisects' probes are stored"):
                json_report.write(args.json_path, report | {"bisects": [b.to_json() for b in bisects]})
    if outcome.regressed:
        return EXIT_REGRESSION
    if outcome.unchecked:
        # a consumer that could not be set up is a setup problem, as an empty store is: a usage error (exit 2),
        # neither a pass nor a regression (exit 1, which CI and bisect read as "this build is bad")
        views.console(stderr=True).print(f"[red]error:[/] {views.escape(outcome.unchecked)}")
        return EXIT_USAGE
    return EXIT_OK


def _write_reports(args, outcome) -> None:
    """The --json and --markdown reports of a check (marked interrupted when it was cancelled)."""
    from modelci.report import compat_report

    if args.json_path:
        compat_report.write_json(args.json_path, outcome)
    if args.markdown_path:
        compat_report.write_markdown(args.markdown_path, outcome)
