"""Artifacts and the history: a full disk under either, a corrupt blob, an artifact store that cannot be used."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import xml.etree.ElementTree as ET

import pytest
from probes import QUICK, filler, workload

BIG = workload("Big") .replace('return {"y": [1.0, 2.0]}', 'return {"y": [float(i) for i in range(300_000)]}')


def _tmpfs(mount, size: str):
    """Mount a tmpfs of `size` at `mount`: a real disk that fills (CI runs as root, which may mount one)."""
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if made.returncode != 0:
        pytest.skip(f"this machine cannot mount a tmpfs (CI runs as root and can): {made.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def _fill(path) -> None:
    """Write `path` until its disk refuses: a write the disk took in part leaves the rest in the file's buffer,
    which the close tries again, so the refusal is caught around the close too."""
    try:
        with open(path, "wb") as fh:
            while True:
                fh.write(b"\0" * 4096)
                fh.flush()
    except OSError:
        pass


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs: a real full disk for the artifact store."""
    yield from _tmpfs(tmp_path / "small", "256k")


@pytest.fixture
def history_disk(tmp_path):
    """A 2 MiB tmpfs for the history database: room for its schema and a run, until a workload fills it."""
    yield from _tmpfs(tmp_path / "history", "2m")


def test_a_full_disk_keeps_the_results_without_their_arrays_and_says_so(project, small_disk):
    project.config(f'artifacts = "{small_disk / "artifacts"}"')
    project.workloads(QUICK)
    first = project.run()
    assert first.returncode == 0, first.stderr
    runs = project.stored("SELECT id, status FROM runs")
    project.workloads(QUICK + BIG)
    done = project.run()
    assert done.returncode == 3, done.stderr
    assert "the disk is full" in done.stderr and "artifact store" in done.stderr
    # the results are not lost: stored without their arrays, in a run that is no baseline
    (run_id, status), = project.stored("SELECT id, status FROM runs WHERE id > ?", runs[-1][0])
    assert status == "incomplete" and f"stored as run {run_id} without their output arrays" in done.stderr
    # shown and written to the report file as any run is (both were skipped: the error came before them)
    assert "suite/Big" in done.stdout
    report = project.report()
    assert report["run"]["id"] == run_id and report["interrupted"] is False
    assert {r["workload"]: r["status"] for r in report["results"]} == {"suite/Quick": "ok", "suite/Big": "ok"}
    stored = dict(project.stored("SELECT workload, status FROM results WHERE run_id = ?", run_id))
    assert stored == {"suite/Quick": "ok", "suite/Big": "ok"}
    assert project.stored("SELECT count(*) FROM outputs JOIN results ON results.id = outputs.result_id "
                          "WHERE run_id = ?", run_id) == [(0,)]
    assert project.stored("SELECT count(*) FROM metrics JOIN results ON results.id = metrics.result_id "
                          "WHERE run_id = ? AND metrics.name = 'time.train'", run_id) == [(2,)]
    assert not [p for p in small_disk.rglob("*") if ".tmp-" in p.name]
    project.assert_clean(done)
    # a later run reuses the result of the complete run, never the newer one without its arrays (it is no
    # baseline and no point of a series either: those read complete runs only)
    project.workloads(QUICK)
    again = project.run("--reuse")
    assert again.returncode == 0, again.stderr
    (result,) = project.report()["results"]
    (complete,), = project.stored("SELECT id FROM results WHERE run_id = ? AND workload = 'suite/Quick'",
                                  runs[-1][0])
    assert result["status"] == "ok" and result["reused"] and result["result_id"] == complete, result


@pytest.fixture
def scratch_disk(tmp_path):
    """A 3 MiB tmpfs for cache_dir, where the workloads' scratch folders are: room for small outputs, not for
    HUGE's (8 MB)."""
    yield from _tmpfs(tmp_path / "cache", "3m")


HUGE = workload("Huge").replace('return {"y": [1.0, 2.0]}', 'return {"y": [float(i) for i in range(1_000_000)]}')


def test_outputs_too_big_for_the_scratch_disk_leave_a_stored_incomplete_run_and_the_next_workloads_run(
        project, scratch_disk):
    # the child's .npy write failed with ENOSPC, its result then found no room either: a `crashed` workload with
    # no reason, and the half-written file starved every workload after it ("crashed" too)
    project.cache = scratch_disk
    project.config()
    project.workloads(HUGE + QUICK)
    done = project.run()
    assert done.returncode == 3, done.stderr
    assert "the outputs of suite/Huge could not be written: no space left on the disk of" in done.stderr
    assert "set cache_dir to a folder on a bigger disk" in done.stderr
    (run_id, status), = project.stored("SELECT id, status FROM runs")
    assert status == "incomplete" and f"stored as run {run_id}" in done.stderr
    assert dict(project.stored("SELECT workload, status FROM results")) == {"suite/Huge": "ok", "suite/Quick": "ok"}
    # Huge's timings are kept, and Quick, which ran after it, kept its outputs
    assert project.stored("SELECT r.workload FROM outputs o JOIN results r ON r.id = o.result_id") == [
        ("suite/Quick",)]
    assert project.stored("SELECT count(*) FROM metrics m JOIN results r ON r.id = m.result_id "
                          "WHERE r.workload = 'suite/Huge' AND m.name = 'time.infer'") == [(1,)]
    project.assert_clean(done)


def test_a_history_on_a_full_disk_shows_and_reports_the_results_it_could_not_store(project, history_disk):
    db = history_disk / "history.db"
    project.config(f'db = "{db}"')
    project.workloads(QUICK)
    first = project.run()
    assert first.returncode == 0, first.stderr
    # a workload that fills the history's disk while it runs, as another job on the machine would
    project.workloads(QUICK + filler(history_disk / "filler"))
    done = project.run("--markdown", "summary.md")
    assert done.returncode == 3, done.stderr
    assert f"could not store the run in sqlite:///{db}: database or disk is full" in done.stderr
    assert "Nothing of this run is stored; free space for the history" in done.stderr
    assert "the next run on this history stores them from the run's journal" in done.stderr
    assert "https://" not in done.stderr  # the driver's own pointer to its docs is no help here
    # said: on the console, and in the report files, with no run id
    assert "run not stored (not compared)" in done.stdout and "suite/Filler" in done.stdout
    report = project.report()
    assert report["run"]["id"] is None and report["judged"] is False
    assert "not judged" in done.stdout and "none yet" not in done.stdout  # not "ok" with no baseline: unjudged
    assert {r["workload"]: r["status"] for r in report["results"]} == {"suite/Quick": "ok", "suite/Filler": "ok"}
    assert "not stored (the history refused it), not compared" in (project.root / "summary.md").read_text()
    (history_disk / "filler").unlink()
    with sqlite3.connect(db) as stored:
        assert stored.execute("SELECT count(*) FROM runs").fetchone() == (1,)  # the first run, whole
    project.assert_clean(done)


def _blobs(project) -> dict:
    root = project.root / ".modelci" / "artifacts"
    return {p: p.parent.name + p.name for p in root.glob("*/*") if p.is_file()}


def test_a_corrupt_blob_heals_when_the_same_content_is_stored_again(project):
    project.workloads(QUICK)
    assert project.run().returncode == 0
    blobs = _blobs(project)
    assert blobs
    for path in blobs:
        path.write_bytes(b"bit rot")
    shown = project.cli("show", "latest")
    assert "Traceback" not in shown.stderr
    done = project.run()
    assert done.returncode == 0, done.stderr
    for path, address in blobs.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == address
    project.assert_clean(done)


def test_a_corrupt_blob_of_the_baseline_is_said_in_its_finding_and_the_rest_is_judged(project):
    """One damaged artifact of a stored run stopped every later run and compare of the workload with its
    message, after the run was stored and before any report was written: `name in outputs` read the array."""
    project.workloads(QUICK.replace('return {"y": [self.w, 2.0]}',
                                    'return {"y": [self.w, 2.0], "z": [__import__("time").time() % 1.0]}'))
    assert project.run().returncode == 0
    # z differs on every run: an alarm opens on it, which an output that was not compared must leave open
    assert project.cli("compare", "current", "current", "--suite", "suite", "--rerun").returncode == 1
    assert "output:z" in project.cli("alarms", "list").stdout
    for path in _blobs(project):
        path.write_bytes(b"bit rot")
    done = project.cli("compare", "current", "current", "--suite", "suite", "--json", "c.json", "--junit", "c.xml")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    (result,) = project.report("c.json")["results"]
    findings = {f["metric"]: f for f in result["findings"]}
    for name in ("output:y", "output:z"):
        assert findings[name]["verdict"] == "new"
        assert "stored array cannot be read (artifact" in findings[name]["message"]
        assert "is corrupt" in findings[name]["message"]
    assert findings["loss"]["verdict"] == "ok"  # the other checks went on
    assert (project.root / "c.xml").is_file()
    assert "recovered" not in done.stdout + done.stderr
    assert "output:z" in project.cli("alarms", "list").stdout


def test_a_baseline_whose_arrays_another_machine_kept_says_its_outputs_were_not_compared(project, tmp_path):
    """Two machines sharing one history, each with its own artifact folder (PostgreSQL with the default
    `artifacts`): every output of a baseline stored by the other machine was "new" in the console, the run passed,
    and only the JSON said that nothing was compared. The console and the Markdown summary now say it, and what
    a shared history needs."""
    from fakewheels import build_fake_wheel

    old, new = (build_fake_wheel(tmp_path / "wheels", "fakefw", version) for version in ("1.0", "1.1"))
    # z differs on every run, so its array is one that only the machine that stored it holds
    project.workloads(QUICK.replace('return {"y": [self.w, 2.0]}',
                                    'return {"y": [self.w, 2.0], "z": [__import__("time").time() % 1.0]}'))
    project.extra_env["MODELCI_ARTIFACTS"] = str(project.root / "machine-a")
    assert project.cli("run", "--target", str(old), "--suite", "suite").returncode == 0
    project.extra_env["MODELCI_ARTIFACTS"] = str(project.root / "machine-b")
    done = project.cli("run", "--target", str(new), "--suite", "suite", "--markdown", "summary.md")
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    assert "not compared" in out and "suite/Quick output:z not compared: the baseline's stored array cannot be " \
        "read (artifact" in out, out
    assert "they need one artifact store that all of them reach" in out
    summary = (project.root / "summary.md").read_text()
    assert "⚠️ no regression found, but 1 output not compared" in summary
    assert "they need one artifact store that all of them reach" in summary
    project.assert_clean(done)


@pytest.mark.parametrize("url, says", [
    ("nosuchproto://bucket/prefix", "Protocol not known"),
    ("{root}/modelci.toml/under-a-file", "Not a directory"),
    ("s3://no-credentials-bucket/prefix", "NoCredentialsError"),
    ("memory://", ""),
])
def test_an_artifact_store_that_cannot_be_used_is_refused_before_the_environment_is_built(project, url, says):
    url = url.format(root=project.root)
    project.config(f'artifacts = "{url}"')
    project.extra_env.update(AWS_EC2_METADATA_DISABLED="true", AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
                             AWS_CONFIG_FILE="/nonexistent")
    project.workloads(QUICK)
    done = project.run()
    if not says:  # a store that works: the run goes on
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 2, done.stderr
    assert "artifact store" in done.stderr and says in done.stderr
    assert "preparing the environment" not in done.stderr
    assert not project.db.exists() or project.stored("SELECT count(*) FROM runs") == [(0,)]
    project.assert_clean(done)


def test_a_history_that_refuses_the_findings_after_the_run_is_stored_says_so_and_writes_the_reports(project):
    """The history takes the run, then refuses what the checks found (here a trigger, as a full disk or a server
    gone away would): the run is stored, the command says that its checks did not finish, exits 3 (not 1, a
    regression) and writes the report files, unjudged. It was a traceback, exit 1 and no report."""
    project.workloads(QUICK)
    assert project.run().returncode == 0
    assert project.report()["judged"] is True
    with sqlite3.connect(project.db) as db:
        db.execute("CREATE TRIGGER refuse_findings BEFORE INSERT ON findings "
                   "BEGIN SELECT RAISE(FAIL, 'the disk is full (injected)'); END")
    done = project.run("--junit", "junit.xml")
    assert done.returncode == 3, done.stdout + done.stderr
    (run_id, status), = project.stored("SELECT id, status FROM runs ORDER BY id DESC LIMIT 1")
    assert status == "complete"
    assert f"run {run_id} is stored, but its checks and alarms could not be finished" in done.stderr
    assert "the disk is full (injected)" in done.stderr and "suite/Quick" in done.stdout
    report = project.report()
    assert report["run"]["id"] == run_id and [r["workload"] for r in report["results"]] == ["suite/Quick"]
    # no finding because none was judged, which the report says: an empty list alone would read as a pass
    assert all(r["findings"] == [] for r in report["results"]) and report["judged"] is False
    assert "not judged" in done.stdout
    assert (project.root / "junit.xml").exists()
    project.assert_clean(done)


def test_a_site_written_to_a_full_disk_is_a_message_not_a_traceback(project, small_disk):
    """`report --out` on a disk too small for the site's assets: one line naming the file and what to do, exit 3."""
    project.workloads(QUICK)
    assert project.run().returncode == 0
    done = project.cli("report", "--out", str(small_disk / "site"))
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"no space left writing {small_disk}" in done.stderr  # where it writes, not what it copies
    assert "free space there, or give a path on another disk" in done.stderr
    project.assert_clean(done)


def test_an_environment_that_finds_no_room_in_the_cache_says_so(project, small_disk, tmp_path):
    """uv fails for want of space under cache_dir: the message names the disk and what to do, exit 3. It was
    exit 2 with the advice to check the requirement and the package index, which are not at fault."""
    from fakewheels import build_fake_wheel

    wheel = build_fake_wheel(tmp_path / "wheels", "roomless", "1.0", {"roomless/__init__.py": "x = 1\n"})
    (small_disk / "fill").write_bytes(b"\0" * (200 * 1024))  # of 256 KiB, about 50 left: not enough for uv
    project.extra_env["MODELCI_CACHE_DIR"] = str(small_disk / "cache")
    project.workloads(QUICK)
    done = project.cli("run", "--target", str(wheel), "--suite", "suite")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "uv found no room on the disk of the environments' cache" in done.stderr, done.stderr
    assert "No space left on device" in done.stderr and "Check the requirement" not in done.stderr
    project.assert_clean(done)


def test_a_history_that_cannot_be_opened_on_a_full_disk_names_the_disk(project, history_disk):
    """SQLite says only "disk I/O error" when it cannot make its journal files on a full disk; the message names
    the disk's free space, and nothing of the history is lost."""
    db = history_disk / "history.db"
    project.config(f'db = "{db}"')
    project.workloads(QUICK)
    assert project.run().returncode == 0
    for name in ("history.db-wal", "history.db-shm"):
        (history_disk / name).unlink(missing_ok=True)
    _fill(history_disk / "fill")  # the whole disk, as another job on the machine would
    done = project.run()
    assert done.returncode == 3, done.stdout + done.stderr
    assert "cannot open the history database" in done.stderr
    assert "KiB free: free space there, or give a db elsewhere" in done.stderr, done.stderr
    (history_disk / "fill").unlink()
    with sqlite3.connect(db) as stored:
        assert stored.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    project.assert_clean(done)


def _fill_on_b(path) -> str:
    """A workload that runs normally the first time (A), and fills the disk of `path` the second (B)."""
    return workload("FillOnB", f"""
        first = pathlib.Path(os.environ["PROBE_DIR"], "ran-once")
        if first.exists():
            with open({str(path)!r}, "wb", buffering=0) as fh:
                try:
                    while True:
                        fh.write(b"x" * 65536)
                except OSError:
                    pass
        first.write_text("A")
    """)


def test_a_compare_whose_b_the_history_refuses_shows_and_reports_b_unjudged(project, history_disk):
    """B's run could not be stored (its disk full): the compare ended with the message alone, B's results shown
    nowhere and no report file, where `run` keeps them. Now they are shown and in the report files, unjudged."""
    db = history_disk / "history.db"
    project.config(f'db = "{db}"')
    project.workloads(QUICK + _fill_on_b(history_disk / "filler"))
    done = project.cli("compare", "current", "current", "--rerun", "--suite", "suite", "--json", "report.json",
                       "--junit", "junit.xml", "--markdown", "summary.md")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "database or disk is full" in done.stderr and "Nothing of this run is stored" in done.stderr
    assert "suite/FillOnB" in done.stdout and "not judged" in done.stdout
    report = project.report()
    assert report["kind"] == "compare" and report["judged"] is False and report["interrupted"] is False
    assert "database or disk is full" in report["problem"]
    assert {r["workload"] for r in report["results"]} == {"suite/Quick", "suite/FillOnB"}
    assert "not compared: " in (project.root / "summary.md").read_text()
    junit = ET.parse(project.root / "junit.xml").getroot()
    assert {p.get("name"): p.get("value") for p in junit.iter("property")}["judged"] == "false"
    (history_disk / "filler").unlink()
    with sqlite3.connect(db) as stored:
        assert stored.execute("SELECT count(*) FROM runs").fetchone() == (1,)  # A, whole
    project.assert_clean(done)


def test_a_cache_disk_full_before_the_run_is_named(project, small_disk):
    """A cache disk already full when the run starts: discovery cannot write even its stderr, and the run said
    only "discovery ended without its result", with nothing after it."""
    project.extra_env["MODELCI_CACHE_DIR"] = str(small_disk / "cache")
    project.workloads(QUICK)
    assert project.run().returncode == 0
    _fill(small_disk / "filler")  # the disk fills up between two runs
    done = project.run()
    assert done.returncode == 3, done.stderr
    assert "it could not write its result (" in done.stderr and "bytes free on the disk of" in done.stderr
    assert "free space under cache_dir" in done.stderr and "Traceback" not in done.stderr
    assert not list((small_disk / "cache" / "scratch").iterdir())  # its own scratch folder went
    project.assert_clean(done)
