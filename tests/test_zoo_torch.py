"""Drive every zoo:torch workload in-process, without the harness: determinism, training, formats, DDP."""

from __future__ import annotations

import importlib.util
import inspect
import math
import socket
import sys
from functools import cache
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from modelci.workload.api import Context, Workload  # noqa: E402
from modelci.workload.fw_torch import TorchHelper  # noqa: E402

SUITE = Path(__file__).resolve().parents[1] / "src" / "modelci" / "zoo" / "torch"
HELPER = TorchHelper()


def _load_suite(folder: Path) -> list[type[Workload]]:
    """Import each suite file by path, as the harness does, and return the Workload classes it defines."""
    found = []
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        module_name = f"_modelci_suite_torch_{path.stem}"
        module = sys.modules.get(module_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(spec)
            # registered so that pickle (torch_pickle) can find the classes again
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
        found += [
            obj
            for _, obj in inspect.getmembers(module, inspect.isclass)
            if issubclass(obj, Workload) and obj is not Workload and obj.__module__ == module_name
        ]
    return found


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One intra-op thread: on a busy 2-core runner, OpenMP spinning makes two threads ~10x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


WORKLOADS = _load_suite(SUITE)
MULTI = [cls for cls in WORKLOADS if cls.devices > 1]
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

    return _train(cls, Path(tempfile.mkdtemp(prefix="modelci-zoo-torch-")))


def _assert_same_outputs(expected: dict, actual: dict) -> None:
    assert expected.keys() == actual.keys()
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


@pytest.mark.parametrize("cls", WORKLOADS, ids=_ids)
def test_workload_declares_the_contract(cls):
    assert cls.framework == "torch"
    assert cls.domain in {"vision", "nlp", "generative", "speech", "recommendation", "multi-device"}
    assert cls.steps >= 10
    assert any(req.startswith("torch") for req in cls.requires)
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


def test_torch_pickle_round_trips_and_is_flagged_unsafe(tmp_path):
    cls = next(c for c in WORKLOADS if c.__name__ == "LeNet")
    trained, ctx, _, outputs = _trained(cls)
    HELPER.save(trained, ctx, "torch_pickle", tmp_path / "model.pt")
    fresh, fresh_ctx = _fresh(cls, tmp_path)
    HELPER.load(fresh, fresh_ctx, "torch_pickle", tmp_path / "model.pt")
    _assert_same_outputs(outputs, fresh.infer(fresh_ctx))
    # state_dict is read with weights_only=True; every other torch format can run code on load
    assert set(HELPER.unsafe_formats) == set(HELPER.formats) - {"state_dict"}


class _Payload:
    """Something that is not a tensor: weights_only loading must refuse to build it."""


def test_state_dict_is_loaded_with_weights_only(tmp_path):
    cls = next(c for c in WORKLOADS if c.__name__ == "LeNet")
    fresh, ctx = _fresh(cls, tmp_path)
    torch.save({"conv1.weight": _Payload()}, tmp_path / "evil.pt")
    with pytest.raises(Exception, match="(?i)weights_only|unpickl"):
        HELPER.load(fresh, ctx, "state_dict", tmp_path / "evil.pt")


def test_supports_names_the_reason(monkeypatch):
    assert HELPER.supports("state_dict") is None
    assert "no format" in HELPER.supports("onnx")
    monkeypatch.setattr(torch, "__version__", "2.0.1")
    assert "torch>=2.1" in HELPER.supports("torch_export")


def test_versions_and_to_numpy():
    versions = HELPER.versions()
    assert versions["torch"] == torch.__version__
    assert versions["numpy"] == np.__version__
    tensor = torch.ones(2, requires_grad=True) * 2
    np.testing.assert_array_equal(HELPER.to_numpy(tensor), np.array([2.0, 2.0], dtype=np.float32))
    assert HELPER.peak_device_memory() is None or HELPER.peak_device_memory() >= 0
    HELPER.synchronize()


# -- multi-device: two gloo ranks with half batches each must match one process on the full batch --


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank_main(rank: int, world_size: int, port: int, class_name: str, out: str) -> None:
    """Body of one spawned rank: join the gloo group, train, and let rank 0 write its losses."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        torch.set_num_threads(1)
        cls = next(c for c in _load_suite(SUITE) if c.__name__ == class_name)
        HELPER.seed(0)
        HELPER.set_determinism(True)
        ctx = Context(seed=0, rank=rank, world_size=world_size, scratch=Path(out).parent)
        workload = cls()
        workload.setup(ctx)
        losses = [workload.train_step(ctx, step) for step in range(cls.steps)]
        outputs = workload.infer(ctx)
        if rank == 0:
            np.savez(out, losses=np.array(losses), **outputs)
    finally:
        HELPER.shutdown_distributed()


def test_data_parallel_skips_a_batch_that_does_not_split(tmp_path):
    from modelci.workload.api import SkipWorkload

    cls = next(c for c in MULTI if c.__name__ == "DataParallelMLP")
    with pytest.raises(SkipWorkload, match="does not split"):
        cls().setup(Context(seed=0, rank=0, world_size=3, scratch=tmp_path))


@pytest.mark.slow
@pytest.mark.skipif(not MULTI, reason="no multi-device workload")
@pytest.mark.parametrize("cls", MULTI, ids=_ids)
def test_data_parallel_matches_one_process_on_the_full_batch(cls, tmp_path):
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    out = tmp_path / "rank0.npz"
    mp.spawn(_rank_main, args=(cls.devices, _free_port(), cls.__name__, str(out)), nprocs=cls.devices, join=True)
    with np.load(out) as ranked:
        ranked = {key: ranked[key] for key in ranked.files}

    single, ctx = _fresh(cls, tmp_path)
    single_losses = [single.train_step(ctx, step) for step in range(cls.steps)]
    single_outputs = single.infer(ctx)
    np.testing.assert_allclose(ranked.pop("losses"), single_losses, rtol=1e-5)
    for name, value in single_outputs.items():
        np.testing.assert_allclose(ranked[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    assert single_losses[-1] < single_losses[0]


def test_to_numpy_widens_bfloat16():
    value = HELPER.to_numpy(torch.tensor([1.5, -2.0], dtype=torch.bfloat16))
    assert value.dtype == np.float32
    np.testing.assert_array_equal(value, [1.5, -2.0])


def test_both_torchscript_modes_are_covered():
    modes = {getattr(cls, "jit_mode", "trace") for cls in WORKLOADS if "torchscript" in cls.formats}
    assert modes == {"trace", "script"}
