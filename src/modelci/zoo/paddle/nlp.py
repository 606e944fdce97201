"""zoo:paddle nlp workloads: a GRU encoder-decoder with additive attention, and a small Transformer LM.

Both learn synthetic token tasks with structure (reverse a sequence; continue an arithmetic
progression), drawn with numpy from `ctx.seed`, so their losses fall within a few steps.
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import nn

from _common import PaddleWorkload, use_device

BOS = 1  # token 0 is padding, never produced here


class _AdditiveAttention(nn.Layer):
    """Bahdanau attention: score(h, e) = v . tanh(W h + U e)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.query = nn.Linear(hidden, hidden, bias_attr=False)
        self.key = nn.Linear(hidden, hidden)
        self.score = nn.Linear(hidden, 1, bias_attr=False)

    def forward(self, state, keys, memory):
        scores = self.score(paddle.tanh(self.query(state).unsqueeze(1) + keys)).squeeze(-1)
        weights = F.softmax(scores, axis=-1)
        return paddle.bmm(weights.unsqueeze(1), memory).squeeze(1), weights


class _Seq2SeqNet(nn.Layer):
    """GRU encoder and a GRU-cell decoder that attends over the encoder states at every step."""

    def __init__(self, vocab: int, length: int, hidden: int = 48) -> None:
        super().__init__()
        # a python int, so that paddle.jit unrolls the decoder loop instead of building a while op
        self.length = length
        self.embed = nn.Embedding(vocab, hidden)
        self.encoder = nn.GRU(hidden, hidden)
        self.attention = _AdditiveAttention(hidden)
        self.decoder = nn.GRUCell(2 * hidden, hidden)
        self.out = nn.Linear(2 * hidden, vocab)

    def forward(self, source, decoder_inputs):
        """Teacher forcing: decoder step t reads `decoder_inputs[:, t]`; returns logits and attention."""
        memory, last = self.encoder(self.embed(source))
        keys = self.attention.key(memory)  # the key projection does not depend on the step
        state = last[0]
        logits, attention = [], []
        for t in range(self.length):
            context, weights = self.attention(state, keys, memory)
            state, _ = self.decoder(paddle.concat([self.embed(decoder_inputs[:, t]), context], -1), state)
            logits.append(self.out(paddle.concat([state, context], -1)))
            attention.append(weights)
        return paddle.stack(logits, 1), paddle.stack(attention, 1)


class Seq2SeqAttention(PaddleWorkload):
    """Learn to reverse token sequences with a GRU encoder-decoder, additive attention and teacher forcing."""

    domain = "nlp"
    steps = 20
    vocab, length = 16, 8

    def build_model(self) -> nn.Layer:
        return _Seq2SeqNet(self.vocab, self.length)

    def setup(self, ctx) -> None:
        use_device(ctx.device)
        rng = np.random.RandomState(ctx.seed)
        source = rng.randint(2, self.vocab, (96, self.length)).astype("int64")
        target = source[:, ::-1].copy()
        decoder_inputs = np.concatenate([np.full((96, 1), BOS, "int64"), target[:, :-1]], 1)
        self.source, self.decoder_inputs, self.target = (paddle.to_tensor(a) for a in (source, decoder_inputs, target))
        self.model = self.build_model()
        self.optimizer = paddle.optimizer.Adam(
            learning_rate=1e-2, parameters=self.model.parameters(), grad_clip=nn.ClipGradByGlobalNorm(1.0)
        )

    def example_inputs(self) -> tuple:
        """The held-out batch (the last 32 sequences), which `infer` feeds the model."""
        return self.source[64:], self.decoder_inputs[64:]

    def train_step(self, ctx, step: int) -> float:
        self.model.train()
        logits, _ = self.model(self.source[:64], self.decoder_inputs[:64])
        return self.optimize(F.cross_entropy(logits.reshape([-1, self.vocab]), self.target[:64].reshape([-1])))

    def infer(self, ctx) -> dict:
        logits, attention = self.predict()
        return {"logits": logits.detach().cpu().numpy(), "attention": attention.detach().cpu().numpy()}


class _Block(nn.Layer):
    """Pre-LayerNorm Transformer block: causal multi-head self-attention, then a GELU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attention = nn.MultiHeadAttention(width, heads, dropout=0.1)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.Dropout(0.1))

    def forward(self, x, mask):
        h = self.norm1(x)
        x = x + self.attention(h, h, h, attn_mask=mask)
        return x + self.mlp(self.norm2(x))


class _TransformerLMNet(nn.Layer):
    """Token and learned position embeddings, two blocks, a final LayerNorm and a tied output layer."""

    def __init__(self, vocab: int, context: int, width: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        # tied with the output: N(0, 1) would give huge logits
        self.tokens = nn.Embedding(vocab, width, weight_attr=nn.initializer.Normal(std=0.1))
        self.positions = self.create_parameter([context, width], default_initializer=nn.initializer.Normal(std=0.02))
        self.blocks = nn.LayerList([_Block(width, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(width)
        # an additive mask; -1e9 rather than -inf keeps softmax clear of inf - inf
        mask = np.triu(np.full((context, context), -1e9, "float32"), 1)
        self.register_buffer("mask", paddle.to_tensor(mask), persistable=False)

    def forward(self, tokens):
        x = self.tokens(tokens) + self.positions
        for block in self.blocks:
            x = block(x, self.mask)
        return paddle.matmul(self.norm(x), self.tokens.weight, transpose_y=True)


class TransformerLM(PaddleWorkload):
    """A two-layer causal Transformer language model on arithmetic-progression token sequences."""

    domain = "nlp"
    steps = 20
    vocab, context = 32, 16

    def build_model(self) -> nn.Layer:
        return _TransformerLMNet(self.vocab, self.context)

    def setup(self, ctx) -> None:
        use_device(ctx.device)
        rng = np.random.RandomState(ctx.seed)
        start = rng.randint(0, self.vocab, (96, 1))
        stride = rng.randint(1, 4, (96, 1))
        self.tokens = paddle.to_tensor(((start + stride * np.arange(self.context + 1)) % self.vocab).astype("int64"))
        self.model = self.build_model()
        self.optimizer = paddle.optimizer.AdamW(
            learning_rate=3e-3, parameters=self.model.parameters(), weight_decay=0.01
        )

    def example_inputs(self) -> tuple:
        """The held-out sequences (without their last token), which `infer` feeds the model."""
        return (self.tokens[64:, :-1],)

    def train_step(self, ctx, step: int) -> float:
        self.model.train()
        logits = self.model(self.tokens[:64, :-1])
        return self.optimize(F.cross_entropy(logits.reshape([-1, self.vocab]), self.tokens[:64, 1:].reshape([-1])))

    def infer(self, ctx) -> dict:
        return {"logits": self.predict().detach().cpu().numpy()}
