"""Drive every zoo:paddle workload in-process, without the harness: determinism, training, formats."""

from __future__ import annotations

import warnings

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

from modelci.workload.fw_paddle import PaddleHelper  # noqa: E402
from zoo_contract import Zoo, ZooContract, assert_same_outputs, run_probe  # noqa: E402

# paddle's BatchNorm warns on every training call, whatever the caller does (paddle/nn/layer/norm.py)
pytestmark = pytest.mark.filterwarnings("ignore:When training, we now always track global mean:UserWarning")

HELPER = PaddleHelper()
ZOO = Zoo("paddle", HELPER)


class TestPaddleZoo(ZooContract):
    zoo = ZOO
    domains = {"vision", "nlp", "generative"}
    requirement = "paddlepaddle"


def test_both_formats_are_flagged_unsafe():
    # both unpickle on load: paddle.load the whole file, paddle.jit.load a pre-PIR model.pdiparams.info
    assert set(HELPER.unsafe_formats) == {"paddle_state", "paddle_jit"}


def test_a_state_dict_that_does_not_fit_is_refused(tmp_path):
    fresh, ctx = ZOO.fresh(ZOO.named("LeNet"), tmp_path)
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
    cls = ZOO.named("LeNet")
    trained, ctx, _, outputs = ZOO.trained(cls)
    with guard():  # what paddle 2.6 writes: model.pdmodel, no model.json
        HELPER.save(trained, ctx, "paddle_jit", tmp_path / "legacy")
    assert (tmp_path / "legacy" / "model.pdmodel").exists()
    assert not (tmp_path / "legacy" / "model.json").exists()
    fresh, fresh_ctx = ZOO.fresh(cls, tmp_path)
    HELPER.load(fresh, fresh_ctx, "paddle_jit", tmp_path / "legacy")
    assert_same_outputs(outputs, fresh.infer(fresh_ctx))


WARM_UP_PROBE = """
import json, sys
import paddle
import zoo_contract
from modelci.workload import fw_paddle

helper = fw_paddle.PaddleHelper()
helper.seed(3)
helper.set_determinism(True)
if sys.argv[1] == "warm":
    helper.warm_up()
    helper.warm_up()  # once per process
drawn = paddle.rand([4]).tolist()
name = paddle.nn.Linear(2, 2).weight.name
imported = zoo_contract.modules_each_forked_workload_imports("paddle", helper)
print(json.dumps({"drawn": drawn, "name": name, "imported": imported}))
"""


def test_warm_up_changes_no_draw_or_name_and_leaves_nothing_for_a_workload_to_import(tmp_path):
    """After PaddleHelper.warm_up, a forked workload imports nothing more (the first paddle.jit.save
    imported 95 modules in every child), and the workload draws the same random numbers and gets the same
    parameter names as without the warm-up."""
    cold, warm = (run_probe(WARM_UP_PROBE, mode, cwd=tmp_path) for mode in ("cold", "warm"))
    assert warm["drawn"] == cold["drawn"] and warm["name"] == cold["name"]
    assert len(warm["imported"]) >= 5
    assert warm["imported"] == {name: [] for name in warm["imported"]}
    assert any(cold["imported"].values())  # what the warm-up spares them
