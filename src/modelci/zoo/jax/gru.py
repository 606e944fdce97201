"""A GRU forecasting noisy sine waves one step ahead, its recurrence a jax.lax.scan."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _common import JaxWorkload, Model, dense, rng

from modelci import Context


def gru_apply(params: dict[str, Any], series: jax.Array) -> jax.Array:
    """One-step-ahead predictions for series (batch, time, 1): a GRU cell scanned over time, then a dense read-out
    of each hidden state."""
    hidden_size = params["recurrent"]["w"].shape[0]

    def cell(h: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        gates_x = x @ params["input"]["w"] + params["input"]["b"]
        gates_h = h @ params["recurrent"]["w"] + params["recurrent"]["b"]
        zx, rx, nx = jnp.split(gates_x, 3, axis=-1)
        zh, rh, nh = jnp.split(gates_h, 3, axis=-1)
        z, r = jax.nn.sigmoid(zx + zh), jax.nn.sigmoid(rx + rh)
        h = (1 - z) * jnp.tanh(nx + r * nh) + z * h
        return h, h

    h0 = jnp.zeros((series.shape[0], hidden_size), series.dtype)
    _, states = jax.lax.scan(cell, h0, jnp.swapaxes(series, 0, 1))
    return jnp.swapaxes(states, 0, 1) @ params["out"]["w"] + params["out"]["b"]


def waves(generator: np.random.Generator, count: int, length: int) -> np.ndarray:
    """Sine waves of random frequency, phase and amplitude, with a little noise: (count, length, 1)."""
    freq = generator.uniform(0.1, 0.4, (count, 1))
    phase = generator.uniform(0, 2 * np.pi, (count, 1))
    amplitude = generator.uniform(0.5, 1.5, (count, 1))
    clean = amplitude * np.sin(freq * np.arange(length)[None, :] + phase)
    return (clean + 0.05 * generator.standard_normal(clean.shape))[..., None].astype(np.float32)


class GRUForecaster(JaxWorkload):
    """A 24-unit GRU over 32-step series and a linear read-out, trained on the mean squared one-step-ahead error
    with Adam."""

    domain = "timeseries"
    steps = 20
    hidden = 24
    length = 32

    def build_model(self) -> Model:
        weights = rng(self.seed, 1)
        params = {"input": dense(weights, 1, 3 * self.hidden),
                  "recurrent": dense(weights, self.hidden, 3 * self.hidden),
                  "out": dense(weights, self.hidden, 1)}
        return Model(gru_apply, params)

    def setup(self, ctx: Context) -> None:
        self.seed = ctx.seed
        self.series = waves(rng(ctx.seed, 0), 192, self.length + 1)
        self.test_series = waves(rng(ctx.seed, 2), 8, self.length)
        self.model = self.build_model()
        self.start_training()

    def loss(self, params: Any, series: jax.Array) -> jax.Array:
        return jnp.mean((gru_apply(params, series[:, :-1]) - series[:, 1:]) ** 2)

    def batch(self, step: int) -> tuple[np.ndarray]:
        start = (step * 48) % self.series.shape[0]
        return (self.series[start:start + 48],)

    def example_inputs(self) -> tuple[np.ndarray]:
        return (self.test_series,)

    def infer(self, ctx: Context) -> dict[str, np.ndarray]:
        return {"forecast": self.predict()}
