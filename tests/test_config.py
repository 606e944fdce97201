"""Configuration precedence (CLI > environment > file > default) and where each value came from."""

from __future__ import annotations

import re
import socket

from modelci import config as config_module


def test_runner_defaults_to_the_host_name(tmp_path):
    cfg = config_module.load(cwd=tmp_path, environ={})
    assert cfg.runner == socket.gethostname() and cfg.sources["runner"] == "default"


def test_cli_beats_environment_beats_file_beats_default(tmp_path):
    (tmp_path / "modelci.toml").write_text('runner = "from-file"\ntimeout = 60\nseed = 3\n')
    environ = {"MODELCI_RUNNER": "from-env", "MODELCI_TIMEOUT": "90"}
    cfg = config_module.load(cli={"runner": "from-cli"}, cwd=tmp_path, environ=environ)
    assert (cfg.runner, cfg.timeout, cfg.seed, cfg.threads) == ("from-cli", 90.0, 3, 1)
    assert cfg.sources["runner"] == "cli" and cfg.sources["timeout"] == "env:MODELCI_TIMEOUT"
    assert cfg.sources["seed"] == f"file:{tmp_path / 'modelci.toml'}" and cfg.sources["threads"] == "default"


def test_tool_modelci_table_in_pyproject_is_read_and_paths_are_relative_to_it(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.modelci]\ndb = "hist/h.db"\n')
    cfg = config_module.load(cwd=tmp_path, environ={})
    assert cfg.db == str((tmp_path / "hist" / "h.db").resolve())


def test_a_tool_modelci_table_that_modelci_toml_overrides_is_named_as_ignored(tmp_path):
    """Both files configure modelci: modelci.toml wins, and every command says that the table is ignored, since an
    edit there would otherwise change nothing, silently."""
    import subprocess
    import sys

    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.modelci]\nrunner = "from-pyproject"\n')
    (tmp_path / "modelci.toml").write_text('runner = "from-modelci-toml"\n')
    cfg = config_module.load(cwd=tmp_path, environ={})
    assert cfg.runner == "from-modelci-toml" and cfg.ignored == tmp_path / "pyproject.toml"
    done = subprocess.run([sys.executable, "-m", "modelci.cli", "config"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "[tool.modelci] table in" in done.stderr and "is ignored; keep one of the two" in done.stderr
    assert "from-modelci-toml" in done.stdout
    # named on purpose, or without a table of its own, pyproject.toml is not worth a note
    assert config_module.load(cwd=tmp_path, environ={}, config_file=tmp_path / "modelci.toml").ignored is None
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert config_module.load(cwd=tmp_path, environ={}).ignored is None
    (tmp_path / "pyproject.toml").write_text('[project\n')  # broken, and not the config in use: no error either
    assert config_module.load(cwd=tmp_path, environ={}).runner == "from-modelci-toml"


def test_a_number_or_a_boolean_in_the_file_is_a_toml_one(tmp_path):
    import pytest

    from modelci.errors import UserError

    for line, message in (('timeout = "60"', "key 'timeout' must be a number, got the string '60': write it "
                                             "without quotes"),
                          ('build_timeout = "5"', "key 'build_timeout' must be a number, got the string '5'"),
                          ('seed = "3"', "key 'seed' must be an integer, got the string '3'"),
                          ('artifacts_readonly = "true"', "key 'artifacts_readonly' must be true or false, got the "
                                                          "string 'true'"),
                          ('artifacts_options = "{}"', "key 'artifacts_options' must be a table, got the string")):
        (tmp_path / "modelci.toml").write_text(line + "\n")
        with pytest.raises(UserError, match=re.escape(message)):
            config_module.load(cwd=tmp_path, environ={})
    # the same text in an environment variable is converted: a variable has no other type
    (tmp_path / "modelci.toml").write_text("")
    cfg = config_module.load(cwd=tmp_path, environ={"MODELCI_TIMEOUT": "60", "MODELCI_ARTIFACTS_READONLY": "true",
                                                     "MODELCI_SEED": "3"})
    assert (cfg.timeout, cfg.artifacts_readonly, cfg.seed) == (60.0, True, 3)


def test_the_config_table_hides_a_password_and_one_kept_in_the_file_is_named():
    """`modelci config` goes into CI logs: the history URL's password is not in it. One written into the
    committed config file is shown to be there, with where to give it instead; one from the environment is not
    worth a note."""
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    # a short folder: the table is 160 characters wide in a log, and a long path in the source column would
    # fold the value column's URL over several lines
    scratch = tempfile.TemporaryDirectory(dir="/tmp", prefix="cfg")
    tmp_path = Path(scratch.name)

    def config(environ: dict[str, str]) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "modelci.cli", "config"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60, env={**os.environ, "COLUMNS": "400", **environ})
        assert done.returncode == 0, done.stderr
        assert "s3cret" not in done.stdout + done.stderr
        return done

    url = "postgresql://ci:s3cret@127.0.0.1:1/history"
    done = config({"MODELCI_DB": url})
    assert "postgresql://ci:***@127.0.0.1:1/history" in done.stdout and "note" not in done.stderr
    (tmp_path / "modelci.toml").write_text(f'db = "{url}"\n')
    done = config({})
    assert "postgresql://ci:***@127.0.0.1:1/history" in done.stdout
    assert "holds a password in 'db'" in " ".join(done.stderr.split()) and "MODELCI_DB" in done.stderr
    (tmp_path / "modelci.toml").write_text('db = "postgresql://ci@127.0.0.1:1/history"\n')
    assert "note" not in config({}).stderr
    scratch.cleanup()


CONNINFO = "host=127.0.0.1 port=5432 user=ci password=s3cret dbname=hist"


def test_a_libpq_connection_string_is_refused_before_anything_is_made(tmp_path):
    """`MODELCI_DB="host=... password=... dbname=..."` has no `://`, so it was taken for a SQLite file path: a
    `run` made a new history named after the whole string, password included, in the current folder, and passed."""
    import os
    import subprocess
    import sys

    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "models.py").write_text("import modelci\n")
    for given in ({"MODELCI_DB": CONNINFO}, {"MODELCI_DB": "dbname=hist  password='s3 cret'"}):
        done = subprocess.run([sys.executable, "-m", "modelci.cli", "run", "--target", "current", "--suite", "suite"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env={**{k: v for k, v in os.environ.items() if not k.startswith("MODELCI_")},
                                   "MODELCI_CACHE_DIR": str(tmp_path / "cache"), **given})
        assert done.returncode == 2, done.stdout + done.stderr
        said = " ".join(done.stderr.split())
        assert "s3cret" not in said and "s3 cret" not in said and "Traceback" not in said
        assert "is a libpq connection string" in said and "postgresql://USER@HOST:PORT/DB" in said, said
        assert "PGPASSWORD" in said and "(from env:MODELCI_DB)" in said
        assert {p.name for p in tmp_path.iterdir()} <= {"cache", "suite"}  # no history made of the string


def test_a_file_name_with_an_equals_sign_is_still_a_sqlite_path(tmp_path):
    """What tells a libpq string from a file name: only keyword=value pairs of libpq's own keywords, two or more,
    or one without a folder in it."""
    for value in ("host=ci1/history.db", "./dbname=hist", "runs a=b c=d.db", "history.db", "a=b c=d"):
        cfg = config_module.load(cli={"db": value}, cwd=tmp_path, environ={})
        assert cfg.db == str((tmp_path / value).resolve())
    for value in (CONNINFO, "dbname=hist", "service=ci", " host=db  port = 5432 "):
        try:
            config_module.load(cli={"db": value}, cwd=tmp_path, environ={})
        except config_module.UserError as exc:
            assert "(from cli) is a libpq connection string" in str(exc)
        else:
            raise AssertionError(f"{value!r} was taken for a file")


def test_a_command_in_a_subfolder_of_the_repository_reads_the_projects_config(tmp_path):
    """In a CI step whose working directory is a subfolder of the checkout, modelci read no config: it asked to
    "set `suites` in modelci.toml" beside a file that does, or made a new empty history there and passed. The
    config is looked for up to the repository's root, as git looks for its repository; its relative paths stay
    the file's."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "models" / "deep").mkdir(parents=True)
    (repo / "modelci.toml").write_text('runner = "from-the-root"\nsuites = ["models"]\n')
    cfg = config_module.load(cwd=repo / "models" / "deep", environ={})
    assert cfg.runner == "from-the-root" and cfg.file == repo / "modelci.toml"
    assert cfg.db == str(repo / ".modelci" / "history.db")
    # the nearest wins: a subproject's own config, here a [tool.modelci] table
    (repo / "models" / "pyproject.toml").write_text('[tool.modelci]\nrunner = "from-models"\n')
    assert config_module.load(cwd=repo / "models" / "deep", environ={}).runner == "from-models"
    # nothing above the repository's root is the project's, nor anything above a folder outside a repository
    (tmp_path / "modelci.toml").write_text('runner = "from-above"\n')
    (repo / "modelci.toml").unlink()
    (repo / "models" / "pyproject.toml").unlink()
    assert config_module.load(cwd=repo / "models", environ={}).file is None
    (tmp_path / "plain" / "sub").mkdir(parents=True)
    (tmp_path / "plain" / "modelci.toml").write_text('runner = "not-a-repository"\n')
    assert config_module.load(cwd=tmp_path / "plain" / "sub", environ={}).file is None
    assert config_module.load(cwd=tmp_path / "plain", environ={}).runner == "not-a-repository"
