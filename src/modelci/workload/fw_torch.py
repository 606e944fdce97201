"""The torch helper: seeding, determinism, to-numpy, versions and the torch save formats.

The harness imports this module for the class's facts, outside the environment under test: torch and numpy are
imported inside the methods, which run in the environment.

Convention for workloads that rely on the built-in formats:
- `self.model` is the `nn.Module` that `infer` calls; `load` replaces it with the loaded module.
- `example_inputs()` returns the tuple of tensors to trace or export with, shaped like what `infer` feeds.
- `build_model()` (optional) returns a fresh module to load a state_dict into; without it the state_dict
  goes into `self.model` as `setup` built it. A workload with its own `load_state_dict(state)` gets the
  state dict handed over instead.
- `jit_mode` (optional, "trace" by default, or "script") picks how `torchscript` compiles the model.
"""

from __future__ import annotations

import functools
import io
import os
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator

from modelci.workload.frameworks import HelperFormat, PythonHelper, format_table, interface_of

#: format -> the oldest torch that has it (torch.export.save/load arrived in 2.1)
_MIN_VERSION = {"torch_export": (2, 1)}


def _version_tuple(version: str) -> tuple[int, int]:
    """(major, minor) of a torch version string such as '2.13.0+cpu' or '2.6.0a0+git1234'."""
    parts = version.split("+")[0].split(".")
    return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)


def _call(obj: Any, name: str) -> Any:
    """`obj.name()` (or the attribute itself when it is no function); None when that raises."""
    value = getattr(obj, name, None)
    try:
        return value() if callable(value) else value
    except Exception:  # noqa: BLE001 - a build without CUDA may raise where it could return None
        return None


@contextmanager
def _quiet_torch_warnings() -> Iterator[None]:
    """Silence the warnings torch itself raises on the formats modelci checks on purpose.

    Recent torch (2.13 at least) marks torch.jit deprecated, yet TorchScript files saved by older versions are exactly
    what the backward-compatibility check must keep loading. The tracer warns about shape checks inside
    torch's own modules (nn.RNN, multi-head attention), and torch.export about nn.RNN's `_flat_weights`;
    the suite author can change neither, and the format round trip shows whether the result is right.
    """
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.jit.* is deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=r"The tensor attributes .*_flat_weights", category=UserWarning)
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        yield


@functools.lru_cache(maxsize=None)
def _exported_module_class() -> type:
    """The class `_ExportedModule`, defined on first use, since it subclasses torch's `nn.Module`."""
    import torch

    class _ExportedModule(torch.nn.Module):
        """An exported program's module that accepts `eval()`/`train()`, so `infer` works on it unchanged.

        torch.export captures the graph in eval mode (see `TorchHelper.save`), and the module it returns
        refuses `eval()`; making the mode switch a no-op keeps that eval-mode graph.
        """

        def __init__(self, module: torch.nn.Module) -> None:
            super().__init__()
            self.exported = module

        def train(self, mode: bool = True) -> _ExportedModule:  # noqa: ARG002 - the graph has a fixed mode
            return self

        def forward(self, *args: Any) -> Any:
            return self.exported(*args)

    return _ExportedModule


class TorchHelper(PythonHelper):
    """Helper for torch workloads (formats `state_dict`, `torchscript`, `torch_export`, `torch_pickle`)."""

    name = "torch"
    module = "torch"
    distributions = ("torch",)
    companions = ("torchvision", "torchaudio", "triton")
    #: the helper hands outputs over as numpy arrays, and torch does not depend on numpy
    needs = ("numpy",)
    #: modules torch imports on first use, that each forked child imported again: the profiler's CUPTI monitor
    #: (every `optimizer.zero_grad()` opens a `record_function`), and the sympy modules that sympy's `Add` and
    #: `log` import on their first evaluation (torch.export's shape arithmetic; `log` comes from a derivative in
    #: its range analysis of conv and pool shapes); 0.02 s per workload. tests/test_zoo_torch.py checks that no
    #: zoo model imports anything more after the warm-up.
    lazy_modules = ("torch.profiler._cupti_monitor", "sympy.tensor.tensor", "sympy.sets.setexpr")
    formats = format_table(
        HelperFormat("state_dict", unsafe=False, why="a dict of tensors, which a plain torch.load reads with "
                                               "weights_only=True (torch's default since 2.6)"),
        HelperFormat("torchscript", unsafe=True,
               why="the archive carries code that torch compiles and runs on load, able to call any registered "
                   "operator"),
        HelperFormat("torch_export", unsafe=True,
               why="a .pt2 archive may mark weights and constants as pickled, and torch.export.load then reads "
                   "them with torch.load(weights_only=False) or pickle.loads (torch/export/pt2_archive/_package.py)"),
        HelperFormat("torch_pickle", unsafe=True,
                     why="a whole pickled module: a torch before 2.6 unpickles it on a plain torch.load (2.6 and "
                         "later refuse it with weights_only=True)"),
    )

    @classmethod
    def fork_hazard(cls) -> str:
        """A CUDA context this process started cannot be used by a forked child."""
        cuda = getattr(sys.modules.get("torch"), "cuda", None)
        try:
            if cuda is not None and cuda.is_initialized():
                return "torch has initialised CUDA in this process, which a forked child cannot use"
        except Exception:  # noqa: BLE001 - a half-built torch must not stop the check
            pass
        return ""

    def probe(self) -> Dict[str, Any]:
        """torch's build: version, git version, CUDA/cuDNN/HIP, MKL, MKL-DNN, OpenMP, threads and its config text."""
        import torch

        backends = torch.backends
        facts = {
            "version": torch.__version__,
            "git_version": getattr(torch.version, "git_version", None),
            "cuda": getattr(torch.version, "cuda", None),
            "hip": getattr(torch.version, "hip", None),
            "debug": getattr(torch.version, "debug", None),
            "cudnn": _call(backends.cudnn, "version") if _call(backends.cudnn, "is_available") else None,
            "mkl": _call(getattr(backends, "mkl", None), "is_available"),
            "mkldnn": _call(getattr(backends, "mkldnn", None), "is_available"),
            "openmp": _call(getattr(backends, "openmp", None), "is_available"),
            "num_threads": torch.get_num_threads(),
            "num_interop_threads": torch.get_num_interop_threads(),
            "cuda_available": _call(torch.cuda, "is_available"),
            "cuda_devices": _call(torch.cuda, "device_count"),
        }
        config = getattr(torch, "__config__", None)
        if config is not None:
            facts["config"] = _call(config, "show")
            facts["parallel_info"] = _call(config, "parallel_info")
        return facts

    def seed(self, seed: int) -> None:
        """Seed python, numpy and torch (CPU and every CUDA device)."""
        import numpy as np
        import torch

        super().seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)

    def set_determinism(self, enabled: bool) -> None:
        """Ask torch for deterministic kernels; ops without one warn rather than fail."""
        import torch

        if enabled:
            # cuBLAS reads this when it creates its handle; harmless without CUDA
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(enabled, warn_only=True)
        torch.backends.cudnn.deterministic = enabled
        # benchmark mode picks cuDNN kernels by timing them, so its choice changes from run to run
        torch.backends.cudnn.benchmark = False

    def first_use(self) -> None:
        """torch's first-use costs that every workload would pay again: import the modules torch imports lazily
        on a workload's first optimizer step and first symbolic shape arithmetic (`lazy_modules`), and save a
        tiny fixed model in every format (state_dict, TorchScript trace, torch.export; into memory).

        Paid in the worker, the forked children inherit them; a spawned child pays them in its own
        prologue, so both start from the same state and their peak memory still compares. The first
        torch.export in a process imports 400 more modules, the first trace and the lazy modules another 0.03 s
        per workload on zoo:torch. The price is a fixed 45 MiB on the RSS after the prologue (32 MiB of it the
        export; docs/overhead.md). The set is fixed here, never learned from the workloads that ran before, so a
        child's starting state depends on the framework alone. Under fork_rng, so the seeded generators are as
        they were.
        """
        import torch

        super().first_use()
        example = (torch.ones(1, 2),)
        try:
            with torch.random.fork_rng(devices=[]), torch.no_grad(), _quiet_torch_warnings():
                model = torch.nn.Linear(2, 2).eval()
                torch.save(model.state_dict(), io.BytesIO())
                if self.supports("torchscript") is None:
                    torch.jit.save(torch.jit.trace(model, example), io.BytesIO())
                if self.supports("torch_export") is None:
                    torch.export.save(torch.export.export(model, example), io.BytesIO())
        except Exception:  # noqa: BLE001 - a warm-up that fails changes nothing the workload could see
            pass

    def init_distributed(self, rank: int, world_size: int, address: str, port: int, local_address: str = "") -> None:
        """Join a gloo process group (NCCL when every rank of the node has its own GPU) through rank 0's TCP store.

        With `local_address` (ranks on several nodes), gloo and NCCL bind to the interface holding it, unless
        `GLOO_SOCKET_IFNAME`/`NCCL_SOCKET_IFNAME` already say: by default gloo binds to the address the host
        name resolves to, often 127.0.0.1, and the other nodes' ranks then wait for a peer they cannot reach.
        """
        import torch
        import torch.distributed as dist

        if local_address:
            interface = interface_of(local_address)
            if interface is None:
                raise RuntimeError(f"no network interface of this node holds its address {local_address}")
            for variable in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
                os.environ.setdefault(variable, interface)
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        # one node: a GPU for each rank; several: this node's ranks are told apart by rank modulo its GPUs
        backend = "nccl" if gpus and gpus >= (1 if local_address else world_size) else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(rank % gpus)
        dist.init_process_group(backend, init_method=f"tcp://{address}:{port}", rank=rank, world_size=world_size)

    def shutdown_distributed(self) -> None:
        """Leave the process group, so the ranks exit cleanly: wait at a barrier, free what still holds the group
        (a DistributedDataParallel module keeps the gloo group alive through its reducer, often in a reference
        cycle), then destroy it. A rank that tears gloo down while another still has work in flight, or whose
        group is only freed during interpreter finalization, can abort ("terminate called without an active
        exception", SIGABRT); the caller should then leave with os._exit (`child.execute` does)."""
        import gc

        import torch.distributed as dist

        if dist.is_initialized():
            try:
                dist.barrier()
            finally:
                gc.collect()
                dist.destroy_process_group()

    def default_device(self, rank: int = 0) -> str:
        """`cuda:<rank>` when a GPU is there, else `cpu`."""
        import torch

        if torch.cuda.is_available():
            return f"cuda:{rank % torch.cuda.device_count()}"
        return "cpu"

    def to_numpy(self, value: Any) -> Any:
        """A tensor (on any device, with or without grad) as a numpy array; anything else via np.asarray."""
        import numpy as np
        import torch

        if isinstance(value, torch.Tensor):
            value = value.detach().cpu()
            if value.dtype == torch.bfloat16:  # numpy has no bfloat16; float32 holds every value exactly
                value = value.float()
            return value.numpy()
        return np.asarray(value)

    def versions(self) -> dict[str, str]:
        """torch, its git commit, CUDA and cuDNN where built with them, and numpy."""
        import numpy as np
        import torch

        found = {"torch": torch.__version__, "numpy": np.__version__}
        git = getattr(torch.version, "git_version", None)
        if git:
            found["torch.git"] = git
        if torch.version.cuda:
            found["torch.cuda"] = torch.version.cuda
        if torch.backends.cudnn.is_available():
            found["torch.cudnn"] = str(torch.backends.cudnn.version())
        return found

    def supports(self, fmt: str) -> str | None:
        """None when this torch can save `fmt`, else why not."""
        import torch

        if fmt not in self.formats:
            return f"torch helper has no format {fmt!r}; known: {', '.join(self.formats)}"
        needed = _MIN_VERSION.get(fmt)
        if needed and _version_tuple(torch.__version__) < needed:
            return f"{fmt} needs torch>={needed[0]}.{needed[1]}, found {torch.__version__}"
        if fmt == "torch_export" and not all(hasattr(torch.export, n) for n in ("export", "save", "load")):
            return f"torch {torch.__version__} lacks torch.export.export/save/load"
        if fmt == "torchscript" and not hasattr(torch, "jit"):
            return f"torch {torch.__version__} has no torch.jit"
        return None

    def save(self, workload: Any, ctx: Any, fmt: str, path: Path) -> None:
        """Write `workload.model` to the file `path` in `fmt`; the model is saved in eval mode."""
        import torch

        reason = self.supports(fmt)
        if reason:
            raise NotImplementedError(reason)
        model = workload.model
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad(), _quiet_torch_warnings():
                if fmt == "state_dict":
                    torch.save(model.state_dict(), path)
                elif fmt == "torchscript":
                    torch.jit.save(self._script(workload, model), str(path))
                elif fmt == "torch_export":
                    program = torch.export.export(model, tuple(workload.example_inputs()))
                    # an open file, so that torch accepts any name the harness picks (it wants *.pt2)
                    with open(path, "wb") as fh:
                        torch.export.save(program, fh)
                elif fmt == "torch_pickle":
                    torch.save(model, path)
        finally:
            model.train(was_training)

    def load(self, workload: Any, ctx: Any, fmt: str, path: Path) -> Any:
        """Read `path` saved in `fmt`, make it `workload.model` (on ctx.device, eval mode) and return it."""
        import torch

        device = torch.device(getattr(ctx, "device", "cpu"))
        with _quiet_torch_warnings():
            # plain torch.load, as a user calls it: the consumer's own default applies (weights_only=True from
            # torch 2.6), so compat sees the failure a user sees; the device is the only argument added
            if fmt == "state_dict":
                state = torch.load(path, map_location=device)
                if hasattr(workload, "load_state_dict"):
                    return workload.load_state_dict(state)
                model = workload.build_model() if hasattr(workload, "build_model") else workload.model
                model.load_state_dict(state)
            elif fmt == "torchscript":
                model = torch.jit.load(str(path), map_location=device)
            elif fmt == "torch_export":
                with open(path, "rb") as fh:
                    model = _exported_module_class()(torch.export.load(fh).module())
            elif fmt == "torch_pickle":
                model = torch.load(path, map_location=device)
            else:
                return super().load(workload, ctx, fmt, path)
        model = model.to(device).eval()
        workload.model = model
        return model

    def peak_device_memory(self) -> int | None:
        """Peak CUDA memory allocated by torch, or None when CUDA was never used."""
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return int(torch.cuda.max_memory_allocated())
        return None

    def reset_peak_device_memory(self) -> None:
        """Start a new peak for `peak_device_memory` (e.g. between the train and infer phases)."""
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.reset_peak_memory_stats()

    def synchronize(self) -> None:
        """Wait for queued CUDA work."""
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    @staticmethod
    def _script(workload: Any, model: Any) -> Any:
        """Compile `model` to TorchScript the way the workload asks (`jit_mode`, default trace)."""
        import torch

        mode = getattr(workload, "jit_mode", "trace")
        if mode == "script":
            return torch.jit.script(model)
        if mode == "trace":
            return torch.jit.trace(model, tuple(workload.example_inputs()))
        raise ValueError(f"jit_mode must be 'trace' or 'script', not {mode!r}")
