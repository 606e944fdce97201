"""Options: out-of-range values and unwritable report paths are usage errors (exit 2) before anything runs."""

from __future__ import annotations

import pytest
from probes import QUICK

#: a line of modelci.toml -> what the message must say
CONFIG = {
    "threads = 1.5": "key 'threads' must be an integer, got 1.5",
    "threads = -1": "key 'threads' must be 0 or more, got -1",
    'threads = "two"': "key 'threads' must be an integer",
    "timeout = -5": "key 'timeout' must be greater than 0, got -5",
    "timeout = 0": "key 'timeout' must be greater than 0, got 0",
    "timeout = nan": "key 'timeout' must be a finite number",
    "timeout = inf": "key 'timeout' must be a finite number",
    "repeats = -3": "key 'repeats' must be 0 or more, got -3",
    "repeats = 2.5": "key 'repeats' must be an integer, got 2.5",
    "seed = -1": "key 'seed' must be 0 or more, got -1",
    'isolation = "thread"': "must be one of fork, spawn",
}
#: an environment variable and its value -> what the message must say
ENVIRON = {
    ("MODELCI_TIMEOUT", "-1"): "environment variable MODELCI_TIMEOUT must be greater than 0",
    ("MODELCI_THREADS", "1.5"): "environment variable MODELCI_THREADS must be an integer",
    ("MODELCI_REPEATS", "many"): "environment variable MODELCI_REPEATS must be an integer",
    ("MODELCI_SEED", "-7"): "environment variable MODELCI_SEED must be 0 or more",
}
#: command-line arguments -> what the message must say
FLAGS = {
    ("--timeout", "-1"): "option --timeout must be greater than 0, got -1",
    ("--timeout", "0"): "option --timeout must be greater than 0",
    ("--timeout", "nan"): "option --timeout must be a finite number",
    ("--repeats", "-1"): "option --repeats must be 0 or more",
    ("--json", "{root}/no/such/folder/report.json"): "--json {root}/no/such/folder/report.json: cannot write",
    ("--junit", "{root}/suite"): "it is a folder",
    ("--markdown", "{root}/modelci.toml/summary.md"): "is not a folder",
    ("--json", "{root}/suite"): "it is a folder",
}


def _refused(project, done, says: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert says in done.stderr, done.stderr[-2000:]
    assert "preparing the environment" not in done.stderr  # refused before anything was built or run
    assert not project.db.exists() or project.stored("SELECT count(*) FROM runs") == [(0,)]
    project.assert_clean(done)


@pytest.mark.parametrize("line", list(CONFIG))
def test_a_config_value_out_of_range_is_a_usage_error(project, line):
    project.config(line)
    project.workloads(QUICK)
    _refused(project, project.run(), CONFIG[line])


@pytest.mark.parametrize("variable, value", list(ENVIRON))
def test_an_environment_value_out_of_range_is_a_usage_error(project, variable, value):
    project.extra_env[variable] = value
    project.workloads(QUICK)
    _refused(project, project.run(), ENVIRON[(variable, value)])


@pytest.mark.parametrize("flag, value", list(FLAGS))
def test_a_flag_out_of_range_or_an_unwritable_report_is_a_usage_error(project, flag, value):
    project.workloads(QUICK)
    value = value.format(root=project.root)
    done = project.cli("run", "--target", "current", "--suite", "suite", flag, value)
    _refused(project, done, FLAGS[(flag, value.replace(str(project.root), "{root}"))].format(root=project.root))


def test_an_integral_float_is_an_integer_and_the_run_goes_on(project):
    project.config("threads = 1.0\nrepeats = 2")
    project.workloads(QUICK)
    done = project.run()
    assert done.returncode == 0, done.stderr[-2000:]
    assert project.statuses() == {"suite/Quick": "ok"}
    project.assert_clean(done)
