"""Per-framework helpers: seeding, determinism, to-numpy, save/load and version info.

Each helper lives in its own module and is imported lazily by name, so that a numpy-only
environment never tries to import torch. Runs inside the environment under test.
"""

from __future__ import annotations

import importlib
import os
import random
from pathlib import Path
from typing import Any

#: framework name -> "module:Class" of its helper
HELPERS = {
    "python": "modelci.workload.frameworks:PythonHelper",
    "numpy": "modelci.workload.frameworks:NumpyHelper",
    "torch": "modelci.workload.fw_torch:TorchHelper",
    "paddle": "modelci.workload.fw_paddle:PaddleHelper",
}


class PythonHelper:
    """Helper for pure-Python workloads; the base of every other helper."""

    name = "python"
    #: formats this helper can save and load without the workload's own save/load
    formats: tuple[str, ...] = ()
    #: formats whose loading can execute arbitrary code (named as such in reports)
    unsafe_formats: tuple[str, ...] = ()

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
        whichever way it started (issue 9)."""
        if type(self)._warmed:
            return
        type(self)._warmed = True
        self.first_use()

    def first_use(self) -> None:
        """The fixed work that warm_up does: none here. It must leave the random generators as it found them and
        never raise: a workload must not fail or change because of it."""

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

    def init_distributed(self, rank: int, world_size: int, address: str, port: int) -> None:
        """Join a process group of `world_size` ranks (`devices = N`); rank 0 listens on address:port."""
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
    formats = ("npz",)

    def seed(self, seed: int) -> None:
        super().seed(seed)
        import numpy as np

        np.random.seed(seed % 2**32)

    def versions(self) -> dict[str, str]:
        import numpy as np

        return {"numpy": np.__version__}

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


def get_helper(framework: str) -> PythonHelper:
    """Return the helper for `framework`; an unknown name is an error naming the known ones."""
    try:
        spec = HELPERS[framework]
    except KeyError:
        raise ValueError(f"unknown framework {framework!r}; known: {', '.join(sorted(HELPERS))}") from None
    module_name, _, class_name = spec.partition(":")
    return getattr(importlib.import_module(module_name), class_name)()
