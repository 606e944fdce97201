"""A decoder-only transformer block (causal multi-head attention, GELU MLP, pre-layer-norm) learning to continue
token sequences, in plain JAX."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _common import JaxWorkload, Model, cross_entropy, dense, filled, normal, rng

from modelci import Context


def layer_norm(params: dict[str, jax.Array], x: jax.Array, eps: float = 1e-5) -> jax.Array:
    """Layer normalisation over the last axis, with a learned scale and shift."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * params["scale"] + params["shift"]


def attention(params: dict[str, Any], x: jax.Array, heads: int) -> jax.Array:
    """Causal multi-head self-attention over x (batch, time, width)."""
    batch, time, width = x.shape
    qkv = x @ params["qkv"]["w"] + params["qkv"]["b"]
    q, k, v = (part.reshape(batch, time, heads, width // heads) for part in jnp.split(qkv, 3, axis=-1))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(width // heads)
    causal = jnp.tril(jnp.ones((time, time), bool))
    weights = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
    mixed = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, time, width)
    return mixed @ params["proj"]["w"] + params["proj"]["b"]


def transformer_apply(params: dict[str, Any], tokens: jax.Array, heads: int = 4) -> jax.Array:
    """Next-token logits: embeddings plus positions, one pre-norm block (attention and MLP, both residual),
    a final norm and the output projection."""
    x = params["embed"][tokens] + params["position"][: tokens.shape[1]]
    x = x + attention(params["attention"], layer_norm(params["norm1"], x), heads)
    hidden = jax.nn.gelu(layer_norm(params["norm2"], x) @ params["mlp_in"]["w"] + params["mlp_in"]["b"])
    x = x + hidden @ params["mlp_out"]["w"] + params["mlp_out"]["b"]
    return layer_norm(params["norm_out"], x) @ params["unembed"]["w"] + params["unembed"]["b"]


def sequences(generator: np.random.Generator, count: int, length: int, vocab: int) -> np.ndarray:
    """Token sequences that count up by a stride of 1, 2 or 3 (mod `vocab`) from a random start: the next token
    follows from the two before it."""
    start = generator.integers(0, vocab, (count, 1))
    stride = generator.integers(1, 4, (count, 1))
    return ((start + stride * np.arange(length)[None, :]) % vocab).astype(np.int32)


class TransformerBlock(JaxWorkload):
    """One GPT-style block, width 32, 4 heads, MLP 4x wide, over a 24-token vocabulary and 16-token context,
    trained on next-token cross-entropy with Adam."""

    domain = "nlp"
    steps = 20
    vocab = 24
    context = 16
    width = 32
    learning_rate = 1e-2

    def build_model(self) -> Model:
        weights = rng(self.seed, 1)
        width = self.width
        ones, zeros = filled((width,), 1.0), filled((width,), 0.0)
        params = {
            "embed": normal(weights, (self.vocab, width), 0.1),
            "position": normal(weights, (self.context, width), 0.1),
            "norm1": {"scale": ones, "shift": zeros},
            "attention": {"qkv": dense(weights, width, 3 * width), "proj": dense(weights, width, width)},
            "norm2": {"scale": ones, "shift": zeros},
            "mlp_in": dense(weights, width, 4 * width),
            "mlp_out": dense(weights, 4 * width, width),
            "norm_out": {"scale": ones, "shift": zeros},
            "unembed": dense(weights, width, self.vocab),
        }
        return Model(transformer_apply, params)

    def setup(self, ctx: Context) -> None:
        self.seed = ctx.seed
        self.tokens = sequences(rng(ctx.seed, 0), 256, self.context + 1, self.vocab)
        self.test_tokens = sequences(rng(ctx.seed, 2), 8, self.context, self.vocab)
        self.model = self.build_model()
        self.start_training()

    def loss(self, params: Any, tokens: jax.Array) -> jax.Array:
        return cross_entropy(transformer_apply(params, tokens[:, :-1]), tokens[:, 1:])

    def batch(self, step: int) -> tuple[np.ndarray]:
        start = (step * 32) % self.tokens.shape[0]
        return (self.tokens[start:start + 32],)

    def example_inputs(self) -> tuple[np.ndarray]:
        return (self.test_tokens,)

    def infer(self, ctx: Context) -> dict[str, np.ndarray]:
        logits = self.predict()
        return {"logits": logits, "next_token": logits[:, -1].argmax(axis=-1)}
