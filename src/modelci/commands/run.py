"""`modelci run`: run a suite against one target and compare each result with its baseline."""

from __future__ import annotations

from modelci.commands import EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, Once, add_selection, jobs


def add_parser(sub) -> None:
    """Declare the command."""
    parser = sub.add_parser("run", help="run a suite against one target and compare with the baseline")
    parser.add_argument("--target", action=Once, hint="`modelci compare A B` runs two targets",
                        help="numpy==2.0.0, a path to a .whl, git+URL@REF, or current")
    parser.add_argument("--repo", action=Once, help="a git repository (path or URL) whose commit --ref is the target")
    parser.add_argument("--ref", action=Once, help="with --repo: the branch, tag or commit to build (default HEAD)")
    parser.add_argument("--build", action=Once,
                        help="how a git target is built: wheel (default), pythonpath[:FOLDER], or a "
                             "shell command that leaves a wheel in $MODELCI_DIST_DIR")
    parser.add_argument("--lock", action=Once, metavar="FILE",
                        help="rebuild the environment exactly from this lock file (`modelci env lock`); --target "
                             "defaults to the lock's target")
    add_selection(parser)
    parser.add_argument("--reuse", action="store_true", help="reuse stored results of the same target, env and code")
    parser.add_argument("--no-alarms", dest="alarms", action="store_false",
                        help="judge and store the run, but open, update, recover and notify no alarm: a pull "
                             "request's build is not the main line's history")
    add_report_files(parser)
    chain = parser.add_argument_group("bisect on alarm", "when the run opens an alarm, find the commit that caused it")
    chain.add_argument("--bisect-on-alarm", action="store_true",
                       help="bisect each alarm this run opens between --good and the run's commit (git targets)")
    chain.add_argument("--good", action=Once, metavar="REF",
                       help="with --bisect-on-alarm: a ref of the same repository where the workloads were good")
    chain.add_argument("--first-parent", action="store_true", help="with --bisect-on-alarm: search the main line only")
    chain.add_argument("--jobs", type=jobs, default=1, help="with --bisect-on-alarm: probes per round")


def add_report_files(parser) -> None:
    """--junit and --markdown, shared with `compare`."""
    parser.add_argument("--junit", action=Once, metavar="FILE",
                        help="write JUnit XML: one test case per workload and check")
    parser.add_argument("--markdown", action=Once, metavar="FILE",
                        help="write a GitHub-flavoured Markdown summary (PR comment, $GITHUB_STEP_SUMMARY)")


def target_spec(args) -> str | None:
    """The target spec from --target, or from --repo/--ref/--build (which make a `git+URL@REF` spec)."""
    from modelci import targets
    from modelci.errors import UserError

    if args.repo:
        if args.target:
            raise UserError("give either --target or --repo/--ref, not both")
        return targets.git_spec(args.repo, args.ref or "HEAD", args.build)
    if not args.target and getattr(args, "lock", None):
        return None  # the lock names its target
    if not args.target and args.ref:
        raise UserError(f"--ref {args.ref} needs --repo: pass --repo PATH (the git checkout the ref is in)")
    if not args.target:
        raise UserError("no target: pass --target SPEC (numpy==2.0.0, a .whl, git+URL@REF, current) "
                        "or --repo PATH --ref REF")
    if args.ref:
        raise UserError("--ref needs --repo")
    if args.build:
        if not args.target.startswith("git+"):
            raise UserError(f"--build applies to git targets only, not {args.target!r}")
        if "#" not in args.target:
            url, ref, _ = targets.parse_git_spec(args.target)
            return targets.git_spec(url, ref, args.build)
    return args.target


def main(args, cfg) -> int:
    """Run, print the summary, write the JSON report; exit 1 on a regression or a failed workload. With
    --bisect-on-alarm, then bisect the alarms the run opened (the exit code stays the run's)."""
    from modelci.envs import pipconfig

    pipconfig.prefetch()  # pip answers while the imports below run
    from modelci import workflow

    spec = target_spec(args)
    chain = bisect_plan(args, spec)
    prepare_report_files(args, cfg)
    # with --bisect-on-alarm the run's warm worker stays for the bisect's probes: a pythonpath build's commits
    # share its environment, so the framework is imported once for the run and the whole bisect
    pool = workflow.WorkerPool(cfg) if chain is not None else None
    try:
        return _run_and_bisect(args, cfg, spec, chain, pool)
    finally:
        if pool is not None:
            pool.close()


def _run_and_bisect(args, cfg, spec: str | None, chain: dict | None, pool) -> int:
    from modelci import cancel, workflow
    from modelci.errors import HarnessError
    from modelci.report import console as views
    from modelci.report import files, json_report

    try:
        outcome = workflow.run(cfg, spec, args.suite or cfg.suites, args.pattern, reuse=args.reuse,
                               progress=views.Progress(quiet=args.quiet, every=cfg.progress_every),
                               command=args.command_line, lock=args.lock, alarms=args.alarms, pool=pool)
    except workflow.Interrupted as exc:
        views.console(stderr=True).print(f"[yellow]{exc}[/]")
        if exc.outcome is not None:  # the report files say what finished, marked interrupted
            with cancel.deferred(), files.writing(report_paths(args), stored(exc.run_id)):
                if args.json_path:
                    json_report.write(args.json_path, json_report.run_report(exc.outcome, True))
                _write_report_files(args, cfg, exc.outcome)
        return EXIT_INTERRUPTED
    except workflow.Unjudged as exc:  # the history failed the run: its results are shown and written, unjudged
        views.render_run(exc.outcome, views.console())
        done = stored(exc.outcome.run_id) or "nothing of the run is stored"
        with cancel.deferred(), files.writing(report_paths(args), done):
            if args.json_path:
                json_report.write(args.json_path, json_report.run_report(exc.outcome, workflow.failed(exc.outcome)))
            _write_report_files(args, cfg, exc.outcome)
        if isinstance(exc, workflow.Unfinished):
            raise HarnessError(str(exc)) from None
        if exc.outcome.kept:  # its journal keeps them: the next run on this history stores them
            raise HarnessError(f"{exc}. The results are shown above and in the report files asked for, and the next "
                               "run on this history stores them from the run's journal") from None
        raise HarnessError(f"{exc}. The results shown above, and the report files asked for, are the run's only "
                           "record") from None
    views.render_run(outcome, views.console())
    bad = workflow.failed(outcome)
    report = json_report.run_report(outcome, bad)
    with cancel.deferred(), files.writing(report_paths(args), stored(outcome.run_id)):
        if args.json_path:
            json_report.write(args.json_path, report)
        _write_report_files(args, cfg, outcome)
    if chain is not None:
        try:
            bisects = _bisect_alarms(args, cfg, outcome, dict(chain, pool=pool))
        except workflow.Interrupted as exc:
            views.console(stderr=True).print(f"[yellow]{exc}; the run is stored, and `modelci bisect` with the same "
                                             "ends resumes from the probes already run[/]")
            return EXIT_INTERRUPTED
        if args.json_path and bisects:
            with files.writing(report_paths(args), "the run and the bisects' probes are stored"):
                json_report.write(args.json_path, report | {"bisects": [b.to_json() for b in bisects]})
    return say_config_errors(outcome.config_errors, EXIT_REGRESSION if bad else EXIT_OK)


def say_config_errors(errors: list[str], code: int) -> int:
    """Say the config errors found once the run was stored (a [[policy]] metric no workload records), one
    `error:` line each, after the run's report, alarms and report files; the exit code: the run's own when it
    is not 0 (a regression outranks the entry that judged nothing), else 2, so that the entry fails CI too."""
    from modelci.report.console import console, escape

    for error in errors:
        console(stderr=True).print(f"[red]error:[/] {escape(error)}")
    return code if code != EXIT_OK or not errors else EXIT_USAGE


def bisect_plan(args, spec: str | None) -> dict | None:
    """With --bisect-on-alarm: the repository, good ref and build the bisects will use; checked before the run, so
    a mistake costs nothing. None without it."""
    from modelci import targets
    from modelci.errors import UserError

    if not args.bisect_on_alarm:
        for flag, value in (("--good", args.good), ("--first-parent", args.first_parent),
                            ("--jobs", getattr(args, "jobs", 1) != 1)):
            if value:
                raise UserError(f"{flag} goes with --bisect-on-alarm")
        return None
    if not args.alarms:
        raise UserError("--bisect-on-alarm bisects the alarms the run opens, and --no-alarms opens none; drop one")
    if not args.good:
        raise UserError("--bisect-on-alarm needs --good REF: a commit of the same repository where the workloads "
                        "were good")
    if not spec or not spec.startswith("git+"):
        raise UserError("--bisect-on-alarm needs a git target: --repo PATH --ref REF, or --target git+URL@REF "
                        "(for releases, use `modelci bisect --versions`)")
    if args.jobs < 1:
        raise UserError(f"--jobs {args.jobs}: give 1 or more probes per round")
    url, _, options = targets.parse_git_spec(spec)
    return {"repo": url, "good": args.good, "build": options.get("build") or None,
            "first_parent": args.first_parent, "jobs": args.jobs}


def _bisect_alarms(args, cfg, outcome, chain: dict) -> list:
    """Bisect what the run opened; print one line per bisect."""
    from modelci.report.console import escape

    from modelci.bisect.on_alarm import bisect_alarms
    from modelci.report import console as views
    from modelci.store import Store

    err = views.console(stderr=True)

    def log(text: str) -> None:
        if not args.quiet:
            err.print(text, markup=False, style="dim", highlight=False)

    bisects = bisect_alarms(cfg, Store.from_config(cfg), outcome, args.suite or cfg.suites, log=log,
                            command=args.command_line, **chain)
    out = views.console()
    for item in bisects:
        ids = ", ".join(f"#{i}" for i in item.alarm_ids)
        style = "yellow" if item.error or item.result.status != "found" else "bold red"
        out.print(f"[magenta]alarm {ids} bisected[/] {escape(item.workload)}: [{style}]{escape(item.summary)}[/]")
    return bisects


def prepare_report_files(args, cfg) -> None:
    """Check before the run that --json, --junit and --markdown can be written, none is the history database nor
    another's file, and remove older files there (report.files.prepare), shared with `compare`."""
    from modelci.report import files
    files.prepare(report_paths(args), db=cfg.db, inputs={"--lock": getattr(args, "lock", None)},
                  config=cfg.file)


def report_paths(args) -> dict[str, str | None]:
    """Option name -> path of the report files asked for: what `files.prepare` checks and `files.writing` names."""
    return {"--json": args.json_path, "--junit": args.junit, "--markdown": args.markdown}


def stored(run_id: int | None) -> str:
    """What a report file that cannot be written leaves done: the run is in the history all the same."""
    return f"the run is stored as run {run_id}" if run_id else ""


def _write_report_files(args, cfg, outcome) -> None:
    """The alarm events of the run, then the --junit and --markdown files (the latter linking the run's page on the
    dashboard with `[alarms] dashboard_url`, as the notifiers do)."""
    from modelci.alarms import views as alarm_views
    from modelci.report import console, junit, markdown
    from modelci.report.markup import dashboard_page

    alarm_views.render_alarm_report(outcome.alarms, console.console())
    if args.junit:
        junit.write(args.junit, junit.run_xml(outcome))
    if args.markdown:
        url = dashboard_page(cfg.alarms.get("dashboard_url", ""), outcome.run_id)
        markdown.write(args.markdown, markdown.run_summary(outcome, url=url))
