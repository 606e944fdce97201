"""The fake framework `compatfw` 1.0 / 2.0 and a suite on top of it, for the backward-compatibility tests.

Pure Python (no numpy), so that it installs offline in milliseconds. Version 2.0 differs from 1.0 in exactly
three ways: `Dense` renames a state key (weight -> kernel), `Scaled` changes its
numerics by 1e-3 relative, and the `text` format is gone. Everything else must stay `ok`.
"""

from __future__ import annotations

from pathlib import Path

from fakewheels import build_fake_wheel

TEMPLATE = '''\
"""compatfw {version}: a fake framework with its own save formats."""
import json
import math
import os

__version__ = "{version}"
_V2 = __version__.startswith("2.")
#: 2.0 drops the text format
FORMATS = ("json", "folder") if _V2 else ("json", "folder", "text")


def supports(fmt):
    """None when this version has `fmt`, else why not."""
    return None if fmt in FORMATS else f"compatfw {{__version__}} has no format {{fmt!r}}"


class Linear:
    """y = tanh(w x + b), with state keys that never change."""

    keys = ("w", "b")

    def __init__(self, weight, bias):
        self.weight, self.bias = weight, bias

    def __call__(self, x):
        return [math.tanh(sum(w * v for w, v in zip(row, x)) + b) for row, b in zip(self.weight, self.bias)]

    def state_dict(self):
        return {{self.keys[0]: self.weight, self.keys[1]: self.bias}}

    def load_state_dict(self, state):
        self.weight, self.bias = state[self.keys[0]], state[self.keys[1]]


class Dense(Linear):
    """2.0 renames the weight's state key from 'weight' to 'kernel'."""

    keys = ("kernel" if _V2 else "weight", "bias")


class Scaled(Linear):
    """2.0 changes the output scale by 1e-3 relative (a numeric change)."""

    def __call__(self, x):
        factor = 1.001 if _V2 else 1.0
        return [v * factor for v in super().__call__(x)]


def save(state, path, fmt):
    """Write a state dict: json (a file), folder (one file per key) or text (1.0 only)."""
    reason = supports(fmt)
    if reason:
        raise NotImplementedError(reason)
    if fmt == "folder":
        os.makedirs(path)
        for key, value in state.items():
            with open(os.path.join(path, key + ".json"), "w") as fh:
                json.dump(value, fh)
        return
    with open(path, "w") as fh:
        if fmt == "json":
            json.dump(state, fh)
        else:
            fh.writelines(f"{{key}}={{json.dumps(value)}}\\n" for key, value in state.items())


def load(path, fmt):
    """Read what `save` wrote."""
    reason = supports(fmt)
    if reason:
        raise NotImplementedError(reason)
    if fmt == "folder":
        return {{name[:-5]: json.load(open(os.path.join(path, name))) for name in sorted(os.listdir(path))}}
    with open(path) as fh:
        if fmt == "json":
            return json.load(fh)
        return {{k: json.loads(v) for k, _, v in (line.rstrip("\\n").partition("=") for line in fh)}}
'''

SUITE = '''\
import modelci
import compatfw


class _Base(modelci.Workload):
    """A one-layer model; 'training' shrinks the weights, so only a real load reproduces the outputs."""

    framework = "python"
    requires = ["compatfw"]
    steps = 3
    warmup = 0
    repeats = 1
    formats = ("json",)
    layer = "Linear"

    def setup(self, ctx):
        rng = ctx.rng()
        weight = [[rng.uniform(-1, 1) for _ in range(3)] for _ in range(2)]
        self.model = getattr(compatfw, self.layer)(weight, [rng.uniform(-0.1, 0.1) for _ in range(2)])
        self.x = [[rng.uniform(-1, 1) for _ in range(3)] for _ in range(4)]

    def example_inputs(self):
        return (self.x,)

    def train_step(self, ctx, step):
        self.model.weight = [[w * 0.9 + 0.01 for w in row] for row in self.model.weight]
        return float(step)

    def infer(self, ctx):
        return {"y": [self.model(x) for x in self.x]}

    def supports(self, fmt):
        return compatfw.supports(fmt)

    def save(self, ctx, fmt, path):
        compatfw.save(self.model.state_dict(), str(path), fmt)

    def load(self, ctx, fmt, path):
        self.model.load_state_dict(compatfw.load(str(path), fmt))
        return self.model


class Stable(_Base):
    # declared safe: plain JSON; the other workloads leave their formats undeclared, so they count as unsafe
    formats = (modelci.Format("json", unsafe=False), modelci.Format("folder", unsafe=False))


class Renamed(_Base):
    layer = "Dense"


class Numerics(_Base):
    layer = "Scaled"


class Legacy(_Base):
    formats = ("json", "text")
'''

RETIRED = SUITE.split("class Stable")[0].replace("class _Base", "class _Base2").replace("(_Base)", "(_Base2)") + '''
class Retired(_Base2):
    """Deleted from the suite before the check: its saved model is `missing`."""
'''


def write_project(root: Path, cache: Path) -> dict[str, Path]:
    """The compatfw 1.0/2.0 wheels, the suite folder and a modelci.toml under `root`."""
    wheels = root / "wheels"
    paths = {v: build_fake_wheel(wheels, "compatfw", v, {"compatfw/__init__.py": TEMPLATE.format(version=v)})
             for v in ("1.0", "2.0")}
    suite = root / "compatsuite"
    suite.mkdir(parents=True)
    (suite / "models.py").write_text(SUITE)
    (suite / "retired.py").write_text(RETIRED)
    (root / "modelci.toml").write_text(f'cache_dir = "{cache}"\ntimeout = 60\nrunner = "test-runner"\n')
    return {"wheels": wheels, "suite": suite, "v1": paths["1.0"], "v2": paths["2.0"]}
