"""A small convolutional network telling synthetic shapes apart, with jax.lax convolutions and pooling."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _common import JaxWorkload, Model, cross_entropy, dense, filled, normal, rng

from modelci import Context

#: image layout NCHW, kernels OIHW, as torch and paddle lay them out
DIMENSIONS = ("NCHW", "OIHW", "NCHW")


def conv(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """A 3x3 convolution with 'same' padding, plus bias."""
    y = jax.lax.conv_general_dilated(x, params["w"], (1, 1), "SAME", dimension_numbers=DIMENSIONS)
    return y + params["b"][None, :, None, None]


def max_pool(x: jax.Array) -> jax.Array:
    """2x2 max pooling with stride 2."""
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def cnn_apply(params: dict[str, Any], images: jax.Array) -> jax.Array:
    """Logits of conv-relu-pool, conv-relu-pool, global average, dense."""
    x = max_pool(jax.nn.relu(conv(params["conv1"], images)))
    x = max_pool(jax.nn.relu(conv(params["conv2"], x)))
    return x.mean(axis=(2, 3)) @ params["out"]["w"] + params["out"]["b"]


def conv_params(generator: np.random.Generator, c_in: int, c_out: int) -> dict[str, jax.Array]:
    """He-normal 3x3 kernels and zero bias."""
    return {"w": normal(generator, (c_out, c_in, 3, 3), np.sqrt(2.0 / (9 * c_in))),
            "b": filled((c_out,), 0.0)}


def shapes(generator: np.random.Generator, count: int, size: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Noisy 1-channel images of a horizontal bar (0), a vertical bar (1) or a square (2) at a random place."""
    labels = generator.integers(0, 3, count).astype(np.int32)
    corner = generator.integers(2, size - 8, (count, 2))
    rows = np.arange(size)[None, :, None] - corner[:, 0, None, None]
    cols = np.arange(size)[None, None, :] - corner[:, 1, None, None]
    hbar = (rows >= 2) & (rows < 4) & (cols >= 0) & (cols < 6)
    vbar = (cols >= 2) & (cols < 4) & (rows >= 0) & (rows < 6)
    square = (rows >= 0) & (rows < 5) & (cols >= 0) & (cols < 5)
    image = np.where(labels[:, None, None] == 0, hbar, np.where(labels[:, None, None] == 1, vbar, square))
    noise = 0.3 * generator.standard_normal((count, 1, size, size))
    return (image[:, None] + noise).astype(np.float32), labels


class SmallCNN(JaxWorkload):
    """Two conv-pool stages (8 and 16 channels) and a dense classifier over three synthetic shapes, trained with
    cross-entropy and Adam."""

    domain = "vision"
    steps = 20

    def build_model(self) -> Model:
        weights = rng(self.seed, 1)
        params = {"conv1": conv_params(weights, 1, 8), "conv2": conv_params(weights, 8, 16),
                  "out": dense(weights, 16, 3)}
        return Model(cnn_apply, params)

    def setup(self, ctx: Context) -> None:
        self.seed = ctx.seed
        self.images, self.labels = shapes(rng(ctx.seed, 0), 256)
        self.test_images, _ = shapes(rng(ctx.seed, 2), 16)
        self.model = self.build_model()
        self.start_training()

    def loss(self, params: Any, images: jax.Array, labels: jax.Array) -> jax.Array:
        return cross_entropy(cnn_apply(params, images), labels)

    def batch(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        start = (step * 64) % self.images.shape[0]
        return self.images[start:start + 64], self.labels[start:start + 64]

    def example_inputs(self) -> tuple[np.ndarray]:
        return (self.test_images,)

    def infer(self, ctx: Context) -> dict[str, np.ndarray]:
        return {"logits": self.predict()}
