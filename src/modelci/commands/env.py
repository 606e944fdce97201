"""`modelci env lock|check|constraints|diff|consistency|export|gc`: environments as inspectable records.

Each subcommand calls one function of `modelci.envs` and prints what it returns.
"""

from __future__ import annotations

import functools
import json

from modelci.commands import EXIT_OK, EXIT_REGRESSION, Once, count, days


def add_parser(sub) -> None:
    """Declare the command and its subcommands."""
    parser = sub.add_parser("env", help="environments: lock, check constraints, diff, consistency, export, gc")
    env = parser.add_subparsers(dest="env_command", required=True, metavar="SUBCOMMAND")

    lock = env.add_parser("lock", help="write the lock file (exact pins) of a run's or an environment's environment")
    lock.add_argument("ref", metavar="RUN|ENV", help="a run id, latest, or an environment id")
    lock.add_argument("-o", "--output", action=Once, required=True, metavar="FILE", help="where to write the lock")

    check = env.add_parser("check", help="fail when a constraints file is not consumed or a lock contradicts one")
    check.add_argument("files", nargs="*", metavar="FILE",
                       help="constraints files that must be consumed (default: every *constraint*.txt in the project)")
    check.add_argument("--lock", action="append", default=[], metavar="FILE",
                       help="check this lock (repeatable; default: the environments of the latest run per runner)")

    derive = env.add_parser("constraints", help="derive loose cross-platform constraints from a pilot lock")
    derive.add_argument("--from", dest="source", action=Once, required=True, metavar="LOCK",
                        help="a lock file, run id or env id")
    derive.add_argument("--level", choices=("major", "minor", "patch"), default="minor",
                        help="how loose: tensorflow==1.6.8 at minor gives >=1.6,<1.7 (default minor)")
    derive.add_argument("--only-direct", action="store_true", help="only the requirements that were asked for")
    derive.add_argument("-o", "--output", action=Once, metavar="FILE", help="write here instead of printing")

    diff = env.add_parser("diff", help="what differs between two environments: packages and fingerprint")
    diff.add_argument("a", metavar="A", help="a run id, an environment id, a lock file or an export bundle")
    diff.add_argument("b", metavar="B", help="the same kinds as A")
    diff.add_argument("--json", dest="json_path", action=Once, metavar="FILE", help="also write the diff as JSON")
    diff.add_argument("--exit-code", action="store_true", help="exit 1 when they differ")

    same = env.add_parser("consistency", help="packages whose versions differ between runners for one target")
    same.add_argument("--target", action=Once, required=True, help="the target spec, e.g. torch==2.13.0")
    same.add_argument("--json", dest="json_path", action=Once, metavar="FILE", help="also write the result as JSON")
    same.add_argument("--exit-code", action="store_true", help="exit 1 when the runners differ")

    export = env.add_parser("export", help="write a bundle that reproduces a run: lock, fingerprint, Dockerfile, "
                                           "reproduce.sh")
    export.add_argument("ref", metavar="RUN", help="a run id, or latest")
    export.add_argument("--out", action=Once, required=True, metavar="DIR", help="a new or empty folder")

    gc = env.add_parser("gc", help="remove cached environments (and the scratch folders of killed runs)")
    how = gc.add_mutually_exclusive_group(required=True)
    how.add_argument("--keep", type=count, metavar="N", help="keep the N most recently used environments")
    how.add_argument("--older-than", type=days, metavar="DAYS", help="remove environments unused for DAYS days")


def main(args, cfg) -> int:
    """Run the subcommand."""
    return globals()["_" + args.env_command](args, cfg)


def _lock(args, cfg) -> int:
    from modelci.report.console import escape

    from modelci.envs import lockfile, refs
    from modelci.report.console import console

    _outputs({"--output": args.output}, cfg, kind="LOCK")
    record = refs.resolve(args.ref, lambda: _store(cfg), cfg.cache_dir)
    lock = record.to_lock()
    if record.run:
        lock.target = refs.lock_target(record.run)
    with _writing({"--output": args.output}):
        lockfile.write(args.output, lock)
    console().print(escape(f"wrote the lock of {record.label}: {len(lock.pins)} packages, environment {record.id} "
                           f"-> {args.output}"), highlight=False)
    return EXIT_OK


def _check(args, cfg) -> int:
    import sysconfig

    from modelci.envs import IndexConfig, lockfile
    from modelci.report.console import escape

    from modelci.envs.check import check
    from modelci.report.console import console

    locks = [lockfile.read(path) for path in args.lock]
    store = _store(cfg) if not locks and _history_exists(cfg) else None  # --lock: the locks, not the history
    report = check(cfg.env, cfg.root, store, locks=locks, files=args.files,
                   pip_constraints=IndexConfig.from_pip().constraints, platform_tag=sysconfig.get_platform())
    out = console()
    if store is None and not locks:
        out.print(escape(f"no history at {cfg.db} yet: no stored run's environment was checked"), highlight=False)
    for line in report.checked:
        out.print(f"[dim]checked {escape(line)}[/]", highlight=False)
    for line in report.notes:
        out.print(f"note: {escape(line)}", highlight=False)
    for line in report.warnings:
        out.print(f"[yellow]warning:[/] {escape(line)}", highlight=False)
    for line in report.problems:
        out.print(f"[red]problem:[/] {escape(line)}", highlight=False)
    if not cfg.env.get("constraints") and not report.problems:
        out.print(escape("no [env] constraints are configured"))
    out.print("[green]env check passed[/]" if report.ok else f"[red]env check failed: {len(report.problems)} "
              "problem(s)[/]")
    return EXIT_OK if report.ok else EXIT_REGRESSION


def _constraints(args, cfg) -> int:
    from modelci.envs import constraints, refs
    from modelci.report.console import console

    from modelci.report import files

    _outputs({"--output": args.output}, cfg, {"--from": args.source}, kind="CONSTRAINTS")
    record = refs.resolve(args.source, lambda: _store(cfg), cfg.cache_dir)
    lock = record.to_lock()
    text = constraints.derive(lock, args.level, args.only_direct, source=record.label)
    if args.output:
        with _writing({"--output": args.output}):
            files.write_text(args.output, text)
        console().print(f"wrote {len(text.splitlines()) - 1} constraints -> {args.output}")
    else:
        print(text, end="")
    return EXIT_OK


def _diff(args, cfg) -> int:
    from modelci.report.console import escape

    from modelci.envs import diff, refs
    from modelci.report.console import console, render_env_diff

    _outputs({"--json": args.json_path}, cfg, {"A": args.a, "B": args.b}, kind="ENV_DIFF")
    store = functools.cache(lambda: _store(cfg))
    a, b = (refs.resolve(ref, store, cfg.cache_dir) for ref in (args.a, args.b))
    result = diff.diff(a.id, a.lock, a.fingerprint, b.id, b.lock, b.fingerprint)
    targets = {r.target_name for r in (a, b) if r.target_name}
    out = console()
    out.print(escape(f"A = {a.label}\nB = {b.label}"), highlight=False)
    if a.target and b.target and a.target != b.target:
        # a git build is no package of its environment: two commits share one, and "the same environment" alone
        # read as if nothing had changed
        out.print(escape(f"target: A {a.target} → B {b.target}"), highlight=False)
    render_env_diff(result, out, targets)
    if args.json_path:
        _write_json(args.json_path, {"schema": "modelci.envdiff/1", "a_label": a.label, "b_label": b.label,
                                     "a_target": a.target, "b_target": b.target, **result.to_json()})
    return EXIT_REGRESSION if args.exit_code and not result.same else EXIT_OK


def _consistency(args, cfg) -> int:
    from modelci.report.console import escape
    from rich.table import Table

    from modelci.envs.consistency import consistency
    from modelci.report.console import console

    _outputs({"--json": args.json_path}, cfg, kind="CONSISTENCY")
    result = consistency(_store(cfg), args.target)
    out = console()
    runners = sorted(result.runners)
    out.print(f"target {escape(args.target)} on " + ", ".join(
        f"{escape(r)} (run {result.runners[r]['run_id']}, env {result.runners[r]['environment_id']})" for r in runners))
    if len(runners) < 2:
        out.print("only one runner ran this target: nothing to compare")
    elif result.consistent:
        out.print("[green]every runner has the same versions of every package[/]")
    else:
        table = Table(show_edge=False, pad_edge=False)
        for column in ("package", *runners, "difference"):
            table.add_column(escape(column))
        for row in result.packages:
            table.add_row(escape(row["name"]), *(escape(row["versions"][r] or "-") for r in runners), row["bump"])
        out.print(table)
    if args.json_path:
        _write_json(args.json_path, {"schema": "modelci.consistency/1", **result.to_json()})
    return EXIT_REGRESSION if args.exit_code and not result.consistent else EXIT_OK


def _export(args, cfg) -> int:
    from modelci.report.console import escape

    from modelci.envs import export, refs
    from modelci.report.console import console

    record = refs.from_run(_store(cfg), args.ref)
    settings = {key: getattr(cfg, key) for key in ("seed", "timeout", "repeats", "threads")}
    bundle = export.export(record, args.out, cfg.root, settings)
    out = console()
    for note in bundle.notes:
        out.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    out.print(escape(f"wrote the bundle of {record.label} -> {bundle.path}; run {bundle.path / 'reproduce.sh'} "
                     "to reproduce it"), highlight=False)
    return EXIT_OK


def _gc(args, cfg) -> int:
    from modelci.envs.gc import gc
    from modelci.report.console import console

    out = console()
    report = gc(cfg.cache_dir, keep=args.keep, older_than_days=args.older_than,
                log=lambda line: out.print(line, markup=False, highlight=False))
    out.print(f"removed {len(report.removed)} environment(s), freed {report.freed_bytes / 1e6:.1f} MB "
              "outside uv's cache; "
              f"kept {len(report.kept)}" + (f", skipped {len(report.busy)} in use" if report.busy else ""))
    from modelci import journal
    from modelci.execute import local

    swept, freed = local.sweep_scratch(cfg.cache_dir)
    if swept:
        out.print(f"removed {swept} scratch folder(s) of killed runs, freed {freed / 1e6:.1f} MB", markup=False,
                  highlight=False)
    kept = journal.waiting(cfg.cache_dir)
    if kept:  # results nothing else holds: named, not removed
        out.print(f"{len(kept)} journal(s) of runs not stored (killed, or refused by the history) wait in "
                  f"{kept[0].parent} (the oldest {kept[0].name}): the next `modelci run` on each one's history "
                  "stores them; remove a folder to give its results up", markup=False, highlight=False)
    return EXIT_OK


def _history_exists(cfg) -> bool:
    """Whether `env check` reads the environments in use from the history. A project's own history (its config
    file's db, or the default) may not exist yet, before its first run: then there are none, and only the
    constraints files are checked. One named on the command line or in MODELCI_DB must exist: a mistyped path
    passed the check, and left an empty history behind for the next command to read as "no runs"."""
    from modelci.store import sqlite_file

    path = sqlite_file(cfg.db)
    source = cfg.sources.get("db", "default")
    return path is None or path.exists() or source == "cli" or source.startswith("env:")


def _store(cfg, create: bool = False):
    """The history; the commands that read runs from it refuse one that does not exist yet (see Store)."""
    from modelci.store import Store

    return Store.from_config(cfg, create=create)


def _outputs(paths: dict[str, str | None], cfg, inputs: dict[str, str | None] | None = None, *,
             kind: str) -> None:
    """Refuse, before any work, an output file that cannot be written (a folder, a missing folder, an empty path),
    that is the history database or a lock file (`inputs`) the command reads, or where a file is that is not what
    this subcommand writes (`kind`, a `files.Output` by name: a lock, a constraints file...), which it would
    replace."""
    from modelci.report import files

    files.prepare(paths, remove=False, db=cfg.db, inputs=inputs, config=cfg.file, kind=getattr(files, kind))


def _writing(paths: dict[str, str | None]):
    """A file the block cannot write (a full disk) is a message naming its option (report.files.writing)."""
    from modelci.report import files

    return files.writing(paths)


def _write_json(path: str, data: dict) -> None:
    from modelci.report import files

    with files.writing({"--json": path}):
        files.write_text(path, json.dumps(data, indent=2, default=str) + "\n")
