"""A softmax classifier trained by minibatch SGD on synthetic data, in plain numpy: your first modelci workload.

Everything is built from `ctx.seed` (nothing is downloaded), so two runs of the same numpy build give the same
loss curve and outputs, and a change between builds is the build's. Copy this file to add a model of your own.
"""

from __future__ import annotations

import numpy as np

import modelci


class SoftmaxClassifier(modelci.Workload):
    """Multinomial logistic regression on Gaussian class clusters (float32, like most production models)."""

    framework = "numpy"  # seeding and the `npz` save/load helpers
    domain = "tabular"
    steps = 20  # recorded training steps: each is one loss value on the curve
    formats = ("npz",)  # saved models that later numpy versions must still load (`modelci compat`)

    classes, features, batch = 4, 8, 64

    def setup(self, ctx: modelci.Context) -> None:
        rng = np.random.default_rng(ctx.seed)
        centers = rng.standard_normal((self.classes, self.features)) * 2.0
        labels = rng.integers(0, self.classes, self.steps * self.batch + 128)
        x = centers[labels] + rng.standard_normal((len(labels), self.features))
        self.x, self.labels = x.astype(np.float32), labels
        self.weight = np.zeros((self.features, self.classes), dtype=np.float32)
        self.bias = np.zeros(self.classes, dtype=np.float32)

    def _probabilities(self, x: np.ndarray) -> np.ndarray:
        logits = x @ self.weight + self.bias
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        return e / e.sum(axis=1, keepdims=True)

    def train_step(self, ctx: modelci.Context, step: int) -> float:
        rows = slice(step * self.batch, (step + 1) * self.batch)
        x, y = self.x[rows], self.labels[rows]
        p = self._probabilities(x)
        loss = float(-np.mean(np.log(p[np.arange(len(y)), y] + 1e-12)))
        p[np.arange(len(y)), y] -= 1.0
        self.weight -= np.float32(0.5) * (x.T @ p) / len(y)
        self.bias -= np.float32(0.5) * p.mean(axis=0)
        return loss

    def infer(self, ctx: modelci.Context) -> dict[str, np.ndarray]:
        held_out = self.x[-128:]
        probabilities = self._probabilities(held_out)
        return {"probabilities": probabilities, "predictions": probabilities.argmax(axis=1)}

    def state_dict(self) -> dict[str, np.ndarray]:
        """The parameters, as the `npz` format saves them."""
        return {"weight": self.weight.copy(), "bias": self.bias.copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> SoftmaxClassifier:
        """Take the parameters from `state` (as `state_dict` wrote them)."""
        self.weight, self.bias = state["weight"].astype(np.float32), state["bias"].astype(np.float32)
        return self
