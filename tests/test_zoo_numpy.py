"""Tests for the built-in `zoo:numpy` suite, run without the harness: each workload is a real, deterministic model.

Run as a script (`python tests/test_zoo_numpy.py SEED`) it prints the digest of every workload's run, so that a
test can compare runs across processes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import modelci
from modelci.workload.frameworks import get_helper

SUITE = Path(modelci.__file__).parent / "zoo" / "numpy"

#: workload -> output name -> dtype; a new workload names its outputs here
EXPECTED_OUTPUTS = {
    "LinearRegressionSGD": {"predictions": np.float64, "residuals": np.float64},
    "MLPClassifier": {"logits": np.float32, "probabilities": np.float32, "predictions": np.int64},
    "SmallCNN": {"logits": np.float32, "probabilities": np.float32, "features": np.float32},
    "ElmanRNN": {"logits": np.float64, "next_token_probs": np.float64, "final_state": np.float64},
    "Float32StatsPipeline": {"standardized": np.float32, "cumulative_probs": np.float32, "quantiles": np.float32},
    "MatrixFactorization": {"held_out_ratings": np.float64, "user_scores": np.float64},
}


def load_suite() -> list[type[modelci.Workload]]:
    """Import every suite file by path, as the harness does, and return the workload classes defined in them."""
    workloads = []
    for path in sorted(SUITE.glob("*.py")):
        if path.name.startswith("_"):
            continue
        spec = importlib.util.spec_from_file_location(f"zoo_numpy_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        workloads += [
            obj
            for obj in vars(module).values()
            if isinstance(obj, type) and issubclass(obj, modelci.Workload) and obj.__module__ == module.__name__
        ]
    return workloads


WORKLOADS = load_suite()


def run(cls: type[modelci.Workload], seed: int) -> tuple[modelci.Workload, list[float], dict[str, np.ndarray]]:
    """Set up and train a fresh instance, then infer; returns the workload, its losses and its outputs."""
    ctx = modelci.Context(seed=seed)
    workload = cls()
    workload.setup(ctx)
    losses = [workload.train_step(ctx, step) for step in range(cls.steps)]
    return workload, losses, workload.infer(ctx)


def digest(losses: list[float], outputs: dict[str, np.ndarray]) -> str:
    """A sha256 over the exact bits of a loss curve and of the outputs (names, dtypes, shapes, bytes)."""
    h = hashlib.sha256(np.array(losses, dtype=np.float64).tobytes())
    for name in sorted(outputs):
        array = np.ascontiguousarray(outputs[name])
        h.update(f"{name}:{array.dtype.str}:{array.shape}".encode())
        h.update(array.tobytes())
    return h.hexdigest()


def assert_same_outputs(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert a[name].tobytes() == b[name].tobytes(), f"output {name!r} differs"


def outputs_differ(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return any(a[name].shape != b[name].shape or not np.array_equal(a[name], b[name]) for name in a)


workload_params = pytest.mark.parametrize("cls", WORKLOADS, ids=lambda cls: cls.__name__)


def test_suite_has_at_least_five_workloads():
    assert len(WORKLOADS) >= 5
    assert len({cls.workload_name() for cls in WORKLOADS}) == len(WORKLOADS)


@workload_params
def test_workload_declares_the_contract(cls):
    assert cls.framework == "numpy"
    assert cls.formats == ("npz",)
    assert 10 <= cls.steps <= 30
    assert cls.domain in {"tabular", "vision", "nlp", "speech", "data", "recommendation"}
    assert cls.__doc__ and cls.__doc__.strip()


@workload_params
def test_same_seed_gives_bit_identical_losses_and_outputs(cls):
    _, losses_a, outputs_a = run(cls, seed=11)
    _, losses_b, outputs_b = run(cls, seed=11)
    assert all(type(loss) is float for loss in losses_a)
    assert np.array(losses_a).tobytes() == np.array(losses_b).tobytes()
    assert_same_outputs(outputs_a, outputs_b)


@workload_params
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_loss_decreases(cls, seed):
    _, losses, _ = run(cls, seed)
    assert len(losses) == cls.steps
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < losses[0]


@workload_params
def test_outputs_are_finite_arrays_of_the_expected_dtypes(cls):
    workload, _, outputs = run(cls, seed=0)
    expected = EXPECTED_OUTPUTS[cls.__name__]
    assert {name: array.dtype for name, array in outputs.items()} == {k: np.dtype(v) for k, v in expected.items()}
    for name, array in outputs.items():
        assert isinstance(array, np.ndarray), name
        assert array.size > 0 and np.all(np.isfinite(array)), name
    for name, array in workload.state_dict().items():
        assert isinstance(array, np.ndarray), name


@workload_params
def test_infer_is_pure(cls):
    workload, _, outputs = run(cls, seed=0)
    ctx = modelci.Context(seed=0)
    assert_same_outputs(outputs, workload.infer(ctx))
    assert_same_outputs(outputs, workload.infer(ctx))


@workload_params
def test_npz_round_trip_gives_identical_outputs(cls, tmp_path):
    trained, _, outputs = run(cls, seed=5)
    helper = get_helper("numpy")
    path = tmp_path / "model.npz"
    helper.save(trained, modelci.Context(seed=5), "npz", path)

    ctx = modelci.Context(seed=5)
    fresh = cls()
    fresh.setup(ctx)
    assert outputs_differ(outputs, fresh.infer(ctx)), "untrained outputs should differ, or the check proves nothing"
    helper.load(fresh, ctx, "npz", path)
    assert_same_outputs(outputs, fresh.infer(ctx))


@workload_params
def test_different_seed_gives_different_outputs(cls):
    _, losses_a, outputs_a = run(cls, seed=0)
    _, losses_b, outputs_b = run(cls, seed=1)
    assert losses_a != losses_b
    assert outputs_differ(outputs_a, outputs_b)


def test_runs_are_bit_identical_across_processes():
    expected = {cls.workload_name(): digest(*run(cls, seed=3)[1:]) for cls in WORKLOADS}
    env = dict(os.environ, PYTHONHASHSEED="12345")
    child = subprocess.run(
        [sys.executable, __file__, "3"], env=env, capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(child.stdout) == expected


if __name__ == "__main__":
    seed = int(sys.argv[1])
    print(json.dumps({cls.workload_name(): digest(*run(cls, seed)[1:]) for cls in WORKLOADS}))
