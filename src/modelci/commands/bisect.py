"""`modelci bisect`: find the commit, merged PR or release that caused a regression.

Exit codes: 0 a culprit was found; 1 the bisect ended without one (only untestable commits remain, or a timing
culprit did not reproduce); 2 refused (the good end is not good, the bad end is not bad) or bad input.
"""

from __future__ import annotations

from modelci.commands import EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION, Once, add_selection, build, jobs

VERDICT_STYLE = {"good": "green", "bad": "red", "skip": "yellow", "old": "dim", "new": "green"}


def add_parser(sub) -> None:
    """Declare the command."""
    parser = sub.add_parser("bisect", help="find the commit, merged PR or release that caused a regression")
    parser.add_argument("--repo", action=Once, help="git repository (path or URL) whose history is searched")
    parser.add_argument("--good", "--old", dest="good", action=Once,
                        help="with --repo: the older ref (where the workload is good; with --improvement, worse)")
    parser.add_argument("--bad", "--new", dest="bad", action=Once,
                        help="with --repo: the newer ref, a descendant of --good (bad; with --improvement, better)")
    parser.add_argument("--versions", action=Once,
                        help="comma-separated targets, oldest (good) first: 'numpy==1.23.5,...'")
    parser.add_argument("--package", action=Once,
                        help="search the releases of this package the configured index offers")
    parser.add_argument("--between", action=Once, nargs=2, metavar=("GOOD", "BAD"),
                        help="with --package: the good and bad release")
    parser.add_argument("--check", action=Once, choices=["status", "precision", "curve", "timing", "memory", "compat"],
                        help="the check to follow (default: whichever fails between the ends); compat: the first "
                             "build where the models saved by --from no longer load or match")
    parser.add_argument("--from", dest="from_spec", action=Once, type=build, metavar="PRODUCER",
                        help="with --check compat: the build whose saved models are loaded at each probe: a ref, a "
                             "target spec or a version (default: the good end)")
    parser.add_argument("--into", dest="into_spec", action=Once, type=build, metavar="CONSUMER",
                        help="with --check compat: the other way round, the first build whose own saved models no "
                             "longer load or match in CONSUMER (an older build that must read them: a ref, a target "
                             "spec or a version); each probe runs the workload, which saves its models, first")
    parser.add_argument("--improvement", "--invert", action="store_true",
                        help="find the commit that made it better (faster, smaller, passing, new outputs): the "
                             "newer end is the reference and the older end must be worse than it")
    parser.add_argument("--first-parent", action="store_true", help="search the main line only (merged PRs)")
    parser.add_argument("--build", action=Once,
                        help="how commits are built: wheel (default), pythonpath[:FOLDER], or a shell "
                             "command that leaves a wheel in $MODELCI_DIST_DIR")
    parser.add_argument("--jobs", type=jobs, default=1, help="probes per round, run at once: a (K+1)-ary search")
    add_selection(parser)


def main(args, cfg) -> int:
    """Run the bisect, print each probe and the verdict, write the JSON report."""
    from modelci.envs import pipconfig

    pipconfig.prefetch()  # pip answers while the imports below run
    from modelci import envs, workflow
    from modelci.bisect import bisect, releases
    from modelci.errors import UserError
    from modelci.report import console as views
    from modelci.report import json_report

    versions = None
    if args.package or args.between:
        if not (args.package and args.between):
            raise UserError("--package and --between go together: --package numpy --between 1.23.5 1.24.4")
        versions = releases.between(args.package, *args.between, envs.IndexConfig.from_pip(), cfg.python)
    elif args.versions:
        versions = [v.strip() for v in args.versions.split(",") if v.strip()]
    if versions is not None and (args.repo or args.good or args.bad):
        raise UserError("give either --repo/--good/--bad or releases (--versions, --package), not both")
    from modelci.report import files
    # a bisect takes minutes; its report path is checked before it
    files.prepare({"--json": args.json_path}, db=cfg.db, config=cfg.file)
    out = views.console(stderr=True)

    def log(text: str) -> None:
        if not args.quiet:
            out.print(text, markup=False, style="dim", highlight=False)

    try:
        result = bisect(cfg, args.suite or cfg.suites, args.pattern, repo=args.repo, good=args.good, bad=args.bad,
                        versions=versions, check=args.check, first_parent=args.first_parent, build=args.build,
                        jobs=args.jobs, log=log, command=args.command_line, from_spec=args.from_spec,
                        into_spec=args.into_spec, improvement=args.improvement)
    except workflow.Interrupted as exc:
        out.print(f"[yellow]{views.escape(str(exc))}; run the same command again to resume[/]")
        if exc.bisect is not None:  # the probes so far and the candidates left, for the CI job's artifacts
            render(exc.bisect, views.console())
            if args.json_path:
                from modelci import cancel

                with cancel.deferred(), files.writing({"--json": args.json_path}, "the probes are stored"):
                    json_report.write(args.json_path, {"schema": json_report.SCHEMA, "kind": "bisect",
                                                       "interrupted": True, **exc.bisect.to_json()})
        return EXIT_INTERRUPTED
    render(result, views.console())
    if args.json_path:
        with files.writing({"--json": args.json_path}, "the probes are stored: the same command shows the result "
                                                       "again without running them"):
            json_report.write(args.json_path, {"schema": json_report.SCHEMA, "kind": "bisect", "interrupted": False,
                                               **result.to_json()})
    return EXIT_OK if result.status == "found" else EXIT_REGRESSION


def render(result, out) -> None:
    """The probes as a table, then the culprit (or the candidates)."""
    from modelci.report.console import escape
    from rich.table import Table

    what = "improvement" if result.direction == "improvement" else "regression"
    table = Table(title=f"bisect {result.workload}: the {what} on the {result.check} check", title_justify="left")
    for column in ("round", "probe", "verdict", "why", "run"):
        table.add_column(column, overflow="fold")
    for probe in result.probes:
        label = probe.label or probe.item
        style = VERDICT_STYLE.get(probe.verdict, "")
        round_text = "ends" if probe.round == 0 else "confirm" if probe.round < 0 else str(probe.round)
        run = f"{probe.run_id or '-'}" + (" (reused)" if probe.reused else "")
        table.add_row(round_text, escape(label), f"[{style}]{probe.verdict}[/]", escape(probe.why[:160]), run)
    out.print(table)
    out.print(f"{result.range_size} candidates, {result.rounds} rounds, {result.builds} builds "
              f"({result.fresh_builds} new), {result.skipped} skipped probes")
    if result.culprit is not None:
        commit = result.culprit.commit
        colour = "green" if result.direction == "improvement" else "red"
        out.print(f"[bold {colour}]{result.first}:[/] {escape(result.culprit.label)}")
        if commit is not None:
            pr = f", PR #{commit.pr}" if commit.pr else ""
            out.print(f"  sha {commit.sha}\n  author {escape(commit.author)}, {commit.date}{pr}")
        if result.last_good is not None:
            before = "last before it" if result.direction == "improvement" else "last good"
            out.print(f"[green]{before}:[/] {escape(result.last_good.label)}")
        if result.confirmation:
            out.print(f"  confirmed by re-running both: {escape(result.confirmation['why'])}")
    else:
        out.print(f"[yellow]{escape(result.message)}[/]")
    for item in result.inconsistent:
        out.print(f"[yellow]note:[/] {item[:10]} was good although a bad commit precedes it; the check may be flaky")
