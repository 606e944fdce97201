"""A small multi-layer perceptron trained with Adam on synthetic data, in torch: your first modelci workload.

Everything is built from `ctx.seed` (nothing is downloaded), so two runs of the same torch build give the same
loss curve and outputs, and a change between builds is the build's. Copy this file to add a model of your own.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

import modelci


class MLPClassifier(modelci.Workload):
    """Two hidden layers with GELU and LayerNorm, classifying Gaussian class clusters."""

    framework = "torch"  # seeding, determinism, to-numpy and the torch save/load helpers
    domain = "tabular"
    requires = ["torch>=2.0"]  # installed next to the target when it does not bring them
    steps = 20  # recorded training steps: each is one loss value on the curve
    formats = ("state_dict", "torchscript")  # saved models that later builds must still load (`modelci compat`)

    classes, features, batch = 4, 16, 64

    def setup(self, ctx: modelci.Context) -> None:
        gen = torch.Generator().manual_seed(ctx.seed)
        centers = torch.randn(self.classes, self.features, generator=gen) * 2.0
        self.labels = torch.randint(0, self.classes, (self.steps * self.batch + 128,), generator=gen)
        self.x = centers[self.labels] + torch.randn(len(self.labels), self.features, generator=gen)
        self.model = self.build_model()  # the helpers save and load `self.model`
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-2)

    def build_model(self) -> nn.Module:
        """A fresh model, which a saved state_dict is loaded into."""
        return nn.Sequential(nn.Linear(self.features, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 32),
                             nn.GELU(), nn.Linear(32, self.classes))

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """What `infer` feeds the model; torchscript traces with it."""
        return (self.x[-128:],)

    def train_step(self, ctx: modelci.Context, step: int) -> float:
        rows = slice(step * self.batch, (step + 1) * self.batch)
        self.model.train()
        loss = F.cross_entropy(self.model(self.x[rows]), self.labels[rows])
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def infer(self, ctx: modelci.Context) -> dict:
        self.model.eval()
        with torch.no_grad():
            logits = self.model(*self.example_inputs())
        return {"logits": logits.numpy(), "predictions": logits.argmax(dim=1).numpy()}
