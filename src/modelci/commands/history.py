"""`modelci history`: the workloads in the history, or one metric of one workload across targets."""

from __future__ import annotations

from modelci.commands import EXIT_OK


def add_parser(sub) -> None:
    """Declare the command."""
    parser = sub.add_parser("history", help="the stored history: workloads, or one metric of one workload")
    parser.add_argument("workload", nargs="?", help="workload id, e.g. numpy/MLPClassifier")
    parser.add_argument("--metric", default="time.train", help="metric name (default time.train)")
    parser.add_argument("--runner", help="only this runner")


def main(args, cfg) -> int:
    """Print the history table."""
    from modelci.errors import UserError
    from modelci.report import console as views
    from modelci.store import Store

    store = Store(cfg.db, cfg.artifacts)
    out = views.console()
    if not args.workload:
        views.render_workloads(store.workloads(args.runner), store.runs(args.runner), out)
        return EXIT_OK
    rows = store.series(args.workload, args.metric, args.runner)
    if not rows:
        known = sorted({w["workload"] for w in store.workloads(args.runner)})
        raise UserError(f"no {args.metric!r} history for workload {args.workload!r}; "
                        f"workloads in the history: {', '.join(known) or 'none'}")
    views.render_history(rows, args.metric, out)
    return EXIT_OK
