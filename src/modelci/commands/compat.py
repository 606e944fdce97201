"""`modelci compat`: models saved by other builds load in the target (or the target's in them) and match."""

from __future__ import annotations

from modelci.commands import EXIT_OK, EXIT_REGRESSION, add_selection


def add_parser(sub) -> None:
    """Declare the command."""
    parser = sub.add_parser("compat", help="check that models saved by older builds load in the target and match")
    parser.add_argument("--target", required=True, help="numpy==2.0.0, a path to a .whl, or a git target")
    add_selection(parser)
    parser.add_argument("--from", dest="from_spec", metavar="VERSION_SPEC",
                        help="producer versions to check: a version (that one and later, older than the target) or "
                             "a specifier set such as '>=1.2,<2' or '==2.13.0' (default: every older version)")
    parser.add_argument("--direction", choices=("backward", "forward", "both"), default="backward",
                        help="backward: older models load in the target (default); forward: the target's models "
                             "load in the older builds; both")
    parser.add_argument("--markdown", dest="markdown_path", metavar="FILE", help="write the matrix as Markdown")


def main(args, cfg) -> int:
    """Check, print the matrix, write the reports; exit 1 when any saved model fails in a consumer."""
    from modelci import compat
    from modelci.report import compat_report
    from modelci.report import console as views

    outcome = compat.check(cfg, args.target, args.suite or cfg.suites, args.pattern, from_spec=args.from_spec,
                           direction=args.direction, progress=views.Progress(quiet=args.quiet))
    compat_report.render(outcome, views.console())
    if args.json_path:
        compat_report.write_json(args.json_path, outcome)
    if args.markdown_path:
        compat_report.write_markdown(args.markdown_path, outcome)
    return EXIT_REGRESSION if outcome.regressed else EXIT_OK
