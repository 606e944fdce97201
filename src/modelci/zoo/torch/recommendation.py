"""zoo:torch recommendation workload: a DLRM-style click model (embedding bags, MLPs, dot interactions).

Clicks come from a hidden random "teacher" model of the same features, so there is signal to learn.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from _common import TorchWorkload


class _DLRMNet(nn.Module):
    """Bottom MLP on dense features, one sum-EmbeddingBag per categorical feature, pairwise dot
    products between all those vectors, and a top MLP that turns them into a click logit."""

    def __init__(self, dense: int, tables: int, rows: int, width: int = 8) -> None:
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(dense, 16), nn.ReLU(), nn.Linear(16, width), nn.ReLU())
        self.embeddings = nn.ModuleList(nn.EmbeddingBag(rows, width, mode="sum") for _ in range(tables))
        vectors = tables + 1
        self.register_buffer("pairs", torch.triu_indices(vectors, vectors, 1), persistent=False)
        self.top = nn.Sequential(nn.Linear(width + vectors * (vectors - 1) // 2, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, dense: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """`indices[t]` holds table t's ids for the whole batch, cut into bags by the shared `offsets`."""
        bottom = self.bottom(dense)
        vectors = [bottom] + [bag(indices[t], offsets) for t, bag in enumerate(self.embeddings)]
        stacked = torch.stack(vectors, 1)
        dots = torch.bmm(stacked, stacked.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([bottom, dots], 1)).squeeze(1)


def _click_log(seed: int, count: int, dense: int, tables: int, rows: int, per_bag: int):
    """Dense features, per-table bag ids with their offsets, and clicks drawn from a random teacher."""
    gen = torch.Generator().manual_seed(seed)
    features = torch.randn(count, dense, generator=gen)
    indices = torch.randint(0, rows, (tables, count * per_bag), generator=gen)
    offsets = torch.arange(0, count * per_bag, per_bag)
    row_weight = torch.randn(tables, rows, generator=gen)
    dense_weight = torch.randn(dense, generator=gen)
    score = features @ dense_weight / dense**0.5
    score = score + row_weight.gather(1, indices).view(tables, count, per_bag).sum((0, 2)) / (tables * per_bag) ** 0.5
    clicks = (score + 0.3 * torch.randn(count, generator=gen) > 0).float()
    return features, indices, offsets, clicks


class DLRMMini(TorchWorkload):
    """DLRM-style click-through model with three embedding-bag tables, trained with Adagrad."""

    domain = "recommendation"
    steps = 20
    dense, tables, rows, per_bag = 8, 3, 50, 4

    def build_model(self) -> nn.Module:
        return _DLRMNet(self.dense, self.tables, self.rows).to(self.device)

    def setup(self, ctx) -> None:
        self.device = torch.device(ctx.device)
        features, indices, offsets, clicks = _click_log(ctx.seed, 256, self.dense, self.tables, self.rows, self.per_bag)
        self.batches = []
        for start in (0, 64, 128, 192):  # the last batch is held out for infer
            ids = indices[:, start * self.per_bag : (start + 64) * self.per_bag]
            batch = (features[start : start + 64], ids, offsets[:64], clicks[start : start + 64])
            self.batches.append(tuple(t.to(self.device) for t in batch))
        self.model = self.build_model()
        self.optimizer = torch.optim.Adagrad(self.model.parameters(), lr=0.05)

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """The held-out batch (dense features, ids, offsets), which `infer` feeds the model."""
        return self.batches[-1][:3]

    def train_step(self, ctx, step: int) -> float:
        self.model.train()
        *inputs, clicks = self.batches[step % 3]
        return self.optimize(F.binary_cross_entropy_with_logits(self.model(*inputs), clicks))

    def infer(self, ctx) -> dict:
        logits = self.predict()
        return {"logits": logits.detach().cpu().numpy(), "click_probability": torch.sigmoid(logits).cpu().numpy()}
