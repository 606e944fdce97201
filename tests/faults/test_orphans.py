"""Orphans: whatever ends `modelci`, its worker, its workload processes and what they started end with it."""

from __future__ import annotations

import signal

import pytest
from probes import (BACKGROUND, BACKGROUND_THEN_HANG, HANG, QUICK, SETSID_BACKGROUND, SETSID_THEN_HANG,
                    processes_with, wait_for)

ISOLATIONS = ["fork", "spawn"]


def _kill_while_hanging(project, source: str, signum: int) -> None:
    project.workloads(QUICK + source)
    proc = project.start("run", "--target", "current", "--suite", "suite")
    wait_for(lambda: project.marker("hanging").exists() or proc.poll() is not None, 120, "the hanging workload")
    assert proc.poll() is None, proc.communicate()
    hanging = int(project.marker("hanging").read_text())
    # the probe can see the processes it must not find after. Waited for: the workload writes the pid once Popen
    # returns, which can be before the kernel has set up the new program's environment (an exec in progress
    # reads as an empty /proc/PID/environ)
    wait_for(lambda: hanging in processes_with(project.token), 10, "the probe to see the hanging process")
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == (-signal.SIGKILL if signum == signal.SIGKILL else 128 + signum), err
    project.assert_clean(type("Done", (), {"stdout": out, "stderr": err}))


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL, signal.SIGHUP])
def test_a_hanging_workload_dies_with_the_harness(project, isolation, signum):
    project.config(f'isolation = "{isolation}"')
    _kill_while_hanging(project, HANG, signum)


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL, signal.SIGHUP])
def test_what_a_hanging_workload_started_dies_with_the_harness(project, isolation, signum):
    """Even SIGKILL: with fork isolation the worker outlives the harness long enough to end the workload's
    process group; a spawned workload runs under a supervisor that does the same (workload/lifeline.py)."""
    project.config(f'isolation = "{isolation}"')
    _kill_while_hanging(project, BACKGROUND_THEN_HANG, signum)


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_what_a_workload_started_in_a_session_of_its_own_dies_with_the_harness(project, isolation, signum):
    """A process that called setsid is out of the workload's process group; the worker (fork) and the spawned
    child's supervisor are subreapers, so it is re-parented to them when the workload dies, and ended."""
    project.config(f'isolation = "{isolation}"')
    _kill_while_hanging(project, SETSID_THEN_HANG, signum)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_process_a_workload_leaves_running_ends_with_the_workload(project, isolation):
    project.config(f'isolation = "{isolation}"')
    project.workloads(BACKGROUND + QUICK)
    done = project.run()
    assert done.returncode == 0, done.stderr
    assert project.statuses() == {"suite/Background": "ok", "suite/Quick": "ok"}
    assert int(project.marker("background").read_text()) > 0
    project.assert_clean(done)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_process_a_workload_leaves_in_a_session_of_its_own_ends_with_the_workload(project, isolation):
    project.config(f'isolation = "{isolation}"')
    project.workloads(SETSID_BACKGROUND + QUICK)
    done = project.run()
    assert done.returncode == 0, done.stderr
    assert project.statuses() == {"suite/SetsidBackground": "ok", "suite/Quick": "ok"}
    assert int(project.marker("background").read_text()) > 0
    project.assert_clean(done)
