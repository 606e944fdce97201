"""What a workload declares or does that the harness must refuse, each as a result of that workload alone.

Class attributes that discovery reads (`requires`, `steps`, `formats`, ...) are checked per class: a wrong one is
an `error` result naming the class, the attribute, the value and what to give, and the other workloads of the
file still run. An exception whose `str()` raises, a workload's own SystemExit or KeyboardInterrupt, and a
`ctx.record` of a name the harness records itself are `failed` results with a reason, in both isolations. Real
subprocesses, numpy workloads, target `current`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from modelci import config as config_module
from modelci import steps, workflow
from modelci.errors import HarnessError, UserError
from modelci.execute import local
from modelci.workload.api import Context

BASE = '''\
import sys

import numpy as np
import modelci


class _Base(modelci.Workload):
    framework = "numpy"
    steps = 1
    repeats = 1
    warmup = 0

    def train_step(self, ctx, step):
        return 1.0

    def infer(self, ctx):
        return {"a": np.zeros(2)}


class Good(_Base):
    pass


class Unprintable(Exception):
    def __str__(self):
        raise TypeError("no str for you")
'''


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


def suite(folder: Path, classes: str) -> Path:
    """A suite folder with one file: the base, `Good`, and `classes`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "models.py").write_text(BASE + classes)
    return folder


def run(project: Path, classes: str, isolation: str = "fork") -> dict:
    """Run a suite of `classes` on the current interpreter; workload name -> result."""
    folder = suite(project / "suite", classes)
    outcome = workflow.run(config_module.load(cli={"isolation": isolation}), "current", [str(folder)])
    return {r.workload.split("/")[-1]: r for r in outcome.results}


# -- class attributes: one error per class, the others still run ----------------------------------------------

ATTRIBUTES = {
    "StringRequires": ('requires = "scipyx"', "`requires` must be a list of requirement strings",
                       "not str 'scipyx'"),
    "NumberInRequires": ('requires = ["numpy", 5]', "`requires` holds int 5", "list of requirement strings"),
    "BadRequirement": ('requires = ["numpy>>>1"]', "`requires` holds 'numpy>>>1', which is not a valid "
                       "requirement", "(Expected semicolon"),
    "InjectedRequirement": ('requires = ["numpy\\n--index-url http://example.invalid"]',
                            "which is not a valid requirement", "`requires` holds 'numpy\\n--index-url"),
    "WordSteps": ('steps = "x"', "`steps` must be a whole number from 0 to 100,000", "not str 'x'"),
    "NegativeSteps": ("steps = -3", "`steps` must be a whole number from 0 to 100,000", "not int -3"),
    "NegativeWarmup": ("warmup = -1", "`warmup` must be a whole number from 0 to 100,000", "not int -1"),
    "NoRepeats": ("repeats = 0", "`repeats` must be a whole number from 1 to 100,000", "not int 0"),
    # each timed call is one value the history keeps in the run's row: a billion would have filled it
    "BillionRepeats": ("repeats = 10**9", "`repeats` must be a whole number from 1 to 100,000", "not int 1000000000"),
    "NumberFormats": ("formats = 5", "`formats` must be a tuple of format names", "not int 5"),
    "StringFormats": ('formats = "npz"', "`formats` must be a tuple of format names", "not str 'npz'"),
    "PathFormat": ('formats = ("../../escape",)', "`formats` holds str '../../escape'", "a format name is"),
    # saved, stored and checked twice, and a Format's `unsafe` could say one thing and the name another
    "TwiceFormat": ('formats = ("npz", modelci.Format("npz", unsafe=False))', "`formats` names 'npz' more than once",
                    "name each format once"),
    "ListFramework": ('framework = ["numpy"]', "`framework` must be the name of a framework", "list ['numpy']"),
    "ObjectDomain": ("domain = object()", "`domain` must be a string", "object <object object"),
    # past the history's 40 characters PostgreSQL refused the whole run, after every workload had run
    "LongDomain": ('domain = "d" * 41', "`domain` is 41 characters long; the most is 40", ""),
}


def attribute_classes() -> str:
    return "".join(f"\n\nclass {name}(_Base):\n    {line}\n" for name, (line, _, _) in ATTRIBUTES.items())


def test_each_wrong_attribute_is_an_error_of_its_class_alone_at_discovery(tmp_path):
    # steps = 0 is a workload without training (run_phases records no loss and no train time for it)
    folder = suite(tmp_path / "s", attribute_classes() + "\n\nclass NoSteps(_Base):\n    steps = 0\n")
    found = steps.requirement_errors(local.discover(Path(sys.executable), {"s": folder}, tmp_path / "scratch"))
    assert sorted(w["id"] for w in found["workloads"]) == ["s/Good", "s/NoSteps"]
    messages = {e["workload"]: e["message"] for e in found["errors"]}
    assert sorted(messages) == sorted(f"s/{name}" for name in ATTRIBUTES)
    for name, (_, what, value) in ATTRIBUTES.items():
        message = messages[f"s/{name}"]
        assert message.startswith(f"class {name}: "), message
        assert what in message and value in message, message
    # what reached the parent holds no requirement made of a string's letters
    for workload in found["workloads"]:
        assert workload["requires"] == [] and workload["formats"] == []


@pytest.mark.parametrize("isolation", ["fork", "spawn"])
def test_a_run_with_wrong_attributes_stores_errors_and_runs_the_rest(project, isolation):
    results = run(project, attribute_classes(), isolation)
    assert results.pop("Good").status == "ok"
    assert {name: r.status for name, r in results.items()} == dict.fromkeys(ATTRIBUTES, "error")
    assert "class BadRequirement: `requires` holds 'numpy>>>1'" in results["BadRequirement"].reason


def test_an_attribute_that_raises_when_read_is_an_error_of_its_class(tmp_path):
    classes = '''

class Meta(type(modelci.Workload)):
    @property
    def requires(cls):
        raise Unprintable()


class Weird(_Base, metaclass=Meta):
    pass
'''
    found = local.discover(Path(sys.executable), {"s": suite(tmp_path / "s", classes)}, tmp_path / "scratch")
    assert [w["id"] for w in found["workloads"]] == ["s/Good"]
    assert [e["message"] for e in found["errors"]] == [
        "class Weird: reading its attributes raised <Unprintable; its str() raised TypeError>"]


def test_missing_requirements_never_raises_a_traceback_for_a_bad_requirement():
    env = SimpleNamespace(lock="")
    for requires, said in ((["numpy>>>1"], "`requires` holds 'numpy>>>1', which is not a valid requirement"),
                           ("scipyx", "`requires` must be a list of requirement strings")):
        workload = SimpleNamespace(id="s/Bad", requires=requires, framework="numpy")
        with pytest.raises(UserError, match="workload s/Bad: ") as caught:
            steps.missing_requirements(env, [workload])
        assert said in str(caught.value) and "\n" not in str(caught.value)
    # a stored model's manifest has no id
    with pytest.raises(UserError, match="a saved model's workload"):
        steps.missing_requirements(env, [SimpleNamespace(requires=["numpy>>>1"], framework=["numpy"])])


# -- what a workload raises: always `failed`, with a reason ---------------------------------------------------

RAISES = '''

class StrRaises(_Base):
    def train_step(self, ctx, step):
        raise Unprintable()


class Exits(_Base):
    def train_step(self, ctx, step):
        sys.exit(0)


class ExitsThree(_Base):
    def infer(self, ctx):
        raise SystemExit(3)


class Interrupted(_Base):
    def setup(self, ctx):
        raise KeyboardInterrupt


class SkipsUnprintably(_Base):
    def setup(self, ctx):
        class Skip(modelci.SkipWorkload):
            def __str__(self):
                raise TypeError("no")
        raise Skip()


class OutputTooBig(_Base):
    def infer(self, ctx):
        class Huge:
            def __array__(self, dtype=None, copy=None):
                raise MemoryError("cannot allocate 80 GiB")
        return {"y": Huge()}
'''


@pytest.mark.parametrize("isolation", ["fork", "spawn"])
def test_what_a_workload_raises_is_a_failure_with_its_reason(project, isolation):
    results = run(project, RAISES, isolation)
    statuses = {name: r.status for name, r in results.items()}
    assert statuses == {"Good": "ok", "StrRaises": "failed", "Exits": "failed", "ExitsThree": "failed",
                        "Interrupted": "failed", "SkipsUnprintably": "skipped", "OutputTooBig": "failed"}, {
        name: (r.reason, r.stderr_tail) for name, r in results.items()}
    assert results["StrRaises"].reason == "<Unprintable; its str() raised TypeError> (in train)"
    assert 'models.py", line' in results["StrRaises"].traceback
    assert results["Exits"].reason.startswith("train_step() raised SystemExit(0)")
    assert results["ExitsThree"].reason.startswith("infer() raised SystemExit(3)")
    assert results["Interrupted"].reason.startswith("setup() raised KeyboardInterrupt()")
    for name, call in (("Exits", "train_step"), ("ExitsThree", "infer"), ("Interrupted", "setup")):
        # the workload's own traceback, from its own frame on
        assert f", in {call}\n" in results[name].traceback, results[name].traceback
        assert "child.py" not in results[name].traceback, results[name].traceback
    assert results["SkipsUnprintably"].reason == "<Skip; its str() raised TypeError>"
    # infer() returned; it was the harness writing its outputs that ran out of memory, and the reason says so
    assert results["OutputTooBig"].reason == "MemoryError: cannot allocate 80 GiB (in outputs)", results[
        "OutputTooBig"].reason


def test_an_import_that_raises_an_unprintable_exception_fails_its_file_alone(tmp_path):
    folder = suite(tmp_path / "s", "")
    (folder / "broken.py").write_text("class Bad(Exception):\n    def __str__(self):\n        raise TypeError\n\n\n"
                                      "raise Bad()\n")
    found = local.discover(Path(sys.executable), {"s": folder}, tmp_path / "scratch")
    assert [w["id"] for w in found["workloads"]] == ["s/Good"]
    assert [(Path(e["file"]).name, e["line"], e["message"]) for e in found["errors"]] == [
        ("broken.py", 6, "<Bad; its str() raised TypeError>")]


@pytest.mark.parametrize("raised", ["Unprintable()", "SystemExit(0)", "KeyboardInterrupt"])
def test_the_compat_child_records_a_load_that_raises_anything(tmp_path, raised):
    folder = suite(tmp_path / "s", f'''

class Loads(_Base):
    formats = ("raw",)

    def load(self, ctx, fmt, path):
        raise {raised}
''')
    (tmp_path / "model").write_text("")
    jobs = [{"index": i, "workload": "s/Loads", "file": str(folder / "models.py"), "seed": 0, "format": "raw",
             "path": str(tmp_path / "model")} for i in range(2)]
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "modelci.workload.compat_child", "load", "--jobs", str(tmp_path / "jobs.json"),
           "--out", str(out), "--suite", f"s={folder}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for index in range(2):  # the process went on to the next job
        record = json.loads((out / str(index) / "result.json").read_text())
        assert record["status"] == "load_failed", record
        assert record["reason"].endswith("(in load)") and 'models.py", line' in record["traceback"], record
    expected = {"Unprintable()": "<Unprintable; its str() raised TypeError>",
                "SystemExit(0)": "load() raised SystemExit(0)",
                "KeyboardInterrupt": "load() raised KeyboardInterrupt()"}
    assert record["reason"].startswith(expected[raised]), record["reason"]


# -- ctx.record: the harness's own names are refused in the call --------------------------------------------

@pytest.mark.parametrize("name", ["loss", "status", "time.train", "time.infer", "time.setup", "mem.peak_rss",
                                  "mem.peak_device", "time.mine", "output:y", "", "  ", "acc\nuracy", "acc\x00",
                                  "a" * 201, 5])
def test_ctx_record_refuses_a_name_the_harness_records_or_cannot_store(name):
    ctx = Context()
    with pytest.raises(ValueError, match=r"ctx\.record\(.*\) refused the name: "):
        ctx.record(name, 1.0)
    assert ctx.metrics == {}


def test_ctx_record_takes_a_workloads_own_names():
    ctx = Context()
    for name in ("accuracy", "loss_d", "time_per_item", "memory", "val.loss", "a" * 200):
        ctx.record(name, 1)
    assert set(ctx.metrics) == {"accuracy", "loss_d", "time_per_item", "memory", "val.loss", "a" * 200}


@pytest.mark.parametrize("isolation", ["fork", "spawn"])
def test_a_recorded_harness_metric_fails_the_workload_and_keeps_the_harness_figures(project, isolation):
    results = run(project, '''

class OwnTime(_Base):
    def train_step(self, ctx, step):
        ctx.record("time.train", 5)
        return 1.0


class OwnLoss(_Base):
    def infer(self, ctx):
        ctx.record("loss", 2)
        return {"a": np.zeros(2)}


class NewlineName(_Base):
    def infer(self, ctx):
        ctx.record("acc\\nuracy", 2)
        return {"a": np.zeros(2)}
''', isolation)
    assert results["Good"].status == "ok"
    for name, metric in (("OwnTime", "'time.train'"), ("OwnLoss", "'loss'"), ("NewlineName", "'acc\\nuracy'")):
        result = results[name]
        assert result.status == "failed", (name, result.reason)
        assert f"ctx.record({metric}, ...) refused the name" in result.reason, result.reason
        assert 'models.py", line' in result.traceback
    assert "the harness records that name itself" in results["OwnTime"].reason
    assert "control character" in results["NewlineName"].reason


def test_names_past_what_the_history_holds_are_refused_where_they_are_given(project, tmp_path):
    """An output name of 201 characters is the workload's failure; a suite folder name of 200 characters is
    refused before anything runs; an error of a class in a file with a long name is stored under a cut id. On
    PostgreSQL each of these refused the whole run after every workload had run."""
    results = run(project, '\n\nclass LongOutput(_Base):\n    def infer(self, ctx):\n        return {"o" * 201: '
                           'np.zeros(2)}\n')
    assert results["Good"].status == "ok" and results["LongOutput"].status == "failed"
    assert "is 201 characters long; the most is 200" in results["LongOutput"].reason
    with pytest.raises(UserError, match="suite folder name 'ffff.*is 200 characters long; the most is 199"):
        workflow.run(config_module.load(), "current", [str(suite(tmp_path / ("f" * 200), ""))])
    folder = tmp_path / "s"
    folder.mkdir()
    wrong = "W" * 60  # s/FILE.py:CLASS is 316 characters
    (folder / ("m" * 250 + ".py")).write_text(BASE + f"\n\nclass {wrong}(_Base):\n    name = 'a b'\n")
    outcome = workflow.run(config_module.load(), "current", [str(folder)])
    (error,) = [r for r in outcome.results if r.status == "error"]
    assert len(error.workload) == steps.WORKLOAD_ID_MAX and error.workload.startswith("s/mmm")
    assert outcome.run_id is not None


@pytest.mark.parametrize("body, says", [
    ("import time\nwhile True:\n    time.sleep(0.1)\n",
     "did not finish in 3 s (the larger of 300 s and the `timeout` option) while importing"),
    ("import os\nos._exit(3)\n", "ended without its result while importing"),
])
def test_a_suite_file_that_blocks_or_exits_at_import_is_named(tmp_path, body, says):
    # discovery waited its whole timeout and said only "its stderr ends with: (nothing)"
    folder = suite(tmp_path / "s", "")
    (folder / "stuck.py").write_text(body)
    with pytest.raises(HarnessError) as caught:
        local.discover(Path(sys.executable), {"s": folder}, tmp_path / "scratch", timeout=3)
    assert says in str(caught.value) and f"{folder / 'stuck.py'}: does that file block or exit at import?" in str(
        caught.value)


@pytest.mark.parametrize("timeout, finds", [(1.0, False), (8.0, True)])
def test_discovery_is_given_the_workload_timeout_when_that_is_longer(project, monkeypatch, timeout, finds):
    # discovery had a fixed 300 s, which no option could raise, for a suite whose imports are slow
    from modelci.execute import base

    monkeypatch.setattr(base, "DISCOVERY_TIMEOUT", 0.5)
    monkeypatch.setattr(workflow, "DISCOVERY_TIMEOUT", 0.5)
    monkeypatch.setattr(local, "DISCOVERY_TIMEOUT", 0.5)
    folder = suite(project / "suite", "")
    (folder / "slow.py").write_text("import time\ntime.sleep(2)\n")  # a file that takes 2 s to import
    config = config_module.load(cli={"timeout": timeout})
    if finds:
        outcome = workflow.run(config, "current", [str(folder)])
        assert [r.status for r in outcome.results] == ["ok"]
    else:
        with pytest.raises(HarnessError, match=r"did not finish in 1 s \(the larger of 0.5 s and the `timeout` "):
            workflow.run(config, "current", [str(folder)])


def test_a_spawned_workload_killed_by_sigkill_is_crashed_by_that_signal_without_a_traceback(project):
    # the OOM killer's signal: the spawned child's supervisor could not set a handler for SIGKILL, printed its own
    # traceback and exited 1, so the workload read as "exited with code 1 before writing its result"
    results = run(project, "\n\nclass Killed(_Base):\n    def setup(self, ctx):\n        import os, signal\n"
                           "        os.kill(os.getpid(), signal.SIGKILL)\n", "spawn")
    killed = results["Killed"]
    assert killed.status == "crashed" and killed.reason == "killed by SIGKILL", killed.reason
    assert "Traceback" not in killed.stderr_tail
    assert results["Good"].status == "ok"


def test_discovery_that_cannot_write_its_result_names_the_limit_not_the_suite(tmp_path):
    """A file-size limit (ulimit -f) or a full scratch disk: discovery could not write its list of workloads, and
    the message blamed the last suite file it imported ("does that file block or exit at import?")."""
    import resource

    folder = suite(tmp_path / "s", "".join(f"\n\nclass Many{i}(_Base):\n    pass\n" for i in range(200)))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (8192, hard))  # the child inherits it; its list is larger
    try:
        with pytest.raises(HarnessError) as caught:
            local.discover(Path(sys.executable), {"s": folder}, tmp_path / "scratch", timeout=60)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    message = str(caught.value)
    assert "could not write its result (File too large)" in message and "ulimit -f" in message, message
    assert "does that file block" not in message
