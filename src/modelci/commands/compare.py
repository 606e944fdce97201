"""`modelci compare A B`: run (or reuse) two targets and judge B against A."""

from __future__ import annotations

from modelci.commands import EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION, add_selection


def add_parser(sub) -> None:
    """Declare the command."""
    parser = sub.add_parser("compare", help="run (or reuse) two targets and judge B against A")
    parser.add_argument("a", metavar="A", help="the reference target")
    parser.add_argument("b", metavar="B", help="the target under test")
    add_selection(parser)
    parser.add_argument("--rerun", action="store_true", help="run both targets again instead of reusing results")
    parser.add_argument("--no-confirm", dest="confirm", action="store_false",
                        help="take timing verdicts from one run per side (default: a workload whose timing differs "
                             "runs again on both sides, B then A, and once more A then B if that pair agrees; the "
                             "verdict stands only if every pass agrees)")
    from modelci.commands.run import add_report_files

    add_report_files(parser)


def main(args, cfg) -> int:
    """Compare, print one table, write the JSON report; exit 1 when B regresses against A. A cancelled compare
    writes its report files for what finished, marked interrupted, as `run` does."""
    from modelci.envs import pipconfig

    pipconfig.prefetch()  # pip answers while the imports below run
    from modelci import cancel, workflow
    from modelci.report import console as views
    from modelci.report.console import escape

    from modelci.commands.run import prepare_report_files, say_config_errors

    prepare_report_files(args, cfg)
    from modelci import targets

    for spec in (args.a, args.b):  # B's typo must not wait for A's run
        targets.check(spec)
    try:
        outcome = workflow.compare(cfg, args.a, args.b, args.suite or cfg.suites, args.pattern, rerun=args.rerun,
                                   progress=views.Progress(quiet=args.quiet, every=cfg.progress_every),
                                   command=args.command_line, confirm=args.confirm)
    except workflow.Interrupted as exc:
        views.console(stderr=True).print(f"[yellow]{exc}[/]")
        if exc.compare is not None:  # the report files say what finished, marked interrupted
            with cancel.deferred():
                _write_report_files(args, exc.compare)
        return EXIT_INTERRUPTED
    except workflow.Unjudged as exc:
        # the history refused a side (or failed after storing it): its results are shown and written to the
        # report files, unjudged; they were lost with the message, where `run` kept them
        views.render_run(exc.outcome, views.console())
        if exc.compare is not None:
            with cancel.deferred():
                _write_report_files(args, exc.compare)
        raise
    views.render_compare(outcome, views.console())
    from modelci.alarms import views as alarm_views

    alarm_views.render_alarm_report(outcome.alarms, views.console())  # what the alarm step did with B's verdicts
    with cancel.deferred():
        _write_report_files(args, outcome)
    unmeasured = outcome.unmeasured
    if unmeasured and not outcome.regressed:
        shown = ", ".join(unmeasured[:5]) + (f" and {len(unmeasured) - 5} more" if len(unmeasured) > 5 else "")
        views.console(stderr=True).print(f"[red]B gave no result for {escape(shown)}: nothing of "
                                         f"{'them' if len(unmeasured) > 1 else 'it'} was compared, so this is no "
                                         "pass[/]")
    code = EXIT_REGRESSION if outcome.regressed or unmeasured else EXIT_OK
    return say_config_errors(outcome.b.config_errors if outcome.b is not None else [], code)


def _write_report_files(args, outcome) -> None:
    """The --json, --junit and --markdown files of a compare (whole, or cancelled: `outcome.interrupted`); one
    that cannot be written says that the runs are stored all the same."""
    from modelci.commands.run import report_paths
    from modelci.report import files

    with files.writing(report_paths(args), "the compared runs are stored"):
        _write_reports(args, outcome)


def _write_reports(args, outcome) -> None:
    from modelci.report import json_report

    if args.json_path:
        json_report.write(args.json_path, json_report.compare_report(outcome))
    if args.junit:
        from modelci.report import junit

        junit.write(args.junit, junit.compare_xml(outcome))
    if args.markdown:
        from modelci.report import markdown

        markdown.write(args.markdown, markdown.compare_summary(outcome))
