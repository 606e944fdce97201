"""A small multi-layer perceptron trained by gradient descent on synthetic data, in plain JAX: your first modelci
workload.

Everything is built from `ctx.seed` (nothing is downloaded): the data with numpy, the weights from
`jax.random.key(ctx.seed)`, so two runs of the same jax build give the same loss curve and outputs, and a change
between builds is the build's. Copy this file to add a model of your own.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import modelci


def apply(params: dict[str, Any], x: jax.Array) -> jax.Array:
    """The logits of a two-layer tanh perceptron: a pure function of its parameters, as JAX models are."""
    hidden = jnp.tanh(x @ params["hidden"]["w"] + params["hidden"]["b"])
    return hidden @ params["out"]["w"] + params["out"]["b"]


class Model:
    """What the jax helper saves and loads: the parameters (a pytree of arrays) and the pure `apply`."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params, self.apply = params, apply

    def __call__(self, *inputs: jax.Array) -> jax.Array:
        return self.apply(self.params, *inputs)


def loss_fn(params: dict[str, Any], x: jax.Array, y: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy."""
    logits = apply(params, x)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


@jax.jit
def sgd_step(params: dict[str, Any], x: jax.Array, y: jax.Array) -> tuple[dict[str, Any], jax.Array]:
    """One step of plain gradient descent, compiled once by XLA."""
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - 0.3 * g, params, grads), loss


class MLPClassifier(modelci.Workload):
    """A 16-32-4 perceptron classifying Gaussian class clusters."""

    framework = "jax"  # to-numpy and the jax save/load helpers
    domain = "tabular"
    requires = ["jax"]  # installed next to the target when it does not bring it
    steps = 20  # recorded training steps: each is one loss value on the curve
    formats = ("jax_params",)  # saved models that later builds must still load (`modelci compat`)

    classes, features, batch = 4, 16, 64

    def setup(self, ctx: modelci.Context) -> None:
        self.seed = ctx.seed
        rng = np.random.default_rng(ctx.seed)
        centers = rng.standard_normal((self.classes, self.features)) * 2.0
        labels = rng.integers(0, self.classes, self.steps * self.batch + 128)
        x = centers[labels] + rng.standard_normal((len(labels), self.features))
        self.x, self.labels = jnp.asarray(x, dtype=jnp.float32), jnp.asarray(labels, dtype=jnp.int32)
        self.model = self.build_model()  # the helpers save and load `self.model`

    def build_model(self) -> Model:
        """A freshly initialised model, which saved parameters are loaded into."""
        k1, k2 = jax.random.split(jax.random.key(self.seed))
        return Model({
            "hidden": {"w": jax.random.normal(k1, (self.features, 32)) / jnp.sqrt(self.features),
                       "b": jnp.zeros(32)},
            "out": {"w": jax.random.normal(k2, (32, self.classes)) / jnp.sqrt(32.0), "b": jnp.zeros(self.classes)},
        })

    def example_inputs(self) -> tuple[jax.Array, ...]:
        """What `infer` feeds the model."""
        return (self.x[-128:],)

    def train_step(self, ctx: modelci.Context, step: int) -> float:
        rows = slice(step * self.batch, (step + 1) * self.batch)
        self.model.params, loss = sgd_step(self.model.params, self.x[rows], self.labels[rows])
        return float(loss)

    def infer(self, ctx: modelci.Context) -> dict[str, np.ndarray]:
        logits = self.model(*self.example_inputs())
        return {"logits": np.asarray(logits), "predictions": np.asarray(jnp.argmax(logits, axis=1))}
