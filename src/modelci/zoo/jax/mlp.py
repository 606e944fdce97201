"""A three-layer perceptron classifying points of interleaved spirals, in plain JAX."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _common import JaxWorkload, Model, cross_entropy, dense, rng

from modelci import Context


def mlp_apply(params: dict[str, Any], x: jax.Array) -> jax.Array:
    """Logits of a 2-64-64-3 tanh perceptron."""
    for name in ("hidden1", "hidden2"):
        x = jnp.tanh(x @ params[name]["w"] + params[name]["b"])
    return x @ params["out"]["w"] + params["out"]["b"]


def spirals(generator: np.random.Generator, n_per_class: int, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Noisy spiral arms, one per class, shuffled: a task no linear model can solve."""
    radius = np.tile(np.linspace(0.05, 1.0, n_per_class), n_classes)
    labels = np.repeat(np.arange(n_classes, dtype=np.int32), n_per_class)
    angle = labels * (2 * np.pi / n_classes) + radius * 4.0 + 0.2 * generator.standard_normal(radius.shape)
    points = np.stack([radius * np.sin(angle), radius * np.cos(angle)], axis=1).astype(np.float32)
    order = generator.permutation(labels.shape[0])
    return points[order], labels[order]


class MLPClassifier(JaxWorkload):
    """A 2-64-64-3 perceptron trained with softmax cross-entropy and Adam on mini-batches, as a tabular
    classifier is."""

    domain = "tabular"
    steps = 30
    n_classes = 3
    hidden = 64
    batch_size = 96
    learning_rate = 2e-2

    def build_model(self) -> Model:
        weights = rng(self.seed, 1)
        sizes = (2, self.hidden, self.hidden, self.n_classes)
        params = {name: dense(weights, fan_in, fan_out)
                  for name, fan_in, fan_out in zip(("hidden1", "hidden2", "out"), sizes, sizes[1:])}
        return Model(mlp_apply, params)

    def setup(self, ctx: Context) -> None:
        self.seed = ctx.seed
        self.points, self.labels = spirals(rng(ctx.seed, 0), 160, self.n_classes)
        self.test_points, _ = spirals(rng(ctx.seed, 2), 32, self.n_classes)
        self.model = self.build_model()
        self.start_training()

    def loss(self, params: Any, points: jax.Array, labels: jax.Array) -> jax.Array:
        return cross_entropy(mlp_apply(params, points), labels)

    def batch(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        start = (step * self.batch_size) % (self.points.shape[0] - self.batch_size)
        return self.points[start:start + self.batch_size], self.labels[start:start + self.batch_size]

    def example_inputs(self) -> tuple[np.ndarray]:
        return (self.test_points,)

    def infer(self, ctx: Context) -> dict[str, np.ndarray]:
        logits = self.predict()
        return {"logits": logits, "classes": logits.argmax(axis=1)}
