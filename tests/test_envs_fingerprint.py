"""Fingerprints: probed inside real uv environments and in this interpreter, leaving nothing behind."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from modelci.envs import EnvSpec, IndexConfig, ensure, find_uv, installed_version
from modelci.envs.build import FINGERPRINT_FILE
from modelci.envs.fingerprint import _probe, collect, numerics_env
from modelci.execute.local import shim_dir


def offline(folder: Path) -> IndexConfig:
    return IndexConfig(no_index=True, find_links=[str(folder)])


def quiet(line: str) -> None:
    pass


def site_files(env_path: Path) -> set[str]:
    """Every file under the environment's site-packages except bytecode caches."""
    site = next(env_path.glob("lib/python*/site-packages"))
    return {str(p.relative_to(site)) for p in site.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def uv_list(python: Path) -> list[dict]:
    proc = subprocess.run([find_uv(), "pip", "list", "--python", str(python), "--format", "json"],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


@pytest.fixture
def fakefw_env(fake_wheel_factory, tmp_path):
    fake_wheel_factory("fakefw", "1.0")
    return ensure(EnvSpec(["fakefw==1.0"], index=offline(fake_wheel_factory.folder)), tmp_path / "cache", log=quiet,
                  environ={**os.environ, "OMP_NUM_THREADS": "3", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"})


def test_fingerprint_holds_machine_facts(fakefw_env):
    fp = fakefw_env.fingerprint
    assert fp["schema"] == 2
    assert fp["os"]["release"] == platform.release() and fp["os"]["system"] == platform.system()
    assert fp["cpu_count"] == os.cpu_count() and 1 <= fp["cpu_usable"] <= os.cpu_count()
    assert fp["memory_bytes"] > 100 * 2**20
    if Path("/proc/cpuinfo").exists() and "flags" in Path("/proc/cpuinfo").read_text():
        assert len(fp["cpu_flags"]) > 5 and fp["cpu_flags"] == sorted(fp["cpu_flags"])
    assert fp["soabi"].startswith("cpython-") and fp["platform_tag"]
    # the variables the workloads see, and only those that change numerics
    assert fp["numerics_env"]["OMP_NUM_THREADS"] == "3"
    assert fp["numerics_env"]["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert "HOME" not in fp["numerics_env"] and "PATH" not in fp["numerics_env"]
    assert fp["gpus"] == [] or shutil.which("nvidia-smi")
    version, digest = fp["distributions"]["fakefw"]
    assert version == "1.0" and len(digest) == 16
    assert fp["build"]["requested"] == ["fakefw==1.0"]
    assert fp["frameworks"] == {} and fp["libraries"] == []  # fakefw is no framework the probe knows


def test_probing_leaves_no_package_in_the_environment(fakefw_env):
    before_list, before_files = uv_list(fakefw_env.python), site_files(fakefw_env.path)

    collect(fakefw_env.python, fakefw_env.lock + "numpy==2.0\n")  # asks the probe to import numpy too

    assert uv_list(fakefw_env.python) == before_list
    assert site_files(fakefw_env.path) == before_files
    found = subprocess.run([str(fakefw_env.python), "-I", "-c", "import threadpoolctl"], capture_output=True)
    assert found.returncode != 0  # the probe's threadpoolctl was never the environment's


def test_changed_numerics_variables_reprobe_a_cached_environment(fakefw_env):
    cache = fakefw_env.path.parent.parent
    logs: list[str] = []
    again = ensure(fakefw_env.spec, cache, log=logs.append, environ={**os.environ, "OMP_NUM_THREADS": "1"})

    assert logs == []  # not rebuilt
    assert again.id == fakefw_env.id  # the id is the content, not the machine's settings
    assert again.fingerprint["numerics_env"]["OMP_NUM_THREADS"] == "1"
    assert "CUBLAS_WORKSPACE_CONFIG" not in again.fingerprint["numerics_env"]
    assert json.loads((again.path / FINGERPRINT_FILE).read_text()) == again.fingerprint


def test_blas_library_version_and_threads_from_numpy():
    """numpy is in the harness's own interpreter: the probe sees its BLAS, its version and its thread count."""
    numpy = pytest.importorskip("numpy")
    lock = f"numpy=={numpy.__version__}\n"

    fp = collect(sys.executable, lock, environ={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})

    assert fp["frameworks"]["numpy"]["version"] == numpy.__version__
    assert fp["frameworks"]["numpy"]["blas"]["name"]
    blas = [lib for lib in fp["libraries"] if lib["user_api"] == "blas"]
    assert blas and blas[0]["version"] and blas[0]["num_threads"] == 1
    assert fp["numerics_env"]["OPENBLAS_NUM_THREADS"] == "1"
    if os.cpu_count() >= 2:
        two = collect(sys.executable, lock, environ={**os.environ, "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"})
        assert [lib for lib in two["libraries"] if lib["user_api"] == "blas"][0]["num_threads"] == 2


def test_loaded_libraries_without_threadpoolctl_come_from_the_memory_map(tmp_path):
    pytest.importorskip("numpy")
    if not Path("/proc/self/maps").exists():
        pytest.skip("no /proc/self/maps here")
    proc = _probe(sys.executable, "", ["numpy"], dict(os.environ), str(tmp_path), str(shim_dir(tmp_path)))
    libraries = json.loads(proc.stdout)["libraries"]
    assert any(lib["user_api"] == "blas" and "blas" in lib["prefix"] for lib in libraries), libraries


def test_a_framework_that_kills_the_probe_keeps_the_other_facts(fake_wheel_factory, tmp_path):
    fake_wheel_factory("torch", "9.9", {"torch/__init__.py": "import os\nos.abort()\n"})
    env = ensure(EnvSpec(["torch==9.9"], index=offline(fake_wheel_factory.folder)), tmp_path / "cache", log=quiet)

    fp = env.fingerprint
    assert "importing torch ended the probe" in fp["probe_error"]
    assert fp["frameworks"] == {} and fp["python"] and fp["distributions"]["torch"][0] == "9.9"
    assert installed_version(env, "torch") == "9.9"


def test_numerics_env_selects_by_prefix_and_name():
    environ = {"OMP_PROC_BIND": "close", "MKL_CBWR": "AVX2", "OPENBLAS_CORETYPE": "Haswell", "HOME": "/root",
               "FLAGS_cudnn_deterministic": "1", "TF_DETERMINISTIC_OPS": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
               "CUDA_VISIBLE_DEVICES": "0"}
    assert numerics_env(environ) == {k: environ[k] for k in ("CUDA_VISIBLE_DEVICES", "FLAGS_cudnn_deterministic",
                                                             "MKL_CBWR", "OMP_PROC_BIND", "OPENBLAS_CORETYPE",
                                                             "TF_DETERMINISTIC_OPS")}


@pytest.mark.slow
@pytest.mark.network
def test_torch_build_information(tmp_path):
    """torch==2.13.0 from the configured indexes (pip's config): the CPU build, with its build facts."""
    env = ensure(EnvSpec(["torch==2.13.0"], index=IndexConfig.from_pip()), tmp_path / "cache", log=quiet)
    torch = env.fingerprint["frameworks"]["torch"]
    assert torch["version"].startswith("2.13.0") and torch["git_version"]
    assert "PyTorch built with" in torch["config"] and torch["num_threads"] >= 1
    assert torch["mkldnn"] in (True, False) and "cuda" in torch
    assert any(lib["user_api"] == "openmp" for lib in env.fingerprint["libraries"])
    before = uv_list(env.python)
    collect(env.python, env.lock)  # imports torch and numpy, with threadpoolctl on the probe's path only
    assert uv_list(env.python) == before
    assert subprocess.run([str(env.python), "-I", "-c", "import threadpoolctl"], capture_output=True).returncode != 0
