"""A run killed outright (SIGKILL: a CI system's grace period spent, the OOM killer) keeps what finished: its
journal holds each result as it arrives, and the next run on the same history stores them (modelci.journal)."""

from __future__ import annotations

import signal
import time

from probes import HANG, QUICK, wait_for


def _own_cache(project):
    """A cache folder of the test's own: the probes share one, and the journals of their killed runs with it."""
    project.extra_env["MODELCI_CACHE_DIR"] = str(project.root / "cache")
    return project.root / "cache"


def _killed_midway(project):
    """Start a run of Quick then Hang, and SIGKILL it once Quick has finished and Hang is running."""
    project.workloads(QUICK + HANG)
    proc = project.start("run", "--target", "current", "--suite", "suite", "--json", "report.json")
    wait_for(lambda: project.marker("hanging").exists() or proc.poll() is not None, 120, "the hanging workload")
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert project.stored("SELECT count(*) FROM runs") == [(0,)]  # nothing of it is stored yet
    return type("Done", (), {"stdout": out, "stderr": err, "returncode": proc.returncode})


def test_a_run_killed_outright_is_stored_by_the_next_run_as_interrupted(project):
    cache = _own_cache(project)
    killed = _killed_midway(project)
    project.assert_clean(killed)  # its worker and the hanging workload went with it
    gc = project.cli("env", "gc", "--keep", "5")  # names the journal, and leaves it: its results are nowhere else
    assert "1 journal(s) of runs killed before they were stored wait in" in gc.stdout, gc.stdout + gc.stderr
    assert len(list((cache / "journals").iterdir())) == 1
    project.marker("hanging").unlink()
    project.workloads(QUICK)
    done = project.run()
    assert done.returncode == 0, done.stderr
    assert "from a run that was killed before it was stored" in done.stderr, done.stderr
    runs = project.stored("SELECT id, status FROM runs ORDER BY id")
    assert [status for _, status in runs] == ["interrupted", "complete"]
    assert f"stored run {runs[0][0]} (1 result(s), marked interrupted)" in done.stderr
    kept = project.stored("SELECT workload, status FROM results WHERE run_id = ?", runs[0][0])
    assert kept == [("suite/Quick", "ok")]
    assert project.stored("SELECT count(*) FROM outputs JOIN results ON results.id = outputs.result_id "
                          "WHERE run_id = ?", runs[0][0]) == [(1,)]  # its output arrays too
    assert not list((cache / "journals").iterdir())  # taken once
    again = project.run()
    assert "killed before it was stored" not in again.stderr
    assert len(project.stored("SELECT id FROM runs")) == 3


def test_a_journal_is_left_alone_while_its_run_goes_on_and_by_runs_on_another_history(project):
    """A run that is still going (its journal's lock held) is never taken, nor a journal of another history."""
    cache = _own_cache(project)
    project.workloads(QUICK + HANG)
    proc = project.start("run", "--target", "current", "--suite", "suite")
    try:
        wait_for(lambda: project.marker("hanging").exists() or proc.poll() is not None, 120, "the hanging workload")
        assert proc.poll() is None, proc.communicate()
        other = project.cli("--db", str(project.root / "other.db"), "run", "--target", "current", "--suite", "suite",
                            "-k", "Quick")
        assert other.returncode == 0 and "killed before it was stored" not in other.stderr, other.stderr
        project.workloads(QUICK)
        same = project.cli("run", "--target", "current", "--suite", "suite")
        assert same.returncode == 0 and "killed before it was stored" not in same.stderr, same.stderr
        assert [s for (s,) in project.stored("SELECT status FROM runs")] == ["complete"]
        assert len(list((cache / "journals").iterdir())) == 1  # the live run's
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    time.sleep(0.5)
    later = project.cli("run", "--target", "current", "--suite", "suite")
    assert "(1 result(s), marked interrupted) from a run that was killed" in later.stderr, later.stderr
