"""Drive every zoo:jax workload in-process, without the harness: determinism, training, formats, fork safety."""

from __future__ import annotations

import json
import os

import pytest

jax = pytest.importorskip("jax")
np = pytest.importorskip("numpy")

from modelci.workload.fw_jax import JaxHelper  # noqa: E402
from zoo_contract import Zoo, ZooContract, assert_same_outputs, run_probe  # noqa: E402

HELPER = JaxHelper()
ZOO = Zoo("jax", HELPER)


class TestJaxZoo(ZooContract):
    zoo = ZOO
    domains = {"tabular", "vision", "nlp", "timeseries"}
    requirement = "jax"


def test_the_zoo_holds_an_mlp_a_cnn_a_transformer_block_and_a_recurrent_network():
    assert {cls.__name__ for cls in ZOO.workloads} >= {"MLPClassifier", "SmallCNN", "TransformerBlock",
                                                        "GRUForecaster"}


def test_both_formats_are_safe_and_jax_params_never_unpickles(tmp_path):
    assert HELPER.unsafe_formats == ()
    fresh, ctx = ZOO.fresh(ZOO.named("MLPClassifier"), tmp_path)
    # an object array is stored as a pickle inside the .npz: allow_pickle=False refuses to read it
    with open(tmp_path / "evil.npz", "wb") as fh:
        np.savez(fh, **{"['out']['b']": np.array([object()], dtype=object)})
    with pytest.raises(ValueError, match="(?i)pickle"):
        HELPER.load(fresh, ctx, "jax_params", tmp_path / "evil.npz")


def test_parameters_that_do_not_fit_are_refused(tmp_path):
    cls = ZOO.named("SmallCNN")
    trained, ctx, _, _ = ZOO.trained(cls)
    HELPER.save(trained, ctx, "jax_params", tmp_path / "cnn.npz")
    mlp, mlp_ctx = ZOO.fresh(ZOO.named("MLPClassifier"), tmp_path)
    with pytest.raises(ValueError, match="do not fit the model: missing"):
        HELPER.load(mlp, mlp_ctx, "jax_params", tmp_path / "cnn.npz")
    # the same names with another shape are refused too, naming the parameter
    data = dict(np.load(tmp_path / "cnn.npz"))
    data["['out']['w']"] = np.zeros((3, 3), np.float32)
    with open(tmp_path / "reshaped.npz", "wb") as fh:
        np.savez(fh, **data)
    fresh, fresh_ctx = ZOO.fresh(cls, tmp_path)
    with pytest.raises(ValueError, match=r"parameter \['out'\]\['w'\] .* is float32\[3, 3\]"):
        HELPER.load(fresh, fresh_ctx, "jax_params", tmp_path / "reshaped.npz")


def test_jax_export_is_a_program_and_arrays_that_run_without_the_workload_code(tmp_path):
    """The exported folder is what another process loads: the program runs with the parameters saved beside it,
    not the fresh instance's own (untrained) ones."""
    cls = ZOO.named("TransformerBlock")
    trained, ctx, _, outputs = ZOO.trained(cls)
    HELPER.save(trained, ctx, "jax_export", tmp_path / "export")
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == ["layout.json", "params.npz", "program.bin"]
    exported = jax.export.deserialize(bytearray((tmp_path / "export" / "program.bin").read_bytes()))
    assert "stablehlo" in exported.mlir_module()
    fresh, fresh_ctx = ZOO.fresh(cls, tmp_path)
    untrained = fresh.infer(fresh_ctx)["logits"]
    assert not np.array_equal(untrained, outputs["logits"])
    loaded = HELPER.load(fresh, fresh_ctx, "jax_export", tmp_path / "export")
    assert type(loaded).__name__ == "_ExportedModel" and fresh.model is loaded
    assert_same_outputs(outputs, fresh.infer(fresh_ctx))


def test_a_jax_export_of_another_layout_is_refused(tmp_path):
    cls = ZOO.named("GRUForecaster")
    trained, ctx, _, _ = ZOO.trained(cls)
    HELPER.save(trained, ctx, "jax_export", tmp_path / "export")
    (tmp_path / "export" / "layout.json").write_text(json.dumps({"layout": 99, "leaves": 1}))
    fresh, fresh_ctx = ZOO.fresh(cls, tmp_path)
    with pytest.raises(ValueError, match="layout 99"):
        HELPER.load(fresh, fresh_ctx, "jax_export", tmp_path / "export")


def test_supports_names_the_reason():
    assert HELPER.supports("jax_params") is None and HELPER.supports("jax_export") is None
    assert "no format 'onnx'" in HELPER.supports("onnx")


def test_versions_probe_and_to_numpy():
    versions = HELPER.versions()
    assert versions["jax"] == jax.__version__ and versions["jax.backend"] == "cpu"
    assert versions["jaxlib"] and versions["numpy"] == np.__version__
    facts = HELPER.probe()
    assert facts["version"] == jax.__version__ and facts["backend"] == "cpu" and facts["devices"]
    value = HELPER.to_numpy(jax.numpy.arange(3.0) * 2)
    assert isinstance(value, np.ndarray)
    np.testing.assert_array_equal(value, [0.0, 2.0, 4.0])
    assert HELPER.fork_hazard() == ""  # a CPU client: only its threads stop the fork (below)


def test_set_determinism_adds_and_removes_its_xla_flag_only(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
    HELPER.set_determinism(True)
    HELPER.set_determinism(True)
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=1 --xla_gpu_deterministic_ops=true"
    HELPER.set_determinism(False)
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=1"


THREADS_PROBE = """
import json, os, sys
from modelci.workload import worker

def count():
    return len(os.listdir("/proc/self/task"))

found = {"start": count()}
error = worker.preload(["jax"], [], {})
found["after_import"] = count()
error = error or worker.warm_up("jax", 0)
found["after_warm_up"] = count()
found["error"] = error
found["hazard"] = worker.fork_hazard()
print(json.dumps(found))
"""


def test_jax_starts_threads_so_the_worker_spawns_its_children(tmp_path):
    """XLA's CPU client starts its thread pools with the first computation (the warm-up), and jax warns that
    os.fork() with them running can deadlock: the fork worker counts them and spawns every zoo:jax child."""
    found = run_probe(THREADS_PROBE, cwd=tmp_path)
    assert found["error"] == ""
    assert found["after_warm_up"] > found["start"]
    assert "extra thread" in found["hazard"]


def test_the_warm_up_draws_nothing_from_the_seeded_generators(tmp_path):
    script = ("import json, jax\nfrom modelci.workload.fw_jax import JaxHelper\nh = JaxHelper()\nh.seed(3)\n"
              "import random, numpy\n"
              "h.warm_up() if __import__('sys').argv[1] == 'warm' else None\n"
              "print(json.dumps([random.random(), float(numpy.random.rand())]))\n")
    cold, warm = (run_probe(script, mode, cwd=tmp_path) for mode in ("cold", "warm"))
    assert cold == warm
