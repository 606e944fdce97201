"""Cancellation: SIGINT, SIGTERM and SIGHUP sent to a real `modelci run` while a workload hangs."""

from __future__ import annotations

import json
import signal
import xml.etree.ElementTree as ET

import pytest
from probes import HANG, QUICK, wait_for


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_a_cancelled_run_stores_and_reports_what_finished(project, signum, code):
    project.workloads(QUICK + HANG)
    for name in ("report.json", "junit.xml", "summary.md"):  # what an earlier run left
        (project.root / name).write_text("an older report")
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
    assert report["interrupted"] is True
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
