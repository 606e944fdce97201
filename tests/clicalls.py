"""What the CLI tests share: a call expected to be a usage error, and a file's digest to show it unchanged."""

from __future__ import annotations

import hashlib
from pathlib import Path

from modelci import cli


def usage_error(argv: list[str], capsys) -> str:
    """Run the CLI, expect exit 2 and no traceback, return what it said (stdout and stderr)."""
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    said = capsys.readouterr()
    assert code == 2, said
    text = said.out + said.err
    assert "Traceback" not in text
    return text


def digest(path: Path) -> str:
    """The sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
