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
from zoo_contract import Zoo, ZooContract, assert_same_outputs  # noqa: E402

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
import json, os, sys, tempfile
from pathlib import Path
import paddle
import modelci
from modelci.workload import fw_paddle
from modelci.workload.api import Context
from modelci.workload.child import import_file, suite_files, workload_classes

helper = fw_paddle.PaddleHelper()
helper.seed(3)
helper.set_determinism(True)
if sys.argv[1] == "warm":
    helper.warm_up()
    helper.warm_up()  # once per process
drawn = paddle.rand([4]).tolist()
name = paddle.nn.Linear(2, 2).weight.name
imported = {}
suite = Path(modelci.__file__).parent / "zoo" / "paddle"
for cls in [c for p in suite_files(suite) for c in workload_classes(import_file(p, "paddle"))]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # as a forked workload child: its whole life after the prologue
        before = set(sys.modules)
        ctx = Context(seed=0, scratch=Path(tempfile.mkdtemp()))
        workload = cls()
        workload.setup(ctx)
        for step in range(int(cls.steps)):
            float(workload.train_step(ctx, step))
        workload.infer(ctx)
        for fmt in cls.formats:
            helper.save(workload, ctx, fmt, ctx.scratch / fmt)
        os.write(write, json.dumps(len(set(sys.modules) - before)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        imported[cls.__name__] = json.loads(fh.read() or "null")
    os.waitpid(pid, 0)
print(json.dumps({"drawn": drawn, "name": name, "imported": imported}))
"""


def test_warm_up_changes_no_draw_or_name_and_leaves_nothing_for_a_workload_to_import(tmp_path):
    """Issue 9: after PaddleHelper.warm_up, a forked workload imports nothing more (the first paddle.jit.save
    imported 95 modules in every child), and the workload draws the same random numbers and gets the same
    parameter names as without the warm-up."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    probes = {}
    for mode in ("cold", "warm"):
        done = subprocess.run([sys.executable, "-c", WARM_UP_PROBE, mode], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        probes[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    cold, warm = probes["cold"], probes["warm"]
    assert warm["drawn"] == cold["drawn"] and warm["name"] == cold["name"]
    assert len(warm["imported"]) >= 5
    assert warm["imported"] == {name: 0 for name in warm["imported"]}
    assert any(count > 0 for count in cold["imported"].values())  # what the warm-up spares them
