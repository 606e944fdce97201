"""One module per CLI command: `add_parser(subparsers)` declares it, `main(args, cfg) -> int` runs it.

Each `main` calls one library function and turns its value into an exit code (docs/design.md: "A thin CLI
over a library"). A new command adds its module here, and nowhere else.
"""

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


def add_selection(parser) -> None:
    """Options shared by the commands that run workloads: suites, -k, runner, timeout, repeats, --json."""
    parser.add_argument("--suite", action="append", default=[], help="folder of workload files or zoo:NAME; repeatable")
    parser.add_argument("-k", dest="pattern", help="only workloads whose id contains this text (or matches this glob); "
                                                   "a whole id selects that workload alone")
    parser.add_argument("--runner", help="runner label (default: the host name; env MODELCI_RUNNER)")
    parser.add_argument("--timeout", type=float, help="seconds per workload before it is killed (env MODELCI_TIMEOUT)")
    parser.add_argument("--repeats", type=int, help="timed inference repeats per workload")
    parser.add_argument("--json", dest="json_path", metavar="FILE", help="write a versioned JSON report")
