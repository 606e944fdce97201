"""Output files (`--json`, `--junit`, `--markdown`, `-o`) through the real CLI: what is not a regular file is written
through and never replaced, the history database is never written over, two options never share one file, an empty
path is refused, and a write that fails is a message.

Every case here replaced a FIFO, a symlink or /dev/stdout with a regular file, destroyed the stored runs, silently
dropped a report, removed a file that was no report (the config, a workload, a user's notes), or ended in a
traceback.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest
from clicalls import digest, usage_error

from modelci import cli

DB = ".modelci/history.db"
#: what an earlier run left at an output path: a report of modelci's, which a new run may replace
OLDER = '{"schema": "modelci.report/1", "kind": "run", "regressed": false, "results": []}\n'


def _isolate(monkeypatch, root: Path) -> None:
    for name in ("MODELCI_DB", "MODELCI_ARTIFACTS", "MODELCI_RUNNER", "MODELCI_SEED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MODELCI_CACHE_DIR", str(root / "cache"))


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    """A project made by `modelci init` with one stored run of `current`: a real history database."""
    root = tmp_path_factory.mktemp("safety")
    with pytest.MonkeyPatch.context() as mp:
        _isolate(mp, root)
        assert cli.main(["init", "--dir", str(root / "p")]) == 0
        mp.chdir(root / "p")
        assert cli.main(["-q", "run", "--target", "current"]) == 0
    return root / "p"


@pytest.fixture
def stored(history, monkeypatch) -> Path:
    """The CLI pointed at the project with a history, in its folder."""
    _isolate(monkeypatch, history.parent)
    monkeypatch.chdir(history)
    return history


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """An empty project folder, the CLI pointed at its own history there (not created yet)."""
    _isolate(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_lock(path: Path) -> None:
    """A lock file of numpy 2.1.3, as `modelci env lock` writes one."""
    from modelci.envs import lockfile

    lockfile.write(path, lockfile.Lock.of("numpy==2.1.3\n", {"python": "3.11"}, environment="e1", source="test"))




class FifoReader:
    """A FIFO and a thread that reads it whole, as a CI step piping a report into another tool."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self.data = b""
        self.thread = threading.Thread(target=self._read, daemon=True)  # never written to: it stays blocked
        self.thread.start()

    def _read(self) -> None:
        with open(self.path, "rb") as fh:
            self.data = fh.read()

    def text(self) -> str:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "nothing was written into the FIFO"
        return self.data.decode()


# --- what is not a regular file is written through ---------------------------------------------------------


def test_a_run_writes_its_reports_into_fifos_and_leaves_them_fifos(stored):
    json_fifo, junit_fifo = FifoReader(stored / "report.fifo"), FifoReader(stored / "junit.fifo")
    assert cli.main(["-q", "run", "--target", "current", "--json", "report.fifo", "--junit", "junit.fifo"]) == 0
    assert json.loads(json_fifo.text())["kind"] == "run"
    assert "<testsuite" in junit_fifo.text()
    for fifo in (json_fifo, junit_fifo):
        assert stat.S_ISFIFO(os.lstat(fifo.path).st_mode)  # it used to be removed, and a regular file put there


def test_a_lock_is_written_into_a_fifo(project):
    write_lock(project / "l.lock")
    fifo = FifoReader(project / "lock.fifo")
    assert cli.main(["env", "lock", "-o", "lock.fifo", "l.lock"]) == 0
    assert "numpy==2.1.3" in fifo.text()
    assert stat.S_ISFIFO(os.lstat(project / "lock.fifo").st_mode)


def test_a_lock_is_written_to_a_terminal(project):
    write_lock(project / "l.lock")
    master, slave = os.openpty()
    try:
        terminal = os.ttyname(slave)
        assert cli.main(["env", "lock", "-o", terminal, "l.lock"]) == 0
        os.set_blocking(master, False)
        said = os.read(master, 1 << 16).decode()
        assert stat.S_ISCHR(os.lstat(terminal).st_mode)
    finally:
        os.close(master)
        os.close(slave)
    assert "numpy==2.1.3" in said


def test_reports_through_a_link_to_dev_stdout_go_to_stdout_and_may_share_it(stored, capfd):
    # the link stands for /dev/stdout itself, which a run as root used to replace with a regular file
    (stored / "out.json").symlink_to("/dev/stdout")
    (stored / "out.md").symlink_to("/dev/fd/1")
    assert cli.main(["-q", "run", "--target", "current", "--json", "out.json", "--markdown", "out.md"]) == 0
    said = capfd.readouterr().out
    assert '"kind": "run"' in said and "modelci" in said.split('"kind": "run"')[1]  # the Markdown after the JSON
    assert (stored / "out.json").is_symlink() and os.readlink(stored / "out.json") == "/dev/stdout"
    assert (stored / "out.md").is_symlink()


def test_a_symlink_to_a_report_stays_a_link_and_its_target_is_replaced(stored):
    (stored / "reports").mkdir(exist_ok=True)
    (stored / "reports" / "run.json").write_text(OLDER)
    (stored / "run.json").symlink_to("reports/run.json")
    (stored / "lock.txt").symlink_to("reports/new.lock")  # dangling: the file it names is created
    assert cli.main(["-q", "run", "--target", "current", "--json", "run.json"]) == 0
    assert (stored / "run.json").is_symlink()
    assert json.loads((stored / "reports" / "run.json").read_text())["kind"] == "run"
    assert cli.main(["env", "lock", "latest", "-o", "lock.txt"]) == 0
    assert (stored / "lock.txt").is_symlink() and "==" in (stored / "reports" / "new.lock").read_text()


def test_a_write_that_fails_is_a_message_that_names_the_option(project, capsys):
    write_lock(project / "l.lock")
    (project / "full").symlink_to("/dev/full")
    said = usage_error(["env", "lock", "-o", "full", "l.lock"], capsys)
    assert "--output full: cannot write the file (No space left on device)" in said
    assert (project / "full").is_symlink()


def test_a_report_that_cannot_be_written_after_a_run_says_the_run_is_stored(stored, capsys):
    (stored / "full.xml").symlink_to("/dev/full")
    said = usage_error(["-q", "run", "--target", "current", "--junit", "full.xml"], capsys)
    assert "--junit full.xml: cannot write the file (No space left on device); the run is stored as run " in said


# --- the history database is never an output -----------------------------------------------------------------


@pytest.mark.parametrize("argv, option", [
    (["env", "lock", "latest", "-o", "{db}"], "--output"),
    (["env", "constraints", "--from", "latest", "-o", "{db}"], "--output"),
    (["env", "diff", "latest", "latest", "--json", "{db}"], "--json"),
    (["env", "consistency", "--target", "current", "--json", "{db}"], "--json"),
    (["run", "--target", "current", "--json", "{db}"], "--json"),
    (["run", "--target", "current", "--junit", "{db}"], "--junit"),
    (["run", "--target", "current", "--markdown", "{db}"], "--markdown"),
    (["compare", "current", "current", "--markdown", "{db}"], "--markdown"),
    (["calibrate", "--target", "current", "--runs", "2", "--json", "{db}"], "--json"),
    (["compat", "--target", "current", "--json", "{db}"], "--json"),
    (["compat", "--target", "current", "--markdown", "{db}"], "--markdown"),
    (["bisect", "--versions", "1,2", "--json", "{db}"], "--json"),
])
def test_no_output_option_writes_over_the_history_database(stored, capsys, argv, option):
    before = digest(stored / DB)
    said = usage_error([a.format(db=DB) for a in argv], capsys)
    assert f"{option} {DB} is the history database; give another path" in said
    assert digest(stored / DB) == before
    assert cli.main(["history"]) == 0 and "current" in capsys.readouterr().out


@pytest.mark.parametrize("path, says", [
    ("alias.db", "is the history database;"),             # a link to it
    (".modelci/../.modelci/history.db", "is the history database;"),
    (".modelci/history.db-wal", "is the history database's wal file;"),
    (".modelci/history.db-journal", "is the history database's journal file;"),
])
def test_another_name_of_the_history_database_is_refused_too(stored, capsys, path, says):
    if not (stored / "alias.db").is_symlink():
        (stored / "alias.db").symlink_to(DB)
    before = digest(stored / DB)
    said = usage_error(["env", "lock", "latest", "-o", path], capsys)
    assert f"--output {path} {says}" in said
    assert digest(stored / DB) == before and (stored / "alias.db").is_symlink()


def test_a_history_given_with_db_is_protected_as_well(stored, capsys):
    db = stored / ".modelci" / "other.db"
    assert cli.main(["--db", str(db), "-q", "run", "--target", "current"]) == 0
    before = digest(db)
    said = usage_error(["--db", f"sqlite:///{db}", "run", "--target", "current", "--json", str(db)], capsys)
    assert "is the history database" in said
    assert digest(db) == before


# --- two options, one file; an empty path ------------------------------------------------------------------


def test_two_options_given_one_file_are_refused_before_anything_is_removed(project, capsys):
    (project / "r.json").write_text(OLDER)
    said = usage_error(["run", "--target", "current", "--json", "r.json", "--junit", "./r.json"], capsys)
    assert "--json r.json and --junit ./r.json are the same file; give each its own path" in said
    assert (project / "r.json").read_text() == OLDER
    assert not (project / ".modelci").exists()  # refused before the run
    said = usage_error(["compat", "--target", "current", "--json", "m", "--markdown", "m"], capsys)
    assert "--json m and --markdown m are the same file" in said


# --- a file that is no report of ours -----------------------------------------------------------------------


@pytest.mark.parametrize("argv, path, says", [
    (["run", "--target", "current", "-k", "typo", "--json", "modelci.toml"], "modelci.toml",
     "--json modelci.toml is the config file; give another path"),
    (["env", "lock", "1", "-o", "modelci.toml"], "modelci.toml", "--output modelci.toml is the config file"),
    (["run", "--target", "current", "--json", "models/classifier.py"], "models/classifier.py",
     "--json models/classifier.py: the file there is not a modelci report, and the report would replace it"),
    (["compare", "current", "nosuch==9", "--markdown", "NOTES.md"], "NOTES.md",
     "--markdown NOTES.md: the file there is not a modelci report"),
    (["run", "--target", "current", "--junit", "NOTES.md"], "NOTES.md", "--junit NOTES.md: the file there is not"),
    (["calibrate", "--target", "current", "--json", "NOTES.md"], "NOTES.md", "--json NOTES.md: the file there"),
    (["compat", "--target", "numpy==2.1.3", "--markdown", "NOTES.md"], "NOTES.md", "--markdown NOTES.md: the file"),
])
def test_a_file_that_is_no_report_is_refused_and_kept(stored, capsys, argv, path, says):
    """These removed the config file, the suite's only workload and a user's notes, and then failed (a typo in -k,
    a version that does not install): only a report of an older run is ours to remove."""
    (stored / "NOTES.md").write_text("notes of a user\n")
    before = digest(stored / path)
    runs = len(list((stored / ".modelci").iterdir()))
    said = usage_error(argv, capsys)
    assert says in said
    assert digest(stored / path) == before
    assert len(list((stored / ".modelci").iterdir())) == runs  # refused before anything ran


#: each output of `modelci env`, and how it names a file at its path that it did not write
ENV_OUTPUTS = [
    (["env", "lock", "latest", "-o", "{}"], "--output {}: the file there is not a lock that modelci wrote"),
    (["env", "constraints", "--from", "latest", "-o", "{}"],
     "--output {}: the file there is not a constraints file that modelci derived"),
    (["env", "diff", "latest", "latest", "--json", "{}"], "--json {}: the file there is not an `env diff` JSON file"),
    (["env", "consistency", "--target", "current", "--json", "{}"],
     "--json {}: the file there is not an `env consistency` JSON file"),
]


@pytest.mark.parametrize("argv, says", ENV_OUTPUTS)
@pytest.mark.parametrize("content", ["def main():\n    return 0\n", OLDER], ids=["a module", "a run report"])
def test_env_outputs_refuse_a_file_they_did_not_write_and_keep_it(project, capsys, argv, says, content):
    """`env lock latest -o tool.py` replaced a user's module by a lock without a word; a run's report is not the
    lock's to replace either. The history does not exist here: the file is named before anything is read."""
    (project / "tool.py").write_text(content)
    said = usage_error([a.format("tool.py") for a in argv], capsys)
    assert says.format("tool.py") in said
    assert "give another path, or remove that file first if it may go" in said
    assert (project / "tool.py").read_text() == content
    assert not (project / ".modelci").exists()


@pytest.mark.parametrize("argv, says", ENV_OUTPUTS)
def test_env_outputs_replace_an_empty_file_and_their_own_earlier_output(stored, argv, says):
    (stored / "out").write_text("")
    for _ in range(2):
        assert cli.main([a.format("out") for a in argv]) == 0
    assert (stored / "out").read_text().startswith(("# modelci", "{"))


def test_compats_own_json_report_is_taken_as_a_report(project):
    """compat's JSON has a schema of its own (modelci.compat/1): its second run refused its first one's report."""
    from modelci.report import compat_report, files

    (project / "c.json").write_text(json.dumps({"schema": compat_report.SCHEMA, "kind": "compat"}, indent=2))
    files.prepare({"--json": "c.json"})
    assert not (project / "c.json").exists()


def test_the_reports_of_every_kind_are_replaced_by_the_next_run(stored):
    """What run and compare wrote (JSON, JUnit XML with its XML declaration, Markdown) is theirs to replace, as is
    an empty file (mktemp's, a CI's step summary before anything is written to it)."""
    (stored / "empty.md").write_text("")
    for argv in (["run", "--target", "current"], ["compare", "current", "current"]):
        for _ in range(2):
            assert cli.main(["-q", *argv, "--json", "r.json", "--junit", "r.xml", "--markdown", "r.md"]) == 0
    assert json.loads((stored / "r.json").read_text())["kind"] == "compare"
    assert (stored / "r.md").read_text().startswith("## modelci compare:")
    assert cli.main(["-q", "run", "--target", "current", "--markdown", "empty.md"]) == 0
    assert (stored / "empty.md").read_text().startswith("## modelci:")


@pytest.mark.parametrize("argv, says", [
    (["run", "--lock", "l.lock", "--json", "l.lock"], "--json l.lock is the file --lock reads"),
    (["run", "--lock", "./l.lock", "--markdown", "l.lock"], "--markdown l.lock is the file --lock reads"),
    (["env", "constraints", "--from", "l.lock", "-o", "l.lock"], "--output l.lock is the file --from reads"),
    (["env", "diff", "l.lock", "latest", "--json", "l.lock"], "--json l.lock is the file A reads"),
])
def test_an_output_that_is_the_lock_the_command_reads_is_refused(project, capsys, argv, says):
    write_lock(project / "l.lock")
    before = digest(project / "l.lock")
    said = usage_error(argv, capsys)
    assert f"{says}; give another path" in said
    assert digest(project / "l.lock") == before  # the run used to remove the lock before reading it


@pytest.mark.parametrize("argv, option", [
    (["env", "lock", "l.lock", "-o", ""], "--output"),
    (["env", "constraints", "--from", "l.lock", "-o", ""], "--output"),
    (["env", "diff", "l.lock", "l.lock", "--json", ""], "--json"),
    (["env", "consistency", "--target", "current", "--json", ""], "--json"),
    (["run", "--target", "current", "--junit", ""], "--junit"),
    (["calibrate", "--target", "current", "--json", ""], "--json"),
])
def test_an_empty_output_path_is_refused(project, capsys, argv, option):
    write_lock(project / "l.lock")
    said = usage_error(argv, capsys)
    assert f"{option} '': give a file path" in said
    assert not (project / ".modelci").exists()
