"""The paddle helper: seeding, determinism, to-numpy, versions and the paddle save formats.

The harness imports this module for the class's facts, outside the environment under test: paddle and numpy are
imported inside the methods (through `_paddle`), which run in the environment.

Workloads follow the same convention as the torch ones: `self.model` is the `paddle.nn.Layer` that
`infer` calls, `example_inputs()` gives the tensors to build the jit program's InputSpec from, and an
optional `build_model()` returns a fresh layer to load a state dict into (else `self.model` is used).
"""

from __future__ import annotations

import functools
import io
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict

from modelci.workload.frameworks import HelperFormat, PythonHelper, format_table

#: deterministic-kernel flags; each build registers only some of them (a CPU build has none of the cuDNN ones)
_DETERMINISM_FLAGS = {
    "FLAGS_cudnn_deterministic": (True, False),
    "FLAGS_cpu_deterministic": (True, False),
    "FLAGS_embedding_deterministic": (1, 0),
    "FLAGS_cudnn_exhaustive_search": (False, False),
}


def _paddle() -> Any:
    """The paddle module, imported on first use."""
    with warnings.catch_warnings():
        # paddle's C++-extension support warns on every import when ccache is absent; nothing to act on
        warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)
        import paddle
    return paddle


@functools.lru_cache(maxsize=None)
def _warm_up_net_class() -> type:
    """The class `_WarmUpNet`, defined on first use, since it subclasses paddle's `nn.Layer`."""
    paddle = _paddle()

    class _WarmUpNet(paddle.nn.Layer):
        """The fixed model of PaddleHelper.warm_up: a layer of the user's kind, whose `forward` calls functions,
        since the program translator prepares what it converts calls with on the first such call it meets."""

        def __init__(self) -> None:
            super().__init__()
            self.fc = paddle.nn.Linear(2, 2)

        def forward(self, x: Any) -> Any:
            return paddle.nn.functional.relu(self.fc(x))

    return _WarmUpNet


class PaddleHelper(PythonHelper):
    """Helper for paddle workloads (formats `paddle_state` and `paddle_jit`)."""

    name = "paddle"
    module = "paddle"
    distributions = ("paddlepaddle", "paddlepaddle-gpu")
    #: paddlepaddle 3.0 imports setuptools without declaring it; a `python -m venv` has it, a uv venv does not
    needs = ("setuptools",)
    #: libpaddle starts brpc's bvar sampler thread, which wakes once a second to sample counters; brpc registers a
    #: pthread_atfork handler that starts it again in a child ("Support fork without exec",
    #: bvar/detail/sampler.cpp). Any other thread, or more of them (with `threads = 0` paddle's import also
    #: starts an OpenMP pool), still makes the worker spawn.
    fork_safe_threads = 1
    formats = format_table(
        HelperFormat("paddle_state", unsafe=True,
                     why="paddle.load unpickles whatever the file holds (paddle/framework/io.py)"),
        HelperFormat("paddle_jit", unsafe=True,
               why="paddle.jit.load unpickles `model.pdiparams.info` when it reads a pre-PIR program "
                   "(paddle/jit/translated_layer.py), which a crafted folder can always ask for"),
    )

    def probe(self) -> Dict[str, Any]:
        """paddle's build: version, commit, CUDA, cuDNN, MKL."""
        paddle = _paddle()
        version = paddle.version

        def call(obj: Any, name: str) -> Any:
            value = getattr(obj, name, None)
            try:
                return value() if callable(value) else value
            except Exception:  # noqa: BLE001 - a build without CUDA may raise where it could return None
                return None

        return {
            "version": call(version, "full_version"),
            "commit": call(version, "commit"),
            "cuda": call(version, "cuda"),
            "cudnn": call(version, "cudnn"),
            "with_mkl": call(version, "with_mkl"),
            "compiled_with_cuda": call(paddle, "is_compiled_with_cuda"),
        }

    def seed(self, seed: int) -> None:
        """Seed python, numpy and paddle's global generator (every place)."""
        import numpy as np

        paddle = _paddle()
        super().seed(seed)
        np.random.seed(seed % 2**32)
        paddle.seed(seed)

    def set_determinism(self, enabled: bool) -> None:
        """Set the deterministic-kernel flags this paddle build registers; the others are left alone."""
        paddle = _paddle()
        for flag, (on, off) in _DETERMINISM_FLAGS.items():
            # a process started from here (e.g. a data-loader worker) reads FLAGS_* from the environment
            os.environ[flag] = str(int(on if enabled else off))
            try:
                paddle.set_flags({flag: on if enabled else off})
            except ValueError:  # "cannot set its value through this function": not in this build
                pass

    def first_use(self) -> None:
        """Save a tiny fixed model in both formats (a state dict into memory, a jit program
        into a temporary folder): the first `paddle.jit.save` in a process imports 95 more modules and builds
        the program translator, 0.1-0.2 s that each forked child paid again. Under a fresh name
        scope, so the workload's layers get the parameter names they get without it, and with paddle's random
        state put back, so its initialisation draws what it draws without it."""
        paddle = _paddle()
        state = paddle.get_rng_state()
        try:
            with paddle.utils.unique_name.guard(), tempfile.TemporaryDirectory() as folder:
                model = _warm_up_net_class()()
                model.eval()
                paddle.save(model.state_dict(), io.BytesIO())
                if self.supports("paddle_jit") is None:
                    spec = [paddle.static.InputSpec(shape=[1, 2], dtype="float32", name="input_0")]
                    paddle.jit.save(model, os.path.join(folder, "model"), input_spec=spec)
        except Exception:  # noqa: BLE001 - a warm-up that fails changes nothing the workload could see
            pass
        finally:
            paddle.set_rng_state(state)

    def to_numpy(self, value: Any) -> Any:
        """A paddle tensor (any place, with or without grad) as a numpy array; anything else via np.asarray."""
        import numpy as np

        paddle = _paddle()
        if isinstance(value, paddle.Tensor):
            return value.detach().cpu().numpy()
        return np.asarray(value)

    def versions(self) -> dict[str, str]:
        """paddle, its git commit, CUDA and cuDNN where built with them, and numpy."""
        import numpy as np

        paddle = _paddle()
        found = {"paddle": paddle.__version__, "numpy": np.__version__}
        commit = getattr(paddle.version, "commit", None)
        if commit:
            found["paddle.git"] = str(commit)
        if paddle.is_compiled_with_cuda():
            found["paddle.cuda"] = str(paddle.version.cuda())
            found["paddle.cudnn"] = str(paddle.version.cudnn())
        return found

    def supports(self, fmt: str) -> str | None:
        """None when this paddle can save `fmt`, else why not."""
        paddle = _paddle()
        if fmt not in self.formats:
            return f"paddle helper has no format {fmt!r}; known: {', '.join(self.formats)}"
        if fmt == "paddle_jit" and not hasattr(paddle, "jit"):
            return f"paddle {paddle.__version__} has no paddle.jit"
        return None

    def save(self, workload: Any, ctx: Any, fmt: str, path: Path) -> None:
        """Save `workload.model` in eval mode. `paddle_state` writes the file `path`; `paddle_jit` writes
        a folder `path` holding `model.*` (.pdmodel or .json program, .pdiparams weights)."""
        paddle = _paddle()
        reason = self.supports(fmt)
        if reason:
            raise NotImplementedError(reason)
        model = workload.model
        was_training = model.training
        model.eval()
        try:
            if fmt == "paddle_state":
                paddle.save(model.state_dict(), str(path))
            elif fmt == "paddle_jit":
                specs = [
                    paddle.static.InputSpec(shape=list(t.shape), dtype=t.dtype, name=f"input_{i}")
                    for i, t in enumerate(workload.example_inputs())
                ]
                Path(path).mkdir(parents=True, exist_ok=True)
                paddle.jit.save(model, str(Path(path) / "model"), input_spec=specs)
        finally:
            if was_training:
                model.train()

    def load(self, workload: Any, ctx: Any, fmt: str, path: Path) -> Any:
        """Read `path` saved in `fmt`, make it `workload.model` (eval mode) and return it."""
        paddle = _paddle()
        if fmt == "paddle_state":
            state = paddle.load(str(path))
            if hasattr(workload, "load_state_dict"):
                return workload.load_state_dict(state)
            model = workload.build_model() if hasattr(workload, "build_model") else workload.model
            expected = set(model.state_dict())
            if expected != set(state):
                raise ValueError(
                    f"state dict at {path} does not fit the model: missing {sorted(expected - set(state))}, "
                    f"unexpected {sorted(set(state) - expected)}"
                )
            model.set_state_dict(state)
        elif fmt == "paddle_jit":
            model = self._load_jit(Path(path) / "model")
        else:
            return super().load(workload, ctx, fmt, path)
        model.eval()
        workload.model = model
        return model

    @staticmethod
    def _load_jit(prefix: Path) -> Any:
        """paddle.jit.load, also for a program saved before PIR (paddle < 3.0 wrote `model.pdmodel`).

        With its PIR API on, paddle 3.0 looks only for `model.json` and calls a model saved by 2.6 missing;
        under `paddle.pir_utils.DygraphOldIrGuard` it reads the old program, and the layer it returns then
        runs outside the guard too (checked: 2.6 -> 3.0 gives bit-identical outputs for the whole zoo).
        """
        paddle = _paddle()
        legacy = prefix.with_suffix(".pdmodel").exists() and not prefix.with_suffix(".json").exists()
        guard = getattr(getattr(paddle, "pir_utils", None), "DygraphOldIrGuard", None)
        if legacy and guard is not None:
            with guard():
                return paddle.jit.load(str(prefix))
        return paddle.jit.load(str(prefix))

    def peak_device_memory(self) -> int | None:
        """Peak GPU memory allocated by paddle, or None on a CPU build or a CPU place."""
        paddle = _paddle()
        if paddle.is_compiled_with_cuda() and paddle.get_device().startswith("gpu"):
            return int(paddle.device.cuda.max_memory_allocated())
        return None

    def synchronize(self) -> None:
        """Wait for queued GPU work."""
        paddle = _paddle()
        if paddle.is_compiled_with_cuda() and paddle.get_device().startswith("gpu"):
            paddle.device.cuda.synchronize()
