"""zoo:torch multi-device workload: data-parallel training with DistributedDataParallel over gloo.

Each of `ctx.world_size` ranks trains on its own slice of one global batch; DDP averages the
gradients, so the loss curve must match one process trained on the whole batch. The model has
no BatchNorm, whose per-rank statistics would break that equivalence.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from modelci import SkipWorkload

from _common import TorchWorkload


class _MLP(nn.Module):
    """A three-layer MLP classifier with GELU and LayerNorm (both per-sample, so rank-independent)."""

    def __init__(self, features: int, classes: int, hidden: int = 64) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(features, hidden),
            nn.LayerNorm(hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class DataParallelMLP(TorchWorkload):
    """An MLP trained with DDP on `devices = 2` ranks (gloo on CPU); one rank falls back to plain training."""

    domain = "multi-device"
    devices = 2
    steps = 12
    jit_mode = "script"  # TorchScript by compiling the code; the other workloads trace
    features, classes, global_batch = 16, 4, 64

    def build_model(self) -> nn.Module:
        return _MLP(self.features, self.classes).to(self.device)

    def setup(self, ctx) -> None:
        import torch.distributed as dist

        self.device = torch.device(ctx.device)
        self.world_size = ctx.world_size
        if self.global_batch % ctx.world_size:
            raise SkipWorkload(f"global batch {self.global_batch} does not split over {ctx.world_size} ranks")
        # every rank builds the same full data set from the seed and keeps its own slice of each batch
        gen = torch.Generator().manual_seed(ctx.seed)
        teacher = torch.randn(self.features, self.classes, generator=gen)
        inputs = torch.randn(self.global_batch * 2 + 32, self.features, generator=gen)
        labels = (inputs @ teacher + 0.5 * torch.randn(len(inputs), self.classes, generator=gen)).argmax(1)
        shard = self.global_batch // ctx.world_size
        self.batches = []
        for start in (0, self.global_batch):
            lo = start + ctx.rank * shard
            self.batches.append((inputs[lo : lo + shard].to(self.device), labels[lo : lo + shard].to(self.device)))
        self.eval_inputs = inputs[2 * self.global_batch :].to(self.device)

        self.model = self.build_model()
        self.trained = self.model
        if ctx.world_size > 1:
            if not (dist.is_available() and dist.is_initialized()):
                raise RuntimeError(
                    f"world_size={ctx.world_size} but torch.distributed is not initialised; "
                    "the harness must call init_process_group before setup"
                )
            device_ids = [self.device.index or 0] if self.device.type == "cuda" else None
            self.trained = nn.parallel.DistributedDataParallel(self.model, device_ids=device_ids)
        self.optimizer = torch.optim.SGD(self.trained.parameters(), lr=0.1, momentum=0.9)

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """The held-out inputs, the same on every rank, which `infer` feeds the model."""
        return (self.eval_inputs,)

    def train_step(self, ctx, step: int) -> float:
        import torch.distributed as dist

        self.trained.train()
        inputs, labels = self.batches[step % 2]
        loss = F.cross_entropy(self.trained(inputs), labels)
        self.optimize(loss)  # DDP all-reduces and averages the gradients during its backward pass
        loss = loss.detach()
        if self.world_size > 1:
            # equal shards: the mean of the per-rank means is the loss on the whole batch
            dist.all_reduce(loss)
            loss /= self.world_size
        return loss.item()

    def infer(self, ctx) -> dict:
        return {"logits": self.predict().detach().cpu().numpy()}


class DataParallelMLPReference(DataParallelMLP):
    """The same model and data in one process on the full batch: its loss curve is what the 2-rank run must match."""

    devices = 1


class DataParallelMLPTwoNodes(DataParallelMLP):
    """The same DDP model with its 2 ranks on 2 machines, one rank each (`nodes = 2`): the ranks meet at rank 0's
    node address and gloo's collectives cross the network. Its loss curve must be DataParallelMLP's, whose 2 ranks
    share one machine. It needs a cluster executor (`executor = "ray"`); the local executor skips it."""

    nodes = 2
    devices = 1
