"""`modelci config`: every option, its value, and where the value came from."""

from __future__ import annotations

from modelci.commands import EXIT_OK


def add_parser(sub) -> None:
    """Declare the command."""
    sub.add_parser("config", help="show every option, its value and where the value came from")


def main(args, cfg) -> int:
    """Print the table."""
    from modelci.report import console as views

    views.render_config(cfg, views.console())
    return EXIT_OK
