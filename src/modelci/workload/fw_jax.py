"""The JAX helper: seeding, determinism, to-numpy, versions and the JAX save formats.

The harness imports this module for the class's facts, outside the environment under test: jax and numpy are
imported inside the methods, which run in the environment.

Convention for workloads that rely on the built-in formats:
- `self.model` is what `infer` calls: an object with `params` (a pytree of arrays: nested dicts, lists and
  tuples) and `apply`, a pure function `apply(params, *inputs)`; calling the model is `apply(params, *inputs)`.
  `load` replaces it with the loaded model.
- `example_inputs()` returns the tuple of arrays `infer` feeds the model, which `jax_export` traces with.
- `build_model()` (optional) returns a freshly initialised model to load parameters into; without it they go
  into `self.model` as `setup` built it.

A JAX workload's randomness is its own: it derives its keys from `ctx.seed` (`jax.random.key(ctx.seed)`), so
seeding here only seeds python's and numpy's generators, which a workload may use for its data.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List

from modelci.workload.frameworks import HelperFormat, PythonHelper, format_table

#: what XLA reads from XLA_FLAGS for deterministic GPU kernels (no effect on CPU, whose kernels are deterministic)
_DETERMINISM_FLAG = "--xla_gpu_deterministic_ops=true"
#: version of the `jax_export` folder's layout
EXPORT_LAYOUT = 1


class _ExportedModel:
    """A model loaded from `jax_export`: the deserialized program called with the saved parameters, so `infer`
    calls it as it called the model it was saved from."""

    def __init__(self, exported: Any, params: List[Any]) -> None:
        self.exported = exported
        self.params = params

    def apply(self, params: List[Any], *inputs: Any) -> Any:
        return self.exported.call(params, *inputs)

    def __call__(self, *inputs: Any) -> Any:
        return self.apply(self.params, *inputs)


class JaxHelper(PythonHelper):
    """Helper for JAX workloads (formats `jax_params` and `jax_export`)."""

    name = "jax"
    module = "jax"
    distributions = ("jax",)
    companions = ("jaxlib", "jax-cuda12-plugin", "jax-cuda13-plugin", "ml-dtypes")
    #: jax.export serializes with flatbuffers, which jax does not declare ("Please install 'flatbuffers' in order
    #: to use Exported serialization")
    needs = ("flatbuffers",)
    formats = format_table(
        HelperFormat("jax_params", unsafe=False,
               why="the parameters as named arrays in an .npz, read with numpy.load(allow_pickle=False)"),
        HelperFormat("jax_export", unsafe=False,
               why="a serialized StableHLO program (jax.export) and an .npz of its parameters, no pickle: "
                   "loading runs XLA operations only"),
    )

    @classmethod
    def fork_hazard(cls) -> str:
        """A GPU or TPU client this process started cannot be used by a forked child."""
        bridge = sys.modules.get("jax._src.xla_bridge")  # where jax keeps its started clients (no import here)
        backends = getattr(bridge, "_backends", None) or {}
        accelerators = sorted(name for name in backends if name != "cpu")
        if accelerators:
            return f"jax has started its {', '.join(accelerators)} client in this process, which a forked child " \
                   "cannot use"
        return ""

    def probe(self) -> Dict[str, Any]:
        """jax's build: versions of jax and jaxlib, the default backend, its devices, and whether x64 is on."""
        import jax

        facts: Dict[str, Any] = {"version": jax.__version__}
        try:
            import jaxlib

            facts["jaxlib"] = getattr(jaxlib, "__version__", None) or jaxlib.version.__version__
        except Exception:  # noqa: BLE001 - a jaxlib that cannot say its version: recorded as unknown
            facts["jaxlib"] = None
        facts["backend"] = jax.default_backend()
        facts["devices"] = [str(device.device_kind) for device in jax.devices()]
        facts["x64"] = bool(jax.config.read("jax_enable_x64"))
        return facts

    def seed(self, seed: int) -> None:
        """Seed python's and numpy's generators; a JAX workload makes its own keys from `ctx.seed`."""
        import numpy as np

        super().seed(seed)
        np.random.seed(seed % 2**32)

    def set_determinism(self, enabled: bool) -> None:
        """Ask XLA for deterministic GPU kernels (it reads XLA_FLAGS when it starts its GPU client, so this
        works from the prologue on). CPU kernels are deterministic already."""
        flags = [flag for flag in os.environ.get("XLA_FLAGS", "").split() if flag != _DETERMINISM_FLAG]
        if enabled:
            flags.append(_DETERMINISM_FLAG)
        os.environ["XLA_FLAGS"] = " ".join(flags)

    def first_use(self) -> None:
        """Start jax's CPU client and compile a tiny fixed function: the first computation of a process pays
        for both, and the first `jax.export` imports the export modules. Draws nothing from any generator."""
        super().first_use()
        try:
            import jax
            import jax.numpy as jnp

            x = jnp.ones((1, 2), jnp.float32)
            jax.block_until_ready(jax.jit(lambda a: jnp.tanh(a @ a.T))(x))
            jax.export.export(jax.jit(lambda a: a * 2))(x).serialize()
        except Exception:  # noqa: BLE001 - a warm-up that fails changes nothing the workload could see
            pass

    def to_numpy(self, value: Any) -> Any:
        """A jax array (on any device) as a numpy array; anything else via np.asarray."""
        import numpy as np

        return np.asarray(value)

    def versions(self) -> dict[str, str]:
        """jax, jaxlib, the backend that ran, and numpy."""
        import jax
        import numpy as np

        found = {"jax": jax.__version__, "numpy": np.__version__, "jax.backend": jax.default_backend()}
        try:
            import jaxlib

            found["jaxlib"] = getattr(jaxlib, "__version__", None) or jaxlib.version.__version__
        except Exception:  # noqa: BLE001 - versions only report
            pass
        return found

    def supports(self, fmt: str) -> str | None:
        """None when this jax can save `fmt`, else why not."""
        if fmt not in self.formats:
            return f"jax helper has no format {fmt!r}; known: {', '.join(self.formats)}"
        if fmt == "jax_export":
            import jax

            if not all(hasattr(getattr(jax, "export", None), n) for n in ("export", "deserialize")):
                return f"jax {jax.__version__} lacks jax.export.export/deserialize (added in 0.4.30)"
            if importlib.util.find_spec("flatbuffers") is None:
                return "jax_export needs the flatbuffers package in the environment"
        return None

    def save(self, workload: Any, ctx: Any, fmt: str, path: Path) -> None:
        """`jax_params` writes the file `path` (an .npz of the parameters by their pytree paths); `jax_export`
        writes a folder `path` holding `program.bin` (jax.export of `apply` over the flat parameters and
        `example_inputs()`), `params.npz` and `layout.json`."""
        reason = self.supports(fmt)
        if reason:
            raise NotImplementedError(reason)
        import jax
        import numpy as np

        model = workload.model
        if fmt == "jax_params":
            with open(path, "wb") as fh:
                np.savez(fh, **_named_leaves(model.params))
            return
        leaves, treedef = jax.tree_util.tree_flatten(model.params)
        apply = model.apply

        def flat_apply(flat: List[Any], *inputs: Any) -> Any:
            return apply(jax.tree_util.tree_unflatten(treedef, flat), *inputs)

        exported = jax.export.export(jax.jit(flat_apply))(leaves, *workload.example_inputs())
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "program.bin").write_bytes(exported.serialize())
        with open(folder / "params.npz", "wb") as fh:
            np.savez(fh, **{f"leaf_{i:05d}": np.asarray(leaf) for i, leaf in enumerate(leaves)})
        (folder / "layout.json").write_text(json.dumps({"layout": EXPORT_LAYOUT, "leaves": len(leaves)}))

    def load(self, workload: Any, ctx: Any, fmt: str, path: Path) -> Any:
        """Read `path` saved in `fmt`, make it `workload.model` and return it."""
        import jax
        import jax.numpy as jnp
        import numpy as np

        if fmt == "jax_params":
            model = workload.build_model() if hasattr(workload, "build_model") else workload.model
            with np.load(path, allow_pickle=False) as data:
                saved = {key: data[key] for key in data.files}
            expected = _named_leaves(model.params)
            if set(expected) != set(saved):
                raise ValueError(
                    f"parameters at {path} do not fit the model: missing {sorted(set(expected) - set(saved))}, "
                    f"unexpected {sorted(set(saved) - set(expected))}"
                )
            for name, leaf in expected.items():
                if saved[name].shape != leaf.shape or saved[name].dtype != leaf.dtype:
                    raise ValueError(f"parameter {name} at {path} is {saved[name].dtype}{list(saved[name].shape)}, "
                                     f"the model's is {leaf.dtype}{list(leaf.shape)}")
            model.params = jax.tree_util.tree_map_with_path(
                lambda key, _: jnp.asarray(saved[jax.tree_util.keystr(key)]), model.params)
        elif fmt == "jax_export":
            folder = Path(path)
            layout = json.loads((folder / "layout.json").read_text())
            if layout.get("layout") != EXPORT_LAYOUT:
                raise ValueError(f"{folder} holds jax_export layout {layout.get('layout')!r}; this modelci reads "
                                 f"layout {EXPORT_LAYOUT}")
            exported = jax.export.deserialize(bytearray((folder / "program.bin").read_bytes()))
            with np.load(folder / "params.npz", allow_pickle=False) as data:
                params = [jnp.asarray(data[f"leaf_{i:05d}"]) for i in range(int(layout["leaves"]))]
            model = _ExportedModel(exported, params)
        else:
            return super().load(workload, ctx, fmt, path)
        workload.model = model
        return model


def _named_leaves(params: Any) -> Dict[str, Any]:
    """{pytree path (jax.tree_util.keystr, e.g. "['dense']['w']"): numpy array} of a parameter pytree."""
    import jax
    import numpy as np

    flat, _ = jax.tree_util.tree_flatten_with_path(params)
    return {jax.tree_util.keystr(key): np.asarray(leaf) for key, leaf in flat}
