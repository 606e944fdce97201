"""Lock files: format and schema, rebuilding exactly with `uv pip sync`, same environment id, bad locks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from modelci.envs import EnvSpec, IndexConfig, ensure, ensure_locked, lockfile
from modelci.envs.lockfile import Lock
from modelci.errors import UserError
from modelci.targets import resolve


def quiet(line: str) -> None:
    pass


@pytest.fixture
def wheel_env(fake_wheel_factory, tmp_path):
    """An environment built from a wheel file (a `wheel` target) plus a dependency from find-links."""
    fake_wheel_factory("helperlib", "2.1")
    wheel = fake_wheel_factory("fakefw", "1.0", requires=["helperlib>=2"])
    spec = EnvSpec([str(wheel)], index=IndexConfig(no_index=True, find_links=[str(fake_wheel_factory.folder)]))
    return ensure(spec, tmp_path / "cache-a", log=quiet)


def lock_of(env, target="fakefw==1.0") -> Lock:
    lock = Lock.of(env.lock, env.fingerprint, environment=env.id, source="a test")
    lock.target = target
    return lock


def test_lock_file_round_trip_and_header(wheel_env, tmp_path):
    lock = lock_of(wheel_env)
    path = tmp_path / "env.lock"
    lockfile.write(path, lock)

    text = path.read_text()
    pins = [line for line in text.splitlines() if not line.startswith("#")]
    assert pins == ["fakefw==1.0", "helperlib==2.1"]  # a plain requirements file for uv and pip
    assert "# schema: 1\n" in text and f"# environment: {wheel_env.id}\n" in text
    assert f"# python: CPython {sys.version_info.major}.{sys.version_info.minor}\n" in text
    again = lockfile.read(path)
    assert again.to_json() == lock.to_json() and again.file == str(path)
    assert again.id() == wheel_env.id  # the id follows from the lock's own content
    assert again.direct() == {"fakefw"}


def test_rebuilt_from_the_lock_is_the_same_environment(wheel_env, tmp_path):
    path = tmp_path / "env.lock"
    lockfile.write(path, lock_of(wheel_env))
    lock = lockfile.read(path)
    target = resolve("fakefw==1.0")
    # another cache, offline: fakefw from the wheel file the lock names, helperlib from find-links
    index = IndexConfig(no_index=True, find_links=[str(Path(lock.wheels[0]["path"]).parent)])
    logs: list[str] = []

    env = ensure_locked(lock, target, sys.executable, index, tmp_path / "cache-b", log=logs.append)

    assert env.id == wheel_env.id
    assert env.lock == wheel_env.lock
    assert env.path != wheel_env.path and env.fingerprint["build"]["from_lock"] == wheel_env.id
    assert target.version == "1.0"
    assert not any("edited" in line for line in logs)


def test_a_lock_whose_wheel_was_rebuilt_is_refused(wheel_env, fake_wheel_factory, tmp_path):
    lock = lock_of(wheel_env)
    lock.wheels = []  # forget the original file: the rebuild must find fakefw 1.0 in find-links
    fake_wheel_factory("fakefw", "1.0", {"fakefw/__init__.py": "changed = True\n"}, requires=["helperlib>=2"])

    with pytest.raises(UserError, match="other files for fakefw"):
        ensure_locked(lock, resolve("fakefw==1.0"), sys.executable,
                      IndexConfig(no_index=True, find_links=[str(fake_wheel_factory.folder)]), tmp_path / "c",
                      log=quiet)


def test_a_lock_whose_wheel_file_moved_names_it(wheel_env, tmp_path):
    """A lock names its local wheels by path; moved (or the lock made on another machine), the rebuild failed with
    uv's "no version of fakefw==1.0" alone, and nothing said which file was missing."""
    lock = lock_of(wheel_env)
    wheel = Path(lock.wheels[0]["path"])
    moved = wheel.rename(tmp_path / "moved.whl")
    try:
        with pytest.raises(UserError) as refused:
            ensure_locked(lock, resolve("fakefw==1.0"), sys.executable, IndexConfig(no_index=True),
                          tmp_path / "c", log=quiet)
    finally:
        moved.rename(wheel)
    said = " ".join(str(refused.value).split())
    assert f"The lock's local wheel files are not where it says: {wheel} (not there)" in said, said
    assert "MODELCI_FIND_LINKS" in said


def test_a_lock_from_another_platform_or_python_is_refused(wheel_env, tmp_path):
    for field, value in (("platform", "macosx-arm64"), ("python", "3.99"), ("implementation", "PyPy")):
        lock = lock_of(wheel_env)
        setattr(lock, field, value)
        path = tmp_path / f"{field}.lock"
        lockfile.write(path, lock)
        with pytest.raises(UserError) as caught:
            ensure_locked(lockfile.read(path), resolve("fakefw==1.0"), sys.executable, IndexConfig(no_index=True),
                          tmp_path / "cache", log=quiet)
        message = str(caught.value)
        assert str(path) in message and value in message and "was made on" in message, message


def test_target_must_be_what_the_lock_holds(wheel_env, tmp_path):
    lock = lock_of(wheel_env)
    index = IndexConfig(no_index=True)
    with pytest.raises(UserError, match="holds no numpy"):
        ensure_locked(lock, resolve("numpy==2.0"), sys.executable, index, tmp_path / "c", log=quiet)
    with pytest.raises(UserError, match="pins fakefw==1.0, which the target excludes"):
        ensure_locked(lock, resolve("fakefw>=1.1"), sys.executable, index, tmp_path / "c", log=quiet)
    with pytest.raises(UserError, match="cannot be combined with --target current"):
        ensure_locked(lock, resolve("current"), sys.executable, index, tmp_path / "c", log=quiet)


@pytest.mark.parametrize(
    "text, message",
    [
        ("fakefw==1.0\n", "is not a modelci lock file (it has no `# schema:` line)"),
        ("# schema: 7\nfakefw==1.0\n", "has lock schema 7; this modelci reads schema 1"),
        ("# schema: 1\nfakefw>=1.0\n", "line 2: 'fakefw>=1.0' is not an exact pin"),
        ('# schema: 1\n# requested: [oops\nfakefw==1.0\n', "not valid JSON"),
        # a hand-edited lock: the later pin silently won in `env diff`, a rebuild blamed a rebuilt wheel
        ("# schema: 1\nnumpy==2.0.2\nfakefw==1.0\nNumPy==2.1.3\n",
         "line 4: numpy is pinned again (2.0.2 at line 2, 2.1.3 here); a lock pins each distribution once"),
        ('# schema: 1\n# requested: {"a": 1}\nfakefw==1.0\n', "must be a JSON list of requirement strings"),
        ('# schema: 1\n# wheel: [1]\nfakefw==1.0\n', "each `# wheel:` line must be a JSON object"),
        # `env diff` said "A and B are the same environment (../../etc)"
        ("# schema: 1\n# environment: ../../etc\nfakefw==1.0\n", "`# environment: ../../etc` is no environment id"),
        ("# schema: 1\n# files: numpy\nnumpy==2.0.2\n", "`# files: numpy` must name a distribution and the digest"),
    ],
)
def test_bad_lock_files_are_user_errors_naming_the_file(tmp_path, text, message):
    path = tmp_path / "bad.lock"
    path.write_text(text)
    with pytest.raises(UserError) as caught:
        lockfile.read(path)
    assert message in str(caught.value) and str(path) in str(caught.value)


def test_missing_lock_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot read lock file"):
        lockfile.read(tmp_path / "nope.lock")


def test_cli_lock_then_run_from_the_lock(fake_project, tmp_path):
    from modelci import config as config_module
    from modelci import workflow
    from modelci.store import Store

    cfg = config_module.load()
    first = workflow.run(cfg, str(fake_project.v10), [str(fake_project.suite)], "Stable")
    path = tmp_path / "run.lock"

    locked = fake_project.cli("env", "lock", str(first.run_id), "-o", str(path))
    assert locked.returncode == 0, locked.stderr
    assert lockfile.read(path).target == "fakefw==1.0"
    rerun = fake_project.cli("run", "--lock", str(path), "--suite", str(fake_project.suite), "-k", "Stable")

    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    latest = Store(cfg.db, cfg.artifacts).run("latest").row
    assert latest.id != first.run_id and latest.environment_id == first.environment.id
    assert latest.target.spec == "fakefw==1.0"
