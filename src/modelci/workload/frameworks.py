"""The framework helpers: one class per framework that carries every fact about it.

A helper class says, as class attributes that the harness reads without importing the framework:
- `name` (what a workload's `framework` says) and `module` (its top-level import name);
- `distributions`, the distributions that provide the module (the first is installed when a workload needs it),
  and `companions`, those whose versions also say which build ran (torchvision, jaxlib);
- `needs`, what the environment needs next to the framework that the framework does not declare;
- `fork_safe_threads`, how many of the threads the framework's import starts are safe to fork with;
- `lazy_modules`, modules the framework imports on first use, which the warm-up imports once;
- `formats`, each save format with whether loading it can run code (`HelperFormat.unsafe`).
Its methods run inside the environment under test: the fingerprint probe's build facts (`probe`), seeding,
determinism, the warm-up, to-numpy, versions, save and load, and the device and distributed hooks.

Each helper lives in its own module, which imports the framework only inside its methods: the harness imports
every helper module for the facts, and a numpy-only environment never tries to import torch. This module and
the helper modules import nothing outside the standard library at top level, and stay valid on Python 3.8,
since the fingerprint probe imports them with the environment's own interpreter.

Adding a framework is a module with its helper class and one line in `REGISTRY`.
"""

from __future__ import annotations

import importlib
import os
import random
import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Collection
from typing import Any, Dict, Iterator, Tuple

#: framework name -> "module:Class" of its helper
REGISTRY = {
    "python": "modelci.workload.frameworks:PythonHelper",
    "numpy": "modelci.workload.frameworks:NumpyHelper",
    "torch": "modelci.workload.fw_torch:TorchHelper",
    "paddle": "modelci.workload.fw_paddle:PaddleHelper",
    "jax": "modelci.workload.fw_jax:JaxHelper",
}


@dataclass(frozen=True)
class HelperFormat:
    """A save format of a framework helper, and whether loading a file of it can execute arbitrary code.

    A helper's own table. A workload names its formats with `modelci.Format` (a string that may carry `unsafe`);
    the helper's word counts for a name the workload neither flags nor saves itself (`Workload.format_unsafe`).
    """

    name: str
    #: loading can run code that the file carries (a pickle, a compiled program): named unsafe in reports
    unsafe: bool
    #: why it is safe or not, in one sentence
    why: str = ""


def format_table(*declared: HelperFormat) -> Dict[str, HelperFormat]:
    """The `formats` table of a helper: format name -> HelperFormat, in the order given."""
    return {fmt.name: fmt for fmt in declared}


class PythonHelper:
    """Helper for pure-Python workloads; the base of every other helper."""

    name = "python"
    #: the top-level module the framework is imported as ("" for none)
    module = ""
    #: distributions that provide `module`; the first is what a workload of this framework needs installed
    distributions: Tuple[str, ...] = ()
    #: distributions whose versions also say which build ran, recorded with the environment's fingerprint
    companions: Tuple[str, ...] = ()
    #: what the environment needs next to the framework that the framework's own metadata does not declare
    needs: Tuple[str, ...] = ()
    #: how many of the threads that importing `module` starts may be forked with: the library starts them again
    #: in a forked child, and they hold no lock that the child's own code takes (see workload.worker)
    fork_safe_threads = 0
    #: modules the framework imports on first use, that each forked child would import again; the warm-up
    #: imports them once
    lazy_modules: Tuple[str, ...] = ()
    #: formats this helper can save and load without the workload's own save/load
    formats: Dict[str, HelperFormat] = {}

    @property
    def unsafe_formats(self) -> Tuple[str, ...]:
        """The formats whose loading can execute arbitrary code (named as such in reports)."""
        return tuple(name for name, fmt in self.formats.items() if fmt.unsafe)

    @classmethod
    def provided_by(cls, distribution: str) -> bool:
        """Whether installing `distribution` (a normalized name) provides this framework."""
        return distribution in cls.distributions

    def probe(self) -> Dict[str, Any]:
        """The framework's build facts for the environment's fingerprint (version, CUDA, BLAS, threads).
        Runs in the fingerprint probe, with nothing of the harness around: standard library and the framework."""
        return {}

    @classmethod
    def fork_hazard(cls) -> str:
        """Why the framework's state in this process makes a fork unsafe (a GPU runtime it started), or "".
        Asked only when `module` is already imported; it must not import anything itself."""
        return ""

    def seed(self, seed: int) -> None:
        """Seed every random generator the framework owns."""
        random.seed(seed)
        os.environ.setdefault("PYTHONHASHSEED", str(seed))

    def set_determinism(self, enabled: bool) -> None:
        """Switch the framework's deterministic-algorithm flags on or off."""

    #: whether this process has run the warm-up (a forked child inherits True from its worker)
    _warmed = False

    def warm_up(self) -> None:
        """Pay the framework's fixed first-use costs (`first_use`), once per process: part of the prologue of
        every workload, and of the worker a child is forked from, so every child starts from the same state
        whichever way it started."""
        if type(self)._warmed:
            return
        type(self)._warmed = True
        self.first_use()

    def first_use(self) -> None:
        """The fixed work that warm_up does: import `lazy_modules` (a module this version lacks is skipped). A
        subclass adds its own; it must leave the random generators as it found them and never raise: a workload
        must not fail or change because of it."""
        for name in self.lazy_modules:
            try:
                importlib.import_module(name)
            except ImportError:  # another version of the framework: nothing to pay for in advance
                pass

    def to_numpy(self, value: Any) -> Any:
        """Turn one framework value into a numpy array (or a nested list when numpy is absent)."""
        try:
            import numpy as np
        except ImportError:
            return value
        return np.asarray(value)

    def versions(self) -> dict[str, str]:
        """Versions of the framework's own packages, for the result record."""
        return {}

    def supports(self, fmt: str) -> str | None:
        """None when `fmt` can be saved in this version, else the reason it cannot."""
        return None

    def save(self, workload: Any, ctx: Any, fmt: str, path: Path) -> None:
        """Save with the framework's own mechanism; the workload's `save` wins when it has one."""
        raise NotImplementedError(f"framework {self.name!r} has no built-in save for format {fmt!r}")

    def load(self, workload: Any, ctx: Any, fmt: str, path: Path) -> Any:
        """Load with the framework's own mechanism; the workload's `load` wins when it has one."""
        raise NotImplementedError(f"framework {self.name!r} has no built-in load for format {fmt!r}")

    def init_distributed(self, rank: int, world_size: int, address: str, port: int, local_address: str = "") -> None:
        """Join a process group of `world_size` ranks (`devices = N` on each of `nodes` nodes); rank 0 listens on
        address:port, on its node's address. `local_address`, when given, is this node's own address, which the
        collectives' sockets must bind to: the host name may resolve to 127.0.0.1, which the other nodes
        cannot reach."""
        raise NotImplementedError(f"framework {self.name!r} has no multi-process support; set devices = 1")

    def shutdown_distributed(self) -> None:
        """Leave the process group."""

    def default_device(self, rank: int = 0) -> str:
        """The device a workload runs on when the harness is not told: an accelerator when there is one."""
        return "cpu"

    def peak_device_memory(self) -> int | None:
        """Peak accelerator memory in bytes since the last reset, or None without one."""
        return None

    def synchronize(self) -> None:
        """Wait for queued device work, so that timings are honest."""


class NumpyHelper(PythonHelper):
    """Helper for plain numpy workloads; `npy` saves a dict of arrays as an .npz."""

    name = "numpy"
    module = "numpy"
    distributions = ("numpy",)
    companions = ("scipy", "mkl", "intel-openmp")
    formats = format_table(HelperFormat("npz", unsafe=False, why="read with numpy.load(allow_pickle=False)"))

    def seed(self, seed: int) -> None:
        super().seed(seed)
        import numpy as np

        np.random.seed(seed % 2**32)

    def versions(self) -> dict[str, str]:
        import numpy as np

        return {"numpy": np.__version__}

    def probe(self) -> Dict[str, Any]:
        """numpy's version, the BLAS/LAPACK it was built against and the SIMD extensions it dispatches to."""
        import numpy

        facts: Dict[str, Any] = {"version": numpy.__version__}
        try:
            config = numpy.show_config(mode="dicts")
        except TypeError:  # numpy < 1.26 only prints
            return facts
        deps = config.get("Build Dependencies", {})
        for key in ("blas", "lapack"):
            if key in deps:
                facts[key] = {k: deps[key].get(k) for k in ("name", "version", "openblas configuration")
                              if k in deps[key]}
        simd = config.get("SIMD Extensions", {})
        if simd:
            facts["simd"] = {k: simd.get(k) for k in ("baseline", "found", "not found")}
        return facts

    def save(self, workload: Any, ctx: Any, fmt: str, path: Path) -> None:
        """`npz`: the workload's `state_dict()` (name -> array) written with numpy.savez."""
        if fmt != "npz":
            return super().save(workload, ctx, fmt, path)
        import numpy as np

        with open(path, "wb") as fh:
            np.savez(fh, **workload.state_dict())

    def load(self, workload: Any, ctx: Any, fmt: str, path: Path) -> Any:
        """`npz`: read the arrays (never pickles) and hand them to the workload's `load_state_dict`."""
        if fmt != "npz":
            return super().load(workload, ctx, fmt, path)
        import numpy as np

        with np.load(path, allow_pickle=False) as data:
            state = {key: data[key] for key in data.files}
        return workload.load_state_dict(state)


def helper_class(framework: str) -> type[PythonHelper]:
    """The helper class of `framework` (its facts), without importing the framework; an unknown name is a
    ValueError naming the known ones."""
    try:
        spec = REGISTRY[framework]
    except KeyError:
        raise ValueError(f"unknown framework {framework!r}; known: {', '.join(sorted(REGISTRY))}") from None
    module_name, _, class_name = spec.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def get_helper(framework: str) -> PythonHelper:
    """The helper of `framework`, ready to use inside its environment."""
    return helper_class(framework)()


def helper_classes() -> Iterator[type[PythonHelper]]:
    """Every registered helper class, in registration order."""
    return (helper_class(name) for name in REGISTRY)


def providing(distribution: str) -> type[PythonHelper] | None:
    """The helper class of the framework that `distribution` (a normalized name) provides, or None."""
    return next((cls for cls in helper_classes() if cls.provided_by(distribution)), None)


def by_module(module: str) -> type[PythonHelper] | None:
    """The helper class of the framework imported as `module`, or None."""
    return next((cls for cls in helper_classes() if cls.module and cls.module == module), None)


def requirements(framework: str, installed: Collection[str] = ()) -> list[str]:
    """The distributions that a workload's `framework` implies: the framework's first distribution unless one of
    its distributions is among `installed` (paddlepaddle-gpu provides paddle too), and its helper's `needs`.
    An unknown framework implies nothing here (the workload's child reports it)."""
    try:
        helper = helper_class(framework)
    except ValueError:
        return []
    provided = any(dist in installed for dist in helper.distributions)
    return [*([] if provided else helper.distributions[:1]), *helper.needs]


def framework_modules() -> list[str]:
    """The top-level modules of every registered framework (those a result reports the version and file of)."""
    return [cls.module for cls in helper_classes() if cls.module]


#: the ioctl that reads an interface's IPv4 address (linux/sockios.h)
_SIOCGIFADDR = 0x8915


def interface_of(address: str) -> str | None:
    """The name of the network interface that holds the IPv4 `address` on this machine (`eth0`), or None when
    none does, or the platform cannot say (no `fcntl`, not Linux).

    Collective libraries pick their interface by name (`GLOO_SOCKET_IFNAME`, `NCCL_SOCKET_IFNAME`): given the
    node address the cluster knows, this names it for them.
    """
    try:
        import fcntl

        wanted = socket.inet_aton(address)
    except (ImportError, OSError):
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address on this interface
                continue
            if answer[20:24] == wanted:
                return name
    return None
