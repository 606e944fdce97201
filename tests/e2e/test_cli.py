"""The real `modelci` command in a subprocess: exit codes, messages without tracebacks, Ctrl-C, JSON report."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time

import pytest


def test_compare_exits_1_on_a_regression_and_writes_the_json_report(fake_project):
    report = fake_project.root / "report.json"
    proc = fake_project.cli("compare", str(fake_project.v10), str(fake_project.v11), "--suite", "fakesuite",
                            "-k", "Precision", "--json", str(report))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "regression" in proc.stdout and "output:scaled" in proc.stdout
    data = json.loads(report.read_text())
    assert data["schema"] == "modelci.report/1" and data["regressed"] is True

    same = fake_project.cli("compare", str(fake_project.v10), str(fake_project.v10), "--suite", "fakesuite",
                            "-k", "Stable")
    assert same.returncode == 0, same.stdout + same.stderr


def test_run_then_show_and_history(fake_project):
    report = fake_project.root / "run.json"
    proc = fake_project.cli("run", "--target", str(fake_project.v10), "--suite", "fakesuite", "-k", "Stable",
                            "--runner", "ci-cpu", "--json", str(report))
    assert proc.returncode == 0, proc.stderr
    assert "no baseline yet" in proc.stdout
    # what the harness spent per step, and each workload's duration and isolation (benchmarks/overhead.py)
    data = json.loads(report.read_text())
    timings = data["run"]["timings"]
    assert {"environment", "store", "discovery", "execute", "ingest", "checks"} <= set(timings), timings
    assert 0 < timings["execute"] < sum(timings.values())
    [entry] = data["results"]
    assert entry["workload"] == "fakesuite/Stable" and entry["isolation"] == "fork" and entry["duration"] > 0
    # the command exits without tearing the interpreter down, but closes the database first: SQLite has moved
    # its WAL into the file, so a copy of history.db alone (a CI artifact) holds the run
    db = fake_project.root / ".modelci" / "history.db"
    assert not db.with_name("history.db-wal").exists()
    copy = fake_project.root / "copy.db"
    copy.write_bytes(db.read_bytes())
    with sqlite3.connect(copy) as connection:
        assert connection.execute("select count(*) from results where workload = 'fakesuite/Stable'").fetchone() == (1,)
    show = fake_project.cli("show", "latest")
    assert show.returncode == 0 and "fakesuite/Stable" in show.stdout and "ci-cpu" in show.stdout
    history = fake_project.cli("history", "fakesuite/Stable", "--metric", "loss")
    assert history.returncode == 0 and "fakefw==1.0" in history.stdout
    listing = fake_project.cli("history")
    assert listing.returncode == 0 and "fakesuite/Stable" in listing.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "--target", "fakefw==0.0.42", "--suite", "fakesuite"], "fakefw==0.0.42"),
        (["run", "--target", "WHEEL", "--suite", "no/such/suite"], "does not exist"),
        (["run", "--target", "WHEEL", "--suite", "fakesuite", "-k", "nothing-matches"], "matches no workload"),
        # before any run there is no history to read: said, and none is created (tests/test_cli_input.py has the
        # unknown ids and workloads of a history that exists)
        (["show", "424242"], "there is no history database"),
        (["history", "fakesuite/Nope"], "`modelci run` creates it"),
    ],
)
def test_bad_input_exits_2_with_a_message_and_no_traceback(fake_project, args, message):
    args = [str(fake_project.v10) if a == "WHEEL" else a for a in args]
    proc = fake_project.cli(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_broken_config_file_exits_2_naming_the_key(fake_project):
    toml = fake_project.root / "modelci.toml"
    toml.write_text(toml.read_text() + "timming_factor = 2\n")  # the file ends in its [checks] table
    proc = fake_project.cli("run", "--target", str(fake_project.v10), "--suite", "fakesuite")
    assert proc.returncode == 2
    assert "timming_factor" in proc.stderr and "Traceback" not in proc.stderr


def test_ctrl_c_keeps_the_database_consistent_with_the_run_marked_interrupted(fake_project):
    # Stable and Slow finish in about a second; Hangs (run with fakefw 1.1) never returns
    cmd = [sys.executable, "-m", "modelci.cli", "run", "--target", str(fake_project.v11), "--suite", "fakesuite",
           "-k", "*/[SH]*", "--timeout", "120"]
    proc = subprocess.Popen(cmd, cwd=fake_project.root, env=fake_project.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        if "fakesuite/Slow ok" in line:
            break
    else:
        proc.kill()
        pytest.fail("Slow never finished:\n" + "".join(lines))
    time.sleep(1.0)  # Hangs is now running
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "interrupted" in err and "Traceback" not in err

    with sqlite3.connect(fake_project.root / ".modelci" / "history.db") as db:
        assert db.execute("pragma integrity_check").fetchone() == ("ok",)
        runs = db.execute("select id, status from runs").fetchall()
        assert [status for _, status in runs] == ["interrupted"]
        results = db.execute("select workload, status from results where run_id = ?", (runs[0][0],)).fetchall()
        assert results == [("fakesuite/Stable", "ok"), ("fakesuite/Slow", "ok")]
        # nothing half-written: every output row points at a stored artifact
        orphans = db.execute("select count(*) from outputs o left join artifacts a on o.sha256 = a.sha256 "
                             "where a.sha256 is null").fetchone()
        assert orphans == (0,)
