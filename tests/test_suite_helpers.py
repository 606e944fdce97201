"""Suite folders whose workload files import a helper module beside them (`import _common`).

Discovery and execution in fork and spawn modes, the worker's pre-imports, two suites with a `_common.py` each,
the compat child, code_hash and `--reuse`, and a helper that fails to import. Real interpreters and real
subprocesses: the workloads are numpy ones, run in this interpreter's environment (target `current`).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from modelci import config as config_module
from modelci import workflow
from modelci.execute import forked, local
from modelci.execute.local import WorkloadInfo
from modelci.workload.child import code_hash, suite_files
from modelci.workload.worker import suite_imports

#: the helper: the only module of the suite that imports numpy
COMMON = '''\
import numpy as np

SCALE = {scale}
DOMAIN = "times {scale}"


def data(seed):
    return np.arange(4.0) * (seed + 1)
'''

#: a workload file that uses the helper at import time and, lazily, while it runs
MODELS = '''\
import modelci

import _common


class Scaled(modelci.Workload):
    framework = "numpy"
    domain = _common.DOMAIN
    steps = 1
    repeats = 1
    warmup = 0

    def setup(self, ctx):
        self.x = _common.data(ctx.seed)

    def example_inputs(self):
        import _common as now  # imported again while the workload runs: this suite's helper still
        return (self.x * now.SCALE,)

    def train_step(self, ctx, step):
        return float(self.x.sum())

    def infer(self, ctx):
        return {"y": self.x * _common.SCALE, "again": self.example_inputs()[0]}
'''


def write_suite(folder: Path, scale: float, models: str = MODELS, name: str = "models.py") -> Path:
    """A suite folder holding `_common.py` (with `scale`) and one workload file; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "_common.py").write_text(COMMON.format(scale=scale))
    (folder / name).write_text(models)
    return folder


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    """An empty project folder as the working directory, with no MODELCI_* variables from outside."""
    for key in [k for k in os.environ if k.startswith("MODELCI_")]:
        monkeypatch.delenv(key)
    root = tmp_path / "project"
    root.mkdir()
    (root / "modelci.toml").write_text(f'cache_dir = "{tmp_path / "cache"}"\nthreads = 1\n')
    monkeypatch.chdir(root)
    return root


def test_helpers_are_never_workload_files(tmp_path):
    folder = write_suite(tmp_path / "s", 2.0)
    # a Workload subclass in a helper is a base for the suite's workloads, not a workload of its own
    (folder / "_common.py").write_text(COMMON.format(scale=2.0) + '''
import modelci


class Complete(modelci.Workload):
    framework = "numpy"

    def setup(self, ctx):
        pass

    def train_step(self, ctx, step):
        return 0.0

    def infer(self, ctx):
        return {"y": np.zeros(1)}
''')
    assert suite_files(folder) == [folder / "models.py"]
    found = local.discover(Path(sys.executable), {"s": folder}, tmp_path / "scratch")
    assert found["errors"] == []
    assert [w["id"] for w in found["workloads"]] == ["s/Scaled"]


def test_what_is_no_regular_file_is_neither_a_workload_nor_a_helper(tmp_path):
    """An editor's lock file (`.#models.py`, a symlink to nowhere), a symlink loop, a folder and a FIFO named like
    workload files or helpers ended discovery with a traceback (exit 3); the FIFO hung it."""
    folder = write_suite(tmp_path / "s", 2.0)
    (folder / ".#models.py").symlink_to("root@host.1:1")
    (folder / "loop.py").symlink_to("loop.py")
    (folder / "dir.py").mkdir()
    os.mkfifo(folder / "fifo.py")
    (folder / "_broken.py").symlink_to("nowhere.py")
    (folder / ".hidden.py").write_text("raise SystemExit('a hidden file is no workload')\n")
    assert suite_files(folder) == [folder / "models.py"]
    code_hash(folder / "models.py")  # the helpers it reads are regular files only
    found = local.discover(Path(sys.executable), {"s": folder}, tmp_path / "scratch")
    assert found["errors"] == []
    assert [w["id"] for w in found["workloads"]] == ["s/Scaled"]


@pytest.mark.parametrize("mode", ["fork", "spawn"])
def test_two_suites_each_import_their_own_helper_in_discovery_and_execution(tmp_path, mode):
    suites = {"a": write_suite(tmp_path / "a", 2.0), "b": write_suite(tmp_path / "b", 3.0)}
    with forked.Executor(Path(sys.executable), tmp_path / "scratch", isolation=mode, threads=1) as executor:
        found = executor.discover(suites)
        assert found["errors"] == []
        # discovery imports both suites in one process: each file must have seen its own helper
        assert [(w["id"], w["domain"]) for w in found["workloads"]] == [("a/Scaled", "times 2.0"),
                                                                         ("b/Scaled", "times 3.0")]
        results = {w["id"]: executor.run_workload(suites, WorkloadInfo.from_json(w), timeout=300)
                   for w in found["workloads"]}
        ready = executor.worker.ready if executor.worker else {}
    for suite, scale in (("a", 2.0), ("b", 3.0)):
        result = results[f"{suite}/Scaled"]
        assert result.status == "ok", (result.reason, result.traceback, result.stderr_tail)
        assert result.info["isolation"] == mode, result.info.get("isolation_reason")
        np.testing.assert_array_equal(result.outputs["y"], np.arange(4.0) * scale)
        np.testing.assert_array_equal(result.outputs["again"], np.arange(4.0) * scale)
    if mode == "fork":
        # only the helper imports numpy; the worker read the helper's imports instead of running it
        assert "numpy" in ready["preloaded"]
        assert "_common" not in ready["preloaded"] and "_common" not in ready["skipped"]


def test_the_worker_reads_a_helpers_imports_without_running_it(tmp_path):
    folder = write_suite(tmp_path / "s", 2.0)
    (folder / "_common.py").write_text("import numpy\nimport _more\n\nraise SystemExit('must not run')\n")
    (folder / "_more.py").write_text("import fractions\nimport _common  # a cycle ends\n")
    # a suite file named like an installed module: the installed one is what `import json` finds in the child
    (folder / "json.py").write_text("import json\n")
    (folder / "models.py").write_text("import modelci\nimport _common\nimport json\n")

    assert suite_imports([folder]) == ["json", "modelci", "numpy", "fractions"]


def test_a_suite_file_named_like_an_installed_module_does_not_shadow_it(tmp_path):
    # the helper's `import numpy` must find numpy, not the suite's numpy.py: the folder comes last on sys.path
    folder = write_suite(tmp_path / "s", 2.0, name="numpy.py")
    suites = {"s": folder}
    found = local.discover(Path(sys.executable), suites, tmp_path / "scratch")
    assert found["errors"] == [] and [w["id"] for w in found["workloads"]] == ["s/Scaled"]
    result = local.run_workload(Path(sys.executable), suites, WorkloadInfo.from_json(found["workloads"][0]),
                                tmp_path / "scratch", timeout=300)
    assert result.status == "ok", (result.reason, result.traceback)
    np.testing.assert_array_equal(result.outputs["y"], np.arange(4.0) * 2.0)


@pytest.mark.parametrize("mode", ["fork", "spawn"])
def test_the_project_folder_hides_no_package_and_no_helper(tmp_path, monkeypatch, mode):
    # children run in the user's project folder, which `python -m` would put first on sys.path
    root = tmp_path / "project"
    root.mkdir()
    (root / "numpy.py").write_text("raise ImportError('the project folder shadowed numpy')\n")
    (root / "_common.py").write_text("raise ImportError('the project folder shadowed the suite helper')\n")
    monkeypatch.chdir(root)
    suites = {"s": write_suite(tmp_path / "s", 2.0)}
    with forked.Executor(Path(sys.executable), tmp_path / "scratch", isolation=mode, threads=1) as executor:
        found = executor.discover(suites)
        assert found["errors"] == []
        result = executor.run_workload(suites, WorkloadInfo.from_json(found["workloads"][0]), timeout=300)
    assert result.status == "ok", (result.reason, result.traceback, result.stderr_tail)
    np.testing.assert_array_equal(result.outputs["y"], np.arange(4.0) * 2.0)


def test_the_compat_child_gives_each_job_its_own_suites_helper(tmp_path):
    suites = {"a": write_suite(tmp_path / "a", 2.0), "b": write_suite(tmp_path / "b", 3.0)}
    # a's class is imported first and reused by the third job, after b's helper was imported
    jobs = [{"index": i, "workload": f"{suite}/Scaled", "file": str(suites[suite] / "models.py"), "seed": 0}
            for i, suite in enumerate("aba")]
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "modelci.workload.compat_child", "inputs", "--jobs", str(tmp_path / "jobs.json"),
           "--out", str(out), "--suite", f"a={suites['a']}", "--suite", f"b={suites['b']}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for index, scale in enumerate((2.0, 3.0, 2.0)):
        record = json.loads((out / str(index) / "result.json").read_text())
        assert record["status"] == "ok", record
        np.testing.assert_array_equal(np.load(out / str(index) / record["inputs"]["input_0"]["file"]),
                                      np.arange(4.0) * scale, err_msg=f"job {index}")


def test_code_hash_covers_the_helpers_beside_the_file(tmp_path):
    folder = tmp_path / "s"
    folder.mkdir()
    models = folder / "models.py"
    models.write_text(MODELS)
    # without helpers, the hash of the file alone: results stored before helpers existed stay reusable
    assert code_hash(models) == hashlib.sha256(models.read_bytes()).hexdigest()
    (folder / "other.py").write_text("x = 1\n")
    alone = code_hash(models)

    (folder / "_common.py").write_text(COMMON.format(scale=2.0))
    with_helper = code_hash(models)
    assert with_helper != alone
    (folder / "other.py").write_text("x = 2\n")  # another workload file is not this one's code
    assert code_hash(models) == with_helper
    (folder / "_common.py").write_text(COMMON.format(scale=2.5))
    assert code_hash(models) not in (alone, with_helper)
    (folder / "_extra.py").write_text("")  # a helper nobody imports counts too: imports are known only by running
    assert code_hash(models) not in (alone, with_helper)


def test_reuse_measures_again_once_a_helper_changes(project):
    folder = write_suite(project / "suite", 2.0)
    cfg = config_module.load()
    first = workflow.run(cfg, "current", [str(folder)])
    assert [r.status for r in first.results] == ["ok"]
    again = workflow.run(cfg, "current", [str(folder)], reuse=True)
    assert again.reused == 1

    # a longer file: the interpreter's bytecode cache checks the size and the mtime in whole seconds
    (folder / "_common.py").write_text(COMMON.format(scale=2.25))
    changed = workflow.run(cfg, "current", [str(folder)], reuse=True)
    assert changed.reused == 0
    result = changed.results[0]
    assert result.status == "ok" and result.code_hash != first.results[0].code_hash
    np.testing.assert_array_equal(result.outputs["y"], np.arange(4.0) * 2.25)
    assert workflow.run(cfg, "current", [str(folder)], reuse=True).reused == 1


@pytest.mark.parametrize(("helper", "message", "line"), [
    ("import numpy\n\nSCALE = 1 / 0\n", "ZeroDivisionError: division by zero (in {folder}/_common.py, line 3)", 3),
    ("import numpy\n\nSCALE = (\n", "SyntaxError: '(' was never closed (_common.py, line 3)", 3),
    ("import numpy\nimport not_installed_anywhere\n",
     "ModuleNotFoundError: No module named 'not_installed_anywhere' (in {folder}/_common.py, line 2)", 2),
], ids=["raises", "syntax", "missing-module"])
def test_a_helper_that_fails_to_import_is_an_error_naming_its_file_and_line(project, helper, message, line):
    folder = write_suite(project / "suite", 2.0)
    (folder / "_common.py").write_text(helper)
    outcome = workflow.run(config_module.load(), "current", [str(folder)])

    assert [(r.workload, r.status) for r in outcome.results] == [("suite/models.py", "error")]
    reason = outcome.results[0].reason
    # the workload file's line that imports the helper, then where the helper failed
    assert reason == f"{folder}/models.py, line 3: " + message.format(folder=folder), reason
    traceback = outcome.results[0].traceback
    assert f"_common.py\", line {line}" in traceback
    # the user's frames only: modelci's child and importlib above them say nothing about their code
    assert "child.py" not in traceback and "importlib" not in traceback and "<frozen" not in traceback
    assert traceback.rstrip().splitlines()[-1].startswith(message.split(":")[0] + ":")  # ends in the exception
    assert workflow.failed(outcome)


def test_an_unbuilt_target_declares_the_workloads_of_a_helpers_base_class(tmp_path):
    # when the environment does not build, the workloads are read from the source (builds.declared_workloads)
    from modelci.builds import declared_workloads

    folder = write_suite(tmp_path / "s", 2.0)
    (folder / "_common.py").write_text("import modelci\n\n\nclass Base(modelci.Workload):\n    pass\n\n\n"
                                       "class _Deeper(Base):\n    pass\n")
    (folder / "models.py").write_text("import _common\nfrom _common import _Deeper\n\n\n"
                                      "class First(_common.Base):\n    pass\n\n\nclass Second(_Deeper):\n    pass\n")
    digest = code_hash(folder / "models.py")
    assert declared_workloads({"s": folder}) == [("s/First", digest), ("s/Second", digest)]


def test_compat_keeps_the_inputs_of_a_workload_whose_example_inputs_is_in_a_helper(tmp_path):
    # compat starts the process that keeps the producer's inputs only for files that may define example_inputs
    from modelci.compat import _mentions_inputs

    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "models.py").write_text("import _common\n\n\nclass M(_common.Base):\n    pass\n")
    assert not _mentions_inputs(str(folder / "models.py"))
    (folder / "_common.py").write_text("class Base:\n    def example_inputs(self):\n        return ()\n")
    assert _mentions_inputs(str(folder / "models.py"))


MISTAKES = '''\
import numpy as np
import modelci


class _Base(modelci.Workload):
    framework = "numpy"
    steps = 2
    repeats = 1
    warmup = 0

    def train_step(self, ctx, step):
        return 1.0

    def infer(self, ctx):
        return {"y": np.ones(2)}


class NoDict(_Base):
    def infer(self, ctx):
        return None


class WordLoss(_Base):
    def train_step(self, ctx, step):
        return "low" if step == 1 else 1.0


class Nested(_Base):
    def infer(self, ctx):
        return {"y": {"z": [1, np.ones(2)]}}


class WordMetric(_Base):
    def infer(self, ctx):
        ctx.record("accuracy", "high")
        return {"y": np.ones(2)}


class OwnBug(_Base):
    def infer(self, ctx):
        return {"y": np.ones(2) / self.missing}
'''


@pytest.mark.parametrize("isolation", ["fork", "spawn"])
def test_a_workloads_mistake_is_named_with_the_users_frames_only(project, isolation):
    # the traceback of a failed workload began in modelci's child (execute, run_phases) and, for a value modelci
    # refused, held nothing but modelci's frames; a loss or a metric that was no number said only "could not
    # convert string to float", and an output of objects "output has dtype object (ndarray)"
    folder = project / "suite"
    folder.mkdir()
    (folder / "mistakes.py").write_text(MISTAKES)
    outcome = workflow.run(config_module.load(cli={"isolation": isolation}), "current", [str(folder)])
    results = {r.workload.split("/")[-1]: r for r in outcome.results}
    assert {name: r.status for name, r in results.items()} == dict.fromkeys(
        ["NoDict", "WordLoss", "Nested", "WordMetric", "OwnBug"], "failed")
    assert "infer() must return a non-empty dict of name -> array, got NoneType" in results["NoDict"].reason
    assert ("train_step() returned str 'low' at step 1; return the loss as one number"
            in results["WordLoss"].reason)
    assert ("output 'y' (dict {'z': [1, array([1., 1.])]}) cannot be stored: it makes an array of Python "
            "objects (dtype object)" in results["Nested"].reason)
    assert "ctx.record('accuracy', ...) got str 'high'; record a number" in results["WordMetric"].reason
    # what modelci refused says all in its reason: no traceback of modelci's own code
    for name in ("NoDict", "WordLoss", "Nested"):
        assert results[name].traceback == "", (name, results[name].traceback)
    # the user's own bug: a traceback that starts in their file
    own = results["OwnBug"].traceback
    assert own.startswith("Traceback (most recent call last):\n") and "AttributeError" in own
    assert f'File "{folder / "mistakes.py"}", line 41, in infer' in own
    assert "child.py" not in own and "run_phases" not in own
    assert f'File "{folder / "mistakes.py"}", line 35, in infer' in results["WordMetric"].traceback


def test_a_failure_in_a_built_in_zoo_workload_keeps_its_frames():
    # the zoo lives in the modelci package, but it is workload code: only modelci/workload is the harness's, so
    # a zoo model's failure is not cut down to its exception line
    from types import SimpleNamespace

    from modelci.workload.child import failure_traceback, run_phases
    from modelci.zoo.numpy.linear_regression import LinearRegressionSGD

    with pytest.raises(AttributeError) as caught:
        run_phases(LinearRegressionSGD(), LinearRegressionSGD, None, None, SimpleNamespace(data={}), None)
    exc = caught.value.with_traceback(caught.value.__traceback__.tb_next)  # from run_phases on, as in the child
    shown = failure_traceback(exc)
    assert "child.py" not in shown and "run_phases" not in shown
    assert "zoo/numpy/linear_regression.py" in shown and "in setup" in shown
