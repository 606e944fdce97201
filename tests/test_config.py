"""Configuration precedence (CLI > environment > file > default) and where each value came from."""

from __future__ import annotations

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
