"""A next-token Elman RNN language model trained with backpropagation through time (float64)."""

from __future__ import annotations

import math

import numpy as np

import modelci


def _second_order_text(rng: np.random.Generator, table: np.ndarray, n: int, length: int) -> np.ndarray:
    """Token sequences from a second-order Markov source, whose next token depends on the previous two."""
    vocab = table.shape[0]
    tokens = np.empty((n, length), dtype=np.int64)
    tokens[:, :2] = rng.integers(0, vocab, size=(n, 2))
    for t in range(2, length):
        cumulative = np.cumsum(table[tokens[:, t - 2], tokens[:, t - 1]], axis=1)
        draws = rng.random(n)[:, None]
        tokens[:, t] = np.minimum(np.sum(cumulative < draws, axis=1), vocab - 1)
    return tokens


class ElmanRNN(modelci.Workload):
    """A tanh Elman RNN next-token language model (as in min-char-rnn), trained by backpropagation through time
    with gradient clipping and Adagrad on text from a second-order Markov source."""

    framework = "numpy"
    domain = "nlp"
    steps = 20
    formats = ("npz",)

    vocab = 10
    hidden = 32
    seq_len = 24
    n_train = 64
    n_test = 8
    batch_size = 16
    learning_rate = 0.1
    clip_norm = 5.0
    param_names = ("w_xh", "w_hh", "b_h", "w_hy", "b_y")

    def setup(self, ctx: modelci.Context) -> None:
        rng = np.random.default_rng(ctx.seed)
        # a sparse transition table: each two-token context favours a handful of next tokens
        # (built from uniforms rather than `dirichlet`, whose stream numpy has changed between releases)
        weights = rng.random((self.vocab, self.vocab, self.vocab)) ** 6
        table = weights / weights.sum(axis=-1, keepdims=True)
        tokens = _second_order_text(rng, table, self.n_train + self.n_test, self.seq_len + 1)
        self.train_tokens, self.test_tokens = tokens[: self.n_train], tokens[self.n_train :]
        v, h = self.vocab, self.hidden
        self.params = {
            "w_xh": rng.standard_normal((v, h)) * 0.3,
            "w_hh": rng.standard_normal((h, h)) * (0.9 / math.sqrt(h)),
            "b_h": np.zeros(h),
            "w_hy": rng.standard_normal((h, v)) * (1.0 / math.sqrt(h)),
            "b_y": np.zeros(v),
        }
        self.grad_squares = {name: np.full_like(value, 1e-8) for name, value in self.params.items()}
        epochs = -(-self.steps * self.batch_size // self.n_train)
        self.order = np.concatenate([rng.permutation(self.n_train) for _ in range(epochs)])

    def _forward(self, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Run the RNN over (B, T) tokens from a zero state; returns the hidden states (B, T+1, H) and logits."""
        p = self.params
        batch, length = inputs.shape
        states = np.zeros((batch, length + 1, self.hidden))
        for t in range(length):
            # a one-hot input times w_xh is a row lookup (an embedding)
            states[:, t + 1] = np.tanh(p["w_xh"][inputs[:, t]] + states[:, t] @ p["w_hh"] + p["b_h"])
        return states, states[:, 1:] @ p["w_hy"] + p["b_y"]

    def train_step(self, ctx: modelci.Context, step: int) -> float:
        batch = self.train_tokens[self.order[step * self.batch_size : (step + 1) * self.batch_size]]
        inputs, targets = batch[:, :-1], batch[:, 1:]
        states, logits = self._forward(inputs)
        log_probs = _log_softmax(logits)
        n_batch, length = targets.shape
        rows, cols = np.indices(targets.shape)
        loss = float(-np.mean(log_probs[rows, cols, targets]))

        p = self.params
        d_logits = np.exp(log_probs)
        d_logits[rows, cols, targets] -= 1.0
        d_logits /= targets.size
        hidden = states[:, 1:]
        grads = {
            "w_hy": hidden.reshape(-1, self.hidden).T @ d_logits.reshape(-1, self.vocab),
            "b_y": d_logits.sum(axis=(0, 1)),
            "w_xh": np.zeros_like(p["w_xh"]),
            "w_hh": np.zeros_like(p["w_hh"]),
            "b_h": np.zeros_like(p["b_h"]),
        }
        d_hidden = d_logits @ p["w_hy"].T
        d_next = np.zeros((n_batch, self.hidden))
        for t in reversed(range(length)):
            d_pre = (d_hidden[:, t] + d_next) * (1.0 - states[:, t + 1] ** 2)
            grads["w_hh"] += states[:, t].T @ d_pre
            grads["b_h"] += d_pre.sum(axis=0)
            np.add.at(grads["w_xh"], inputs[:, t], d_pre)
            d_next = d_pre @ p["w_hh"].T
        # clip by global norm, then Adagrad, as recurrent nets need both to train stably
        norm = math.sqrt(sum(float(np.sum(g * g)) for g in grads.values()))
        scale = min(1.0, self.clip_norm / (norm + 1e-12))
        for name, grad in grads.items():
            grad = grad * scale
            self.grad_squares[name] += grad * grad
            p[name] -= self.learning_rate * grad / np.sqrt(self.grad_squares[name])
        return loss

    def infer(self, ctx: modelci.Context) -> dict[str, np.ndarray]:
        states, logits = self._forward(self.test_tokens[:, :-1])
        return {
            "logits": logits,
            "next_token_probs": np.exp(_log_softmax(logits[:, -1])),
            "final_state": states[:, -1],
        }

    def state_dict(self) -> dict[str, np.ndarray]:
        """The input, recurrent and output weights, as saved in the `npz` format."""
        return {name: value.copy() for name, value in self.params.items()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> ElmanRNN:
        """Take the weights from `state` (as written by `state_dict`)."""
        self.params = {name: np.array(state[name], dtype=np.float64) for name in self.param_names}
        return self


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))
