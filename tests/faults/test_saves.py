"""Saves: a save that leaves nothing at the path it was given is a failed save that says what it found instead."""

from __future__ import annotations

import pytest
from probes import shared_run, workload

#: workload -> (its save body, expected save status, texts of the reason)
SAVES = {
    "Beside": ('pathlib.Path(str(path) + ".npz").write_bytes(b"x")', "failed", ["found raw.npz instead"]),
    "Nothing": ("pass", "failed", ["left nothing at the path"]),
    "EmptyFolder": ("pathlib.Path(path).mkdir()", "failed", ["left an empty folder"]),
    "File": ('pathlib.Path(path).write_bytes(b"model")', "ok", []),
    "Folder": ('pathlib.Path(path).mkdir(); (pathlib.Path(path) / "weights").write_bytes(b"w")', "ok", []),
    "Raises": ('raise OSError("disk says no")', "failed", ["OSError: disk says no"]),
}


def _source() -> str:
    source = ""
    for name, (body, _, _) in SAVES.items():
        source += workload(name, attrs='formats = ("raw",)')
        source += f"\n    def save(self, ctx, fmt, path):\n        import pathlib\n        {body}\n"
    return source


@pytest.fixture(scope="module")
def saves(tmp_path_factory, probe_cache):
    return shared_run(tmp_path_factory, probe_cache, {"models.py": _source()})


@pytest.mark.parametrize("name", list(SAVES))
def test_each_saved_format_has_a_status_that_says_what_happened(saves, name):
    _, status, texts = SAVES[name]
    result = saves.check(f"suite/{name}", "ok")
    [entry] = result["saved"]
    assert entry["format"] == "raw" and entry["status"] == status, entry
    for text in texts:
        assert text in entry["reason"], entry
    stored = saves.project.stored("SELECT info FROM results WHERE id = ?", result["result_id"])[0][0]
    assert f'"status": "{status}"' in stored or f'"status":"{status}"' in stored


def test_the_run_summary_shows_each_saved_format(saves):
    assert "saved" in saves.done.stdout and "raw failed" in saves.done.stdout and "raw ok" in saves.done.stdout
    assert "suite/Beside: saving raw failed" in saves.done.stdout
    summary = (saves.project.root / "summary.md").read_text()
    assert "`suite/Beside` raw: failed" in summary and "`suite/File` raw: ok" in summary
