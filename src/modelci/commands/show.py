"""`modelci show [RUN_ID | latest]`: one stored run with its results and findings."""

from __future__ import annotations

from modelci.commands import EXIT_OK


def add_parser(sub) -> None:
    """Declare the command."""
    parser = sub.add_parser("show", help="one stored run with its results and findings")
    parser.add_argument("run_id", nargs="?", default="latest", metavar="RUN_ID", help="a run id, or latest (default)")


def main(args, cfg) -> int:
    """Print the run."""
    from modelci.report import console as views
    from modelci.store import Store

    views.render_show(Store.from_config(cfg, create=False).run(args.run_id), views.console())
    return EXIT_OK
