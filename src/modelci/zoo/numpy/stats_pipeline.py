"""A float32 feature-normalisation pipeline with running statistics, as a data loader or BatchNorm keeps them."""

from __future__ import annotations

import numpy as np

import modelci

_CLIP_PERCENTILES = np.array([1.0, 99.0], dtype=np.float32)
_SUMMARY_PERCENTILES = np.array([5.0, 25.0, 50.0, 75.0, 95.0], dtype=np.float32)


def _percentile(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Per-feature percentiles kept in float32: numpy < 2 interpolates float32 data in float64 and returns that."""
    return np.percentile(x, q, axis=0).astype(np.float32)


class Float32StatsPipeline(modelci.Workload):
    """Streaming float32 feature standardisation: BatchNorm-style running mean and variance, percentile clipping,
    then softmax, log-sum-exp and cumulative sums over the features; the loss is the drift of each batch."""

    framework = "numpy"
    domain = "data"
    steps = 20
    formats = ("npz",)

    n_features = 32
    batch_size = 256
    n_test = 256
    momentum = 0.3
    eps = 1e-5
    state_names = ("running_mean", "running_var", "running_low", "running_high")

    def setup(self, ctx: modelci.Context) -> None:
        rng = np.random.default_rng(ctx.seed)
        d = self.n_features
        # features on wildly different locations and scales, half of them heavy-tailed (log-normal)
        location = rng.uniform(-20.0, 20.0, size=d).astype(np.float32)
        scale = np.exp(rng.uniform(-1.0, 2.0, size=d)).astype(np.float32)
        skewed = np.arange(d) % 2 == 1
        raw = rng.standard_normal((self.steps * self.batch_size + self.n_test, d), dtype=np.float32)
        raw[:, skewed] = np.exp(0.75 * raw[:, skewed])
        data = raw * scale + location
        self.batches = data[: -self.n_test].reshape(self.steps, self.batch_size, d)
        self.x_test = data[-self.n_test :]
        self.running_mean = np.zeros(d, dtype=np.float32)
        self.running_var = np.ones(d, dtype=np.float32)
        self.running_low = np.full(d, -np.inf, dtype=np.float32)
        self.running_high = np.full(d, np.inf, dtype=np.float32)

    def _standardize(self, x: np.ndarray) -> np.ndarray:
        return (x - self.running_mean) / np.sqrt(self.running_var + self.eps)

    def train_step(self, ctx: modelci.Context, step: int) -> float:
        x = self.batches[step]
        # the drift: KL divergence of N(mean, var) of the batch, standardised with the running stats, from N(0, 1)
        z = self._standardize(x)
        z_mean, z_var = z.mean(axis=0), z.var(axis=0)
        loss = float(np.mean(0.5 * (z_var + z_mean**2 - 1.0 - np.log(z_var))))

        m, n = self.momentum, len(x)
        self.running_mean = (1.0 - m) * self.running_mean + m * x.mean(axis=0)
        self.running_var = (1.0 - m) * self.running_var + m * x.var(axis=0) * (n / (n - 1))
        low, high = _percentile(x, _CLIP_PERCENTILES)
        if step == 0:
            self.running_low, self.running_high = low, high
        else:
            self.running_low = (1.0 - m) * self.running_low + m * low
            self.running_high = (1.0 - m) * self.running_high + m * high
        return loss

    def infer(self, ctx: modelci.Context) -> dict[str, np.ndarray]:
        z = self._standardize(np.clip(self.x_test, self.running_low, self.running_high))
        shifted = z - z.max(axis=1, keepdims=True)
        log_softmax = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
        return {
            "standardized": z,
            "cumulative_probs": np.cumsum(np.exp(log_softmax), axis=1),
            "quantiles": _percentile(z, _SUMMARY_PERCENTILES),
        }

    def state_dict(self) -> dict[str, np.ndarray]:
        """The running statistics, as saved in the `npz` format."""
        return {name: getattr(self, name).copy() for name in self.state_names}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> Float32StatsPipeline:
        """Take the running statistics from `state` (as written by `state_dict`)."""
        for name in self.state_names:
            setattr(self, name, np.array(state[name], dtype=np.float32))
        return self
