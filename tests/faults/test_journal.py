"""A run killed outright (SIGKILL: a CI system's grace period spent, the OOM killer) keeps what finished: its
journal holds each result as it arrives, and the next run on the same history stores them (modelci.journal)."""

from __future__ import annotations

import os
import signal
import time

from probes import HANG, QUICK, wait_for


def _own_cache(project):
    """A cache folder of the test's own: the probes share one, and the journals of their killed runs with it."""
    project.extra_env["MODELCI_CACHE_DIR"] = str(project.root / "cache")
    return project.root / "cache"


#: set in a probe's environment, the modelci processes it starts run the code `_hook` gave at their start
HOOKED = "PROBE_HOOKED"


def _hook(project, code: str) -> None:
    """Make the modelci processes of `project` run `code` as they start (a sitecustomize.py on their path), while
    HOOKED is in its environment: a fault placed at an exact point of a real run, which no signal sent from
    outside could hit (the milliseconds after a commit)."""
    hook = project.root / "hook"
    hook.mkdir()
    body = "".join(f"    {line}\n" for line in code.splitlines())
    (hook / "sitecustomize.py").write_text(f"import os\nif os.environ.get({HOOKED!r}):\n{body}")
    paths = [str(hook), *filter(None, [project.env().get("PYTHONPATH")])]
    project.extra_env.update({"PYTHONPATH": os.pathsep.join(paths), HOOKED: "1"})


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
    assert [p.name[:4] for p in (cache / "scratch").iterdir()] == ["run-"]  # left behind, with what it held
    gc = project.cli("env", "gc", "--keep", "5")  # names the journal, and leaves it: its results are nowhere else
    assert "1 journal(s) of runs not stored (killed, or refused by the history) wait in" in gc.stdout, gc.stdout
    assert "removed 1 scratch folder(s) of killed runs" in gc.stdout, gc.stdout
    assert not list((cache / "scratch").iterdir())
    assert len(list((cache / "journals").iterdir())) == 1
    project.marker("hanging").unlink()
    project.workloads(QUICK)
    done = project.run()
    assert done.returncode == 0, done.stderr
    assert "from an earlier run that was not stored (killed" in done.stderr, done.stderr
    runs = project.stored("SELECT id, status FROM runs ORDER BY id")
    assert [status for _, status in runs] == ["interrupted", "complete"]
    assert f"stored run {runs[0][0]} (1 result(s), marked interrupted)" in done.stderr
    kept = project.stored("SELECT workload, status FROM results WHERE run_id = ?", runs[0][0])
    assert kept == [("suite/Quick", "ok")]
    assert project.stored("SELECT count(*) FROM outputs JOIN results ON results.id = outputs.result_id "
                          "WHERE run_id = ?", runs[0][0]) == [(1,)]  # its output arrays too
    assert not list((cache / "journals").iterdir())  # taken once
    again = project.run()
    assert "from an earlier run that was not stored" not in again.stderr
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
        assert other.returncode == 0 and "from an earlier run that was not stored" not in other.stderr, other.stderr
        project.workloads(QUICK)
        same = project.cli("run", "--target", "current", "--suite", "suite")
        assert same.returncode == 0 and "from an earlier run that was not stored" not in same.stderr, same.stderr
        assert [s for (s,) in project.stored("SELECT status FROM runs")] == ["complete"]
        assert len(list((cache / "journals").iterdir())) == 1  # the live run's
        assert len(list((cache / "scratch").glob("run-*"))) == 1  # the live run's scratch folder too
        assert "scratch folder(s) of killed runs" not in same.stderr + other.stderr
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    time.sleep(0.5)
    later = project.cli("run", "--target", "current", "--suite", "suite")
    assert "(1 result(s), marked interrupted) from an earlier run that was not stored" in later.stderr, later.stderr
    assert "removed 1 scratch folder(s) of killed runs" in later.stderr, later.stderr
    assert not list((cache / "scratch").glob("run-*"))


def _move_history(db, to):
    """Move a SQLite history with its write-ahead log and shared-memory file."""
    for suffix in ("", "-wal", "-shm"):
        if db.with_name(db.name + suffix).exists():
            db.with_name(db.name + suffix).rename(to.with_name(to.name + suffix))


def test_a_journal_is_left_to_its_own_history_when_another_sits_at_the_same_path(project):
    """Two machines sharing one cache folder, each with its own SQLite history at the same path (a CI runner's
    project folder): the journal of a run killed on one must not be stored in the other's history. A journal
    names its history by the id the history holds, not by its URL."""
    cache = _own_cache(project)
    _killed_midway(project)
    project.marker("hanging").unlink()
    project.workloads(QUICK)
    _move_history(project.db, project.root / "first.db")  # the other machine's history, made at the same path
    other = project.run()
    assert other.returncode == 0, other.stderr
    assert "from an earlier run that was not stored" not in other.stderr, other.stderr
    assert [s for (s,) in project.stored("SELECT status FROM runs")] == ["complete"]
    assert len([p for p in (cache / "journals").iterdir() if any(p.glob("*.result"))]) == 1
    _move_history(project.db, project.root / "second.db")
    _move_history(project.root / "first.db", project.db)  # back on the first machine's history
    done = project.run()
    assert "(1 result(s), marked interrupted) from an earlier run that was not stored" in done.stderr, done.stderr
    assert [s for (s,) in project.stored("SELECT status FROM runs ORDER BY id")] == ["interrupted", "complete"]


def test_a_bad_journal_is_named_and_holds_up_no_other_and_a_cut_result_loses_only_itself(project):
    """One journal whose meta is no JSON object stopped the recovery of every journal after it, on every run; one
    result file cut short lost the whole journal. The suite file that did not import is in the journal too."""
    import shutil

    cache = _own_cache(project)
    (project.suite).mkdir(parents=True, exist_ok=True)
    (project.suite / "broken.py").write_text("raise ImportError('broken on purpose')\n")
    _killed_midway(project)
    (journal,) = (cache / "journals").iterdir()
    assert len(list(journal.glob("*.result"))) == 2  # broken.py's error, and Quick
    bad = cache / "journals" / ("0" * 32)
    shutil.copytree(journal, bad)
    (bad / "meta.json").write_text("null")
    cut = cache / "journals" / ("f" * 32)
    shutil.copytree(journal, cut)
    last = sorted(cut.glob("*.result"))[-1]
    last.write_bytes(last.read_bytes()[:100])
    project.marker("hanging").unlink()
    project.workloads(QUICK)
    done = project.run()
    assert done.returncode == 1, done.stderr  # broken.py fails this run too
    assert f"{bad} has a meta.json that is no JSON object" in done.stderr, done.stderr
    assert f"1 result(s) could not be read and are lost: {last.name}" in done.stderr, done.stderr
    runs = project.stored("SELECT id, status FROM runs ORDER BY id")
    assert [status for _, status in runs] == ["interrupted", "interrupted", "complete"]
    stored = [sorted(project.stored("SELECT workload, status FROM results WHERE run_id = ?", run_id))
              for run_id, _ in runs[:2]]
    assert sorted(stored) == sorted([[("suite/Quick", "ok"), ("suite/broken.py", "error")],
                                     [("suite/broken.py", "error")]]), stored
    assert [p.name for p in (cache / "journals").iterdir()] == [bad.name]  # kept, and named each time


def _the_next_run_stores_the_kept_one(project, cache) -> None:
    """After one stored run and one the history refused: the next run stores the refused one's results from its
    journal, marked interrupted, and the journal goes."""
    again = project.run()
    assert again.returncode == 0 and "from an earlier run that was not stored" in again.stderr, again.stderr
    assert [s for (s,) in project.stored("SELECT status FROM runs ORDER BY id")] == [
        "complete", "interrupted", "complete"]
    assert not list((cache / "journals").iterdir())


def test_a_run_the_history_refuses_is_kept_for_the_next_run(project, tmp_path):
    """The history refused the run (here a trigger, as a full disk would): its results were only in the report
    files. The journal now stays, and the next run on the history stores them."""
    import sqlite3

    cache = _own_cache(project)
    project.workloads(QUICK)
    assert project.run().returncode == 0
    with sqlite3.connect(project.db) as db:
        db.execute("CREATE TRIGGER refuse_runs BEFORE INSERT ON runs BEGIN SELECT RAISE(FAIL, 'refused'); END")
    refused = project.run()
    assert refused.returncode == 3 and "Nothing of this run is stored" in refused.stderr, refused.stderr
    assert "the 1 result(s) of this run are kept in" in refused.stderr, refused.stderr
    with sqlite3.connect(project.db) as db:
        db.execute("DROP TRIGGER refuse_runs")
    _the_next_run_stores_the_kept_one(project, cache)


def test_a_history_locked_by_a_stuck_process_names_the_lock_and_keeps_the_run(project):
    """A SQLite history whose write lock another process keeps (here a connection that began a transaction and
    sits in it) refuses the run once busy_timeout is spent, with SQLite's bare "database is locked". The message
    now says who can hold a lock that long and what to do; the run waits in its journal for the next one."""
    import sqlite3

    cache = _own_cache(project)
    project.workloads(QUICK)
    assert project.run().returncode == 0
    _hook(project, "import modelci.store\nmodelci.store.SQLITE_BUSY_TIMEOUT_MS = 2000\n")
    stuck = sqlite3.connect(project.db, isolation_level=None)
    try:
        stuck.execute("BEGIN IMMEDIATE")
        refused = project.run()
    finally:
        stuck.close()
    assert refused.returncode == 3, refused.stderr
    assert ("database is locked (another process kept its write lock past the 2 s a writer waits: a process "
            "stopped or hung in a transaction") in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and "the 1 result(s) of this run are kept in" in refused.stderr
    del project.extra_env[HOOKED]
    _the_next_run_stores_the_kept_one(project, cache)


def test_a_journal_that_lost_its_lock_file_is_still_stored(project):
    """Every journal is made with its lock file before any run looks at it, so one without is damaged (a hand
    that cleaned the folder up): it is taken and stored like any journal of a killed run, not skipped for ever
    as if its run were still going."""
    cache = _own_cache(project)
    _killed_midway(project)
    project.marker("hanging").unlink()
    [folder] = (cache / "journals").iterdir()
    (folder / "owner.lock").unlink()
    project.workloads(QUICK)
    done = project.run()
    assert "(1 result(s), marked interrupted) from an earlier run that was not stored" in done.stderr, done.stderr
    assert not list((cache / "journals").iterdir())


def test_a_run_killed_just_after_it_was_stored_is_not_stored_again(project):
    """A SIGKILL between the commit that stores a run and the removal of its journal (a few milliseconds) left
    the journal of a stored run, and the next run stored its results a second time: a duplicate point in every
    series. The run's journal is named in the history with it; the recovery sees that and only removes it."""
    cache = _own_cache(project)
    # the kill lands exactly there: the run's process kills itself where it would remove its journal
    _hook(project, "import os, signal\n"
                   "import modelci.journal\n"
                   "modelci.journal.Journal.close = lambda self: os.kill(os.getpid(), signal.SIGKILL)\n")
    project.workloads(QUICK)
    killed = project.run()
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    project.assert_clean(killed)
    assert project.stored("SELECT id, status FROM runs") == [(1, "complete")]
    assert len(list((cache / "journals").iterdir())) == 1  # left behind, its run stored
    del project.extra_env[HOOKED]
    done = project.run()
    assert done.returncode == 0, done.stderr
    assert "removed the journal of run 1 " in done.stderr, done.stderr
    assert "from an earlier run that was not stored" not in done.stderr
    assert [s for (s,) in project.stored("SELECT status FROM runs ORDER BY id")] == ["complete", "complete"]
    assert project.stored("SELECT count(*) FROM results") == [(2,)]
    assert not list((cache / "journals").iterdir())


def test_a_signal_as_a_stored_runs_journal_goes_still_writes_the_report_and_leaves_no_half_journal(project):
    """A Ctrl-C (or a CI system's SIGTERM) in the milliseconds after the commit, as the run removed its journal,
    cut the removal halfway: no report file and no run id said, and a journal without its meta left behind, which
    every later run warned about as results lost (they were stored). The removal is now whole before the signal
    is acted on, and the signal is taken as one after the run was stored."""
    cache = _own_cache(project)
    # the signal lands exactly there: once the removal has begun (its meta gone), before the rest is removed
    _hook(project, "import os, signal, time\n"
                   "import modelci.journal\n"
                   "close = modelci.journal.Journal.close\n"
                   "def cut(self):\n"
                   "    (self.folder / modelci.journal.META).unlink()\n"
                   "    os.kill(os.getpid(), signal.SIGINT)\n"
                   "    time.sleep(0.5)\n"
                   "    close(self)\n"
                   "modelci.journal.Journal.close = cut\n")
    project.workloads(QUICK)
    cut = project.run()
    assert cut.returncode == 130, cut.stderr
    assert "run 1 stored as complete; its checks and alarms did not run" in cut.stderr, cut.stderr
    report = project.report()
    assert report["run"]["id"] == 1 and report["interrupted"] is True and report["judged"] is False
    assert [r["status"] for r in report["results"]] == ["ok"]
    assert project.stored("SELECT id, status FROM runs") == [(1, "complete")]
    assert not list((cache / "journals").iterdir())
    project.assert_clean(cut)
    del project.extra_env[HOOKED]
    done = project.run()
    assert done.returncode == 0 and "journal" not in done.stderr, done.stderr


def test_a_calibration_cut_just_after_a_run_was_stored_names_that_run(project):
    """`calibrate` cut by a signal in the milliseconds after its second run was stored said "the runs stored
    before the signal: 1", and its report listed run 1 alone, though run 2 was in the history."""
    _own_cache(project)
    _hook(project, "import os, signal\n"
                   "import modelci.journal\n"
                   "close = modelci.journal.Journal.close\n"
                   "closed = []\n"
                   "def second(self):\n"
                   "    closed.append(self)\n"
                   "    if len(closed) == 2:\n"
                   "        os.kill(os.getpid(), signal.SIGINT)\n"
                   "    close(self)\n"
                   "modelci.journal.Journal.close = second\n")
    project.workloads(QUICK)
    cut = project.cli("calibrate", "--target", "current", "--suite", "suite", "--runs", "3", "--json",
                      "report.json")
    assert cut.returncode == 130, cut.stderr
    assert project.stored("SELECT id, status FROM runs ORDER BY id") == [(1, "complete"), (2, "complete")]
    assert project.report()["run_ids"] == [1, 2]
    assert "run 2 stored as complete" in cut.stderr, cut.stderr
    project.assert_clean(cut)


def test_a_half_removed_journal_of_a_stored_run_is_removed_not_warned_about(project):
    """What an earlier version's cut removal left (a stored run's journal without its meta or its run, some
    results still there) is recognised by its name in the history and removed, with one line saying so."""
    cache = _own_cache(project)
    _hook(project, "import os, signal\n"
                   "import modelci.journal\n"
                   "modelci.journal.Journal.close = lambda self: os.kill(os.getpid(), signal.SIGKILL)\n")
    project.workloads(QUICK)
    assert project.run().returncode == -signal.SIGKILL
    [folder] = (cache / "journals").iterdir()
    (folder / "meta.json").unlink()
    (folder / "run.pickle").unlink()
    del project.extra_env[HOOKED]
    done = project.run()
    assert done.returncode == 0, done.stderr
    assert f"removed what was left of the journal of run 1 in {folder}" in " ".join(done.stderr.split())
    assert "no readable" not in done.stderr and not list((cache / "journals").iterdir())
    assert project.stored("SELECT count(*) FROM runs") == [(2,)]


def test_a_run_killed_as_it_removes_its_journal_leaves_nothing_to_warn_about(project):
    """The removal renames the journal out of the way in one step, then deletes it: a SIGKILL in between leaves
    a folder the next run removes without a word, and nothing is stored twice."""
    cache = _own_cache(project)
    _hook(project, "import os, signal, types\n"
                   "import modelci.journal\n"
                   "kill = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"
                   "modelci.journal.shutil = types.SimpleNamespace(rmtree=kill)\n")  # the journal's only
    project.workloads(QUICK)
    assert project.run().returncode == -signal.SIGKILL
    [folder] = (cache / "journals").iterdir()
    assert folder.name.endswith(".removing") and (folder / "meta.json").exists()
    del project.extra_env[HOOKED]
    done = project.run()
    assert done.returncode == 0 and "journal" not in done.stderr, done.stderr
    assert not list((cache / "journals").iterdir())
    assert project.stored("SELECT status FROM runs") == [("complete",), ("complete",)]


def test_a_run_out_of_memory_says_so_in_one_line_and_its_results_wait_in_its_journal(project):
    """modelci itself out of memory (a `ulimit -v`, a container's limit) while it stores a run: that was a
    traceback. Now one line with the limit, exit 3, and the finished results are stored by the next run."""
    cache = _own_cache(project)
    # the memory runs out exactly there: as the run is stored, after its workloads finished
    _hook(project, "import modelci.workflow\n"
                   "def _ingest(*args, **kwargs):\n"
                   "    raise MemoryError()\n"
                   "modelci.workflow._ingest = _ingest\n")
    project.workloads(QUICK)
    starved = project.run()
    assert starved.returncode == 3, starved.stderr
    assert "error: modelci ran out of memory (MemoryError); " in starved.stderr, starved.stderr
    assert "What was stored before is kept" in starved.stderr and "Traceback" not in starved.stderr
    assert "the 1 result(s) of this run are kept in" in starved.stderr, starved.stderr
    assert project.stored("SELECT count(*) FROM runs") == [(0,)]
    project.assert_clean(starved)
    del project.extra_env[HOOKED]
    done = project.run()
    assert "stored run 1 (1 result(s), marked interrupted) from an earlier run that was not stored" in done.stderr
    assert not list((cache / "journals").iterdir())


def test_a_journal_keeps_no_token_of_its_targets_url(tmp_path):
    """A journal may outlive its run in the cache folder, which CI jobs keep and upload: the target it holds has
    no password in its spec or repository."""
    from types import SimpleNamespace

    from modelci import journal
    from modelci.targets import Target

    url = "https://ci:s3cret@git.example/fw.git"
    target = Target(spec=f"git+{url}@v1", kind="git", name="fw", commit="a" * 40, repo=url)
    kept = journal.start(tmp_path, SimpleNamespace(identity="h" * 32), {"target": target, "command": "run"}, print)
    assert kept is not None
    written = b"".join(path.read_bytes() for path in kept.folder.iterdir() if path.is_file())
    assert b"s3cret" not in written and b"ci:***@git.example" in written
    assert target.spec == f"git+{url}@v1"  # the run itself still has it, for git
    kept.close()
