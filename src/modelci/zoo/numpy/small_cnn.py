"""A small convolutional network written with im2col, forward and backward by hand, in float32."""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

import modelci

#: stroke direction (row step, column step) of each class: horizontal, vertical, diagonal, anti-diagonal
_DIRECTIONS = np.array([[0, 1], [1, 0], [1, 1], [1, -1]])


def _strokes(rng: np.random.Generator, n: int, size: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Noisy images of one straight stroke each; the label is the stroke's direction."""
    labels = rng.integers(0, len(_DIRECTIONS), size=n)
    d_row, d_col = _DIRECTIONS[labels, 0], _DIRECTIONS[labels, 1]
    span = length - 1
    row0 = rng.integers(0, size - d_row * span)
    col0 = rng.integers(np.where(d_col < 0, span, 0), np.where(d_col > 0, size - span, size))
    intensity = rng.uniform(0.7, 1.3, size=n)
    images = 0.25 * rng.standard_normal((n, 1, size, size))
    samples = np.arange(n)
    for k in range(length):
        images[samples, 0, row0 + k * d_row, col0 + k * d_col] += intensity
    return images.astype(np.float32), labels.astype(np.int64)


def _im2col(x: np.ndarray) -> np.ndarray:
    """(N, C, H, W) -> (N*H*W, C*9): the 3x3 patches around each pixel, zero-padded ("same" convolution)."""
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = sliding_window_view(padded, (3, 3), axis=(2, 3))  # (N, C, H, W, 3, 3)
    return windows.transpose(0, 2, 3, 1, 4, 5).reshape(n * h * w, c * 9)


def _col2im(cols: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The adjoint of `_im2col`: scatter-add patch gradients back onto the (N, C, H, W) input."""
    n, c, h, w = shape
    patches = cols.reshape(n, h, w, c, 3, 3)
    padded = np.zeros((n, c, h + 2, w + 2), dtype=cols.dtype)
    for i in range(3):
        for j in range(3):
            padded[:, :, i : i + h, j : j + w] += patches[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return padded[:, :, 1:-1, 1:-1]


def _conv(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """3x3 "same" convolution as one matrix product; returns the output and the columns for backward."""
    n, _, h, w = x.shape
    cols = _im2col(x)
    out = cols @ weight.reshape(len(weight), -1).T + bias
    return out.reshape(n, h, w, -1).transpose(0, 3, 1, 2), cols


def _conv_backward(
    d_out: np.ndarray, cols: np.ndarray, weight: np.ndarray, x_shape: tuple[int, ...] | None
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """Gradients of `_conv` for its weight and bias, and for its input unless `x_shape` is None (the image)."""
    d_flat = d_out.transpose(0, 2, 3, 1).reshape(-1, len(weight))
    d_weight = (d_flat.T @ cols).reshape(weight.shape)
    d_x = None if x_shape is None else _col2im(d_flat @ weight.reshape(len(weight), -1), x_shape)
    return d_x, d_weight, d_flat.sum(axis=0)


def _pool_windows(x: np.ndarray) -> np.ndarray:
    """(N, C, H, W) -> (N, C, H/2, W/2, 4): the four values of each 2x2 pooling window."""
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)


def _max_pool(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """2x2 max pooling; returns the output and the winning index of each window for backward."""
    windows = _pool_windows(x)
    winner = np.argmax(windows, axis=-1)[..., None]
    return np.take_along_axis(windows, winner, axis=-1)[..., 0], winner


def _max_pool_backward(d_out: np.ndarray, winner: np.ndarray, x_shape: tuple[int, ...]) -> np.ndarray:
    """Route each pooled gradient to the input that won its window (the first one on ties)."""
    n, c, h, w = x_shape
    d_windows = np.zeros((n, c, h // 2, w // 2, 4), dtype=d_out.dtype)
    np.put_along_axis(d_windows, winner, d_out[..., None], axis=-1)
    return d_windows.reshape(n, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(x_shape)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))


class SmallCNN(modelci.Workload):
    """A LeNet-style image classifier (conv-ReLU-maxpool-conv-ReLU-global-maxpool-dense, softmax cross-entropy)
    on 12x12 stroke images, trained with Adam."""

    framework = "numpy"
    domain = "vision"
    steps = 20
    formats = ("npz",)

    image_size = 12
    stroke_length = 7
    n_train = 320
    n_test = 64
    channels = (8, 16)
    batch_size = 32
    learning_rate = 0.02
    betas = (0.9, 0.999)
    eps = 1e-7
    param_names = ("conv1_w", "conv1_b", "conv2_w", "conv2_b", "dense_w", "dense_b")

    def setup(self, ctx: modelci.Context) -> None:
        rng = np.random.default_rng(ctx.seed)
        x, y = _strokes(rng, self.n_train + self.n_test, self.image_size, self.stroke_length)
        self.x_train, self.y_train = x[: self.n_train], y[: self.n_train]
        self.x_test = x[self.n_train :]
        c1, c2 = self.channels
        n_classes = len(_DIRECTIONS)
        shapes = {
            "conv1_w": (c1, 1, 3, 3), "conv1_b": (c1,),
            "conv2_w": (c2, c1, 3, 3), "conv2_b": (c2,),
            "dense_w": (c2, n_classes), "dense_b": (n_classes,),
        }  # fmt: skip
        self.params: dict[str, np.ndarray] = {}
        for name, shape in shapes.items():
            if name.endswith("_b"):
                self.params[name] = np.zeros(shape, dtype=np.float32)
            else:
                fan_in = math.prod(shape[1:]) if len(shape) == 4 else shape[0]
                scale = math.sqrt(2.0 / fan_in)
                self.params[name] = rng.standard_normal(shape, dtype=np.float32) * scale
        self.moments = {name: (np.zeros_like(v), np.zeros_like(v)) for name, v in self.params.items()}
        epochs = -(-self.steps * self.batch_size // self.n_train)
        self.order = np.concatenate([rng.permutation(self.n_train) for _ in range(epochs)])

    def _forward(self, x: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        p = self.params
        a1, cols1 = _conv(x, p["conv1_w"], p["conv1_b"])
        r1 = np.maximum(a1, 0.0)
        pooled, winner = _max_pool(r1)
        a2, cols2 = _conv(pooled, p["conv2_w"], p["conv2_b"])
        r2 = np.maximum(a2, 0.0)
        flat = r2.reshape(r2.shape[0], r2.shape[1], -1)
        peak = np.argmax(flat, axis=-1)[..., None]
        features = np.take_along_axis(flat, peak, axis=-1)[..., 0]
        logits = features @ p["dense_w"] + p["dense_b"]
        cache = {"cols1": cols1, "r1": r1, "winner": winner, "pooled": pooled,
                 "cols2": cols2, "r2": r2, "peak": peak, "features": features}  # fmt: skip
        return logits, cache

    def train_step(self, ctx: modelci.Context, step: int) -> float:
        batch = self.order[step * self.batch_size : (step + 1) * self.batch_size]
        y = self.y_train[batch]
        logits, cache = self._forward(self.x_train[batch])
        log_probs = _log_softmax(logits)
        rows = np.arange(len(y))
        loss = float(-np.mean(log_probs[rows, y]))
        ctx.record("accuracy", float(np.mean(np.argmax(logits, axis=1) == y)))

        p = self.params
        d_logits = np.exp(log_probs)
        d_logits[rows, y] -= 1.0
        d_logits /= len(y)
        grads = {"dense_w": cache["features"].T @ d_logits, "dense_b": d_logits.sum(axis=0)}
        r2 = cache["r2"]
        d_flat = np.zeros((r2.shape[0], r2.shape[1], r2.shape[2] * r2.shape[3]), dtype=r2.dtype)
        np.put_along_axis(d_flat, cache["peak"], (d_logits @ p["dense_w"].T)[..., None], axis=-1)
        d_r2 = d_flat.reshape(r2.shape)
        d_pooled, grads["conv2_w"], grads["conv2_b"] = _conv_backward(
            d_r2 * (r2 > 0), cache["cols2"], p["conv2_w"], cache["pooled"].shape
        )
        r1 = cache["r1"]
        d_r1 = _max_pool_backward(d_pooled, cache["winner"], r1.shape)
        _, grads["conv1_w"], grads["conv1_b"] = _conv_backward(
            d_r1 * (r1 > 0), cache["cols1"], p["conv1_w"], None
        )
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
        logits, cache = self._forward(self.x_test)
        return {
            "logits": logits,
            "probabilities": np.exp(_log_softmax(logits)),
            "features": cache["features"],
        }

    def state_dict(self) -> dict[str, np.ndarray]:
        """The convolution kernels, dense weights and biases, as saved in the `npz` format."""
        return {name: value.copy() for name, value in self.params.items()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> SmallCNN:
        """Take the weights from `state` (as written by `state_dict`)."""
        self.params = {name: np.array(state[name], dtype=np.float32) for name in self.param_names}
        return self
