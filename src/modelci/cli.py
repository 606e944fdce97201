"""The command line: parse, load the config, call one command, turn what it returns into an exit code.

Exit codes (docs/design.md, "Conventions"): 0 no regression; 1 regression or failure found; 2 usage or
configuration error; 3 the harness itself could not run; 128 + the signal's number when cancelled: 130 by
SIGINT (Ctrl-C), 143 by SIGTERM, 129 by SIGHUP (what finished is stored, marked interrupted; `cancel`).
A UserError is shown as its message, without a traceback; any other exception is a bug and shows one.
"""

from __future__ import annotations

import argparse
import atexit
import errno
import importlib
import os
import shlex
import sys
import threading

from modelci import __version__
from modelci.commands import COMMANDS, EXIT_INTERRUPTED, Once


#: the commands that judge results against the [[allow]] entries, which an expired entry stops
JUDGING = {"run", "compare", "calibrate", "bisect", "compat"}


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, object]]:
    """The argument parser of every command, and command name -> its module."""
    parser = argparse.ArgumentParser(prog="modelci", description="Model-level CI for machine-learning frameworks.")
    parser.add_argument("--version", action="version", version=f"modelci {__version__}")
    parser.add_argument("--config", action=Once,
                        help="config file (default: modelci.toml or [tool.modelci] in pyproject.toml, here or in "
                             "the nearest folder above, up to the git repository's root)")
    parser.add_argument("--db", action=Once, help="history database: SQLite path or SQLAlchemy URL (env MODELCI_DB)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = {}
    for name in COMMANDS:
        module = importlib.import_module(name)
        before = set(sub.choices)
        module.add_parser(sub)
        for command in set(sub.choices) - before:
            modules[command] = module
    return parser, modules


def _check_no_lost_values(argv: list[str]) -> None:
    """argparse drops the value of `--runner=--` (it takes `--` for the end of the options) and leaves [] in place
    of the string, which later read as "option --runner must be a string, got []"; say what happened instead."""
    from modelci.errors import UserError

    for arg in argv:
        if arg.startswith("-") and arg.endswith("=--"):
            raise UserError(f"{arg}: '--' cannot be a value (it ends the options); give the value itself")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `modelci` command."""
    argv = sys.argv[1:] if argv is None else argv
    parser, modules = build_parser()
    args = parser.parse_args(argv)
    from modelci.records import redacted

    # stored with each run and shown wherever it is: a password in a --db URL must be in neither
    args.command_line = "modelci " + " ".join(shlex.quote(redacted(a)) for a in argv)
    from modelci.report.console import escape

    from modelci import cancel
    from modelci import config as config_module
    from modelci.errors import HarnessError, UserError
    from modelci.report.console import console

    cancel.install()
    cfg = None
    try:
        _check_utf8(argv)
        _check_no_lost_values(argv)
        cli_values = {"db": args.db}
        for name in ("runner", "timeout", "repeats"):
            cli_values[name] = getattr(args, name, None)
        if args.config is not None and not args.config.strip():
            # "" fell back to ./modelci.toml, another config than the one the user meant to name
            raise UserError("--config '': give the config file's path, or leave --config out for ./modelci.toml")
        # `init` writes a new project's config: a broken one in the current folder is none of its business
        # an expired [[allow]] entry stops the commands that judge, so that the difference it silenced comes back
        # to someone; the others (the alarms to triage it, the history, the dashboard) go on and say it
        lenient = args.command not in JUDGING
        cfg = None if args.command == "init" else config_module.load(cli=cli_values, config_file=args.config,
                                                                     lenient=lenient)
        for message in cfg.expired_allow if cfg is not None else ():
            console(stderr=True).print(f"[yellow]note:[/] {escape(message)}")
        if cfg is not None and cfg.ignored is not None:
            note = (f"{cfg.file} configures modelci, so the [tool.modelci] table in {cfg.ignored} is ignored; keep "
                    "one of the two")
            console(stderr=True).print(f"[yellow]note:[/] {escape(note)}")
        for key in cfg.secrets_in_file if cfg is not None else ():
            # refusing it would stop every runner of a fleet that works today; saying it is enough to have it moved
            variable = config_module.OPTION_BY_NAME[key].env
            instead = f"give the value in {variable} instead" + (
                ", or the password alone in PGPASSWORD or ~/.pgpass" if key == "db" else "")
            note = (f"{cfg.file} holds a password in {key!r}, where whoever reads the file (and the repository it is "
                    f"committed to) reads it; {instead} (it is never shown nor stored)")
            console(stderr=True).print(f"[yellow]note:[/] {escape(note)}")
        code = modules[args.command].main(args, cfg)
        return cancel.exit_code() if code == EXIT_INTERRUPTED else code
    except UserError as exc:
        console(stderr=True).print(f"[red]error:[/] {escape(str(exc))}")
        return exc.exit_code
    except KeyboardInterrupt:
        console(stderr=True).print(f"[yellow]interrupted ({cancel.signal_name()})[/]")
        return cancel.exit_code()
    except OSError as exc:
        # a path given anywhere (a suite, --out, --db, a wheel, the cache) with a part of more than 255 bytes, or a
        # disk that fills: the file system refuses it wherever it is first used, and each place would need its own
        # check. Whatever was stored before stays: every store writes in a transaction, every report whole
        shown = str(exc.filename2 or exc.filename or "")  # a copy's destination is its second file name
        if exc.errno == errno.ENAMETOOLONG:
            shown = shown if len(shown) <= 80 else f"{shown[:60]}...{shown[-16:]} ({len(shown)} characters)"
            console(stderr=True).print(f"[red]error:[/] {escape(shown)}: a file name too long for the file system "
                                       "(each part of a path holds at most 255 bytes); give a shorter path")
            return UserError.exit_code
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            where = f" writing {shown}" if shown else ""
            console(stderr=True).print(f"[red]error:[/] no space left{escape(where)} ({escape(exc.strerror or '')}); "
                                       "free space there, or give a path on another disk. What was stored before "
                                       "is kept")
            return HarnessError.exit_code
        raise
    except MemoryError as exc:
        # the machine's memory, or a limit on this process (`ulimit -v`, a container's): what was stored is
        # kept (every store writes in a transaction), and a run's finished results wait in its journal
        _out_of_memory(exc)
        return HarnessError.exit_code
    except Exception as exc:  # noqa: BLE001 - the database's errors only; any other is a bug, with its traceback
        said = _database_failure(exc, cfg)
        if said is None:
            raise
        console(stderr=True).print(f"[red]error:[/] {escape(said)}")
        return HarnessError.exit_code


def _database_failure(exc: Exception, cfg: object) -> str | None:
    """What to say of an error of the history database that reached the command line (a server that went away
    mid-query, a role refused a write), or None for any other exception. Every command that reads or writes the
    history meets these, and each showed two tracebacks and exited 1, which CI reads as a regression: it is the
    harness that could not do its job (exit 3), as when `run` cannot store a run."""
    errors = sys.modules.get("sqlalchemy.exc")  # not imported: no database was used, so this is not its error
    # a DBAPIError is what the driver or the server said; SQLAlchemy's own errors (a misused session) are bugs
    if errors is None or not isinstance(exc, errors.DBAPIError):
        return None
    from modelci.store import failed, shown_db

    db = getattr(cfg, "db", None)
    return failed(exc, shown_db(db) if db else "")


def _out_of_memory(exc: MemoryError) -> None:
    """Say that modelci itself ran out of memory, in one line, and what limits it."""
    import resource

    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    limited = f"this process may use {limit / 2**20:.0f} MiB (ulimit -v)" if limit != resource.RLIM_INFINITY \
        else "no ulimit -v is set, so the machine's (or the container's) memory ran out"
    what = f": {exc}" if str(exc) else ""
    line = (f"error: modelci ran out of memory (MemoryError{what}); {limited}. Give it more, or run fewer "
            "workloads at once. What was stored before is kept\n")
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    except (OSError, ValueError, MemoryError):  # nothing left to say it with
        pass


def _check_utf8(argv: list[str]) -> None:
    """A UserError for an argument that is not UTF-8 text (Python keeps its bytes as lone surrogates): names,
    paths and refs are stored and compared as UTF-8, and such a value failed deep in the database driver or the
    JSON writer, with a traceback."""
    from modelci.errors import UserError

    for arg in argv:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            shown = os.fsencode(arg)
            raise UserError(f"the argument {shown!r} is not UTF-8 text; give names and paths in UTF-8") from None


def entry() -> None:
    """The `modelci` command: `main`, then exit without tearing the interpreter down.

    Freeing the 600 modules and 80,000 objects a command has loaded, one by one, took 0.13-0.15 s after every
    command (a quarter of what a zoo:torch run spent outside its workloads and the worker's start).
    What an exit must do is done first: the atexit handlers run (the store's finalizers close its database
    connections, so SQLite moves its WAL into the database file; logging flushes its handlers), then stdout
    and stderr are flushed. A command that leaves a thread running (`serve`) exits the usual way, which
    waits for it; so does an exception, which shows its traceback.
    """
    code = main()
    if threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`modelci history | head`): nothing left to tell it
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()
