"""One module per CLI command: `add_parser(subparsers)` declares it, `main(args, cfg) -> int` runs it.

Each `main` calls one library function and turns its value into an exit code (docs/design.md: "A thin CLI
over a library"). A new command adds its module here, and nowhere else.
"""

import argparse

#: the command modules, in the order `modelci --help` lists them
COMMANDS = [
    "modelci.commands.init",
    "modelci.commands.run",
    "modelci.commands.compare",
    "modelci.commands.calibrate",
    "modelci.commands.history",
    "modelci.commands.show",
    "modelci.commands.config",
    "modelci.commands.env",
    "modelci.commands.alarms",
    "modelci.commands.report",
    "modelci.commands.serve",
    "modelci.commands.compat",
    "modelci.commands.bisect",
    "modelci.commands.db",
]

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_HARNESS, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


# argparse types: argparse turns their ArgumentTypeError into "argument --port: ..." and exit 2


def jobs(text: str) -> int:
    """Probes per round of a bisect, 1 or more: checked when given, also where no bisect follows."""
    return _integer(text, 1, "a number of probes per round, 1 or more")


def count(text: str) -> int:
    """A whole number of 0 or more (`--recent`, `--keep`)."""
    return _integer(text, 0, "a whole number of 0 or more")


def record_id(text: str) -> int:
    """An alarm id: a whole number from 1 (the database's ids are 64-bit)."""
    return _integer(text, 1, "an alarm id, a whole number from 1 (`modelci alarms list --all` lists them)",
                    2**63 - 1)


def port(text: str) -> int:
    """A TCP port, 0 meaning a free one."""
    return _integer(text, 0, "a port from 0 to 65535 (0 picks a free one)", 65535)


def days(text: str) -> float:
    """A finite number of days of 0 or more."""
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days of 0 or more")
    return value


def build(text: str) -> str:
    """A build to load from or into (`--from`, `--into`): a version, a specifier set, a ref or a target spec.
    Blank is refused: `--from "$PRODUCER"` with the variable unset meant the option's default, silently."""
    if not text.replace(",", "").strip():  # "," is a specifier set of no specifiers: every version, as blank
        raise argparse.ArgumentTypeError(f"{text!r} is empty; give a version, a specifier set such as '>=1.2', a "
                                         "ref or a target, or leave the option out for its default")
    return text


#: the namespace attribute where `Once` keeps the destinations given so far in this parse
_ONCE_GIVEN = "_once_given"


class Once(argparse.Action):
    """An option that may be given once: argparse keeps the last of two silently (`-k A -k B` ran B only,
    `--json a.json --json b.json` wrote b.json alone, `--target X --target Y` ran Y). For the options that name
    what a command works on or writes (a target, a ref, a file, a folder, the history); a number that tunes the
    work (`--timeout`, `--jobs`) keeps argparse's last-one-wins, which scripts use to override a default they
    pass. `hint` ends the message; `blank`, where set, refuses an empty value with that text.

    What was given is kept on the namespace, not compared with the default: argparse sets the default there
    before parsing, and `init --dir . --dir p` gives the default first."""

    def __init__(self, option_strings: list[str], dest: str, hint: str = "", blank: str = "", **kwargs) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.hint, self.blank = hint, blank

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001 (argparse's signature)
        given = vars(namespace).setdefault(_ONCE_GIVEN, {})  # dest -> the option string it was first given as
        if self.dest in given:
            first = given[self.dest]
            what = f"{option_string} given twice" if first == option_string else \
                f"{first} and {option_string} are one option, given twice"
            parser.error(f"{what}; give it once" + (f" ({self.hint})" if self.hint else ""))
        given[self.dest] = option_string
        if self.blank and isinstance(values, str) and not values.strip():
            parser.error(f"{option_string} {values!r} is empty; {self.blank}")
        setattr(namespace, self.dest, values)


def _integer(text: str, low: int, what: str, high: int | None = None) -> int:
    # ASCII digits only: int() also reads other scripts' digits ("١" is 1), which no id or port is written in
    if not text.strip().lstrip("+-").isascii():
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"{text} is out of range: give {what}")
    return value


def check_runner(store, runner: str | None) -> None:
    """A UserError for a --runner the history never saw, naming the runners it has: a misspelt runner read as
    an empty table or "no alarms" with exit 0, which looks the same as all being well."""
    from modelci.errors import UserError

    if runner and not store.runs(runner, limit=1):
        raise UserError(f"--runner {runner!r}: no run of that runner in the history; runners there: "
                        f"{', '.join(store.runners()) or 'none'}")


def add_selection(parser) -> None:
    """Options shared by the commands that run workloads: suites, -k, runner, timeout, repeats, --json."""
    parser.add_argument("--suite", action="append", default=[], help="folder of workload files or zoo:NAME; repeatable")
    parser.add_argument("-k", dest="pattern", action=Once,
                        hint="a glob such as '*MLP*' selects several workloads",
                        # '' selected every workload, as no -k does
                        blank="give text of a workload id, or leave it out for every workload",
                        help="only workloads whose id contains this text (or matches this glob); "
                             "a whole id selects that workload alone")
    parser.add_argument("--runner", action=Once, help="runner label (default: the host name; env MODELCI_RUNNER)")
    parser.add_argument("--timeout", type=float, help="seconds per workload before it is killed (env MODELCI_TIMEOUT)")
    parser.add_argument("--repeats", type=int, help="timed inference repeats per workload")
    parser.add_argument("--json", dest="json_path", action=Once, metavar="FILE", help="write a versioned JSON report")
