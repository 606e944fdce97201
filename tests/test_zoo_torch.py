"""Drive every zoo:torch workload in-process, without the harness: determinism, training, formats, DDP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from modelci.workload.api import Context  # noqa: E402
from modelci.workload.fw_torch import TorchHelper  # noqa: E402
from zoo_contract import Zoo, ZooContract, assert_same_outputs, ids, run_probe  # noqa: E402

HELPER = TorchHelper()
ZOO = Zoo("torch", HELPER)
#: the workloads that run as several ranks: `devices` on each of `nodes` (here all on this machine)
MULTI = [cls for cls in ZOO.workloads if cls.devices * cls.nodes > 1]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One intra-op thread: on a busy 2-core runner, OpenMP spinning makes two threads ~10x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class TestTorchZoo(ZooContract):
    zoo = ZOO
    domains = {"vision", "nlp", "generative", "speech", "recommendation", "multi-device"}
    requirement = "torch"


def test_torch_pickle_loads_as_a_users_plain_torch_load_does_and_is_flagged_unsafe(tmp_path):
    """torch_pickle is read with a plain torch.load, the consumer's own default: torch 2.13 (this venv's) reads
    with weights_only=True and refuses a whole pickled module, as it does for a user; with weights_only=False
    the same file still round-trips, so the refusal is torch's default, not a broken save."""
    cls = ZOO.named("LeNet")
    trained, ctx, _, outputs = ZOO.trained(cls)
    HELPER.save(trained, ctx, "torch_pickle", tmp_path / "model.pt")
    fresh, fresh_ctx = ZOO.fresh(cls, tmp_path)
    with pytest.raises(Exception, match="Weights only load failed"):
        HELPER.load(fresh, fresh_ctx, "torch_pickle", tmp_path / "model.pt")
    fresh.model = torch.load(tmp_path / "model.pt", weights_only=False).eval()
    assert_same_outputs(outputs, fresh.infer(fresh_ctx))
    # state_dict is read with weights_only=True; every other torch format can run code on load
    assert set(HELPER.unsafe_formats) == set(HELPER.formats) - {"state_dict"}


class _Payload:
    """Something that is not a tensor: weights_only loading must refuse to build it."""


def test_state_dict_is_loaded_with_weights_only(tmp_path):
    fresh, ctx = ZOO.fresh(ZOO.named("LeNet"), tmp_path)
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


def _train_rank(rank: int, world_size: int, class_name: str, out: str) -> None:
    """Train one rank; rank 0 writes its losses and outputs. The workload (and the DDP module that holds the
    process group) is freed when this returns, before the group is destroyed."""
    torch.set_num_threads(1)
    cls = ZOO.named(class_name)
    HELPER.seed(0)
    HELPER.set_determinism(True)
    ctx = Context(seed=0, rank=rank, world_size=world_size, scratch=Path(out).parent)
    workload = cls()
    workload.setup(ctx)
    losses = [workload.train_step(ctx, step) for step in range(cls.steps)]
    outputs = workload.infer(ctx)
    if rank == 0:
        np.savez(out, losses=np.array(losses), **outputs)


def _rank_main(rank: int, world_size: int, port: int, class_name: str, out: str) -> None:
    """Body of one spawned rank: join the gloo group, train, leave the group, and exit the way the harness's
    ranks do (child.execute): with os._exit, past interpreter finalization, where gloo's threads can abort the
    process after its work is done. An exception still reaches mp.spawn, which reports it."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        _train_rank(rank, world_size, class_name, out)
    finally:
        HELPER.shutdown_distributed()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def test_data_parallel_skips_a_batch_that_does_not_split(tmp_path):
    from modelci.workload.api import SkipWorkload

    cls = next(c for c in MULTI if c.__name__ == "DataParallelMLP")
    with pytest.raises(SkipWorkload, match="does not split"):
        cls().setup(Context(seed=0, rank=0, world_size=3, scratch=tmp_path))


@pytest.mark.slow
@pytest.mark.skipif(not MULTI, reason="no multi-device workload")
@pytest.mark.parametrize("cls", MULTI, ids=ids)
def test_data_parallel_matches_one_process_on_the_full_batch(cls, tmp_path):
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    out = tmp_path / "rank0.npz"
    ranks = cls.devices * cls.nodes
    mp.spawn(_rank_main, args=(ranks, _free_port(), cls.__name__, str(out)), nprocs=ranks, join=True)
    with np.load(out) as ranked:
        ranked = {key: ranked[key] for key in ranked.files}

    single, ctx = ZOO.fresh(cls, tmp_path)
    single_losses = [single.train_step(ctx, step) for step in range(cls.steps)]
    single_outputs = single.infer(ctx)
    np.testing.assert_allclose(ranked.pop("losses"), single_losses, rtol=1e-5)
    for name, value in single_outputs.items():
        np.testing.assert_allclose(ranked[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    assert single_losses[-1] < single_losses[0]


ABORTS_AT_EXIT = '''\
import atexit
import os
import sys

import modelci.zoo.torch

sys.path.insert(0, modelci.zoo.torch.__path__[0])  # where the zoo's modules find their `_common`
from distributed import DataParallelMLP  # noqa: E402


class AbortsAtExit(DataParallelMLP):
    """Stands for a framework whose threads abort the process in interpreter finalization, after the work."""

    def setup(self, ctx):
        atexit.register(os.abort)
        super().setup(ctx)
'''


@pytest.mark.slow
@pytest.mark.parametrize("ranks", ["fork", "spawn"])
def test_a_rank_that_would_abort_in_interpreter_finalization_does_not_lose_the_finished_run(ranks, tmp_path):
    """The harness's ranks leave with os._exit once their result is written (child.execute): gloo's threads,
    torn down during finalization, aborted a finished 2-rank run in CI (SIGABRT), which made it a crash."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "aborts.py").write_text(ABORTS_AT_EXIT)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "modelci.workload.child", "run", "--suite", f"s={suite}",
                           "--workload", "s/AbortsAtExit", "--out", str(out), "--no-save", "--ranks", ranks],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})  # as `threads = 1` does: fork needs 1
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "ok", (result.get("reason"), result.get("traceback"))
    assert result["info"]["world_size"] == 2
    assert result["info"]["ranks"] == ranks, result["info"].get("ranks_reason")


def test_to_numpy_widens_bfloat16():
    value = HELPER.to_numpy(torch.tensor([1.5, -2.0], dtype=torch.bfloat16))
    assert value.dtype == np.float32
    np.testing.assert_array_equal(value, [1.5, -2.0])


def test_both_torchscript_modes_are_covered():
    modes = {getattr(cls, "jit_mode", "trace") for cls in ZOO.workloads if "torchscript" in cls.formats}
    assert modes == {"trace", "script"}


FIRST_USE_PROBE = """
import json
import zoo_contract
from modelci.workload.fw_torch import TorchHelper

helper = TorchHelper()
helper.seed(0)
helper.set_determinism(True)
helper.warm_up()
print(json.dumps(zoo_contract.modules_each_forked_workload_imports("torch", helper)))
"""


def test_after_the_warm_up_no_workload_imports_a_module(tmp_path):
    """What a forked child imports, it imports again for every workload: after the helper's warm-up,
    training, inference and saving every format import nothing more, for each single-process zoo model."""
    found = run_probe(FIRST_USE_PROBE, cwd=tmp_path)
    assert len(found) >= 7
    assert found == {name: [] for name in found}
