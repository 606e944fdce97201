"""`modelci history`: the workloads in the history, or one metric of one workload across targets."""

from __future__ import annotations

from modelci.commands import EXIT_OK, Once, check_runner

#: the runs of a series `history WORKLOAD` shows by default: a terminal table of 10,000 rows took 7 s to print
LAST = 50


def add_parser(sub) -> None:
    """Declare the command."""
    parser = sub.add_parser("history", help="the stored history: workloads, or one metric of one workload")
    parser.add_argument("workload", nargs="?", help="workload id, e.g. numpy/MLPClassifier")
    parser.add_argument("--metric", action=Once, help="metric name (default time.train; with --changes: every metric)")
    parser.add_argument("--runner", action=Once, help="only this runner")
    parser.add_argument("--last", type=int, metavar="N",
                        help=f"show the last N runs of the workload's series (default {LAST})")
    parser.add_argument("--all", action="store_true", help="show every run of the workload's series")
    parser.add_argument("--changes", action="store_true",
                        help="change points of every series (runner, workload, metric) across targets")


def main(args, cfg) -> int:
    """Print the history table."""
    from modelci.errors import UserError
    from modelci.report import console as views
    from modelci.store import Store

    if args.all and args.last is not None:  # --last was silently ignored
        raise UserError(f"--all and --last {args.last}: give one, --all for every run or --last N for the last N")
    if args.last is not None and args.last < 1:
        raise UserError(f"--last {args.last}: give a number of runs of at least 1, or --all for every run")
    store = Store.from_config(cfg, create=False)
    out = views.console()
    _check_selection(args, store)
    if args.changes:
        from modelci.alarms import changes, hooks
        from modelci.alarms import views as alarm_views

        hooks.check_policy_metrics(cfg, store)
        workloads = [args.workload] if args.workload else None
        series = changes.load_series(store, runner=args.runner, workloads=workloads, metric=args.metric)
        alarm_views.render_changes(changes.find_changes(series, changes.calibrated(cfg, store)), out)
        return EXIT_OK
    args.metric = args.metric or "time.train"
    last = LAST if args.last is None else args.last
    if not args.workload:
        views.render_workloads(store.workloads(args.runner), store.runs(args.runner), out)
        return EXIT_OK
    series = store.series(args.workload, args.metric, args.runner)
    if not series:
        raise UserError(_nothing_to_show(store, args.workload, args.metric, args.runner))
    # a terminal table of 10,000 rows took 7 s to print (docs/overhead.md): the recent runs by default
    views.render_history(series if args.all else series[-last:], args.metric, out, total=len(series))
    return EXIT_OK


def _check_selection(args, store) -> None:
    """A UserError for a runner or a workload the history does not hold, and for --metric with neither a workload
    nor --changes: each printed an empty table or "no change points" with exit 0, which read as all is well."""
    from modelci.errors import UserError

    check_runner(store, args.runner)
    if args.metric and not args.workload and not args.changes:
        raise UserError(f"--metric {args.metric!r} shows one metric of one workload: give the workload too "
                        "(`modelci history WORKLOAD --metric NAME`), or --changes for every series of that metric")
    if not args.changes or not (args.workload or args.metric):
        return
    metrics = store.metric_names(args.workload, args.runner)
    if args.workload and not metrics:
        raise UserError(_nothing_to_show(store, args.workload, args.metric or "", args.runner))
    if args.metric and args.metric not in metrics:
        of = f"workload {args.workload!r}" if args.workload else "the history"
        raise UserError(f"--metric {args.metric!r}: {of} has no such metric; its metrics: "
                        f"{', '.join(metrics) or 'none'}")


def _nothing_to_show(store, workload: str, metric: str, runner: str | None) -> str:
    """Why a series is empty, with what there is: the workload's metrics, or the workloads of the history."""
    metrics = store.metric_names(workload, runner)
    if metrics:
        return f"workload {workload!r} has no metric {metric!r}; its metrics: {', '.join(metrics)}"
    on = f" on runner {runner!r}" if runner else ""
    if runner and store.metric_names(workload):
        return f"workload {workload!r} never ran{on}; leave out --runner to see every runner's runs"
    known = sorted({w["workload"] for w in store.workloads(runner)})
    return (f"no workload {workload!r} in the history{on}; workloads there: {', '.join(known) or 'none'} "
            "(`modelci history` lists them)")
