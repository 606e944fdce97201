"""A matrix-factorisation recommender with user and item biases, trained by minibatch SGD (float64)."""

from __future__ import annotations

import math

import numpy as np

import modelci


class MatrixFactorization(modelci.Workload):
    """A biased matrix-factorisation recommender (Funk SVD, as in the Netflix prize) fitted to sparse ratings
    by minibatch SGD with L2 regularisation."""

    framework = "numpy"
    domain = "recommendation"
    steps = 20
    formats = ("npz",)

    n_users = 120
    n_items = 80
    true_factors = 4
    n_factors = 8
    density = 0.25
    test_fraction = 0.1
    n_scored_users = 16
    batch_size = 256
    learning_rate = 0.05
    l2 = 0.01
    param_names = ("user_factors", "item_factors", "user_bias", "item_bias", "global_bias")

    def setup(self, ctx: modelci.Context) -> None:
        rng = np.random.default_rng(ctx.seed)
        u, i = self.n_users, self.n_items
        # ratings from a low-rank taste model plus popularity and user leniency, clipped to the 1-5 scale
        taste = rng.standard_normal((u, self.true_factors)) @ rng.standard_normal((self.true_factors, i))
        leniency, popularity = 0.5 * rng.standard_normal((u, 1)), 0.5 * rng.standard_normal((1, i))
        full = np.clip(3.5 + 0.5 * taste + leniency + popularity + 0.2 * rng.standard_normal((u, i)), 1.0, 5.0)
        users, items = np.nonzero(rng.random((u, i)) < self.density)
        order = rng.permutation(len(users))
        users, items = users[order].astype(np.int64), items[order].astype(np.int64)
        ratings = full[users, items]
        n_test = int(len(users) * self.test_fraction)
        self.test_users, self.test_items = users[:n_test], items[:n_test]
        self.train_users, self.train_items, self.train_ratings = users[n_test:], items[n_test:], ratings[n_test:]
        scale = 0.1 / math.sqrt(self.n_factors)
        self.user_factors = rng.standard_normal((u, self.n_factors)) * scale
        self.item_factors = rng.standard_normal((i, self.n_factors)) * scale
        self.user_bias = np.zeros(u)
        self.item_bias = np.zeros(i)
        # the usual warm start: the global bias begins at the mean training rating
        self.global_bias = np.array([self.train_ratings.mean()])
        n = len(self.train_ratings)
        epochs = -(-self.steps * self.batch_size // n)
        self.order = np.concatenate([rng.permutation(n) for _ in range(epochs)])

    def _predict(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        dot = np.einsum("nk,nk->n", self.user_factors[users], self.item_factors[items])
        return self.global_bias + self.user_bias[users] + self.item_bias[items] + dot

    def train_step(self, ctx: modelci.Context, step: int) -> float:
        batch = self.order[step * self.batch_size : (step + 1) * self.batch_size]
        users, items, ratings = self.train_users[batch], self.train_items[batch], self.train_ratings[batch]
        error = self._predict(users, items) - ratings
        loss = float(np.mean(error**2))
        # per-rating SGD updates summed with add.at, which handles a user or item repeated in the batch
        p, q = self.user_factors[users], self.item_factors[items]
        lr, l2 = self.learning_rate, self.l2
        np.add.at(self.user_factors, users, -lr * (error[:, None] * q + l2 * p))
        np.add.at(self.item_factors, items, -lr * (error[:, None] * p + l2 * q))
        np.add.at(self.user_bias, users, -lr * (error + l2 * self.user_bias[users]))
        np.add.at(self.item_bias, items, -lr * (error + l2 * self.item_bias[items]))
        self.global_bias -= lr * np.mean(error)
        return loss

    def infer(self, ctx: modelci.Context) -> dict[str, np.ndarray]:
        scored = np.arange(self.n_scored_users)
        user_scores = (
            self.global_bias
            + self.user_bias[scored, None]
            + self.item_bias[None, :]
            + self.user_factors[scored] @ self.item_factors.T
        )
        return {"held_out_ratings": self._predict(self.test_users, self.test_items), "user_scores": user_scores}

    def state_dict(self) -> dict[str, np.ndarray]:
        """The factor matrices and biases, as saved in the `npz` format."""
        return {name: getattr(self, name).copy() for name in self.param_names}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> MatrixFactorization:
        """Take the factors and biases from `state` (as written by `state_dict`)."""
        for name in self.param_names:
            setattr(self, name, np.array(state[name], dtype=np.float64))
        return self
