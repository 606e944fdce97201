"""Linear regression fitted by minibatch SGD on a synthetic tabular regression task (float64)."""

from __future__ import annotations

import numpy as np

import modelci


class LinearRegressionSGD(modelci.Workload):
    """Least-squares linear regression trained by shuffled minibatch SGD: the baseline model of tabular ML."""

    framework = "numpy"
    domain = "tabular"
    steps = 20
    formats = ("npz",)

    n_train = 512
    n_test = 128
    n_features = 16
    batch_size = 64
    learning_rate = 0.15

    def setup(self, ctx: modelci.Context) -> None:
        rng = np.random.default_rng(ctx.seed)
        n, d = self.n_train + self.n_test, self.n_features
        # columns on uneven scales, like real tabular features, and a target with a non-zero intercept
        scales = rng.uniform(0.5, 1.5, size=d)
        x = rng.standard_normal((n, d)) * scales
        true_weight = rng.standard_normal(d)
        y = x @ true_weight + 3.0 + 0.1 * rng.standard_normal(n)
        self.x_train, self.x_test = x[: self.n_train], x[self.n_train :]
        self.y_train, self.y_test = y[: self.n_train], y[self.n_train :]
        self.weight = np.zeros(d)
        self.bias = np.zeros(1)
        # the epoch orders are drawn up front so that a step depends only on the seed and the step number
        epochs = -(-self.steps * self.batch_size // self.n_train)
        self.order = np.concatenate([rng.permutation(self.n_train) for _ in range(epochs)])

    def train_step(self, ctx: modelci.Context, step: int) -> float:
        batch = self.order[step * self.batch_size : (step + 1) * self.batch_size]
        x, y = self.x_train[batch], self.y_train[batch]
        residual = x @ self.weight + self.bias - y
        loss = float(np.mean(residual**2))
        grad_residual = 2.0 * residual / len(batch)
        self.weight -= self.learning_rate * (x.T @ grad_residual)
        self.bias -= self.learning_rate * np.sum(grad_residual, keepdims=True)
        return loss

    def infer(self, ctx: modelci.Context) -> dict[str, np.ndarray]:
        predictions = self.x_test @ self.weight + self.bias
        return {"predictions": predictions, "residuals": predictions - self.y_test}

    def state_dict(self) -> dict[str, np.ndarray]:
        """The fitted parameters, as saved in the `npz` format."""
        return {"weight": self.weight.copy(), "bias": self.bias.copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> LinearRegressionSGD:
        """Take the parameters from `state` (as written by `state_dict`)."""
        self.weight = np.array(state["weight"], dtype=np.float64)
        self.bias = np.array(state["bias"], dtype=np.float64)
        return self
