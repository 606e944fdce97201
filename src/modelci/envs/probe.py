"""The fingerprint probe: runs INSIDE the environment under test, stdlib only, any Python 3.8+.

`fingerprint.collect` runs this file's text with `python -I -c`, so neither the harness's packages nor the
current folder are on the path, and nothing is installed: threadpoolctl, when the harness has it, is copied
into a temporary folder that only this process appends to its path (argv[1]). argv[2] is a JSON list of the
frameworks to import (those the lock holds); an empty list skips every import, which is the fallback when
importing a framework kills the process. Each framework's build facts come from its helper class's `probe`
(modelci.workload.frameworks), imported from a folder that holds only a link to the `modelci` package (argv[3]).
The result is one JSON object on stdout.
"""

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig

#: libraries whose presence in the process says which BLAS/LAPACK/OpenMP runs the numbers (fallback only)
_LIBRARY_KINDS = (
    ("openblas", "blas"), ("mkl_rt", "blas"), ("libmkl", "blas"), ("blis", "blas"), ("flexiblas", "blas"),
    ("libblas", "blas"), ("libcblas", "blas"), ("liblapack", "lapack"), ("accelerate", "blas"),
    ("libgomp", "openmp"), ("libiomp", "openmp"), ("libomp", "openmp"),
)


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def _run(args):
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def python_facts():
    """Interpreter, ABI and platform tags: what decides which wheels fit."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "platform_tag": sysconfig.get_platform(),
        "soabi": sysconfig.get_config_var("SOABI") or "",
        "libc": " ".join(platform.libc_ver()).strip(),
    }


def os_facts():
    """Operating system, distribution and kernel."""
    pretty = ""
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            pretty = line.split("=", 1)[1].strip().strip('"')
    return {"system": platform.system(), "release": platform.release(), "version": platform.version(),
            "distribution": pretty}


def cpu_facts():
    """CPU model and flags, logical cores (all and usable by this process), physical memory."""
    model, flags = "", []
    for line in _read("/proc/cpuinfo").splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if not model and key in ("model name", "Hardware", "cpu model", "Model"):
            model = value.strip()
        if not flags and key in ("flags", "Features"):
            flags = sorted(set(value.split()))
    if sys.platform == "darwin":
        model = model or (_run(["sysctl", "-n", "machdep.cpu.brand_string"]) or "").strip()
        flags = flags or sorted(set((_run(["sysctl", "-n", "machdep.cpu.features"]) or "").lower().split()))
    memory = None
    match = re.search(r"^MemTotal:\s+(\d+) kB", _read("/proc/meminfo"), re.M)
    if match:
        memory = int(match.group(1)) * 1024
    elif hasattr(os, "sysconf"):
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"model": model or platform.processor(), "flags": flags, "count": os.cpu_count(),
            "usable": usable, "memory_bytes": memory}


def distributions():
    """{normalized name: [version, digest of the files its RECORD lists]}: equal digests, equal installed files.

    Entries an installer writes itself (INSTALLER, REQUESTED, direct_url.json, uv_cache.json, RECORD), scripts
    and data outside site-packages (their shebangs name the venv) and bytecode are left out, so the same
    wheel installed by path, from find-links or from a lock gives the same digest.
    """
    import hashlib
    from importlib import metadata

    found = {}
    for dist in metadata.distributions():
        name = re.sub(r"[-_.]+", "-", (dist.metadata["Name"] or "")).lower()
        if not name or name in found:
            continue
        kept = []
        for line in (dist.read_text("RECORD") or "").splitlines():
            path, _, rest = line.partition(",")
            digest = rest.partition(",")[0]
            base = path.rsplit("/", 1)[-1]
            in_dist_info = ".dist-info/" in path
            if (not digest or path.startswith("../") or path.endswith(".pyc")
                    or (in_dist_info and base not in ("METADATA", "WHEEL", "entry_points.txt"))):
                continue
            kept.append(path + "," + digest)
        found[name] = [dist.version, hashlib.sha256("\n".join(sorted(kept)).encode()).hexdigest()[:16]]
    return found


def framework_facts(name, harness_dir):
    """The build facts of framework `name`, from its helper class's `probe` (modelci.workload.frameworks).

    `harness_dir` holds only a link to the `modelci` package; it is appended to the path, after the
    environment's own packages, and only the helper modules are imported from it (standard library only).
    """
    if harness_dir and harness_dir not in sys.path:
        sys.path.append(harness_dir)
    from modelci.workload.frameworks import get_helper

    return get_helper(name).probe()


def loaded_libraries(threadpoolctl_dir):
    """BLAS/LAPACK/OpenMP libraries loaded in this process, with versions and thread counts (threadpoolctl)."""
    if threadpoolctl_dir:
        sys.path.append(threadpoolctl_dir)  # appended: the environment's own copy, if any, wins
        try:
            import threadpoolctl

            keys = ("user_api", "internal_api", "prefix", "version", "num_threads", "threading_layer",
                    "architecture", "filepath")
            return [dict({k: info.get(k) for k in keys}, filepath=_relative(info.get("filepath")))
                    for info in threadpoolctl.threadpool_info()]
        except Exception as exc:  # fall back to the memory map below
            sys.stderr.write("threadpoolctl failed: %r\n" % (exc,))
    libraries, seen = [], set()
    for line in _read("/proc/self/maps").splitlines():
        path = line.split()[-1] if "/" in line else ""
        base = path.rsplit("/", 1)[-1].lower()
        for needle, kind in _LIBRARY_KINDS:
            if needle in base and path not in seen:
                seen.add(path)
                libraries.append({"user_api": kind, "prefix": base.split(".so")[0], "version": None,
                                  "num_threads": None, "filepath": _relative(path)})
    return libraries


def _relative(path):
    """A library path inside the environment as `<env>/...`, so two copies of one environment compare equal."""
    prefix = sys.prefix.rstrip("/") + "/"
    return "<env>/" + path[len(prefix):] if path and path.startswith(prefix) else path


def gpus():
    """GPU model, driver and memory from nvidia-smi, where it exists."""
    if not shutil.which("nvidia-smi"):
        return []
    fields = ("index", "name", "driver_version", "memory.total", "compute_cap")
    text = _run(["nvidia-smi", "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
    if text is None:
        text = _run(["nvidia-smi", "--query-gpu=" + ",".join(fields[:4]), "--format=csv,noheader,nounits"]) or ""
    rows = []
    for line in text.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        row = dict(zip(fields, values))
        if "memory.total" in row:
            row["memory_mib"] = row.pop("memory.total")
        rows.append(row)
    return rows


def main():
    """Print the fingerprint facts as JSON."""
    threadpoolctl_dir = sys.argv[1] if len(sys.argv) > 1 else ""
    wanted = json.loads(sys.argv[2]) if len(sys.argv) > 2 else []
    harness_dir = sys.argv[3] if len(sys.argv) > 3 else ""
    facts = python_facts()
    facts["os"] = os_facts()
    facts["cpu_info"] = cpu_facts()
    facts["distributions"] = distributions()
    frameworks, errors = {}, {}
    for name in wanted:
        try:
            frameworks[name] = framework_facts(name, harness_dir)
        except Exception as exc:  # a broken framework is a fact about the environment, not a probe failure
            errors[name] = "%s: %s" % (type(exc).__name__, exc)
    facts["frameworks"] = frameworks
    if errors:
        facts["framework_errors"] = errors
    facts["libraries"] = loaded_libraries(threadpoolctl_dir) if wanted else []
    facts["gpus"] = gpus()
    sys.stdout.write(json.dumps(facts, default=str))


if __name__ == "__main__":
    main()
