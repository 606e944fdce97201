"""The fingerprint of an environment: exactly what its results were measured on.

It holds the interpreter and platform tags, OS and kernel, CPU model, flags, cores and memory, the BLAS,
LAPACK and OpenMP libraries actually loaded (with versions and thread counts), the frameworks' own build
information (each framework helper's `probe`), the GPUs nvidia-smi reports, and the environment variables that change
numerics. It is collected by the environment's own python running `probe.py` in isolated mode (`-I`):
nothing is installed into the environment, and threadpoolctl, when the harness has it, is only copied into
a temporary folder that the probe process appends to its own path.

Thread counts and numerics variables depend on the variables the workloads will see, so the probe runs
with those (`environ`); `build.ensure` probes again when they change.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from packaging.utils import canonicalize_name

from modelci.errors import HarnessError
from modelci.execute import local
from modelci.workload import frameworks

#: bump when the fingerprint's keys change meaning (docs/design.md: "Version every file you write")
SCHEMA = 2

#: distributions that say which framework stack produced a result, besides those the framework helpers name
OTHER_FRAMEWORKS = ("tensorflow",)

#: variables that change numerics or threading, by prefix and by exact name
NUMERICS_PREFIXES = ("OMP_", "MKL_", "OPENBLAS_", "KMP_", "NUMEXPR_", "ONEDNN_", "DNNL_", "FLAGS_", "CUBLAS",
                     "CUDNN_", "PYTORCH_", "NCCL_ALGO", "NCCL_PROTO")
NUMERICS_NAMES = ("GOTO_NUM_THREADS", "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "CUDA_VISIBLE_DEVICES",
                  "CUDA_LAUNCH_BLOCKING", "NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
                  "ATEN_CPU_CAPABILITY", "TF_DETERMINISTIC_OPS", "TF_CUDNN_DETERMINISTIC", "TF_ENABLE_ONEDNN_OPTS",
                  "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "XLA_FLAGS", "JAX_ENABLE_X64",
                  "JAX_DEFAULT_MATMUL_PRECISION", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "PYTHONHASHSEED")

_PROBE = Path(__file__).with_name("probe.py")


def collect(python: Path | str, lock: str, *, environ: Mapping[str, str] | None = None,
            build: dict | None = None) -> dict:
    """Fingerprint the interpreter `python` with the packages pinned in `lock`, as seen under `environ`.

    `build` (how the environment was made: requested requirements, wheels, constraints) is stored as is.
    Importing a framework that kills the process does not fail the fingerprint: the facts without the
    frameworks are kept, with the reason under `probe_error`.
    """
    environ = dict(os.environ if environ is None else environ)
    pins = parse_lock(lock)
    wanted = [cls.name for cls in frameworks.helper_classes() if any(d in pins for d in cls.distributions)]
    with tempfile.TemporaryDirectory(prefix="modelci-probe-") as scratch:
        helper = _threadpoolctl_copy(Path(scratch))
        harness = str(local.shim_dir(Path(scratch)))
        proc = _probe(python, helper, wanted, environ, scratch, harness)
        error = None
        if proc.returncode != 0 and wanted:
            error = f"importing {', '.join(wanted)} ended the probe with exit code {proc.returncode}: " \
                    f"{proc.stderr.strip()[-500:]}"
            proc = _probe(python, helper, [], environ, scratch, harness)
    if proc.returncode != 0:
        raise HarnessError(
            f"could not fingerprint the environment at {python}: exit code {proc.returncode}\n"
            f"{proc.stderr.strip()[-2000:]}"
        )
    facts = json.loads(proc.stdout)
    cpu = facts.pop("cpu_info")
    fingerprint = {
        "schema": SCHEMA,
        **facts,
        "cpu": cpu["model"], "cpu_count": cpu["count"], "cpu_usable": cpu["usable"], "cpu_flags": cpu["flags"],
        "memory_bytes": cpu["memory_bytes"],
        "numerics_env": numerics_env(environ),
        "packages_of_interest": packages_of_interest(lock),
        "build": dict(build or {}),
    }
    if error:
        fingerprint["probe_error"] = error
    return fingerprint


def numerics_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables in `environ` that change numerics or threading (OMP_*, MKL_*, CUBLAS_WORKSPACE_CONFIG, ...)."""
    return {k: v for k, v in sorted(environ.items()) if k.startswith(NUMERICS_PREFIXES) or k in NUMERICS_NAMES}


def framework_distributions() -> list[str]:
    """The distributions whose versions say which framework stack produced a result: each framework helper's own
    and its companions', then the others."""
    names = [d for cls in frameworks.helper_classes() for d in (*cls.distributions, *cls.companions)]
    return list(dict.fromkeys([*names, *OTHER_FRAMEWORKS]))


def packages_of_interest(lock: str) -> dict[str, str]:
    """The framework-stack versions found in `lock` ("name==version" lines), by normalized name."""
    pins = parse_lock(lock)
    return {name: pins[name] for name in framework_distributions() if name in pins}


def parse_lock(lock: str) -> dict[str, str]:
    """{normalized name: version} from "name==version" lines; comment lines are skipped."""
    pins: dict[str, str] = {}
    for line in lock.splitlines():
        pin = split_pin(line.split("#", 1)[0])  # comments: a lock file's header, or a note after a pin
        if pin is not None:
            pins[pin[0]] = pin[1]
    return pins


def split_pin(line: str) -> tuple[str, str] | None:
    """(normalized name, version) of one `name==version` line, or None when the line is not one; the one parser
    of pins (locks, `uv pip list`, a run's environment), names normalized by packaging (PEP 503)."""
    name, sep, version = line.strip().partition("==")
    if not sep or not name.strip() or not version.strip():
        return None
    return canonicalize_name(name.strip()), version.strip()


def _probe(python: Path | str, helper: str, wanted: list[str], environ: dict[str, str],
           cwd: str, harness: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([str(python), "-I", "-c", _PROBE.read_text(), helper, json.dumps(wanted), harness],
                              capture_output=True, text=True, timeout=600, env=environ, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HarnessError(f"could not fingerprint the environment at {python}: {exc}") from None


def _threadpoolctl_copy(folder: Path) -> str:
    """Copy the harness's threadpoolctl module into `folder` (for the probe's path only); "" when absent."""
    spec = importlib.util.find_spec("threadpoolctl")
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return ""
    shutil.copy(spec.origin, folder / "threadpoolctl.py")
    return str(folder)
