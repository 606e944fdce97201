"""Environments: real uv, real venvs, fake wheels installed offline through find-links."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from modelci.envs import EnvSpec, IndexConfig, current, ensure, installed_version
from modelci.envs.build import SPEC_FILE
from modelci.envs.pipconfig import parse_pip_config_list
from modelci.errors import HarnessError, UserError


def offline(folder: Path) -> IndexConfig:
    return IndexConfig(no_index=True, find_links=[str(folder)])


def run_in(env_python: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(env_python), "-I", "-c", code], capture_output=True, text=True, timeout=60)


@pytest.fixture
def fakefw_spec(fake_wheel_factory) -> EnvSpec:
    fake_wheel_factory("fakefw", "1.0")
    return EnvSpec(["fakefw==1.0"], index=offline(fake_wheel_factory.folder))


# --- ensure -----------------------------------------------------------------------------------------------


def test_ensure_builds_then_reuses(fakefw_spec, tmp_path):
    logs: list[str] = []
    env = ensure(fakefw_spec, tmp_path / "cache", log=logs.append)

    assert env.path == tmp_path / "cache" / "envs" / fakefw_spec.id()
    assert env.isolated and env.spec is fakefw_spec
    assert env.lock == "fakefw==1.0\n"
    assert (env.path / "modelci-lock.txt").read_text() == env.lock
    assert json.loads((env.path / SPEC_FILE).read_text()) == fakefw_spec.to_json()
    assert installed_version(env, "FakeFW") == "1.0"
    assert installed_version(env, "torch") is None
    assert run_in(env.python, "import fakefw; print(fakefw.__version__)").stdout.strip() == "1.0"
    assert any("building environment" in line for line in logs)
    # the one id users see for an environment is its id by content (the run output's), not the cache folder's
    assert [line for line in logs if line.startswith("built environment")][0].split()[2] == env.id
    assert not any(f"environment {fakefw_spec.id()}" in line for line in logs)  # a folder's name, never an id
    assert any(line.startswith("uv: ") for line in logs)  # uv's own progress, passed on

    marker = env.path / "marker"
    marker.write_text("a rebuild would delete me")
    logs.clear()
    again = ensure(fakefw_spec, tmp_path / "cache", log=logs.append)
    assert again.path == env.path and again.lock == env.lock and again.fingerprint == env.fingerprint
    assert marker.exists()
    assert logs == []


def test_environment_holds_nothing_of_modelci(fakefw_spec, tmp_path):
    env = ensure(fakefw_spec, tmp_path / "cache", log=lambda line: None)
    code = textwrap.dedent(
        """
        import importlib.util, json
        names = ["sqlalchemy", "rich", "scipy", "numpy", "modelci", "pytest", "pip", "fakefw"]
        print(json.dumps({name: importlib.util.find_spec(name) is not None for name in names}))
        """
    )
    found = json.loads(run_in(env.python, code).stdout)
    assert found == {name: name == "fakefw" for name in found}
    assert [line.split("==")[0] for line in env.lock.splitlines()] == ["fakefw"]


def test_fingerprint_describes_the_env_python(fakefw_spec, tmp_path):
    env = ensure(fakefw_spec, tmp_path / "cache", log=lambda line: None)
    fingerprint = env.fingerprint
    assert fingerprint["schema"] == 2
    assert fingerprint["python"] == ".".join(map(str, sys.version_info[:3]))
    assert fingerprint["implementation"] and fingerprint["platform"] and fingerprint["machine"]
    assert fingerprint["cpu_count"] == os.cpu_count()
    assert "cpu" in fingerprint and "platform_tag" in fingerprint
    assert fingerprint["packages_of_interest"] == {}


def test_half_built_environment_is_rebuilt(fakefw_spec, tmp_path):
    leftover = tmp_path / "cache" / "envs" / fakefw_spec.id()
    (leftover / "bin").mkdir(parents=True)
    (leftover / "junk").write_text("from a killed build")
    logs: list[str] = []

    env = ensure(fakefw_spec, tmp_path / "cache", log=logs.append)

    assert env.path == leftover
    assert not (leftover / "junk").exists()
    assert (leftover / SPEC_FILE).exists()
    assert any("removing incomplete environment" in line for line in logs)


def test_environment_with_another_stored_spec_is_rebuilt(fakefw_spec, tmp_path):
    env = ensure(fakefw_spec, tmp_path / "cache", log=lambda line: None)
    (env.path / SPEC_FILE).write_text(json.dumps({"schema": 0}))
    logs: list[str] = []
    ensure(fakefw_spec, tmp_path / "cache", log=logs.append)
    assert any("building environment" in line for line in logs)


def test_concurrent_ensure_builds_once(fake_wheel_factory, tmp_path):
    wheel = fake_wheel_factory("fakefw", "1.0")
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from modelci.envs import EnvSpec, IndexConfig, ensure
        spec = EnvSpec([sys.argv[1]], index=IndexConfig(no_index=True))
        env = ensure(spec, Path(sys.argv[2]))
        print("path", env.path)
        """
    )
    args = [sys.executable, "-c", script, str(wheel), str(tmp_path / "cache")]
    children = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        outputs.append(out)

    assert sum(out.count("building environment") for out in outputs) == 1
    paths = {line for out in outputs for line in out.splitlines() if line.startswith("path ")}
    assert len(paths) == 1


SLOW_BACKEND = """
import base64, hashlib, os, time, zipfile

HANG, STARTED = {hang!r}, {started!r}


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    open(STARTED, "w").close()
    while os.path.exists(HANG):  # the test kills the build here
        time.sleep(0.05)
    files = {{"slowpkg/__init__.py": b"", "slowpkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\\nName: slowpkg\\n"
             b"Version: 1.0\\n", "slowpkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\\nGenerator: t\\n"
             b"Root-Is-Purelib: true\\nTag: py3-none-any\\n"}}
    record = [p + ",sha256=" + base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode()
              + "," + str(len(d)) for p, d in files.items()] + ["slowpkg-1.0.dist-info/RECORD,,"]
    files["slowpkg-1.0.dist-info/RECORD"] = "\\n".join(record).encode()
    name = "slowpkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return name
"""


def test_killing_a_build_midway_leaves_nothing_that_looks_valid(tmp_path):
    """SIGKILL a process while uv builds a requirement inside ensure(); the next ensure() rebuilds."""
    hang, started = tmp_path / "hang", tmp_path / "started"
    hang.touch()
    package = tmp_path / "slowpkg"
    package.mkdir()
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n')
    (package / "backend.py").write_text(SLOW_BACKEND.format(hang=str(hang), started=str(started)))
    spec = EnvSpec([str(package)], index=IndexConfig(no_index=True))
    cache = tmp_path / "cache"
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from modelci.envs import EnvSpec, IndexConfig, ensure
        ensure(EnvSpec([sys.argv[1]], index=IndexConfig(no_index=True)), Path(sys.argv[2]))
        """
    )
    builder = subprocess.Popen([sys.executable, "-c", script, str(package), str(cache)], start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert builder.poll() is None, builder.stderr.read().decode()
            assert time.monotonic() < deadline, "the build never reached the backend"
            time.sleep(0.02)
    finally:
        os.killpg(builder.pid, signal.SIGKILL)  # the whole session: python, uv and the build backend
        builder.communicate(timeout=60)

    path = cache / "envs" / spec.id()
    assert (path / "bin" / "python").exists()  # killed midway: the venv exists ...
    assert not (path / SPEC_FILE).exists()  # ... but nothing marks it complete

    hang.unlink()
    logs: list[str] = []
    env = ensure(spec, cache, log=logs.append)
    assert any("removing incomplete environment" in line for line in logs)
    assert installed_version(env, "slowpkg") == "1.0"
    assert (path / SPEC_FILE).exists()


def test_unresolvable_requirement_is_a_user_error(fake_wheel_factory, tmp_path):
    fake_wheel_factory("fakefw", "1.0")
    spec = EnvSpec(["fakefw", "numpy==0.0.42"], index=offline(fake_wheel_factory.folder))

    with pytest.raises(UserError) as caught:
        ensure(spec, tmp_path / "cache", log=lambda line: None)

    message = str(caught.value)
    assert not isinstance(caught.value, HarnessError)
    assert message.startswith("could not install numpy==0.0.42 into environment")
    assert "you require numpy==0.0.42" in message  # uv's reason, passed on
    assert len(message.splitlines()) <= 8
    assert not (tmp_path / "cache" / "envs" / spec.id()).exists()


def test_an_extra_the_package_does_not_have_is_noted_at_the_build_and_at_each_reuse(fake_wheel_factory, tmp_path):
    """uv installs `fakefw[bogus]` as plain fakefw with a warning that was never shown: the environment lacked what
    was asked, silently. Real uv, offline."""
    fake_wheel_factory("fakefw", "1.0")
    spec = EnvSpec(["fakefw[bogus]==1.0"], index=offline(fake_wheel_factory.folder))
    logs: list[str] = []
    env = ensure(spec, tmp_path / "cache", log=logs.append)

    assert installed_version(env, "fakefw") == "1.0"
    notes = [line for line in logs if line.startswith("note:")]
    assert notes == ["note: fakefw[bogus]==1.0 asks for the extra 'bogus', which fakefw==1.0 does not have: the "
                     "environment holds fakefw without it; check the extra's name"]
    assert not any("does not have an extra" in line for line in logs if line.startswith("uv: "))  # said once
    logs.clear()
    ensure(spec, tmp_path / "cache", log=logs.append)
    assert logs == notes, "a cached environment says it again: the run that built it may be long gone"


def test_unknown_extras_are_read_from_uvs_warnings():
    """uv 0.13's words, captured; a dependency's unknown extra is named by its package."""
    from modelci.envs.build import unknown_extras

    stderr = ("Resolved 2 packages in 6ms\n + fakefw==1.0\n"
              "warning: The package `fakefw==1.0` does not have an extra named `bogus`\n"
              "warning: The package `helper-lib==2.0` does not have an extra named `fast`.\n"  # older uv: a period
              "warning: Failed to hardlink files; falling back to full copy.\n")
    assert unknown_extras(["FakeFW[Bogus,cpu]==1.0", "other"], stderr) == [
        "FakeFW[Bogus,cpu]==1.0 asks for the extra 'bogus', which fakefw==1.0 does not have: the environment holds "
        "fakefw without it; check the extra's name",
        "the extra 'fast' of helper-lib was asked for, but helper-lib==2.0 does not have it: the environment holds "
        "helper-lib without it",
    ]
    assert unknown_extras(["fakefw==1.0"], "Resolved 1 package in 6ms\n") == []


def test_missing_base_python_is_a_user_error(tmp_path):
    spec = EnvSpec([], python=str(tmp_path / "no-such-python"))
    with pytest.raises(UserError, match="no-such-python"):
        ensure(spec, tmp_path / "cache", log=lambda line: None)
    assert not (tmp_path / "cache" / "envs" / spec.id()).exists()


def test_missing_uv_is_a_harness_error(fakefw_spec, tmp_path, monkeypatch):
    monkeypatch.setenv("MODELCI_UV", str(tmp_path / "no-such-uv"))
    with pytest.raises(HarnessError, match="no-such-uv"):
        ensure(fakefw_spec, tmp_path / "cache", log=lambda line: None)


def test_user_uv_cache_dir_is_kept(fakefw_spec, tmp_path, monkeypatch):
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "users-uv-cache"))
    ensure(fakefw_spec, tmp_path / "cache", log=lambda line: None)
    assert (tmp_path / "users-uv-cache").is_dir()
    assert not (tmp_path / "cache" / "uv-cache").exists()


# --- spec ids ---------------------------------------------------------------------------------------------


def test_spec_id_is_stable_and_follows_the_spec(fake_wheel_factory, monkeypatch):
    wheel = fake_wheel_factory("fakefw", "1.0")
    index = offline(fake_wheel_factory.folder)
    spec = EnvSpec([str(wheel)], index=index)
    assert len(spec.id()) == 16
    assert spec.id() == EnvSpec([str(wheel)], index=offline(fake_wheel_factory.folder)).id()
    assert spec.id() != EnvSpec([str(wheel)], index=IndexConfig()).id()
    assert spec.id() != EnvSpec(["fakefw==1.0"], index=index).id()

    # a relative path names the same file as its absolute form, since uv runs elsewhere
    monkeypatch.chdir(wheel.parent)
    relative = EnvSpec([wheel.name], index=index)
    assert relative.requirements == [str(wheel)] and relative.id() == spec.id()

    # the same path with other content (a rebuilt wheel) is another environment
    before = spec.id()
    fake_wheel_factory("fakefw", "1.0", {"fakefw/__init__.py": "__version__ = 'rebuilt'\n"})
    assert EnvSpec([str(wheel)], index=index).id() != before


# --- current ----------------------------------------------------------------------------------------------


def test_current_is_the_running_interpreter(tmp_path):
    env = current(tmp_path / "cache")
    assert env.python == Path(sys.executable)
    assert not env.isolated and env.path is None and env.spec is None
    assert installed_version(env, "pytest") == pytest.__version__
    assert installed_version(env, "modelci") is not None
    assert env.fingerprint["python"] == ".".join(map(str, sys.version_info[:3]))
    assert current(tmp_path / "cache").id == env.id


# --- pip configuration ------------------------------------------------------------------------------------

PIP_VARS = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONSTRAINT", "PIP_NO_INDEX")
MODELCI_VARS = ("MODELCI_INDEX_URL", "MODELCI_EXTRA_INDEX_URL", "MODELCI_FIND_LINKS")


@pytest.fixture
def no_pip_config(monkeypatch):
    """Hide this machine's pip config files and PIP_*/MODELCI_* variables, so a test sets its own."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for var in PIP_VARS + MODELCI_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_from_pip_reads_pip_env_vars(no_pip_config, tmp_path):
    no_pip_config.setenv("PIP_INDEX_URL", "https://mirror.example/simple")
    no_pip_config.setenv("PIP_EXTRA_INDEX_URL", "file:///srv/a/simple  https://b.example/simple")
    no_pip_config.setenv("PIP_FIND_LINKS", f"{tmp_path}/one {tmp_path}/two")
    no_pip_config.setenv("PIP_CONSTRAINT", str(tmp_path / "constraints.txt"))

    config = IndexConfig.from_pip(extra_find_links=[str(tmp_path / "three")])

    assert config == IndexConfig(
        index_url="https://mirror.example/simple",
        extra_index_urls=["file:///srv/a/simple", "https://b.example/simple"],
        find_links=[f"{tmp_path}/one", f"{tmp_path}/two", f"{tmp_path}/three"],
        constraints=[str(tmp_path / "constraints.txt")],
        no_index=False,
    )
    assert config.uv_args() == [
        "--index-url", "https://mirror.example/simple",
        "--extra-index-url", "file:///srv/a/simple",
        "--extra-index-url", "https://b.example/simple",
        "--find-links", f"{tmp_path}/one",
        "--find-links", f"{tmp_path}/two",
        "--find-links", f"{tmp_path}/three",
        "--constraint", str(tmp_path / "constraints.txt"),
        "--index-strategy", "unsafe-best-match",
    ]  # fmt: skip


def test_modelci_vars_override_pip(no_pip_config, tmp_path, monkeypatch):
    no_pip_config.setenv("PIP_INDEX_URL", "https://pip.example/simple")
    no_pip_config.setenv("PIP_FIND_LINKS", "/from/pip")
    no_pip_config.setenv("MODELCI_INDEX_URL", "https://modelci.example/simple")
    no_pip_config.setenv("MODELCI_EXTRA_INDEX_URL", "https://x.example/simple https://y.example/simple")
    no_pip_config.setenv("MODELCI_FIND_LINKS", "wheels")
    monkeypatch.chdir(tmp_path)

    config = IndexConfig.from_pip()

    assert config.index_url == "https://modelci.example/simple"
    assert config.extra_index_urls == ["https://x.example/simple", "https://y.example/simple"]
    assert config.find_links == [str(tmp_path / "wheels")]  # made absolute: uv runs in the cache folder


def test_no_index_drops_the_indexes_but_keeps_find_links(no_pip_config):
    no_pip_config.setenv("PIP_NO_INDEX", "1")
    no_pip_config.setenv("PIP_INDEX_URL", "https://mirror.example/simple")
    no_pip_config.setenv("PIP_FIND_LINKS", "/wheels")
    config = IndexConfig.from_pip()
    assert config.no_index
    assert config.uv_args() == ["--no-index", "--find-links", "/wheels", "--index-strategy", "unsafe-best-match"]
    assert IndexConfig.from_pip(no_index=True).no_index


def test_parse_pip_config_list_follows_pips_precedence():
    text = textwrap.dedent(
        """\
        :env:.find-links='/env/wheels'
        global.find-links='/global/wheels'
        global.index-url='https://global.example/simple'
        install.index-url='https://install.example/simple'
        global.extra-index-url='file:///a/simple file:///b/simple'
        download.index-url='https://ignored.example/simple'
        """
    )
    assert parse_pip_config_list(text) == {
        "find-links": "/env/wheels",
        "index-url": "https://install.example/simple",
        "extra-index-url": "file:///a/simple file:///b/simple",
    }


def test_from_pip_matches_pip_config_list_on_this_machine():
    """Whatever pip is configured with here (files and PIP_* vars), from_pip sees the same."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    # An independent reading of pip's output: for each key the most specific section wins.
    values: dict[str, str] = {}
    for section in ("global", "install", ":env:"):
        for line in listed.splitlines():
            name, _, raw = line.partition("=")
            if name.startswith(section + "."):
                values[name[len(section) + 1 :]] = raw.strip("'\"")
    for key in ("index-url", "extra-index-url", "find-links", "constraint"):
        var = "PIP_" + key.upper().replace("-", "_")
        values[key] = os.environ.get(var, values.get(key, ""))
    if os.environ.get("MODELCI_INDEX_URL") or os.environ.get("MODELCI_EXTRA_INDEX_URL"):
        pytest.skip("MODELCI_* index variables override pip's configuration here")

    config = IndexConfig.from_pip()

    assert config.index_url == (values["index-url"].split() or [None])[0]
    assert config.extra_index_urls == values["extra-index-url"].split()
    if not os.environ.get("MODELCI_FIND_LINKS"):
        assert config.find_links == [os.path.abspath(link) if "://" not in link else link
                                     for link in values["find-links"].split()]  # fmt: skip
    assert config.constraints == [os.path.abspath(path) for path in values["constraint"].split()]


def test_pip_env_config_reaches_uv(no_pip_config, fake_wheel_factory, tmp_path):
    fake_wheel_factory("fakefw", "1.1")
    no_pip_config.setenv("PIP_NO_INDEX", "yes")
    no_pip_config.setenv("PIP_FIND_LINKS", str(fake_wheel_factory.folder))
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("fakefw<2\n")
    no_pip_config.setenv("PIP_CONSTRAINT", str(constraints))

    env = ensure(EnvSpec(["fakefw"], index=IndexConfig.from_pip()), tmp_path / "cache", log=lambda line: None)

    assert installed_version(env, "fakefw") == "1.1"


@pytest.mark.network
def test_what_pip_installs_here_uv_installs_too(tmp_path):
    """With this machine's pip configuration as it is (indexes, find-links, constraints), uv installs too."""
    env = ensure(EnvSpec(["six"], index=IndexConfig.from_pip()), tmp_path / "cache", log=lambda line: None)
    assert installed_version(env, "six") is not None
    assert run_in(env.python, "import six").returncode == 0


def test_prefetched_pip_config_is_the_one_read_later(monkeypatch, tmp_path):
    """`prefetch` starts `pip config list` early; `from_pip` reads that answer instead of asking again, and
    sees what it would have seen without it."""
    from modelci.envs import pipconfig

    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nextra-index-url = file:///prefetched/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setattr(pipconfig, "_PIP_CONFIG_CACHE", {})
    monkeypatch.setattr(pipconfig, "_PENDING", {})
    pipconfig.prefetch()
    assert len(pipconfig._PENDING) == 1
    prefetched = IndexConfig.from_pip()
    assert pipconfig._PENDING == {}
    assert "file:///prefetched/simple" in prefetched.extra_index_urls
    pipconfig._PIP_CONFIG_CACHE.clear()
    assert IndexConfig.from_pip() == prefetched


def test_an_index_token_is_not_part_of_the_environment_id_nor_of_its_spec():
    """The spec JSON names the environment and is kept in its folder: a token in an index URL made every renewal
    of the token a new environment, built again, and was written into the cache. uv still gets the URL."""
    from modelci.envs.build import EnvSpec
    from modelci.envs.pipconfig import IndexConfig

    def spec(token: str) -> EnvSpec:
        return EnvSpec(["fw==1.0"], index=IndexConfig(index_url=f"https://ci:{token}@pypi.example/simple",
                                                      extra_index_urls=[f"https://pkgs.example/simple?token={token}"]))

    assert spec("tok-1").id() == spec("tok-2").id()
    assert "tok-1" not in json.dumps(spec("tok-1").to_json())
    assert "https://ci:tok-1@pypi.example/simple" in spec("tok-1").index.uv_args()
