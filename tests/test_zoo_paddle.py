"""Drive every zoo:paddle workload in-process, without the harness: determinism, training, formats."""

from __future__ import annotations

import importlib.util
import inspect
import math
import sys
import warnings
from functools import cache
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
with warnings.catch_warnings():
    # paddle warns on import when ccache is absent (it only matters for building C++ extensions)
    warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)
    paddle = pytest.importorskip("paddle")
try:
    # one math-library thread: on a busy 2-core runner, two spinning OpenMP threads run ~4x slower
    from paddle.base import core as _core
except ImportError:  # paddle < 2.6 called it paddle.fluid
    _core = None
if hasattr(_core, "set_num_threads"):
    _core.set_num_threads(1)

from modelci.workload.api import Context, Workload  # noqa: E402
from modelci.workload.fw_paddle import PaddleHelper  # noqa: E402

# paddle's BatchNorm warns on every training call, whatever the caller does (paddle/nn/layer/norm.py)
pytestmark = pytest.mark.filterwarnings("ignore:When training, we now always track global mean:UserWarning")

SUITE = Path(__file__).resolve().parents[1] / "src" / "modelci" / "zoo" / "paddle"
HELPER = PaddleHelper()


def _load_suite(folder: Path) -> list[type[Workload]]:
    """Import each suite file by path, as the harness does, and return the Workload classes it defines."""
    found = []
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        module_name = f"_modelci_suite_paddle_{path.stem}"
        module = sys.modules.get(module_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
        found += [
            obj
            for _, obj in inspect.getmembers(module, inspect.isclass)
            if issubclass(obj, Workload) and obj is not Workload and obj.__module__ == module_name
        ]
    return found


WORKLOADS = _load_suite(SUITE)
FORMAT_CASES = [(cls, fmt) for cls in WORKLOADS for fmt in cls.formats]


def _ids(value):
    return value.__name__ if isinstance(value, type) else str(value)


def _fresh(cls: type[Workload], tmp: Path, seed: int = 0) -> tuple[Workload, Context]:
    """A new instance after `setup`, seeded and made deterministic the way the harness does it."""
    HELPER.seed(seed)
    HELPER.set_determinism(True)
    ctx = Context(seed=seed, scratch=tmp)
    workload = cls()
    workload.setup(ctx)
    return workload, ctx


def _train(cls: type[Workload], tmp: Path, seed: int = 0):
    """A trained instance, its context, its loss per step and its inference outputs."""
    workload, ctx = _fresh(cls, tmp, seed)
    losses = [workload.train_step(ctx, step) for step in range(cls.steps)]
    return workload, ctx, losses, workload.infer(ctx)


@cache
def _trained(cls: type[Workload]):
    """`_train` once per workload class, shared by the tests that only read the result."""
    import tempfile

    return _train(cls, Path(tempfile.mkdtemp(prefix="modelci-zoo-paddle-")))


def _assert_same_outputs(expected: dict, actual: dict) -> None:
    assert expected.keys() == actual.keys()
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


@pytest.mark.parametrize("cls", WORKLOADS, ids=_ids)
def test_workload_declares_the_contract(cls):
    assert cls.framework == "paddle"
    assert cls.domain in {"vision", "nlp", "generative"}
    assert cls.steps >= 10
    assert any(req.startswith("paddlepaddle") for req in cls.requires)
    assert set(cls.formats) <= set(HELPER.formats)


@pytest.mark.parametrize("cls", WORKLOADS, ids=_ids)
def test_training_is_finite_and_learns(cls):
    _, _, losses, _ = _trained(cls)
    assert len(losses) == cls.steps
    assert all(isinstance(loss, float) and math.isfinite(loss) for loss in losses)
    if cls.domain != "generative":  # a GAN's losses chase each other; finite is all we ask
        assert np.mean(losses[-3:]) < np.mean(losses[:3])


@pytest.mark.parametrize("cls", WORKLOADS, ids=_ids)
def test_outputs_are_finite_arrays_and_infer_is_pure(cls):
    workload, ctx, _, outputs = _trained(cls)
    assert outputs
    for name, value in outputs.items():
        assert isinstance(value, np.ndarray), name
        assert np.isfinite(value).all(), name
    _assert_same_outputs(outputs, workload.infer(ctx))


@pytest.mark.parametrize("cls", WORKLOADS, ids=_ids)
def test_same_seed_gives_identical_losses_and_outputs(cls, tmp_path):
    _, _, losses, outputs = _trained(cls)
    _, _, again_losses, again_outputs = _train(cls, tmp_path)
    assert again_losses == losses
    _assert_same_outputs(outputs, again_outputs)


@pytest.mark.parametrize("cls", WORKLOADS, ids=_ids)
def test_another_seed_gives_other_losses(cls, tmp_path):
    _, _, losses, _ = _trained(cls)
    _, _, other, _ = _train(cls, tmp_path, seed=1)
    assert other != losses


@pytest.mark.parametrize(("cls", "fmt"), FORMAT_CASES, ids=_ids)
def test_format_round_trips_into_a_fresh_instance(cls, fmt, tmp_path):
    reason = HELPER.supports(fmt)
    if reason:
        pytest.skip(reason)
    trained, ctx, _, outputs = _trained(cls)
    path = tmp_path / f"model.{fmt}"
    HELPER.save(trained, ctx, fmt, path)
    assert path.exists()
    _assert_same_outputs(outputs, trained.infer(ctx))  # saving must not disturb the trained model

    fresh, fresh_ctx = _fresh(cls, tmp_path, seed=0)
    loaded = HELPER.load(fresh, fresh_ctx, fmt, path)
    assert fresh.model is loaded
    _assert_same_outputs(outputs, fresh.infer(fresh_ctx))


def test_both_formats_are_flagged_unsafe():
    # both unpickle on load: paddle.load the whole file, paddle.jit.load a pre-PIR model.pdiparams.info
    assert set(HELPER.unsafe_formats) == {"paddle_state", "paddle_jit"}


def test_a_state_dict_that_does_not_fit_is_refused(tmp_path):
    cls = next(c for c in WORKLOADS if c.__name__ == "LeNet")
    fresh, ctx = _fresh(cls, tmp_path)
    paddle.save({"conv1.weight": paddle.zeros([1])}, str(tmp_path / "other.pdparams"))
    with pytest.raises(ValueError, match="does not fit"):
        HELPER.load(fresh, ctx, "paddle_state", tmp_path / "other.pdparams")


def test_supports_names_the_reason():
    assert HELPER.supports("paddle_state") is None
    assert "no format" in HELPER.supports("onnx")


def test_set_determinism_tolerates_flags_this_build_lacks():
    HELPER.set_determinism(True)
    HELPER.set_determinism(False)
    HELPER.set_determinism(True)


def test_versions_and_to_numpy():
    versions = HELPER.versions()
    assert versions["paddle"] == paddle.__version__
    assert versions["numpy"] == np.__version__
    tensor = paddle.ones([2]) * 2
    tensor.stop_gradient = False
    np.testing.assert_array_equal(HELPER.to_numpy(tensor * 1), np.array([2.0, 2.0], dtype=np.float32))
    assert HELPER.peak_device_memory() is None or HELPER.peak_device_memory() >= 0
    HELPER.synchronize()


def test_paddle_jit_loads_a_program_saved_before_pir(tmp_path):
    guard = getattr(getattr(paddle, "pir_utils", None), "DygraphOldIrGuard", None)
    if guard is None:
        pytest.skip(f"paddle {paddle.__version__} writes the old program format anyway")
    cls = next(c for c in WORKLOADS if c.__name__ == "LeNet")
    trained, ctx, _, outputs = _trained(cls)
    with guard():  # what paddle 2.6 writes: model.pdmodel, no model.json
        HELPER.save(trained, ctx, "paddle_jit", tmp_path / "legacy")
    assert (tmp_path / "legacy" / "model.pdmodel").exists()
    assert not (tmp_path / "legacy" / "model.json").exists()
    fresh, fresh_ctx = _fresh(cls, tmp_path)
    HELPER.load(fresh, fresh_ctx, "paddle_jit", tmp_path / "legacy")
    _assert_same_outputs(outputs, fresh.infer(fresh_ctx))
