"""`modelci run`: run a suite against one target and compare each result with its baseline."""

from __future__ import annotations

from modelci.commands import EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION, add_selection


def add_parser(sub) -> None:
    """Declare the command."""
    parser = sub.add_parser("run", help="run a suite against one target and compare with the baseline")
    parser.add_argument("--target", required=True, help="numpy==2.0.0, a path to a .whl, or current")
    add_selection(parser)
    parser.add_argument("--reuse", action="store_true", help="reuse stored results of the same target, env and code")


def main(args, cfg) -> int:
    """Run, print the summary, write the JSON report; exit 1 on a regression or a failed workload."""
    from modelci import workflow
    from modelci.report import console as views
    from modelci.report import json_report

    try:
        outcome = workflow.run(cfg, args.target, args.suite or cfg.suites, args.pattern, reuse=args.reuse,
                               progress=views.Progress(quiet=args.quiet), command=args.command_line)
    except workflow.Interrupted as exc:
        views.console(stderr=True).print(f"[yellow]{exc}[/]")
        return EXIT_INTERRUPTED
    views.render_run(outcome, views.console())
    bad = workflow.failed(outcome)
    if args.json_path:
        json_report.write(args.json_path, json_report.run_report(outcome, bad))
    return EXIT_REGRESSION if bad else EXIT_OK
