"""Cache hygiene: `env gc` by count and age, never under a build, and half-built leftovers."""

from __future__ import annotations

import fcntl
import os
import time

import pytest

from modelci.envs import EnvSpec, IndexConfig, ensure
from modelci.envs.build import LAST_USED_FILE
from modelci.envs.gc import cached, gc
from modelci.errors import UserError

DAY = 86400.0


@pytest.fixture
def three_envs(fake_wheel_factory, tmp_path):
    """Environments a, b, c in one cache, last used 30, 20 and 10 days ago."""
    cache = tmp_path / "cache"
    specs = {}
    for age, name in zip((30, 20, 10), "abc"):
        fake_wheel_factory(f"pkg-{name}", "1.0")
        index = IndexConfig(no_index=True, find_links=[str(fake_wheel_factory.folder)])
        spec = EnvSpec([f"pkg-{name}==1.0"], index=index)
        env = ensure(spec, cache, log=lambda line: None)
        stamp = time.time() - age * DAY
        for path in (env.path / LAST_USED_FILE, env.path / "modelci-env.json", env.path):
            os.utime(path, (stamp, stamp))
        specs[name] = spec
    return cache, specs


def names(envs) -> set[str]:
    return {env.spec_id for env in envs}


def test_keep_n_most_recently_used(three_envs):
    cache, specs = three_envs
    assert [env.spec_id for env in cached(cache)] == [specs[n].id() for n in "cba"]

    report = gc(cache, keep=1, log=lambda line: None)

    assert names(report.removed) == {specs["a"].id(), specs["b"].id()}
    assert names(report.kept) == {specs["c"].id()}
    assert report.freed_bytes > 0
    assert names(cached(cache)) == {specs["c"].id()}
    assert not list((cache / "envs").glob(".trash-*"))
    logs: list[str] = []
    ensure(specs["a"], cache, log=logs.append)  # a removed environment is simply built again
    assert any("building environment" in line for line in logs)


def test_older_than_days_and_use_refreshes_age(three_envs):
    cache, specs = three_envs
    ensure(specs["a"], cache, log=lambda line: None)  # handing it out marks it used now

    report = gc(cache, older_than_days=15, log=lambda line: None)

    assert names(report.removed) == {specs["b"].id()}
    assert names(cached(cache)) == {specs["a"].id(), specs["c"].id()}


def test_environment_being_built_is_skipped_and_leftovers_go(three_envs):
    cache, specs = three_envs
    leftover = cache / "envs" / "0123456789abcdef"
    (leftover / "bin").mkdir(parents=True)
    with open(cache / "envs" / f"{specs['a'].id()}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # as ensure() holds it while building
        report = gc(cache, keep=0, log=lambda line: None)

    assert names(report.busy) == {specs["a"].id()}
    assert names(report.removed) == {specs["b"].id(), specs["c"].id(), leftover.name}
    assert (cache / "envs" / specs["a"].id()).is_dir() and not leftover.exists()


def test_gc_needs_a_rule(tmp_path):
    with pytest.raises(UserError, match="--keep N .* or --older-than DAYS"):
        gc(tmp_path)
    with pytest.raises(UserError, match="at least 0"):
        gc(tmp_path, keep=-1)
    assert gc(tmp_path / "no-cache-yet", keep=3).removed == []


def test_an_environment_a_running_modelci_uses_is_skipped(three_envs, tmp_path):
    """`env gc` during a run removed the environment its workloads ran from: the next workload lost its python,
    the run ended in a traceback and stored nothing. A process that was handed the environment holds it."""
    import subprocess
    import sys

    cache, specs = three_envs
    ready = tmp_path / "ready"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time, pathlib\n"
        "from modelci.envs import EnvSpec, IndexConfig, ensure\n"
        f"index = IndexConfig(no_index=True, find_links={specs['a'].index.find_links!r})\n"
        "spec = EnvSpec(['pkg-a==1.0'], index=index)\n"
        f"ensure(spec, pathlib.Path({str(cache)!r}), log=lambda line: None)\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(120)\n")])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and holder.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the holder did not get its environment"
        logs: list[str] = []
        report = gc(cache, keep=0, log=logs.append)
        assert names(report.busy) == {specs["a"].id()}
        assert f"skipping environment {specs['a'].id()}: a running modelci uses it" in logs
        assert (cache / "envs" / specs["a"].id() / "bin" / "python").exists()
    finally:
        holder.kill()
        holder.wait()
    assert names(gc(cache, keep=0, log=lambda line: None).removed) == {specs["a"].id()}  # once it has ended
