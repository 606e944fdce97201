"""`modelci history WORKLOAD --metric NAME`: the recent runs of a series by default, every run with --all.

Through the real CLI entry point over a real SQLite history in a temp dir.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from modelci import cli, targets
from modelci.envs import Environment
from modelci.records import Metric, Result
from modelci.store import Store

T0 = datetime(2025, 3, 1, tzinfo=timezone.utc)
ENVIRONMENT = Environment(id="env-1", path=None, python=Path("/usr/bin/python3"), spec=None, lock="fw==1.0\n",
                          fingerprint={"python": "3.11"}, isolated=True)


@pytest.fixture
def history(tmp_path, monkeypatch):
    """A history of five runs of s/A, on 1.0 ... 1.4, and the CLI pointed at it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MODELCI_DB", str(tmp_path / "history.db"))
    monkeypatch.setenv("MODELCI_ARTIFACTS", str(tmp_path / "artifacts"))
    store = Store(str(tmp_path / "history.db"), str(tmp_path / "artifacts"))
    for i in range(5):
        result = Result(workload="s/A", status="ok", metrics={"time.infer": Metric("time.infer", "samples",
                                                                                    [0.001 * (i + 1)], "s")})
        store.ingest(target=targets.resolve(f"fw==1.{i}"), environment=ENVIRONMENT, runner="cpu",
                     results=[result], started_at=T0 + timedelta(hours=i))
    return store


def shown_versions(out: str) -> list[str]:
    return [f"1.{i}" for i in range(5) if f"fw==1.{i} " in out]


def test_history_shows_the_last_runs_and_says_how_to_see_all(history, capsys):
    assert cli.main(["history", "s/A", "--metric", "time.infer", "--last", "2"]) == 0
    out = capsys.readouterr().out
    assert shown_versions(out) == ["1.3", "1.4"] and "5.00 ms" in out
    assert "the last 2 of 5 runs; --all shows every run" in out

    assert cli.main(["history", "s/A", "--metric", "time.infer", "--all"]) == 0
    out = capsys.readouterr().out
    assert shown_versions(out) == ["1.0", "1.1", "1.2", "1.3", "1.4"] and "--all" not in out
    # the default (50) covers this short history whole
    assert cli.main(["history", "s/A", "--metric", "time.infer"]) == 0
    assert shown_versions(capsys.readouterr().out) == ["1.0", "1.1", "1.2", "1.3", "1.4"]


def test_history_refuses_a_last_below_one(history, capsys):
    assert cli.main(["history", "s/A", "--metric", "time.infer", "--last", "0"]) == 2
    assert "--last 0: give a number of runs of at least 1, or --all" in capsys.readouterr().err
    assert cli.main(["history", "--last", "-1"]) == 2  # without a workload it was taken as it came
    assert "--last -1: give a number of runs of at least 1" in capsys.readouterr().err


def test_an_empty_series_says_what_there_is(history, capsys):
    assert cli.main(["history", "s/A", "--metric", "nope"]) == 2
    assert "workload 's/A' has no metric 'nope'; its metrics: time.infer" in capsys.readouterr().err
    assert cli.main(["history", "s/A", "--metric", "time.infer", "--runner", "nobody"]) == 2
    assert "--runner 'nobody': no run of that runner in the history; runners there: cpu" in capsys.readouterr().err
    assert cli.main(["history", "s/B", "--metric", "time.infer"]) == 2
    assert "no workload 's/B' in the history; workloads there: s/A" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["history", "--runner", "gpu"], "--runner 'gpu': no run of that runner in the history; runners there: cpu"),
    (["history", "--changes", "--runner", "gpu"], "--runner 'gpu': no run of that runner"),
    (["history", "--metric", "time.infer"], "--metric 'time.infer' shows one metric of one workload: give the "
                                            "workload too"),
    (["history", "s/B", "--changes"], "no workload 's/B' in the history; workloads there: s/A"),
    (["history", "--changes", "--metric", "time.inferr"], "--metric 'time.inferr': the history has no such "
                                                          "metric; its metrics: time.infer"),
])
def test_a_selection_the_history_does_not_hold_is_an_error_not_an_empty_answer(history, capsys, argv, says):
    """Each printed an empty table or "no change points" with exit 0, which read as all is well."""
    assert cli.main(argv) == 2
    assert says in capsys.readouterr().err
    assert cli.main(["history", "--changes", "--runner", "cpu", "--metric", "time.infer"]) == 0
    assert cli.main(["history", "--runner", "cpu"]) == 0 and "s/A" in capsys.readouterr().out
