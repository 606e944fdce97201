"""plotly is the `report` extra: without it, `modelci report` and `modelci serve` stop at once with exit 2 and a
message naming the extra, and write nothing (no site folder, no temporary folder left behind)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

from modelci import cli


@pytest.fixture
def no_plotly(monkeypatch, tmp_path):
    """plotly as if not installed (find_spec answers None for a module set to None), in a folder with no history."""
    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.chdir(tmp_path)
    for key in [k for k in __import__("os").environ if k.startswith("MODELCI_")]:
        monkeypatch.delenv(key)
    return tmp_path


def test_report_without_plotly_names_the_extra_and_writes_nothing(no_plotly, capsys):
    assert cli.main(["report", "--out", "site"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'modelci[report]'" in " ".join(err.split()) and "Traceback" not in err
    assert not (no_plotly / "site").exists()


def test_serve_without_plotly_stops_before_making_a_folder(no_plotly, capsys, monkeypatch):
    scratch = no_plotly / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    assert cli.main(["serve", "--port", "0"]) == 2
    assert "pip install 'modelci[report]'" in " ".join(capsys.readouterr().err.split())
    assert list(scratch.iterdir()) == []


def test_with_plotly_the_site_carries_its_javascript(tmp_path, monkeypatch, capsys):
    """The same command with plotly installed (the test extras have it) writes the site and plotly.js."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["db", "upgrade"]) == 0  # an empty history: `report` reads one, it does not make one
    assert cli.main(["report", "--out", "site"]) == 0
    copied = Path("site/assets/plotly.min.js")
    assert copied.stat().st_size > 1_000_000 and b"plotly" in copied.read_bytes()[:2000].lower()
