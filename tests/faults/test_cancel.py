"""Cancellation: SIGINT, SIGTERM and SIGHUP sent to a real `modelci run` while a workload hangs."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
import xml.etree.ElementTree as ET

import pytest
from probes import HANG, OLDER_REPORTS, QUICK, wait_for, workload


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_a_cancelled_run_stores_and_reports_what_finished(project, signum, code):
    project.workloads(QUICK + HANG)
    for name, text in OLDER_REPORTS.items():  # what an earlier run left
        (project.root / name).write_text(text)
    proc = project.start("run", "--target", "current", "--suite", "suite", "--json", "report.json",
                         "--junit", "junit.xml", "--markdown", "summary.md")
    wait_for(lambda: project.marker("hanging").exists() or proc.poll() is not None, 120, "the hanging workload")
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    done = type("Done", (), {"stdout": out, "stderr": err, "returncode": proc.returncode})
    assert proc.returncode == code, err
    assert f"interrupted by {signal.Signals(signum).name}" in err
    report = project.report()
    assert report["interrupted"] is True and report["judged"] is False
    assert {r["workload"]: r["status"] for r in report["results"]} == {"suite/Quick": "ok"}
    runs = project.stored("SELECT id, status FROM runs")
    assert [status for _, status in runs] == ["interrupted"]
    assert report["run"]["id"] == runs[0][0]
    assert project.stored("SELECT count(*) FROM results") == [(1,)]
    junit = ET.parse(project.root / "junit.xml").getroot()
    assert [c.get("classname") for c in junit.iter("testcase")] == ["suite.Quick"]
    assert {p.get("name"): p.get("value") for p in junit.iter("property")}["interrupted"] == "true"
    assert "interrupted" in (project.root / "summary.md").read_text()
    json.dumps(report)
    project.assert_clean(done)


def test_signals_after_the_first_do_not_cut_its_clean_up_short(project):
    """A burst of signals (Ctrl-C pressed again and again, a runner that sends SIGTERM twice): the first one
    cancels, and the ones that arrive while its clean-up runs neither stop the report files being written nor
    show a traceback; the exit code is the first signal's."""
    project.workloads(QUICK + HANG)
    proc = project.start("run", "--target", "current", "--suite", "suite", "--json", "report.json",
                         "--junit", "junit.xml")
    wait_for(lambda: project.marker("hanging").exists() or proc.poll() is not None, 120, "the hanging workload")
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    for i in range(60):  # 0.6 s of signals, through the kill of the workload, the store and the reports
        time.sleep(0.01)
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGTERM if i % 3 == 2 else signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    done = type("Done", (), {"stdout": out, "stderr": err, "returncode": proc.returncode})
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    report = project.report()
    assert report["interrupted"] is True
    assert {r["workload"]: r["status"] for r in report["results"]} == {"suite/Quick": "ok"}
    assert [c.get("classname") for c in ET.parse(project.root / "junit.xml").getroot().iter("testcase")] == \
        ["suite.Quick"]
    assert project.stored("SELECT status FROM runs") == [("interrupted",)]
    project.assert_clean(done)


def test_a_run_cancelled_before_any_workload_finished_says_so(project):
    project.workloads(HANG)
    (project.root / "report.json").write_text('{"schema": "modelci.report/1", "regressed": false, "results": []}')
    proc = project.start("run", "--target", "current", "--suite", "suite", "--json", "report.json")
    wait_for(lambda: project.marker("hanging").exists() or proc.poll() is not None, 120, "the hanging workload")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    report = project.report()
    assert report["interrupted"] is True and report["results"] == [] and "schema" in report
    assert project.stored("SELECT status FROM runs") == []
    project.assert_clean(type("Done", (), {"stdout": out, "stderr": err}))


def test_a_run_cancelled_while_its_environment_is_prepared_leaves_no_older_report(project):
    """Cancelled before discovery: nothing ran, and the older report is gone rather than read as this run's."""
    project.workloads(QUICK)
    (project.root / "report.json").write_text('{"schema": "modelci.report/1", "regressed": false, "results": []}')
    # a suite file that blocks discovery (it is imported inside the environment) until the signal comes
    project.workloads('''
import os, pathlib
pathlib.Path(os.environ["PROBE_DIR"], "hanging").write_text(str(os.getpid()))
while True:
    pass
''', name="slow_import.py")
    proc = project.start("run", "--target", "current", "--suite", "suite", "--json", "report.json")
    wait_for(lambda: project.marker("hanging").exists() or proc.poll() is not None, 120, "the blocking import")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert not (project.root / "report.json").exists()
    project.assert_clean(type("Done", (), {"stdout": out, "stderr": err}))


#: ok on its first run (compare's side A), then tells the probe and spins forever (side B)
HANG_ON_B = '''
class HangOnB(modelci.Workload):
    framework = "python"

    def setup(self, ctx):
        import os, pathlib
        first = pathlib.Path(os.environ["PROBE_DIR"], "ran-once")
        if first.exists():
            pathlib.Path(os.environ["PROBE_DIR"], "hanging").write_text(str(os.getpid()))
            while True:
                pass
        first.write_text("A")

    def train_step(self, ctx, step):
        return 0.0

    def infer(self, ctx):
        return {"y": [0.0]}
'''


def _cancel_compare(project, signum: int):
    """`compare current current --rerun` with every report file (older ones in place), cancelled by `signum` once
    a workload hangs; returns (the finished process's output, the JSON report)."""
    for name, text in OLDER_REPORTS.items():  # what an earlier compare left
        (project.root / name).write_text(text)
    proc = project.start("compare", "current", "current", "--rerun", "--suite", "suite", "--json", "report.json",
                         "--junit", "junit.xml", "--markdown", "summary.md")
    wait_for(lambda: project.marker("hanging").exists() or proc.poll() is not None, 120, "the hanging workload")
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    done = type("Done", (), {"stdout": out, "stderr": err, "returncode": proc.returncode})
    assert proc.returncode == 128 + signum, err
    assert f"interrupted by {signal.Signals(signum).name}" in err
    return done, project.report()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_compare_cancelled_while_b_runs_reports_what_finished(project, signum):
    project.workloads(QUICK + HANG_ON_B)
    done, report = _cancel_compare(project, signum)
    runs = project.stored("SELECT id, status FROM runs ORDER BY id")
    assert [status for _, status in runs] == ["complete", "interrupted"]  # A whole, B cut short
    assert report["kind"] == "compare" and report["interrupted"] is True and report["regressed"] is False
    assert report["baseline_run"]["id"] == runs[0][0] and report["run"]["id"] == runs[1][0]
    assert {r["workload"]: r["status"] for r in report["results"]} == {"suite/Quick": "ok"}
    assert all(r["findings"] == [] for r in report["results"])  # B's results are not judged
    junit = ET.parse(project.root / "junit.xml").getroot()
    assert [c.get("classname") for c in junit.iter("testcase")] == ["suite.Quick"]
    assert {p.get("name"): p.get("value") for p in junit.iter("property")}["interrupted"] == "true"
    summary = (project.root / "summary.md").read_text()
    assert "interrupted" in summary and "suite/Quick" in summary
    project.assert_clean(done)


def test_a_compare_cancelled_while_a_runs_says_b_did_not_run(project):
    project.workloads(QUICK + HANG)
    done, report = _cancel_compare(project, signal.SIGTERM)
    runs = project.stored("SELECT id, status FROM runs")
    assert [status for _, status in runs] == ["interrupted"]
    assert report["interrupted"] is True and report["run"] is None and report["results"] == []
    assert report["baseline_run"]["id"] == runs[0][0]
    junit = ET.parse(project.root / "junit.xml").getroot()
    assert {p.get("name"): p.get("value") for p in junit.iter("property")}["interrupted"] == "true"
    assert "B did not run" in (project.root / "summary.md").read_text()
    project.assert_clean(done)


def test_a_signal_held_while_the_run_is_stored_still_writes_the_reports_naming_the_stored_run(project):
    """SIGTERM while the run waits to be stored (another runner holds the history's write lock): the signal waits
    for the transaction, and then the run is stored whole; the report files must be written for it and name it.
    They were not: the command said only "interrupted" and wrote no report, for a run stored as complete."""
    project.workloads(QUICK)
    assert project.run().returncode == 0  # the history exists; the next run reads it, then waits to write
    (project.root / "report.json").unlink()
    holder = sqlite3.connect(project.db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # a writer of another runner, mid-transaction
    try:
        proc = project.start("run", "--target", "current", "--suite", "suite", "--json", "report.json")
        for line in proc.stderr:  # the workload is done: what is left is storing the run
            if "suite/Quick" in line:
                break
        time.sleep(1.0)
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)
    finally:
        holder.execute("COMMIT")
        holder.close()
    out, err = proc.communicate(timeout=120)
    done = type("Done", (), {"stdout": out, "stderr": err, "returncode": proc.returncode})
    assert proc.returncode == 143, err
    runs = project.stored("SELECT id, status FROM runs ORDER BY id")
    assert [status for _, status in runs] == ["complete", "complete"]
    assert f"run {runs[1][0]} stored as complete; its checks and alarms did not run" in err, err
    report = project.report()
    assert report["interrupted"] is True and report["run"]["id"] == runs[1][0]
    assert {r["workload"]: r["status"] for r in report["results"]} == {"suite/Quick": "ok"}
    project.assert_clean(done)


def test_a_signal_in_the_alarm_step_keeps_the_verdicts_and_says_where_the_alarms_are(project):
    """SIGTERM while a webhook of the alarm step waits for its receiver: the run is stored and judged, and the alarm
    step may have opened its alarm already. The command said "its checks and alarms did not run" and reported no
    verdict, which was untrue; it now keeps the verdicts and points at `modelci alarms`."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()  # takes the connection and never answers
    project.config('[[notify]]\nkind = "webhook"\nurl_env = "PROBE_HOOK"\ntimeout = 60\nretries = 0\n')
    project.extra_env["PROBE_HOOK"] = f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
    project.workloads(QUICK + workload("Broken", 'raise RuntimeError("broken on purpose")'))
    try:
        proc = project.start("run", "--target", "current", "--suite", "suite", "--json", "report.json")
        listener.settimeout(120)
        connection, _ = listener.accept()  # the alarm step is notifying: the alarm is open
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        connection.close()
    finally:
        listener.close()
    done = type("Done", (), {"stdout": out, "stderr": err, "returncode": proc.returncode})
    assert proc.returncode == 143, err
    assert "complete and judged; the signal came in its alarm step" in err and "did not run" not in err, err
    report = project.report()
    assert report["interrupted"] is True and report["judged"] is True
    broken = next(r for r in report["results"] if r["workload"] == "suite/Broken")
    assert broken["status"] == "failed" and broken["findings"], broken
    assert project.stored("SELECT count(*) FROM alarms") == [(1,)]  # what the step recorded before the signal
    project.assert_clean(done)


def test_a_calibration_cancelled_in_its_second_run_reports_the_runs_it_stored(project):
    """`calibrate --runs 3` cancelled while its second run hangs: the first run is stored whole and the second as
    interrupted; no noise is stored (it would be measured on fewer runs than asked), and the --json report says
    so and names the stored runs."""
    project.workloads(QUICK + HANG_ON_B)
    (project.root / "report.json").write_text(OLDER_REPORTS["report.json"])
    proc = project.start("calibrate", "--target", "current", "--suite", "suite", "--runs", "3", "--json",
                         "report.json")
    wait_for(lambda: project.marker("hanging").exists() or proc.poll() is not None, 120, "the second run's hang")
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    done = type("Done", (), {"stdout": out, "stderr": err, "returncode": proc.returncode})
    assert proc.returncode == 143, err
    assert "interrupted by SIGTERM" in err and "no noise stored: 3 runs were asked for" in err, err
    runs = project.stored("SELECT id, status FROM runs ORDER BY id")
    assert [status for _, status in runs] == ["complete", "interrupted"]
    report = project.report()
    assert report["kind"] == "calibration" and report["interrupted"] is True and report["noise"] == []
    assert report["run_ids"] == [run_id for run_id, _ in runs]
    assert project.stored("SELECT count(*) FROM noise_profiles") == [(0,)]
    project.assert_clean(done)


SWALLOWED = '''
import os, signal, sys, time
from modelci import cancel
cancel.install()


class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs here, inside __del__, and its exception is only printed
            pass


try:
    obj = Finalized()
    del obj
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.01)
    print("ran to the end")
except KeyboardInterrupt:
    print("cancelled")
    sys.exit(cancel.exit_code())
'''


def test_a_signal_that_lands_in_a_finalizer_still_cancels(tmp_path):
    """Python runs a signal's handler inside whatever the main thread runs, a `__del__` or a weakref callback
    too (SQLAlchemy's pool has some), where the exception it raises is only printed. The cancel was lost: the
    command ran on to its end and held every later signal as a second one."""
    import subprocess
    import sys

    script = tmp_path / "swallowed.py"
    script.write_text(SWALLOWED)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (143, "cancelled"), done.stdout + done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
