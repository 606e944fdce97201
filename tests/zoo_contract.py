"""What every framework zoo (zoo:torch, zoo:paddle, zoo:jax) must do, driven in-process without the harness.

`Zoo` imports a built-in suite as the harness does and sets up, trains and infers its workloads the way the
harness does (seed and determinism first). `ZooContract` holds the tests every zoo passes: a test module
subclasses it as `Test...` with `zoo`, `domains` and `requirement` set, next to its framework's own tests.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import modelci
from modelci.workload.api import Context, Workload
from modelci.workload.child import import_file, suite_files, workload_classes


def modules_each_forked_workload_imports(name: str, helper: Any) -> dict[str, list[str]]:
    """Fork this process once per single-process workload of zoo:`name`, as the fork worker does, and return
    what each child imported over its whole life after the prologue (setup, training, inference, every save
    format). Run it in a fresh process whose prologue (the helper's seed, determinism and warm-up) is done."""
    import json
    import os
    import sys

    zoo = Zoo(name, helper)
    scratch = zoo.scratch  # made here, so that this process removes it: the children leave with os._exit
    found = {}
    for cls in [c for c in zoo.workloads if c.devices == 1 and c.nodes == 1]:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            before = set(sys.modules)
            ctx = Context(seed=0, scratch=Path(tempfile.mkdtemp(dir=scratch)))
            workload = cls()
            workload.setup(ctx)
            for step in range(int(cls.steps)):
                float(workload.train_step(ctx, step))
            workload.infer(ctx)
            for fmt in cls.formats:
                helper.save(workload, ctx, fmt, ctx.scratch / fmt)
            os.write(write, json.dumps(sorted(set(sys.modules) - before)).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as fh:
            found[cls.__name__] = json.loads(fh.read() or "null")
        os.waitpid(pid, 0)
    return found


def run_probe(script: str, *args: str, cwd: Path) -> Any:
    """Run `script` (which may import zoo_contract) in a fresh interpreter with one math thread; the JSON it
    prints last."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


class Zoo:
    """One built-in suite: its workload classes, and each of them seeded, set up, trained and inferred."""

    def __init__(self, name: str, helper: Any) -> None:
        self.name = name
        self.helper = helper
        self.folder = Path(modelci.__file__).resolve().parent / "zoo" / name
        # the harness's own import: helpers beside the files (`_common.py`) importable, modules registered under
        # the names that pickles (torch_pickle) find the classes by again
        self.workloads: list[type[Workload]] = [cls for path in suite_files(self.folder)
                                                for cls in workload_classes(import_file(path, name))]
        self._trained: dict[type[Workload], tuple] = {}
        self._scratch: tempfile.TemporaryDirectory | None = None

    @property
    def scratch(self) -> str:
        """The shared trained instances' scratch, removed when the test process ends. Made on first use: a process
        that imports a test module only to run one function (a spawned rank, which leaves with os._exit) would
        leave it behind."""
        if self._scratch is None:
            self._scratch = tempfile.TemporaryDirectory(prefix=f"modelci-zoo-{self.name}-")
        return self._scratch.name

    def named(self, name: str) -> type[Workload]:
        """The workload class called `name`."""
        return next(cls for cls in self.workloads if cls.__name__ == name)

    def fresh(self, cls: type[Workload], tmp: Path, seed: int = 0) -> tuple[Workload, Context]:
        """A new instance after `setup`, seeded and made deterministic the way the harness does it."""
        self.helper.seed(seed)
        self.helper.set_determinism(True)
        ctx = Context(seed=seed, scratch=tmp)
        workload = cls()
        workload.setup(ctx)
        return workload, ctx

    def train(self, cls: type[Workload], tmp: Path, seed: int = 0) -> tuple:
        """A trained instance, its context, its loss per step and its inference outputs."""
        workload, ctx = self.fresh(cls, tmp, seed)
        losses = [workload.train_step(ctx, step) for step in range(cls.steps)]
        return workload, ctx, losses, workload.infer(ctx)

    def trained(self, cls: type[Workload]) -> tuple:
        """`train` once per workload class, shared by the tests that only read the result."""
        if cls not in self._trained:
            self._trained[cls] = self.train(cls, Path(tempfile.mkdtemp(dir=self.scratch)))
        return self._trained[cls]


def assert_same_outputs(expected: dict, actual: dict) -> None:
    """Both dicts hold the same names, and bit-identical arrays under each."""
    assert expected.keys() == actual.keys()
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


def ids(value: Any) -> str:
    """Test ids: a workload by its class name."""
    return value.__name__ if isinstance(value, type) else str(value)


class ZooContract:
    """The tests every framework zoo passes; `cls` is each workload, `fmt` each format it declares."""

    zoo: Zoo
    #: the domains the zoo's workloads may declare
    domains: set[str]
    #: the distribution every workload requires
    requirement: str

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "fmt" in metafunc.fixturenames:
            cases = [(cls, fmt) for cls in self.zoo.workloads for fmt in cls.formats]
            metafunc.parametrize(("cls", "fmt"), cases, ids=ids)
        elif "cls" in metafunc.fixturenames:
            metafunc.parametrize("cls", self.zoo.workloads, ids=ids)

    def test_workload_declares_the_contract(self, cls):
        assert cls.framework == self.zoo.name
        assert cls.domain in self.domains
        assert cls.steps >= 10
        assert any(req.startswith(self.requirement) for req in cls.requires)
        assert set(cls.formats) <= set(self.zoo.helper.formats)

    def test_training_is_finite_and_learns(self, cls):
        _, _, losses, _ = self.zoo.trained(cls)
        assert len(losses) == cls.steps
        assert all(isinstance(loss, float) and math.isfinite(loss) for loss in losses)
        if cls.domain != "generative":  # a GAN's losses chase each other; finite is all we ask
            assert np.mean(losses[-3:]) < np.mean(losses[:3])

    def test_outputs_are_finite_arrays_and_infer_is_pure(self, cls):
        workload, ctx, _, outputs = self.zoo.trained(cls)
        assert outputs
        for name, value in outputs.items():
            assert isinstance(value, np.ndarray), name
            assert np.isfinite(value).all(), name
        assert_same_outputs(outputs, workload.infer(ctx))

    def test_same_seed_gives_identical_losses_and_outputs(self, cls, tmp_path):
        _, _, losses, outputs = self.zoo.trained(cls)
        _, _, again_losses, again_outputs = self.zoo.train(cls, tmp_path)
        assert again_losses == losses
        assert_same_outputs(outputs, again_outputs)

    def test_another_seed_gives_other_losses(self, cls, tmp_path):
        _, _, losses, _ = self.zoo.trained(cls)
        _, _, other, _ = self.zoo.train(cls, tmp_path, seed=1)
        assert other != losses

    def test_format_round_trips_into_a_fresh_instance(self, cls, fmt, tmp_path):
        helper = self.zoo.helper
        reason = helper.supports(fmt)
        if reason:
            pytest.skip(reason)
        trained, ctx, _, outputs = self.zoo.trained(cls)
        path = tmp_path / f"model.{fmt}"
        helper.save(trained, ctx, fmt, path)
        assert path.exists()
        assert_same_outputs(outputs, trained.infer(ctx))  # saving must not disturb the trained model

        fresh, fresh_ctx = self.zoo.fresh(cls, tmp_path, seed=0)
        loaded = helper.load(fresh, fresh_ctx, fmt, path)
        assert fresh.model is loaded
        assert_same_outputs(outputs, fresh.infer(fresh_ctx))
