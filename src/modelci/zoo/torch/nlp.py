"""zoo:torch nlp workloads: a GRU encoder-decoder with additive attention, and a small Transformer LM.

Both learn synthetic token tasks with structure (reverse a sequence; continue an arithmetic
progression), so their losses fall within a few steps. Everything is built from `ctx.seed`.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from _common import TorchWorkload

BOS = 1  # token 0 is padding, never produced here


class _AdditiveAttention(nn.Module):
    """Bahdanau attention: score(h, e) = v . tanh(W h + U e)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.query = nn.Linear(hidden, hidden, bias=False)
        self.key = nn.Linear(hidden, hidden)
        self.score = nn.Linear(hidden, 1, bias=False)

    def forward(self, state: torch.Tensor, keys: torch.Tensor,
                memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        weights = F.softmax(self.score(torch.tanh(self.query(state).unsqueeze(1) + keys)).squeeze(-1), dim=-1)
        return torch.bmm(weights.unsqueeze(1), memory).squeeze(1), weights


class _Seq2SeqNet(nn.Module):
    """GRU encoder and a GRU-cell decoder that attends over the encoder states at every step."""

    def __init__(self, vocab: int, hidden: int = 48) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.encoder = nn.GRU(hidden, hidden, batch_first=True)
        self.attention = _AdditiveAttention(hidden)
        self.decoder = nn.GRUCell(2 * hidden, hidden)
        self.out = nn.Linear(2 * hidden, vocab)

    def forward(self, source: torch.Tensor, decoder_inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing: decoder step t reads `decoder_inputs[:, t]`; returns logits and attention."""
        memory, last = self.encoder(self.embed(source))
        keys = self.attention.key(memory)  # the key projection does not depend on the step
        state = last.squeeze(0)
        logits, attention = [], []
        for t in range(decoder_inputs.shape[1]):
            context, weights = self.attention(state, keys, memory)
            state = self.decoder(torch.cat([self.embed(decoder_inputs[:, t]), context], -1), state)
            logits.append(self.out(torch.cat([state, context], -1)))
            attention.append(weights)
        return torch.stack(logits, 1), torch.stack(attention, 1)


class Seq2SeqAttention(TorchWorkload):
    """Learn to reverse token sequences with a GRU encoder-decoder, additive attention and teacher forcing."""

    domain = "nlp"
    steps = 20
    vocab, length = 16, 8

    def build_model(self) -> nn.Module:
        return _Seq2SeqNet(self.vocab).to(self.device)

    def setup(self, ctx) -> None:
        self.device = torch.device(ctx.device)
        gen = torch.Generator().manual_seed(ctx.seed)
        source = torch.randint(2, self.vocab, (96, self.length), generator=gen)
        target = source.flip(1)
        decoder_inputs = torch.cat([torch.full((96, 1), BOS), target[:, :-1]], 1)
        self.source, self.decoder_inputs, self.target = (t.to(self.device) for t in (source, decoder_inputs, target))
        self.model = self.build_model()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-2)

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """The held-out batch (the last 32 sequences), which `infer` feeds the model."""
        return self.source[64:], self.decoder_inputs[64:]

    def train_step(self, ctx, step: int) -> float:
        self.model.train()
        logits, _ = self.model(self.source[:64], self.decoder_inputs[:64])
        loss = F.cross_entropy(logits.reshape(-1, self.vocab), self.target[:64].reshape(-1))
        return self.optimize(loss, clip_norm=1.0)

    def infer(self, ctx) -> dict:
        logits, attention = self.predict()
        return {"logits": logits.detach().cpu().numpy(), "attention": attention.detach().cpu().numpy()}


class _Block(nn.Module):
    """Pre-LayerNorm Transformer block: causal multi-head self-attention, then a GELU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, dropout=0.1, batch_first=True)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.Dropout(0.1))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attention(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class _TransformerLMNet(nn.Module):
    """Token and learned position embeddings, two blocks, a final LayerNorm and a tied output layer."""

    def __init__(self, vocab: int, context: int, width: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        nn.init.normal_(self.tokens.weight, std=0.1)  # tied with the output: N(0, 1) would give huge logits
        self.positions = nn.Parameter(torch.randn(context, width) * 0.02)
        self.blocks = nn.ModuleList(_Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), 1), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        x = self.tokens(tokens) + self.positions[:length]
        for block in self.blocks:
            x = block(x, self.mask[:length, :length])
        return self.norm(x) @ self.tokens.weight.t()


class TransformerLM(TorchWorkload):
    """A two-layer causal Transformer language model on arithmetic-progression token sequences."""

    domain = "nlp"
    steps = 20
    vocab, context = 32, 16

    def build_model(self) -> nn.Module:
        return _TransformerLMNet(self.vocab, self.context).to(self.device)

    def setup(self, ctx) -> None:
        self.device = torch.device(ctx.device)
        gen = torch.Generator().manual_seed(ctx.seed)
        start = torch.randint(0, self.vocab, (96, 1), generator=gen)
        stride = torch.randint(1, 4, (96, 1), generator=gen)
        tokens = (start + stride * torch.arange(self.context + 1)) % self.vocab
        self.tokens = tokens.to(self.device)
        self.model = self.build_model()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-3, weight_decay=0.01)

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """The held-out sequences (without their last token), which `infer` feeds the model."""
        return (self.tokens[64:, :-1],)

    def train_step(self, ctx, step: int) -> float:
        self.model.train()
        logits = self.model(self.tokens[:64, :-1])
        return self.optimize(F.cross_entropy(logits.reshape(-1, self.vocab), self.tokens[:64, 1:].reshape(-1)))

    def infer(self, ctx) -> dict:
        return {"logits": self.predict().detach().cpu().numpy()}
