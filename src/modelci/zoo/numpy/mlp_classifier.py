"""A two-hidden-layer MLP classifier with hand-written backprop and Adam, in float32."""

from __future__ import annotations

import math

import numpy as np

import modelci


def _spirals(rng: np.random.Generator, n_per_class: int, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Interleaved noisy spiral arms, one per class: a task no linear model can solve."""
    radius = np.tile(np.linspace(0.05, 1.0, n_per_class), n_classes)
    labels = np.repeat(np.arange(n_classes), n_per_class)
    angle = labels * (2.0 * math.pi / n_classes) + radius * 4.0 + 0.2 * rng.standard_normal(radius.shape)
    points = np.stack([radius * np.sin(angle), radius * np.cos(angle)], axis=1)
    order = rng.permutation(len(labels))
    return points[order].astype(np.float32), labels[order].astype(np.int64)


class MLPClassifier(modelci.Workload):
    """A 2-64-64-3 ReLU perceptron trained with softmax cross-entropy and Adam, as in any tabular classifier."""

    framework = "numpy"
    domain = "tabular"
    steps = 30
    formats = ("npz",)

    n_classes = 3
    n_per_class = 160
    n_test = 96
    hidden = 64
    batch_size = 64
    learning_rate = 0.02
    betas = (0.9, 0.999)
    eps = 1e-7
    param_names = ("w1", "b1", "w2", "b2", "w3", "b3")

    def setup(self, ctx: modelci.Context) -> None:
        rng = np.random.default_rng(ctx.seed)
        x, y = _spirals(rng, self.n_per_class, self.n_classes)
        self.x_train, self.y_train = x[self.n_test :], y[self.n_test :]
        self.x_test = x[: self.n_test]
        sizes = [2, self.hidden, self.hidden, self.n_classes]
        self.params: dict[str, np.ndarray] = {}
        for layer, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
            # He initialisation; python-float scales keep the arrays float32 under NEP 50 and before it
            scale = math.sqrt(2.0 / fan_in)
            self.params[f"w{layer}"] = rng.standard_normal((fan_in, fan_out), dtype=np.float32) * scale
            self.params[f"b{layer}"] = np.zeros(fan_out, dtype=np.float32)
        self.moments = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in self.params.items()}
        n = len(self.y_train)
        epochs = -(-self.steps * self.batch_size // n)
        self.order = np.concatenate([rng.permutation(n) for _ in range(epochs)])

    def _forward(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        p = self.params
        h1 = np.maximum(x @ p["w1"] + p["b1"], 0.0)
        h2 = np.maximum(h1 @ p["w2"] + p["b2"], 0.0)
        return h1, h2, h2 @ p["w3"] + p["b3"]

    def train_step(self, ctx: modelci.Context, step: int) -> float:
        batch = self.order[step * self.batch_size : (step + 1) * self.batch_size]
        x, y = self.x_train[batch], self.y_train[batch]
        h1, h2, logits = self._forward(x)
        log_probs = _log_softmax(logits)
        rows = np.arange(len(y))
        loss = float(-np.mean(log_probs[rows, y]))
        ctx.record("accuracy", float(np.mean(np.argmax(logits, axis=1) == y)))

        d_logits = np.exp(log_probs)
        d_logits[rows, y] -= 1.0
        d_logits /= len(y)
        p = self.params
        d_h2 = (d_logits @ p["w3"].T) * (h2 > 0)
        d_h1 = (d_h2 @ p["w2"].T) * (h1 > 0)
        grads = {
            "w3": h2.T @ d_logits, "b3": d_logits.sum(axis=0),
            "w2": h1.T @ d_h2, "b2": d_h2.sum(axis=0),
            "w1": x.T @ d_h1, "b1": d_h1.sum(axis=0),
        }  # fmt: skip
        self._adam(grads, step + 1)
        return loss

    def _adam(self, grads: dict[str, np.ndarray], t: int) -> None:
        beta1, beta2 = self.betas
        step_size = self.learning_rate * math.sqrt(1.0 - beta2**t) / (1.0 - beta1**t)
        for name, grad in grads.items():
            m, v = self.moments[name]
            m *= beta1
            m += (1.0 - beta1) * grad
            v *= beta2
            v += (1.0 - beta2) * grad * grad
            self.params[name] -= step_size * m / (np.sqrt(v) + self.eps)

    def infer(self, ctx: modelci.Context) -> dict[str, np.ndarray]:
        logits = self._forward(self.x_test)[2]
        return {
            "logits": logits,
            "probabilities": np.exp(_log_softmax(logits)),
            "predictions": np.argmax(logits, axis=1).astype(np.int64),
        }

    def state_dict(self) -> dict[str, np.ndarray]:
        """The weights and biases of the three layers, as saved in the `npz` format."""
        return {name: value.copy() for name, value in self.params.items()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> MLPClassifier:
        """Take the weights from `state` (as written by `state_dict`)."""
        self.params = {name: np.array(state[name], dtype=np.float32) for name in self.param_names}
        return self


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
