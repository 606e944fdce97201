"""Environment diffs: bump sizes, packages, fingerprint fields, and the section `compare` shows."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from modelci import config as config_module
from modelci import workflow
from modelci.envs import lockfile, refs
from modelci.envs.diff import between, bump, diff, diff_fingerprints, diff_locks, diff_packages
from modelci.envs.lockfile import Lock
from modelci.report import json_report
from modelci.report.console import render_compare, render_env_diff


@pytest.mark.parametrize("before, after, size", [
    ("1.6.8", "2.0.0", "major"), ("1.6.8", "1.7.0", "minor"), ("1.6.8", "1.6.9", "patch"),
    ("1.6", "1.6.1", "patch"), ("2.0.0rc1", "2.0.0", "pre/post/dev"), ("1.0", "1.0.post1", "pre/post/dev"),
    ("2.13.0+cpu", "2.13.0+cu121", "local"), ("1.7.0", "1.6.8", "downgrade minor"),
    ("1!1.0", "2.0", "downgrade major"),
    ("1.0", "1.0", ""), ("weird-version", "1.0", "unknown"),
])
def test_bump_size(before, after, size):
    assert bump(before, after) == size


def test_diff_packages_added_removed_changed_rebuilt():
    a = "numpy==2.0.2\nsix==1.16.0\nfakefw==1.0\nmpmath==1.3.0\n"
    b = "numpy==2.2.6\nfakefw==1.0\nmpmath==1.3.0\nsympy==1.13.0\n"
    changes = diff_packages(a, b, {"fakefw": ["1.0", "aaaa"], "mpmath": ["1.3.0", "cccc"]},
                            {"fakefw": ["1.0", "bbbb"], "mpmath": ["1.3.0", "cccc"]})
    assert [(c.name, c.change, c.before, c.after, c.bump) for c in changes] == [
        ("fakefw", "rebuilt", "1.0", "1.0", "same version, other files"),
        ("numpy", "changed", "2.0.2", "2.2.6", "minor"),
        ("six", "removed", "1.16.0", "", ""),
        ("sympy", "added", "", "1.13.0", ""),
    ]
    assert diff_locks(a, b)[0] == {"name": "numpy", "change": "changed", "before": "2.0.2", "after": "2.2.6",
                                   "bump": "minor"}


def test_diff_fingerprints_names_dotted_fields():
    a = {"schema": 2, "cpu": "EPYC", "numerics_env": {"OMP_NUM_THREADS": "1"}, "gpus": [],
         "frameworks": {"torch": {"cuda": None}}, "distributions": {"x": ["1", "a"]}}
    b = {"schema": 2, "cpu": "EPYC", "numerics_env": {}, "gpus": [{"name": "H200"}],
         "frameworks": {"torch": {"cuda": "12.4"}}, "distributions": {"x": ["1", "b"]}}
    assert [(c.field, c.before, c.after) for c in diff_fingerprints(a, b)] == [
        ("frameworks.torch.cuda", None, "12.4"), ("gpus", [], [{"name": "H200"}]),
        ("numerics_env.OMP_NUM_THREADS", "1", None)]


def test_lock_files_diff_with_their_interpreters(tmp_path):
    one = Lock({"numpy": "2.0.2", "six": "1.16.0"}, "CPython", "3.11", "linux-x86_64")
    two = Lock({"numpy": "2.2.6", "six": "1.16.0"}, "CPython", "3.12", "linux-x86_64")
    lockfile.write(tmp_path / "one.lock", one)
    lockfile.write(tmp_path / "two.lock", two)
    a, b = (refs.resolve(str(tmp_path / n), store=None, cache_dir=tmp_path) for n in ("one.lock", "two.lock"))

    result = diff(a.id, a.lock, a.fingerprint, b.id, b.lock, b.fingerprint)

    assert [(p.name, p.bump) for p in result.packages] == [("numpy", "minor")]
    assert [(f.field, f.before, f.after) for f in result.fingerprint] == [("python", "3.11", "3.12")]
    out = Console(record=True, width=200)
    render_env_diff(result, out)
    text = out.export_text()
    assert "1 package change(s) besides the target" in text and "numpy" in text and "minor" in text


def test_a_fingerprint_list_of_tables_shows_the_items_that_differ():
    """The BLAS libraries and the constraints files are lists of tables whose first 57 characters were the same
    on both sides, which is all a cell showed: the difference was invisible."""
    common = {"path": "shared-constraints.txt", "sha256": "ecf4" + "0" * 60}  # the same on both sides
    own = {"path": "np-constraints.txt", "sha256": "5ccc" + "1" * 60}
    a = {"build": {"constraints": [common]}, "libraries": [{"api": "blas", "version": "0.3.31", "arch": "SkylakeX"}]}
    b = {"build": {"constraints": [common, own]},
         "libraries": [{"api": "blas", "version": "0.3.23.dev", "arch": "Cooperlake"}]}
    result = diff("a", "numpy==2.0.2\n", a, "b", "numpy==2.0.2\n", b)
    out = Console(record=True, width=400)
    render_env_diff(result, out)
    text = out.export_text()
    row = next(line for line in text.splitlines() if line.startswith("build.constraints"))
    assert "np-constraints.txt" in row and "shared-constraints.txt" not in row, row
    row = next(line for line in text.splitlines() if line.startswith("libraries"))
    assert "version=0.3.31, arch=SkylakeX" in row and "version=0.3.23.dev, arch=Cooperlake" in row, row


def test_two_locks_of_other_targets_say_so_and_mark_the_target(tmp_path, capsys):
    """A git build is no package of its environment, so two commits share one, and `env diff` said only "the same
    environment"; a lock's own target was counted as a change besides the target."""
    from modelci import cli

    for name, target in (("one", "fakefw==1.0"), ("two", "fakefw==1.1")):
        lock = Lock({"fakefw": target.split("==")[1], "six": "1.16.0"}, "CPython", "3.11", "linux-x86_64")
        lock.target = target
        lockfile.write(tmp_path / f"{name}.lock", lock)
    code = cli.main(["env", "diff", str(tmp_path / "one.lock"), str(tmp_path / "two.lock"), "--json",
                     str(tmp_path / "d.json")])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0 and "target: A fakefw==1.0 → B fakefw==1.1" in out, out
    assert "0 package change(s) besides the target" in out, out
    data = json.loads((tmp_path / "d.json").read_text())
    assert (data["a_target"], data["b_target"]) == ("fakefw==1.0", "fakefw==1.1")


def test_compare_shows_what_changed_besides_the_target(fake_project, tmp_path):
    cfg = config_module.load()
    outcome = workflow.compare(cfg, str(fake_project.v10), str(fake_project.v11), [str(fake_project.suite)], "Stable")

    section = json_report.compare_report(outcome)["environment_diff"]
    assert section["targets"] == ["fakefw"]
    assert section["packages"] == [{"name": "fakefw", "change": "changed", "before": "1.0", "after": "1.1",
                                    "bump": "minor"}]
    assert not between(outcome.a.environment, outcome.b.environment).besides({"fakefw"})
    out = Console(record=True, width=200)
    render_compare(outcome, out)
    text = out.export_text()
    assert f"environment A {outcome.a.environment.id} → B {outcome.b.environment.id}" in text
    assert "0 package change(s) besides the target" in text and "fakefw (target)" in text

    report = tmp_path / "diff.json"
    cli = fake_project.cli("env", "diff", str(outcome.a.run_id), str(outcome.b.run_id), "--json", str(report),
                           "--exit-code")
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert "fakefw (target)" in cli.stdout
    data = json.loads(report.read_text())
    assert data["schema"] == "modelci.envdiff/1" and data["packages"][0]["name"] == "fakefw"
