"""A small multi-layer perceptron trained with Adam on synthetic data, in paddle: your first modelci workload.

The data are drawn with numpy from `ctx.seed` (nothing is downloaded), so they are the same in every paddle
version, and a change between builds is the build's. Copy this file to add a model of your own.
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import nn

import modelci


class MLPClassifier(modelci.Workload):
    """Two hidden layers with GELU and LayerNorm, classifying Gaussian class clusters."""

    framework = "paddle"  # seeding, determinism, to-numpy and the paddle save/load helpers
    domain = "tabular"
    steps = 20  # recorded training steps: each is one loss value on the curve
    formats = ("paddle_state", "paddle_jit")  # saved models that later builds must still load (`modelci compat`)

    classes, features, batch = 4, 16, 64

    def setup(self, ctx: modelci.Context) -> None:
        rng = np.random.RandomState(ctx.seed)
        centers = rng.standard_normal((self.classes, self.features)) * 2.0
        labels = rng.randint(0, self.classes, self.steps * self.batch + 128)
        x = centers[labels] + rng.standard_normal((len(labels), self.features))
        self.x, self.labels = paddle.to_tensor(x.astype("float32")), paddle.to_tensor(labels.astype("int64"))
        self.model = self.build_model()  # the helpers save and load `self.model`
        self.optimizer = paddle.optimizer.Adam(learning_rate=1e-2, parameters=self.model.parameters())

    def build_model(self) -> nn.Layer:
        """A fresh model, which a saved state dict is loaded into."""
        return nn.Sequential(nn.Linear(self.features, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 32),
                             nn.GELU(), nn.Linear(32, self.classes))

    def example_inputs(self) -> tuple:
        """What `infer` feeds the model; `paddle_jit` builds its input spec from it."""
        return (self.x[-128:],)

    def train_step(self, ctx: modelci.Context, step: int) -> float:
        start = step * self.batch
        self.model.train()
        loss = F.cross_entropy(self.model(self.x[start:start + self.batch]), self.labels[start:start + self.batch])
        self.optimizer.clear_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def infer(self, ctx: modelci.Context) -> dict:
        self.model.eval()
        with paddle.no_grad():
            logits = self.model(*self.example_inputs())
        return {"logits": logits.numpy(), "predictions": logits.argmax(axis=1).numpy()}
