"""Bad input through the real CLI entry point: each gets a usage error (exit 2) that names what is wrong and what
to do, before any work, and leaves what is recorded as it was; never a traceback.

Every case here was a traceback, a silent wrong answer, or work done before the refusal.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from alarm_history import History, timed
from clicalls import digest, usage_error

from modelci import cli
from modelci.alarms import lifecycle

HUGE = "99999999999999999999999"


def write_lock(path: Path) -> None:
    """A lock file of numpy 2.1.3, as `modelci env lock` writes one."""
    from modelci.envs import lockfile

    lockfile.write(path, lockfile.Lock.of("numpy==2.1.3\n", {"python": "3.11"}, environment="e1", source="test"))


@pytest.fixture
def project(tmp_path, monkeypatch):
    """An empty project folder, the CLI pointed at its own history there (not created yet)."""
    monkeypatch.chdir(tmp_path)
    for name in ("MODELCI_DB", "MODELCI_ARTIFACTS", "MODELCI_RUNNER", "MODELCI_SEED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MODELCI_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


@pytest.fixture
def alarmed(tmp_path, monkeypatch):
    """A history with one open alarm (fw 1.1 30% slower than 1.0), the CLI pointed at it."""
    history = History(tmp_path / "p")
    history.run("1.0", [timed("s/Slow", 0.10)])
    history.run("1.1", [timed("s/Slow", 0.13, seed=1)])
    monkeypatch.chdir(history.root)
    monkeypatch.setenv("MODELCI_CACHE_DIR", str(tmp_path / "cache"))
    return history



@pytest.mark.parametrize("argv", [["history"], ["show"], ["alarms", "list"], ["report", "--out", "site"],
                                  ["db", "current"], ["env", "lock", "-o", "l.txt", "latest"]])
def test_a_command_that_reads_the_history_refuses_a_mistyped_path_and_creates_nothing(project, capsys, argv):
    # it used to create the folders and an empty history, and answer "no alarms" (exit 0): green in CI
    said = usage_error(["--db", str(project / "typo" / "history.db"), *argv], capsys)
    assert f"there is no history database {project / 'typo' / 'history.db'}" in said
    assert "`modelci run` creates it" in said
    assert not (project / "typo").exists()


@pytest.mark.parametrize("argv", [["history"], ["db", "current"], ["db", "upgrade"],
                                  ["run", "--target", "current", "--suite", "zoo:numpy"],
                                  ["calibrate", "--target", "current", "--suite", "zoo:numpy"]])
def test_no_command_adds_modelci_tables_to_another_applications_database(project, capsys, argv):
    # the writing commands used to add modelci's tables to it beside the application's own (a mistyped --db)
    other = project / "other_app.db"
    with sqlite3.connect(other) as db:
        db.execute("create table orders (id integer primary key)")
    db.close()
    before = digest(other)
    said = usage_error(["--db", str(other), *argv], capsys)
    assert "holds no modelci history" in said
    if argv[0] != "history":
        assert "other tables (orders)" in said and "give a new or empty database" in said
    # not a byte changed either: setting WAL mode rewrote its header before the refusal
    assert digest(other) == before
    with sqlite3.connect(other) as db:
        tables = [row[0] for row in db.execute("select name from sqlite_master where type = 'table'")]
    assert tables == ["orders"]


READERS = [["history"], ["show"], ["alarms", "list"], ["alarms", "show", "1"], ["report", "--out", "site"],
           ["db", "current"], ["env", "lock", "-o", "l.txt", "latest"], ["env", "diff", "1", "1"]]


@pytest.mark.parametrize("argv", READERS)
def test_a_command_that_reads_an_empty_file_refuses_it_and_writes_nothing(project, capsys, argv):
    # each turned the empty file into a 4 KiB SQLite database (the WAL mode set on opening) before refusing it,
    # and `db current` answered "revision none, pending ..." with exit 0
    empty = project / "e.db"
    empty.write_bytes(b"")
    said = usage_error(["--db", str(empty), *argv], capsys)
    assert "holds no modelci history" in said
    if argv[0] == "db":
        assert "`modelci db upgrade` makes one there" in said
    assert empty.read_bytes() == b""
    assert sorted(p.name for p in project.iterdir()) == ["e.db"]


@pytest.mark.parametrize("argv", READERS)
def test_a_command_that_reads_a_history_leaves_its_file_as_it_was(alarmed, capsys, argv):
    alarmed.store.engine.dispose()  # the fixture's writes are in the file, not in a WAL beside it
    db = alarmed.root / alarmed.config.db
    before = digest(db)
    assert cli.main(argv) == 0, capsys.readouterr()
    assert digest(db) == before


@pytest.mark.parametrize("argv", [["history"], ["db", "upgrade"],
                                  ["run", "--target", "current", "--suite", "zoo:numpy"]])
def test_a_database_url_whose_port_is_no_number_is_named(project, capsys, argv):
    # SQLAlchemy raises a bare ValueError for it, which reached the user as a traceback
    said = usage_error(["--db", "postgresql://ci@localhost:port/modelci", *argv], capsys)
    assert "db = 'postgresql://ci@localhost:port/modelci' is not a database URL (its port is not a number)" in said
    said = usage_error(["--db", "postgresql://ci@localhost:99999/modelci", *argv], capsys)
    assert "db = 'postgresql://ci@localhost:99999/modelci': port 99999 is no TCP port (1-65535)" in said


def test_a_history_path_that_is_a_folder_is_named_as_one(project, capsys):
    (project / "hist").mkdir()
    said = usage_error(["--db", "hist", "history"], capsys)
    assert f"the history database {project / 'hist'} is a folder; give the file in it" in said


@pytest.mark.parametrize("argv", [["run", "--target", "current", "--suite", "zoo:numpy"],
                                  ["compare", "current", "current", "--suite", "zoo:numpy"],
                                  ["calibrate", "--target", "current", "--suite", "zoo:numpy", "--runs", "2"],
                                  ["bisect", "--package", "numpy", "--between", "1.26.4", "2.0.0",
                                   "--suite", "zoo:numpy"]])
@pytest.mark.parametrize("cache", ["a file", "under a file"])
def test_a_cache_folder_that_cannot_be_made_is_named(project, capsys, monkeypatch, argv, cache):
    # it was a FileExistsError or NotADirectoryError traceback from wherever the cache was first made
    (project / "taken").write_text("")
    folder = project / "taken" if cache == "a file" else project / "taken" / "cache"
    monkeypatch.setenv("MODELCI_CACHE_DIR", str(folder))
    said = usage_error(["--db", str(project / "h.db"), *argv], capsys)
    why = "it is a file" if cache == "a file" else "Not a directory"
    assert f"cache_dir {folder} cannot be used: {why}; set cache_dir in modelci.toml or MODELCI_CACHE_DIR" in said


def test_ids_beyond_what_the_database_holds_are_no_run_and_no_alarm(alarmed, capsys):
    assert "no run '99999999999999999999999'" in usage_error(["show", HUGE], capsys)
    assert "no run '99999999999999999999999'" in usage_error(["env", "diff", HUGE, "1"], capsys)
    for argv in (["alarms", "show", HUGE], ["alarms", "ack", HUGE], ["alarms", "resolve", "0"]):
        assert "give an alarm id, a whole number from 1" in usage_error(argv, capsys)


def test_who_acts_on_an_alarm_is_refused_past_what_the_history_holds(alarmed, capsys, monkeypatch):
    (alarm,) = lifecycle.list_alarms(alarmed.store)
    assert "--by 'bbbb" in usage_error(["alarms", "ack", str(alarm.id), "--by", "b" * 201], capsys)
    monkeypatch.setenv("MODELCI_USER", "u" * 201)
    said = usage_error(["alarms", "silence", str(alarm.id), "--until", "2099-01-01"], capsys)
    assert "MODELCI_USER 'uuuu" in said and "is 201 characters long; the most is 200" in said
    assert [e["event"] for e in lifecycle.get_alarm(alarmed.store, alarm.id).events].count("acknowledged") == 0


@pytest.mark.parametrize("who", ["", " ", "a\nb"])
def test_who_acts_on_an_alarm_must_be_a_name_on_one_line(alarmed, capsys, who):
    (alarm,) = lifecycle.list_alarms(alarmed.store)
    said = usage_error(["alarms", "ack", str(alarm.id), "--by", who], capsys)
    assert f"--by {who!r}: give who acts, a name on one line" in said
    assert [e["event"] for e in lifecycle.get_alarm(alarmed.store, alarm.id).events].count("acknowledged") == 0


def test_a_sqlite_url_in_a_folder_not_made_yet_makes_it_as_a_path_does(project, capsys):
    """sqlite:///PATH failed with SQLite's "unable to open database file" (exit 3) where PATH made its folder."""
    db = project / "new" / "folder" / "h.db"
    assert cli.main(["--db", f"sqlite:///{db}", "-q", "run", "--target", "current", "--suite", "zoo:numpy",
                     "-k", "LinearRegressionSGD"]) == 0
    assert db.is_file()


def test_an_alarm_given_twice_is_acknowledged_once(alarmed, capsys):
    (alarm,) = lifecycle.list_alarms(alarmed.store)
    assert cli.main(["alarms", "ack", str(alarm.id), str(alarm.id), "--by", "me"]) == 0
    events = [e["event"] for e in lifecycle.get_alarm(alarmed.store, alarm.id).events]
    assert events.count("acknowledged") == 1


def test_alarms_list_refuses_a_runner_the_history_never_saw(alarmed, capsys):
    # a misspelt runner printed "no alarms" with exit 0, as a clean bill of health would
    said = usage_error(["alarms", "list", "--runner", "nobody"], capsys)
    assert "--runner 'nobody': no run of that runner in the history; runners there: ci" in said
    assert cli.main(["alarms", "list", "--runner", "ci"]) == 0
    assert "Slow" in capsys.readouterr().out


@pytest.mark.parametrize("argv, says", [
    (["serve", "--port", "99999"], "give a port from 0 to 65535"),
    (["serve", "--port", "-1"], "give a port from 0 to 65535"),
    (["report", "--out", "site", "--recent", "-5"], "give a whole number of 0 or more"),
    (["env", "gc", "--older-than", "nan"], "not a number of days of 0 or more"),
    (["run", "--target", "current", "-k", "A", "-k", "B"], "-k given twice"),
    (["run", "--target", "current", "-k", ""], "-k '' is empty; give text of a workload id"),
    # past the history's columns: PostgreSQL refused the run after every workload had run
    (["run", "--target", "numpy==1." + "0" * 120, "--suite", "zoo:numpy"],
     "its version is 122 characters long; the history holds at most 100"),
    (["compat", "--target", "numpy==2.1.3", "--jobs", "0"], "argument --jobs: 0 is out of range"),
    # an unset variable in a CI script (`--from "$PRODUCER"`) checked every older version, the default, silently
    (["compat", "--target", "numpy==2.1.3", "--from", ""], "argument --from: '' is empty"),
    (["bisect", "--check", "compat", "--good", "a", "--bad", "b", "--into", " "], "argument --into: ' ' is empty"),
    (["compat", "--target", "numpy==2.1.3", "--from", " , "], "argument --from: ' , ' is empty"),
    # each timed call is a value the history keeps in the run's row: a billion would have filled it
    (["run", "--target", "current", "--suite", "zoo:numpy", "--repeats", "1000000000"],
     "option --repeats must be 100000 or less"),
    (["--db", "postgresql+psycopg2://ci@localhost/x", "history"],
     "the PostgreSQL driver psycopg2 that postgresql+psycopg2:// names is not installed"),
    # "no target" said nothing of the --ref that was given
    (["run", "--ref", "main"], "--ref main needs --repo: pass --repo PATH"),
    # "" fell back to ./modelci.toml, silently another config than the one meant
    (["--config", "", "history"], "--config '': give the config file's path"),
    # a run stored in memory was gone when the command ended
    (["--db", "sqlite://", "run", "--target", "current", "--suite", "zoo:numpy"], "is an in-memory database"),
    (["--db", "sqlite:///:memory:", "db", "current"], "is an in-memory database, gone when the command ends"),
    # ?mode=ro without uri=true was ignored by the driver (with a warning): the history opened for writing
    (["--db", "sqlite:///h.db?mode=ro", "history"],
     "SQLite takes mode only in a URI; write sqlite:///file:PATH?mode=ro&uri=true"),
    # "disk I/O error" (exit 3) to a run, "there is no history database" to a reader
    (["--db", "/dev/null", "run", "--target", "current", "--suite", "zoo:numpy"],
     "the history database /dev/null is not a regular file (a device or a pipe)"),
    (["--db", "/dev/null", "show"], "the history database /dev/null is not a regular file"),
    # "/dev/null is a folder but neither ..."
    (["env", "diff", "/dev/null", "latest"], "/dev/null is neither a lock file nor a folder"),
    # argparse drops a value of '--': "option --runner must be a string, got []"
    (["run", "--runner=--", "--target", "current"], "--runner=--: '--' cannot be a value (it ends the options)"),
    # 100,000,000 stored 779 runs in 170 s before it was stopped
    (["calibrate", "--target", "current", "--suite", "zoo:numpy", "--runs", "100000000"], "at most 1000"),
    # accepted and ignored, where --good without --bisect-on-alarm was refused
    (["compat", "--target", "numpy==2.1.3", "--jobs", "5"], "--jobs goes with --bisect-on-alarm"),
    (["run", "--target", "current", "--suite", "/dev/null"], "suite '/dev/null' is not a folder"),
    # --last was silently ignored
    (["history", "numpy/MLPClassifier", "--all", "--last", "3"], "--all and --last 3: give one"),
    # "-k None selects 6"
    (["bisect", "--versions", "numpy==2.0.2,numpy==2.1.3", "--suite", "zoo:numpy"],
     "bisect follows one workload, but without -k the suite holds 6: numpy/ElmanRNN"),
])
def test_options_out_of_range_are_refused_by_name(project, capsys, argv, says):
    assert says in usage_error(argv, capsys)


@pytest.mark.parametrize("a, b", [("", "current"), ("current", ""), ("current", "numpy===")])
def test_compare_refuses_a_bad_target_on_either_side_before_it_runs_the_other(project, capsys, a, b):
    said = usage_error(["--db", str(project / "h.db"), "compare", a, b, "--suite", "zoo:numpy"], capsys)
    assert "the target is empty" in said or "is not a requirement" in said
    assert not (project / "h.db").exists()  # nothing ran: a run would have made the history


@pytest.mark.parametrize("argv, says", [
    (["bisect", "--versions", "numpy==2.1.3,torch==2.0", "--suite", "zoo:numpy", "-k", "Linear"],
     "--versions mixes packages: numpy==2.1.3 is numpy, torch==2.0 is torch"),
    (["bisect", "--versions", "numpy==2.0.2,numpy==2.1.3,Torch==2.0", "--suite", "zoo:numpy", "-k", "Linear"],
     "--versions mixes packages: numpy==2.0.2 is numpy, Torch==2.0 is torch"),
    (["bisect", "--package", "numpy", "--between", "2.0.2", "torch==2.0", "--suite", "zoo:numpy", "-k", "Linear"],
     "--between torch==2.0: that is a release of torch, but --package is numpy"),
])
def test_a_bisect_over_two_packages_is_refused_before_anything_is_built(project, capsys, argv, says):
    """A torch environment was built and run before "the bad end torch==2.0 is not bad" said what was wrong."""
    assert says in usage_error(argv, capsys)
    assert not (project / "cache" / "envs").exists() and not (project / ".modelci").exists()


def test_a_bad_target_in_versions_is_named_with_an_example_of_versions(project, capsys):
    said = usage_error(["bisect", "--versions", "numpy==2.1.3,numpy==nope", "--suite", "zoo:numpy", "-k", "Linear"],
                       capsys)
    assert "target 'numpy==nope' is not a requirement" in said
    assert "for example --versions numpy==1.26.4,numpy==2.0.0" in said and "--target" not in said


@pytest.mark.parametrize("argv, says", [
    (["run", "--target", "current", "--json", "a.json", "--json", "b.json"], "--json given twice; give it once"),
    (["run", "--target", "current", "--target", "numpy==2.1.3"],
     "--target given twice; give it once (`modelci compare A B` runs two targets)"),
    (["run", "--target", "current", "--junit", "a.xml", "--junit", "b.xml"], "--junit given twice"),
    (["compare", "current", "current", "--markdown", "a.md", "--markdown", "b.md"], "--markdown given twice"),
    (["compat", "--target", "current", "--markdown", "a.md", "--markdown", "b.md"], "--markdown given twice"),
    (["calibrate", "--target", "current", "--target", "numpy==2.1.3"], "--target given twice"),
    (["env", "lock", "latest", "-o", "a.lock", "--output", "b.lock"],
     "-o and --output are one option, given twice; give it once"),
    (["env", "consistency", "--target", "current", "--target", "numpy==2.1.3"], "--target given twice"),
    (["bisect", "--versions", "numpy==2.0.2,numpy==2.1.3", "--versions", "numpy==2.1.3,numpy==2.2.0"],
     "--versions given twice"),
    (["bisect", "--good", "v1", "--old", "v2", "--bad", "v3"], "--good and --old are one option, given twice"),
    (["report", "--out", "a", "--out", "b"], "--out given twice"),
    (["--db", "a.db", "--db", "b.db", "history"], "--db given twice"),
])
def test_an_option_that_takes_one_value_given_twice_is_refused(project, capsys, argv, says):
    """argparse kept the last of two: `--json a.json --json b.json` wrote b.json alone, `--target X --target Y`
    ran Y."""
    assert says in usage_error(argv, capsys)
    assert sorted(p.name for p in project.iterdir()) == []  # nothing run, nothing written


def test_calibrate_refuses_an_empty_target(project, capsys):
    assert "the target is empty" in usage_error(["calibrate", "--target", " ", "--suite", "zoo:numpy"], capsys)


@pytest.mark.parametrize("argv, option", [
    (["env", "lock", "-o", "{folder}", "l.lock"], "--output"),
    (["env", "constraints", "--from", "l.lock", "-o", "{folder}"], "--output"),
    (["env", "diff", "l.lock", "l.lock", "--json", "{folder}"], "--json"),
    (["env", "lock", "-o", "{missing}/l.txt", "l.lock"], "--output"),
    (["bisect", "--versions", "1,2", "--suite", "zoo:numpy", "--json", "{folder}"], "--json"),
    (["compat", "--target", "current", "--suite", "zoo:numpy", "--markdown", "{folder}"], "--markdown"),
])
def test_an_output_file_that_cannot_be_written_is_refused_before_the_work(project, capsys, argv, option):
    (project / "folder").mkdir()
    write_lock(project / "l.lock")
    argv = [a.format(folder=project / "folder", missing=project / "missing") for a in argv]
    said = usage_error(argv, capsys)
    assert f"{option} " in said and "cannot write the file there" in said
    assert not (project / ".modelci").exists()  # refused before the history was opened


def test_a_lock_written_over_an_older_one_replaces_it_whole(project, capsys):
    from modelci.envs import lockfile

    write_lock(project / "l.lock")
    lockfile.write(project / "out.lock", lockfile.Lock.of("numpy==2.0.2\n", {"python": "3.11"}, environment="e0"))
    assert cli.main(["env", "lock", "-o", "out.lock", "l.lock"]) == 0
    assert "numpy==2.1.3" in (project / "out.lock").read_text()
    assert "numpy==2.0.2" not in (project / "out.lock").read_text()


def test_env_export_into_a_file_says_so(alarmed, capsys):
    (alarmed.root / "afile").write_text("mine\n")
    said = usage_error(["env", "export", "--out", "afile", "1"], capsys)
    assert "--out afile is a file; export into a new or empty folder" in said
    assert (alarmed.root / "afile").read_text() == "mine\n"


@pytest.mark.parametrize("name, content, says", [
    ("modelci.toml", b"seed = 1\n\xff\xfe\x00junk\n", "not UTF-8 text"),
    ("pyproject.toml", b"tool = 5\n", "'tool' must be a table"),
    ("pyproject.toml", b"[tool]\nmodelci = 5\n", "'tool.modelci' must be a table"),
    ("modelci.toml", b"seed = 99999999999999999999\n", "must be 4294967295 or less"),
    ("modelci.toml", b'runner = ""\n', "must be a non-blank label"),
    ("modelci.toml", b'runner = "a\\nb"\n', "must be a non-blank label"),
    ("modelci.toml", b"[checks]\nalpha = 5\n", "'alpha' is a significance level"),
    ("modelci.toml", b"[checks]\ntiming_factor = nan\n", "must be a finite number"),
    ("modelci.toml", b"[checks]\ntiming_factor = 0.5\n", "must be 1 or more"),
    ("modelci.toml", b"[checks]\nrtol = -1\n", "'rtol' must not be negative"),
    # each of these was a traceback: a home folder that cannot be found, a NUL the OS refuses, tomllib's recursion,
    # and a timeout past what select() takes (the run failed when its first workload started)
    ("modelci.toml", b'db = "~nosuchuser-modelci/x.db"\n', "~nosuchuser-modelci is no user's home folder here"),
    ("modelci.toml", b'artifacts = "~nosuchuser-modelci/a"\n', "~nosuchuser-modelci is no user's home folder"),
    ("modelci.toml", b'db = "a\\u0000b"\n', "holds a NUL character"),
    ("modelci.toml", b"[checks]\nx = " + b"[" * 2000 + b"]" * 2000 + b"\n", "nested too deeply to read"),
    ("modelci.toml", b"timeout = 1e10\n", "must be 31536000 or less"),
    # each timed call is a value the history keeps in the run's row: a billion would have filled it
    ("modelci.toml", b"repeats = 1000000000\n", "must be 100000 or less"),
    # numbers of hundreds of digits were an OverflowError; blank paths made a history named "   ", or scattered
    # the artifact store's folders over the project; a runner label past the history's column lost the run
    ("modelci.toml", b"timeout = 1" + b"0" * 400 + b"\n", "key 'timeout' must be a finite number, got 1000"),
    ("modelci.toml", b"[checks]\ntiming_factor = 1" + b"0" * 400 + b"\n", "'timing_factor' must be a finite number"),
    ("modelci.toml", b"[checks]\nskip_head = 1" + b"0" * 400 + b"\n", "(401 digits)"),
    ("modelci.toml", b'[[notify]]\nkind = "webhook"\nurl_env = "HOOK"\ntimeout = 1' + b"0" * 400 + b"\n",
     "key 'timeout' must be a finite number"),
    ("modelci.toml", b'[[notify]]\nkind = "webhook"\nurl_env = "HOOK"\nretries = 1' + b"0" * 400 + b"\n",
     "retries = 10000000000000000000... (401 digits), timeout = 10 and backoff = 1 can hold the run"),
    ("modelci.toml", b'[[overrides]]\nworkload = ""\nrtol = 0.1\n', "key 'workload' must be a non-empty string"),
    ("modelci.toml", b'db = "   "\n', "db = '   ' (from file:"),
    ("modelci.toml", b'artifacts = ""\n', "modelci.toml) is blank; give a path, or leave it out"),
    ("modelci.toml", b'runner = "' + b"r" * 201 + b'"\n', "is 201 characters long; the most is 200"),
])
def test_a_bad_config_file_is_named_with_what_is_wrong(project, capsys, name, content, says):
    (project / name).write_bytes(content)
    assert says in usage_error(["config"], capsys)


def test_a_home_folder_that_does_not_exist_is_refused_from_the_environment_too(project, capsys, monkeypatch):
    monkeypatch.setenv("MODELCI_CACHE_DIR", "~nosuchuser-modelci/cache")
    assert "cache_dir = '~nosuchuser-modelci/cache' (from env:MODELCI_CACHE_DIR)" in usage_error(["config"], capsys)


def test_a_db_given_on_the_command_line_or_in_the_environment_is_relative_to_the_current_folder(project,
                                                                                               monkeypatch):
    from modelci import config

    (project / "sub").mkdir()
    (project / "sub" / "modelci.toml").write_text('db = "h.db"\n')
    file = project / "sub" / "modelci.toml"
    assert config.load(config_file=file, cwd=project, environ={}).db == str(project / "sub" / "h.db")
    assert config.load(cli={"db": "here.db"}, config_file=file, cwd=project, environ={}).db == \
        str(project / "here.db")
    assert config.load(config_file=file, cwd=project, environ={"MODELCI_DB": "e.db"}).db == str(project / "e.db")


def test_an_argument_that_is_not_utf8_is_refused_by_name(project, capsys):
    said = usage_error(["history", "\udcff\udcfe"], capsys)
    assert "the argument b'\\xff\\xfe' is not UTF-8 text" in said


def test_a_binary_file_given_as_a_lock_is_named(project, capsys):
    (project / "r.bin").write_bytes(bytes(range(256)) * 4)
    assert "r.bin is no lock file: it is not UTF-8 text" in usage_error(["env", "diff", "r.bin", "r.bin"], capsys)


def test_env_check_refuses_a_history_named_on_the_command_line_that_does_not_exist(project, capsys):
    said = usage_error(["--db", "typo/histroy.db", "env", "check"], capsys)
    assert "there is no history database" in said
    assert not (project / "typo").exists()
    # a project's own history before its first run: the constraints are checked, and no empty history is made
    (project / "c.txt").write_text("numpy<3\n")
    (project / "modelci.toml").write_text('[env]\nconstraints = ["c.txt"]\n')
    assert cli.main(["env", "check"]) == 0
    assert "no history at" in capsys.readouterr().out
    assert not (project / ".modelci").exists()


def test_env_check_with_nothing_to_check_says_so_and_does_not_pass(project, capsys):
    # it said "env check passed" (exit 0) having checked nothing: green in CI for a project without constraints
    said = usage_error(["env", "check"], capsys)
    assert "nothing to check: no [env] constraints are configured" in said and "there is no history yet" in said
    assert "Configure [env] constraints in modelci.toml" in said and "--lock FILE" in said
    assert not (project / ".modelci").exists()
    # a history with no runs in it, as `db upgrade` leaves a new database
    assert cli.main(["--db", "e.db", "db", "upgrade"]) == 0
    said = usage_error(["--db", "e.db", "env", "check"], capsys)
    assert "nothing to check" in said and "the history holds no complete run of a built target" in said
    # a lock given is something to check
    write_lock(project / "l.txt")
    assert cli.main(["--db", "e.db", "env", "check", "--lock", "l.txt"]) == 0
    assert "checked lock of" in capsys.readouterr().out


def test_a_seed_beyond_what_python_accepts_is_refused_from_the_environment_too(project, capsys, monkeypatch):
    monkeypatch.setenv("MODELCI_SEED", str(2**32))
    assert "MODELCI_SEED must be 4294967295 or less" in usage_error(["config"], capsys)


def test_a_config_file_with_a_byte_order_mark_is_read(project):
    from modelci import config

    (project / "modelci.toml").write_bytes(b"\xef\xbb\xbfseed = 3\n")
    assert config.load(cwd=project, environ={}).seed == 3


def test_calibrate_writes_its_json_report(tmp_path, monkeypatch, capsys):
    assert cli.main(["init", "--dir", str(tmp_path / "p")]) == 0
    monkeypatch.chdir(tmp_path / "p")
    monkeypatch.setenv("MODELCI_CACHE_DIR", str(tmp_path / "cache"))
    code = cli.main(["calibrate", "--target", "current", "--runs", "2", "--json", "noise.json"])
    assert code == 0, capsys.readouterr()
    report = json.loads(Path("noise.json").read_text())
    assert report["kind"] == "calibration" and report["target"]["spec"] == "current"
    assert len(report["run_ids"]) == 2 and not report["failures"]
    timing = [e for e in report["noise"] if e["metric"] == "time.infer"]
    assert timing and timing[0]["runs"] == 2 and timing[0]["cv"] is not None


def test_init_of_a_new_project_does_not_read_the_current_folders_broken_config(project, capsys):
    (project / "modelci.toml").write_text("this is = not [toml\n")
    assert cli.main(["init", "--dir", "fresh"]) == 0
    assert (project / "fresh" / "modelci.toml").is_file()


def test_a_suite_that_is_a_file_or_empty_and_a_config_that_is_a_folder_say_so(project, capsys):
    (project / "workload.py").write_text("")
    said = usage_error(["run", "--target", "current", "--suite", "workload.py"], capsys)
    assert "suite 'workload.py' is a file; a suite is the folder that holds workload files" in said
    assert "an empty --suite" in usage_error(["run", "--target", "current", "--suite", ""], capsys)
    assert "is a folder; pass the modelci.toml" in usage_error(["--config", str(project), "config"], capsys)
    assert "/dev/null is not a regular file" in usage_error(["--config", "/dev/null", "config"], capsys)
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert "pyproject.toml has no [tool.modelci] table" in usage_error(["--config", "pyproject.toml", "config"],
                                                                       capsys)
    assert not (project / ".modelci").exists()  # the current folder was not run as a suite


def test_serve_that_cannot_listen_leaves_no_temporary_site_behind(alarmed, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    said = usage_error(["serve", "--host", "nonexistent.invalid", "--port", "0"], capsys)
    assert "cannot listen on 'nonexistent.invalid'" in said
    assert list((tmp_path / "tmp").iterdir()) == []  # a modelci-site-* folder was left for each failed start


def test_an_id_in_another_scripts_digits_is_no_id(alarmed, capsys):
    # int() reads "١" (ARABIC-INDIC DIGIT ONE) as 1: the command acted on alarm 1
    assert "'١' is not an alarm id" in usage_error(["alarms", "ack", "١"], capsys)


def test_serve_on_a_host_that_is_no_address_here_says_so_before_building_the_site(alarmed, capsys):
    said = usage_error(["serve", "--host", "nonexistent.invalid", "--port", "0", "--out", "site"], capsys)
    assert "it is no address of this machine" in said
    assert not (alarmed.root / "site" / "index.html").exists()


def test_env_check_of_a_constraints_file_that_does_not_exist_says_so(project, capsys):
    # a mistyped path is a usage error (exit 2), not a constraints file that failed the check (exit 1)
    said = usage_error(["env", "check", "nosuch.txt"], capsys)
    assert f"{project / 'nosuch.txt'} does not exist: name constraints files that exist" in said
    assert "or give no FILE to check every *constraint*.txt in the project" in said
    (project / "folder").mkdir()
    said = usage_error(["env", "check", "folder", "/dev/null"], capsys)
    assert f"{project / 'folder'} is a folder" in said and "/dev/null is not a regular file" in said


def test_compat_refuses_a_bad_from_before_it_builds_an_environment(project, capsys):
    said = usage_error(["compat", "--target", "numpy==2.1.3", "--from", "numpy===", "--suite", "zoo:numpy"], capsys)
    assert "--from 'numpy===' is neither a version" in said
    assert not (project / "cache" / "envs").exists()


def test_report_does_not_replace_a_page_it_did_not_write(alarmed, capsys):
    mine = alarmed.root / "www"
    mine.mkdir()
    (mine / "index.html").write_text("<p>my page</p>")
    assert "www holds files that no modelci report wrote (index.html)" in usage_error(["report", "--out", "www"],
                                                                                       capsys)
    assert (mine / "index.html").read_text() == "<p>my page</p>"
    # nor does it spread a site among a project's files (`report --out .`), replacing any of the same name
    (alarmed.root / "assets").mkdir(exist_ok=True)
    (alarmed.root / "assets" / "site.css").write_text("mine")
    assert "holds files that no modelci report wrote" in usage_error(["report", "--out", "."], capsys)
    assert (alarmed.root / "assets" / "site.css").read_text() == "mine" and not (alarmed.root / "w").exists()
    assert "--out is empty" in usage_error(["report", "--out", ""], capsys)
    # a site it wrote itself is written again in place
    assert cli.main(["report", "--out", "site"]) == 0
    assert cli.main(["report", "--out", "site"]) == 0


def test_a_target_with_an_environment_marker_is_refused(project, capsys):
    said = usage_error(["run", "--target", 'numpy==1.0; os_name == "x"', "--suite", "zoo:numpy"], capsys)
    assert "has an environment marker" in said
    assert not (project / ".modelci").exists()


def test_a_suite_folder_without_workload_files_is_refused_before_the_run(project, capsys):
    (project / "empty").mkdir()
    (project / "helpers").mkdir()
    (project / "helpers" / "_common.py").write_text("X = 1\n")
    for folder in ("empty", "helpers"):
        said = usage_error(["run", "--target", "current", "--suite", folder], capsys)
        assert f"suite folder {folder!r} holds no workload files" in said
    assert not (project / ".modelci").exists()  # nothing stored, no alarm opened


LONG = "a" * 300  # one part of a path past the file system's 255 bytes


@pytest.mark.parametrize("argv", [
    ["run", "--target", "current", "--suite", f"/tmp/{LONG}"],
    ["run", "--target", f"/tmp/{LONG}.whl", "--suite", "zoo:numpy"],
    ["run", "--target", "current", "--json", f"/tmp/{LONG}"],
    ["--config", f"/tmp/{LONG}", "config"],
    ["--db", f"/tmp/{LONG}", "history"],
    ["init", "--dir", f"/tmp/{LONG}"],
    ["env", "check", f"/tmp/{LONG}"],
])
def test_a_path_part_too_long_for_the_file_system_is_named(project, capsys, argv):
    # each was an OSError traceback from wherever the path was first used
    said = usage_error(argv, capsys)
    assert "a file name too long for the file system (each part of a path holds at most 255 bytes)" in said
    assert "/tmp/aaaa" in said and "characters)" in said


@pytest.mark.parametrize("arg, kept", [
    ("--db=postgresql+psycopg://ci:p%40ss@db:5432/h?sslpassword=k3y&application_name=ci",
     "--db=postgresql+psycopg://ci:***@db:5432/h?sslpassword=***&application_name=ci"),
    ("https://__token__:glpat-abc@gitlab.example/api/v4/projects/1/packages/pypi/simple",
     "https://__token__:***@gitlab.example/api/v4/projects/1/packages/pypi/simple"),
    ("https://hooks.example/x?token=abc&y=1", "https://hooks.example/x?token=***&y=1"),
    ("postgresql://ci@db/modelci", "postgresql://ci@db/modelci"),
    ("suite/a:b@c.py", "suite/a:b@c.py"),
    # a command line as shlex.quote wrote it, redacted again where it is stored: the quote that closes the
    # argument is not the value's, and was taken with it
    ("modelci --db 'postgresql://ci@h:5432/hist?password=s3cret' run --target current",
     "modelci --db 'postgresql://ci@h:5432/hist?password=***' run --target current"),
    ("modelci --db 'postgresql://h/hist?password=***' run", "modelci --db 'postgresql://h/hist?password=***' run"),
    ('modelci --db "postgresql://ci@h/hist?sslpassword=k3y"', 'modelci --db "postgresql://ci@h/hist?sslpassword=***"'),
    # a quote inside the value (shlex writes it '"'"') is the value's, and redacted with it
    ("--db 'postgresql://ci@h/hist?password=a'\"'\"'b&application_name=ci' run",
     "--db 'postgresql://ci@h/hist?password=***&application_name=ci' run"),
    ("--db 'postgresql://ci@h/hist?password=s3cret'\"'\"''", "--db 'postgresql://ci@h/hist?password=***'"),
])
def test_a_secret_in_a_url_of_the_command_line_is_redacted_before_it_is_stored(arg, kept):
    from modelci.records import redacted

    assert redacted(arg) == kept


@pytest.mark.parametrize("spec", ["fw @ https://ci:s3cret@host/fw-1.0-py3-none-any.whl ; python_version > '3'",
                                  "git+https://ci:s3cret@host/fw.git@v1#bogus=1"])
def test_a_refused_target_is_named_without_its_password(spec, tmp_path):
    from modelci import targets
    from modelci.errors import UserError

    with pytest.raises(UserError) as refused:
        targets.resolve(spec, cache_dir=tmp_path)
    assert "s3cret" not in str(refused.value) and "ci:***@host" in str(refused.value), refused.value
