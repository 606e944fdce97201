"""The command line: parse, call one library function, turn what it returns into an exit code.

Exit codes (DESIGN.md, "Conventions"): 0 no regression; 1 regression or failure found; 2 usage or
configuration error; 3 the harness itself could not run; 130 interrupted (what finished is stored).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from modelci import __version__

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_HARNESS, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class Parser(argparse.ArgumentParser):
    """argparse that exits 2 with its usage message, as every usage error should."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    parser = Parser(prog="modelci", description="Model-level CI for machine-learning frameworks.")
    parser.add_argument("--version", action="version", version=f"modelci {__version__}")
    parser.add_argument("--config", help="config file (default: ./modelci.toml or [tool.modelci] in ./pyproject.toml)")
    parser.add_argument("--db", help="history database: SQLite path or SQLAlchemy URL (env MODELCI_DB)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def selection(p: argparse.ArgumentParser) -> None:
        p.add_argument("--suite", action="append", default=[], help="folder of workload files or zoo:NAME; repeatable")
        p.add_argument("-k", dest="pattern", help="only workloads whose id contains this text (or matches this glob)")
        p.add_argument("--runner", help="runner label (default: the host name; env MODELCI_RUNNER)")
        p.add_argument("--timeout", type=float, help="seconds per workload before it is killed (env MODELCI_TIMEOUT)")
        p.add_argument("--repeats", type=int, help="timed inference repeats per workload")
        p.add_argument("--json", dest="json_path", metavar="FILE", help="write a versioned JSON report")

    run = sub.add_parser("run", help="run a suite against one target and compare with the baseline")
    run.add_argument("--target", required=True, help="numpy==2.0.0, a path to a .whl, or current")
    selection(run)
    run.add_argument("--reuse", action="store_true", help="reuse stored results of the same target, env and code")

    compare = sub.add_parser("compare", help="run (or reuse) two targets and judge B against A")
    compare.add_argument("a", metavar="A", help="the reference target")
    compare.add_argument("b", metavar="B", help="the target under test")
    selection(compare)
    compare.add_argument("--rerun", action="store_true", help="run both targets again instead of reusing stored results")

    history = sub.add_parser("history", help="the stored history: workloads, or one metric of one workload")
    history.add_argument("workload", nargs="?", help="workload id, e.g. numpy/MLPClassifier")
    history.add_argument("--metric", default="time.train", help="metric name (default time.train)")
    history.add_argument("--runner", help="only this runner")

    show = sub.add_parser("show", help="one stored run with its results and findings")
    show.add_argument("run_id", nargs="?", default="latest", metavar="RUN_ID", help="a run id, or latest (default)")

    sub.add_parser("config", help="show every option, its value and where the value came from")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `modelci` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from modelci.errors import UserError
    from modelci.report.console import console

    err = console(stderr=True)
    try:
        return dispatch(args, argv if argv is not None else sys.argv[1:])
    except UserError as exc:
        err.print(f"[red]error:[/] {_escape(str(exc))}")
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]")
        return EXIT_INTERRUPTED


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def dispatch(args: argparse.Namespace, argv: list[str]) -> int:
    """Load the config and run the command."""
    from modelci import config as config_module
    from modelci import workflow
    from modelci.report import console as views
    from modelci.report import json_report
    from modelci.store import Store

    cli_values: dict[str, Any] = {"db": args.db}
    for name in ("runner", "timeout", "repeats"):
        cli_values[name] = getattr(args, name, None)
    cfg = config_module.load(cli=cli_values, config_file=args.config)
    out = views.console()
    command = "modelci " + " ".join(shlex.quote(a) for a in argv)

    if args.command == "config":
        views.render_config(cfg, out)
        return EXIT_OK
    if args.command in ("run", "compare"):
        suites = args.suite or cfg.suites
        progress = views.Progress(quiet=args.quiet)
        try:
            if args.command == "run":
                outcome = workflow.run(cfg, args.target, suites, args.pattern, reuse=args.reuse, progress=progress,
                                       command=command)
                views.render_run(outcome, out)
                bad = workflow.failed(outcome)
                if args.json_path:
                    json_report.write(args.json_path, json_report.run_report(outcome, bad))
                return EXIT_REGRESSION if bad else EXIT_OK
            outcome = workflow.compare(cfg, args.a, args.b, suites, args.pattern, rerun=args.rerun,
                                       progress=progress, command=command)
            views.render_compare(outcome, out)
            if args.json_path:
                json_report.write(args.json_path, json_report.compare_report(outcome))
            return EXIT_REGRESSION if outcome.regressed else EXIT_OK
        except workflow.Interrupted as exc:
            views.console(stderr=True).print(f"[yellow]{exc}[/]")
            return EXIT_INTERRUPTED
    store = Store(cfg.db, cfg.artifacts)
    if args.command == "history":
        if args.workload:
            rows = store.series(args.workload, args.metric, args.runner)
            if not rows:
                from modelci.errors import UserError

                known = sorted({w["workload"] for w in store.workloads(args.runner)})
                raise UserError(f"no {args.metric!r} history for workload {args.workload!r}; "
                                f"workloads in the history: {', '.join(known) or 'none'}")
            views.render_history(rows, args.metric, out)
        else:
            views.render_workloads(store.workloads(args.runner), store.runs(args.runner), out)
        return EXIT_OK
    if args.command == "show":
        views.render_show(store.run(args.run_id), out)
        return EXIT_OK
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
