"""The fingerprint of an environment: which interpreter, platform and CPU its results come from.

It is collected by the environment's own python running a stdlib-only script in isolated mode (`-I`), so
nothing is installed into the environment and nothing of the harness leaks into what is measured.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from modelci.errors import HarnessError

#: bump when the fingerprint's keys change meaning (STYLE.md: "Version every file you write")
SCHEMA = 1

#: distributions whose versions say which framework stack produced a result
FRAMEWORKS = (
    "numpy",
    "scipy",
    "torch",
    "torchvision",
    "paddlepaddle",
    "paddlepaddle-gpu",
    "jax",
    "jaxlib",
    "tensorflow",
    "mkl",
    "intel-openmp",
)

# Runs inside the environment: stdlib only, and it must work on every Python the environments may use.
_SCRIPT = r"""
import json, os, platform, subprocess, sys, sysconfig

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "cpu model", "Model"):
                    return value.strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                  capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor()

print(json.dumps({
    "python": platform.python_version(),
    "implementation": platform.python_implementation(),
    "platform": platform.platform(),
    "machine": platform.machine(),
    "platform_tag": sysconfig.get_platform(),
    "cpu": cpu_model(),
    "cpu_count": os.cpu_count(),
}))
"""


def collect(python: Path | str, lock: str) -> dict:
    """Fingerprint the interpreter `python` and the framework versions pinned in `lock`."""
    proc = subprocess.run([str(python), "-I", "-c", _SCRIPT], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise HarnessError(
            f"could not fingerprint the environment at {python}: exit code {proc.returncode}\n"
            f"{proc.stderr.strip()[-2000:]}"
        )
    facts = json.loads(proc.stdout)
    return {"schema": SCHEMA, **facts, "packages_of_interest": packages_of_interest(lock)}


def packages_of_interest(lock: str) -> dict[str, str]:
    """The framework-stack versions found in `lock` ("name==version" lines), by normalized name."""
    pins = parse_lock(lock)
    return {name: pins[name] for name in FRAMEWORKS if name in pins}


def parse_lock(lock: str) -> dict[str, str]:
    """{normalized name: version} from "name==version" lines."""
    pins: dict[str, str] = {}
    for line in lock.splitlines():
        name, sep, version = line.strip().partition("==")
        if sep:
            pins[normalize(name)] = version.strip()
    return pins


def normalize(name: str) -> str:
    """PEP 503 name normalization, so `Typing_Extensions` and `typing-extensions` match."""
    return re.sub(r"[-_.]+", "-", name).lower()
