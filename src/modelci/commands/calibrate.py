"""`modelci calibrate`: measure each workload's run-to-run noise on one target and store it as a floor."""

from __future__ import annotations

from modelci.commands import EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION, Once, add_selection


def add_parser(sub) -> None:
    """Declare the command."""
    parser = sub.add_parser("calibrate", help="run each workload N times on one target and store its noise")
    parser.add_argument("--target", action=Once, required=True, help="numpy==2.0.0, a path to a .whl, or current")
    add_selection(parser)
    parser.add_argument("--runs", type=int, default=5,
                        help="how many times to run each workload (default 5). The history check weighs the CV "
                             "measured as RUNS - 1 degrees of freedom against a series' own points: 20 runs make "
                             "it count on a young history")


def main(args, cfg) -> int:
    """Calibrate and print the noise table; exit 1 when a workload failed in any run."""
    from modelci.envs import pipconfig

    pipconfig.prefetch()  # pip answers while the imports below run
    from modelci import workflow
    from modelci.report import console as views
    from modelci.report import files, json_report

    files.prepare({"--json": args.json_path}, db=cfg.db, config=cfg.file)
    try:
        outcome = workflow.calibrate(cfg, args.target, args.suite or cfg.suites, args.pattern, runs=args.runs,
                                     progress=views.Progress(quiet=args.quiet, every=cfg.progress_every),
                                     command=args.command_line)
    except workflow.Interrupted as exc:
        views.console(stderr=True).print(f"[yellow]{exc}[/]")
        if exc.calibration is not None:
            ids = ", ".join(str(i) for i in exc.calibration.run_ids) or "none"
            views.console(stderr=True).print(f"[yellow]no noise stored: {args.runs} runs were asked for; the runs "
                                             f"stored before the signal: {ids}[/]")
            if args.json_path:
                from modelci import cancel

                with cancel.deferred(), files.writing({"--json": args.json_path}, "the finished runs are stored"):
                    json_report.write(args.json_path, json_report.calibration_report(exc.calibration))
        return EXIT_INTERRUPTED
    views.render_calibration(outcome, views.console())
    if args.json_path:
        with files.writing({"--json": args.json_path}, "the calibration runs and their noise are stored"):
            json_report.write(args.json_path, json_report.calibration_report(outcome))
    return EXIT_REGRESSION if outcome.failures else EXIT_OK
