"""One owner per identity: a target has one name and one place in the order in every report, `-k` selects the
same workloads wherever a selection is made, and one parser reads pins.

Each test reads the identity through every place that shows it (the console's history, `modelci history`'s
workload table, `show`, the baselines, the alarms' change points, the dashboard) and checks that they agree.
"""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from modelci import builds, compat, selection, targets
from modelci.alarms import changes
from modelci.envs import lockfile
from modelci.envs.fingerprint import parse_lock, split_pin
from modelci.locks import exclusive
from modelci.records import Metric, Result
from modelci.report import console as views
from modelci.report import queries
from modelci.store import Store
from modelci.targets import Target
from modelci.workload.processes import kill_group

COMMIT = "ab12cd34ef" + "0" * 30


def _result(workload: str, seconds: float) -> Result:
    return Result(workload=workload, status="ok", framework="fakefw", duration=0.5,
                  metrics={"time.train": Metric("time.train", "samples", [seconds * (1 + i / 100) for i in range(6)],
                                                "s")})


def _ingest(store: Store, target: Target, seconds: float) -> int:
    env = SimpleNamespace(id=f"env-{target.spec}"[:64], python="/envs/bin/python", isolated=True,
                          lock="fakefw==1.0\n", fingerprint={"schema": 1})
    return store.ingest(target=target, environment=env, runner="ci", results=[_result("suite/Net", seconds)])


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "history.db"), str(tmp_path / "artifacts"))


#: a commit whose version is not known (a build that failed before it said one): only a name and a commit
UNVERSIONED = Target(spec="git+/src/fakefw@main", kind="git", name="fakefw", commit=COMMIT)
RELEASES = [Target(spec=f"fakefw=={v}", kind="requirement", name="fakefw", version=v) for v in ("1.10", "1.9")]


def _names_everywhere(store: Store) -> dict[str, list[str]]:
    """Every label the reports give the stored targets, in the order each report puts them."""
    out = io.StringIO()
    views.render_history(store.series("suite/Net", "time.train"), "time.train",
                         Console(file=out, width=400))
    history_rows = [line.split("│")[3].strip() for line in out.getvalue().splitlines() if line.strip()[:1].isdigit()]
    history = queries.load_history(store)
    probe = Target(spec="fakefw==9.0", kind="requirement", name="fakefw", version="9.0")
    return {
        "console history (run order)": history_rows,
        "recent runs (run order)": [run.target.label for run in reversed(store.runs())],
        "baseline candidates": sorted(c.label for c in store.baseline_candidates("suite/Net", "ci", probe)),
        "dashboard (target order)": [t.label for t in history.targets.values()],
        "change points (target order)": changes.load_series(store, metric="time.train")[0].labels,
    }


def test_an_unversioned_commit_has_one_name_in_every_report(store):
    assert UNVERSIONED.label == f"fakefw@{COMMIT[:10]}"
    run_id = _ingest(store, UNVERSIONED, 1.0)
    names = _names_everywhere(store)
    assert all(found == [UNVERSIONED.label] for found in names.values()), names
    assert store.workloads()[0]["target"] == UNVERSIONED.label
    assert store.run(run_id).row.target.label == UNVERSIONED.label
    out = io.StringIO()
    views.render_show(store.run(run_id), Console(file=out, width=400))
    assert f"target {UNVERSIONED.label} " in out.getvalue()


def test_every_report_puts_targets_in_one_order(store):
    # ingested newest release first, the commit of unknown version last: the order is by version, not by run
    for seconds, target in enumerate([*RELEASES, UNVERSIONED], 1):
        _ingest(store, target, float(seconds))
    names = _names_everywhere(store)
    order = [UNVERSIONED.label, "fakefw==1.9", "fakefw==1.10"]
    assert names["dashboard (target order)"] == order
    assert names["change points (target order)"] == order
    assert names["console history (run order)"] == ["fakefw==1.10", "fakefw==1.9", UNVERSIONED.label]
    assert names["baseline candidates"] == sorted(order)
    # the latest status of a workload is that of its newest target in that order, not of its latest run
    assert store.workloads()[0]["target"] == "fakefw==1.10"


def test_the_order_breaks_ties_by_first_run_then_by_target():
    same = [targets.order_key("1.0+gaaa", "2024-01-02", 5, 2), targets.order_key("1.0+gbbb", "2024-01-01", 7, 1),
            targets.order_key("1.0", "2024-01-01", 3, 3), targets.order_key("1.0", "2024-01-01", 3, 0)]
    assert sorted(range(4), key=same.__getitem__) == [3, 2, 1, 0]
    assert targets.order_key("not a version", "", 1) == targets.order_key(None, None, 1)


def _suite(folder, names):
    folder.mkdir()
    body = "".join(f"class {name}(Workload):\n    framework = 'python'\n\n" for name in names)
    (folder / "nets.py").write_text("from modelci import Workload\n\n" + body)
    return {folder.name: folder}


def test_an_exact_workload_id_selects_that_workload_alone_everywhere(tmp_path):
    ids = ["torch/LeNet", "torch/LeNetWide", "torch/ResNet"]
    assert selection.select("torch/LeNet", ids) == ["torch/LeNet"]
    assert selection.select("LeNet", ids) == ["torch/LeNet", "torch/LeNetWide"]
    assert selection.select("LeNet*", ids) == ["torch/LeNet", "torch/LeNetWide"]
    assert selection.select("*/Res*", ids) == ["torch/ResNet"]
    assert selection.select(None, ids) == ids

    suites = _suite(tmp_path / "torch", ["LeNet", "LeNetWide", "ResNet"])
    # the workloads of a commit that did not build, read from the source
    assert [w for w, _ in builds.declared_workloads(suites, "torch/LeNet")] == ["torch/LeNet"]
    assert [w for w, _ in builds.declared_workloads(suites, "LeNet")] == ["torch/LeNet", "torch/LeNetWide"]
    # the saved models compat loads
    manifests = [{"suite": "torch", "workload": w, "format": f} for w in ids for f in ("a", "b")]
    assert {m["workload"] for m in compat._selected(manifests, suites, "torch/LeNet")} == {"torch/LeNet"}
    assert {m["workload"] for m in compat._selected(manifests, suites, "LeNet")} == {"torch/LeNet",
                                                                                     "torch/LeNetWide"}
    assert compat._selected(manifests, {}, None) == []


def test_one_parser_reads_pins_with_packaging_names(tmp_path):
    assert split_pin("Typing_Extensions==4.12.2") == ("typing-extensions", "4.12.2")
    assert split_pin("zope.interface == 7.0 ") == ("zope-interface", "7.0")
    assert split_pin("numpy>=2") is None and split_pin("==1.0") is None and split_pin("numpy==") is None
    lock = "# schema: 1\nTyping_Extensions==4.12.2\nNumPy==2.1.0  # the framework's\n"
    assert parse_lock(lock) == {"typing-extensions": "4.12.2", "numpy": "2.1.0"}
    path = tmp_path / "env.lock"
    path.write_text("# schema: 1\n# python: CPython 3.11.7\n# platform: linux-x86_64\n" + lock.split("\n", 1)[1])
    assert lockfile.read(path).pins == parse_lock(lock)


def test_a_lock_held_by_another_process_is_waited_for_or_skipped(tmp_path):
    path = tmp_path / "thing.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import fcntl, sys
            handle = open({str(path)!r}, "a")
            fcntl.flock(handle, fcntl.LOCK_EX)
            print("held", flush=True)
            sys.stdin.readline()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with exclusive(path, wait=False) as held:
            assert held is False
        said = []

        def let_go(message: str) -> None:  # said before it waits: the holder lets go, then it gets the lock
            said.append(message)
            holder.stdin.write("\n")
            holder.stdin.flush()

        with exclusive(path, waiting="waiting for the thing", log=let_go) as held:
            assert held is True
        assert said == ["waiting for the thing"]
    finally:
        holder.kill()
        holder.wait()
        holder.stdin.close()
        holder.stdout.close()
    with exclusive(path, wait=False) as held:
        assert held is True


def test_one_killer_ends_a_child_and_what_it_started():
    # a child that leads its group and starts a grandchild in it, as a workload may start a server
    child = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time\n"
         "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
         "print(p.pid, flush=True)\ntime.sleep(300)\n"], stdout=subprocess.PIPE, text=True, start_new_session=True)
    grandchild = int(child.stdout.readline())
    kill_group(child.pid)
    assert child.wait(timeout=30) == -signal.SIGKILL
    child.stdout.close()
    for _ in range(300):  # killed: gone, or a zombie until whoever adopted it reaps it
        try:
            state = Path(f"/proc/{grandchild}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state in ("Z", "X"):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"process {grandchild}, started by the killed child, still runs")
    kill_group(child.pid)  # a group already gone is fine


def test_a_wheel_is_found_by_path_by_file_url_and_by_direct_reference(tmp_path):
    # a file:// URL, or `name @ file://...`, was "no such wheel file" for a wheel that is there
    from fakewheels import build_fake_wheel

    from modelci import targets

    wheel = build_fake_wheel(tmp_path, "fakefw", "1.2")
    for spec in (str(wheel), wheel.as_uri(), f"fakefw @ {wheel.as_uri()}"):
        target = targets.resolve(spec)
        assert (target.kind, target.name, target.version) == ("wheel", "fakefw", "1.2"), spec
        assert target.requirements == [str(wheel)]
