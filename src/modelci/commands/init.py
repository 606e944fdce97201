"""`modelci init`: write a commented `modelci.toml` and a suite folder with one real workload."""

from __future__ import annotations

import shlex

from modelci.commands import EXIT_OK, Once


def add_parser(sub) -> None:
    """Declare the command."""
    from modelci.starter import SUITE, frameworks

    parser = sub.add_parser("init", help="start a project: a commented modelci.toml and a suite with one workload")
    parser.add_argument("--framework", action=Once, choices=frameworks(), default="numpy",
                        help="the framework of the starter workload (default numpy)")
    parser.add_argument("--dir", action=Once, default=".", metavar="PATH",
                        help=f"folder to write modelci.toml and {SUITE}/ into (default: here; made when missing)")


def main(args, cfg) -> int:
    """Write the files, say what was written and what to run next."""
    from modelci.report import console as views
    from modelci.starter import init

    if not args.dir.strip():  # "" was the current folder, and the next step said `cd '' && ...`
        from modelci.errors import UserError

        raise UserError("--dir '': give the folder to set up (it is made when missing), or leave --dir out for "
                        "the current folder")
    written = init(args.dir, args.framework)
    out = views.console()
    for path in (written.config, written.workload):
        out.print(f"wrote {path}", markup=False, highlight=False)
    where = "" if args.dir == "." else f"cd {shlex.quote(args.dir)} && "  # a folder with a space is one argument
    out.print(f"next: {where}{written.command}   (any release, a .whl, git+URL@REF or --repo PATH --ref REF)",
              markup=False, highlight=False)
    return EXIT_OK
