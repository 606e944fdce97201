"""`modelci init`: the config it writes is true to the options, it never overwrites, and its workloads are real.

The workload of each framework is driven in-process here (seeded as the harness does): it learns, is
deterministic, and every format it declares round-trips. numpy runs in the test venv; torch and paddle run in
the venvs that hold them (`.ci/run` runs this module there too). The numpy starter's first `modelci run`, through
the real command in a real environment, is in tests/e2e/test_init_run.py.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from modelci import config, starter
from modelci.checks import Policy
from modelci.workload.api import Context
from modelci.workload.child import import_file, workload_classes
from modelci.workload.frameworks import get_helper


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELCI_")}
    return subprocess.run([sys.executable, "-m", "modelci.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_init_writes_a_config_that_names_the_suite_and_loads(tmp_path):
    proc = cli(tmp_path, "init", "--framework", "numpy", "--dir", "project")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    root = tmp_path / "project"
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == [
        "modelci.toml", "models", "models/classifier.py"]
    assert "next: cd project && modelci run --target numpy" in proc.stdout
    spaced = cli(tmp_path, "init", "--framework", "numpy", "--dir", "my project")
    assert "next: cd 'my project' && modelci run" in spaced.stdout  # quoted: the line runs as it is printed
    cfg = config.load(cwd=root, environ={})
    assert cfg.sources["suites"] == f"file:{root / 'modelci.toml'}"
    assert cfg.suites == ["models"] and cfg.timeout == 900


def test_every_commented_option_is_real_and_says_its_default(tmp_path):
    """Uncommenting the config's examples gives a file that loads, with the values the comments show."""
    text = starter.render_config("numpy")
    examples = re.findall(r"^# (\w+ = .+|\[\[overrides\]\])$", text, flags=re.MULTILINE)
    assert len(examples) >= 10
    uncommented = re.sub(r"^# (\w+ = .+|\[\[overrides\]\])$", r"\1", text, flags=re.MULTILINE)
    (tmp_path / "modelci.toml").write_text(uncommented)
    cfg = config.load(cwd=tmp_path, environ={})
    assert cfg.runner == "ci-cpu" and cfg.overrides[0]["metric"] == "output:*"
    for name in ("db", "artifacts", "threads", "cache_dir"):  # the commented value is the default
        assert getattr(cfg, name) == config.OPTION_BY_NAME[name].default or name in ("db", "artifacts", "cache_dir")
        assert re.search(rf'^# {name} = "?{re.escape(str(config.OPTION_BY_NAME[name].default))}"?$', text,
                         flags=re.MULTILINE), name
    for name in ("timing_factor", "alpha", "memory_factor"):
        assert math.isclose(cfg.checks[name], getattr(Policy(), name)), name


@pytest.mark.parametrize("existing", ["modelci.toml", "models"])
def test_init_refuses_to_overwrite_and_writes_nothing(tmp_path, existing):
    (tmp_path / "models").mkdir() if existing == "models" else (tmp_path / existing).write_text("runner = 'mine'\n")
    before = {p: (p.read_text() if p.is_file() else None) for p in tmp_path.rglob("*")}
    proc = cli(tmp_path, "init", "--framework", "numpy")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{existing} already exists" in proc.stderr and "never overwrites" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert {p: (p.read_text() if p.is_file() else None) for p in tmp_path.rglob("*")} == before


def test_init_into_a_project_set_up_in_its_pyproject_is_refused(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.modelci]\nrunner = "r"\n')
    proc = cli(tmp_path, "init", "--dir", ".")
    assert proc.returncode == 2 and "already holds a [tool.modelci] table" in proc.stderr
    assert not (tmp_path / "modelci.toml").exists()  # it would have won over runner = "r", silently


def test_init_into_a_file_or_an_unknown_framework_is_a_user_error(tmp_path):
    (tmp_path / "afile").write_text("")
    proc = cli(tmp_path, "init", "--dir", "afile")
    assert proc.returncode == 2 and "is a file, not a folder" in proc.stderr
    proc = cli(tmp_path, "init", "--framework", "caffe")
    assert proc.returncode == 2 and "invalid choice: 'caffe'" in proc.stderr
    with pytest.raises(starter.UserError, match="no starter for framework 'caffe'"):
        starter.init(tmp_path / "x", "caffe")
    assert not (tmp_path / "x").exists()


def test_init_on_a_full_disk_leaves_nothing_behind_and_an_empty_dir_is_refused(tmp_path):
    """A disk that filled mid-way left half a starter, which the next `init` refused as "already exists"; and
    `--dir ''` set up the current folder, then advised `cd '' && ...`."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"this machine cannot mount a tmpfs (CI runs as root and can): {mounted.stderr.strip()}")
    try:
        with open(disk / "fill", "wb", buffering=0) as fill:  # the whole disk
            try:
                while True:
                    fill.write(b"\0" * 4096)
                    fill.flush()
            except OSError:
                pass
        proc = cli(disk, "init", "--dir", "project", "--framework", "numpy")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "cannot write the starter into project" in proc.stderr and "nothing was left there" in proc.stderr
        assert "Traceback" not in proc.stderr
        assert not (disk / "project" / "modelci.toml").exists() and not (disk / "project" / "models").exists()
        (disk / "fill").unlink()
        again = cli(disk, "init", "--dir", "project", "--framework", "numpy")
        assert again.returncode == 0, again.stderr  # not "already exists"
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)
    empty = cli(tmp_path, "init", "--dir", "")
    assert empty.returncode == 2 and "--dir '': give the folder to set up" in empty.stderr
    assert not (tmp_path / "modelci.toml").exists()


def trained(framework: str, tmp_path: Path, seed: int = 0):
    """The starter workload of `framework`, imported as the harness does, seeded, trained and inferred."""
    helper = get_helper(framework)
    path = starter.TEMPLATES / f"{framework}_classifier.py"
    (cls,) = workload_classes(import_file(path, f"starter_{framework}"))
    helper.seed(seed)
    helper.set_determinism(True)
    ctx = Context(seed=seed, scratch=tmp_path)
    workload = cls()
    workload.setup(ctx)
    losses = [workload.train_step(ctx, step) for step in range(cls.steps)]
    return helper, cls, ctx, workload, losses, workload.infer(ctx)


@pytest.mark.parametrize("framework", starter.frameworks())
def test_starter_workload_learns_is_deterministic_and_round_trips(framework, tmp_path):
    pytest.importorskip(framework)  # torch and paddle: in the venvs holding them (.ci/run)
    import numpy as np

    helper, cls, ctx, workload, losses, outputs = trained(framework, tmp_path)
    assert cls.framework == framework and len(losses) == cls.steps >= 10
    assert all(isinstance(x, float) and math.isfinite(x) for x in losses)
    assert np.mean(losses[-3:]) < 0.5 * np.mean(losses[:3])
    assert outputs and all(isinstance(v, np.ndarray) and np.isfinite(v).all() for v in outputs.values())
    again = trained(framework, tmp_path)
    assert again[4] == losses
    for name in outputs:
        np.testing.assert_array_equal(again[5][name], outputs[name], err_msg=name)
    assert cls.formats and set(cls.formats) <= set(helper.formats)
    for fmt in cls.formats:
        path = tmp_path / f"model.{fmt}"
        helper.save(workload, ctx, fmt, path)
        fresh = cls()
        fresh.setup(ctx)  # untrained: only the loaded weights can give the trained outputs
        helper.load(fresh, ctx, fmt, path)
        for name, value in fresh.infer(ctx).items():
            np.testing.assert_array_equal(value, outputs[name], err_msg=f"{fmt}: {name}")
