"""zoo:torch speech workload: a Conv1d + bidirectional LSTM acoustic model trained with CTC loss.

The spectrograms are synthetic: every label has its own spectral profile, held for a few frames
between stretches of near-silence, so the alignment CTC has to find is real but easy.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from _common import TorchWorkload


def _spectrograms(seed: int, count: int, labels: int, mels: int, frames: int, length: int):
    """(count, mels, frames) features, (count, length) targets in 1..labels-1, and the target lengths."""
    gen = torch.Generator().manual_seed(seed)
    profiles = torch.randn(labels, mels, generator=gen)
    features = 0.3 * torch.randn(count, mels, frames, generator=gen)
    targets = torch.randint(1, labels, (count, length), generator=gen)
    lengths = torch.randint(length // 2, length + 1, (count,), generator=gen)
    for i in range(count):
        frame = int(torch.randint(0, 3, (1,), generator=gen))
        for j in range(int(lengths[i])):
            hold = int(torch.randint(2, 4, (1,), generator=gen))
            features[i, :, frame : frame + hold] += profiles[targets[i, j]].unsqueeze(1)
            frame += hold + 1  # a gap frame, so that repeated labels stay apart
    return features, targets, lengths


class _AcousticNet(nn.Module):
    """Two Conv1d layers over time, a bidirectional LSTM, and per-frame log-probabilities (blank = 0)."""

    def __init__(self, mels: int, labels: int, hidden: int = 32) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv1d(mels, hidden, 3, padding=1), nn.ReLU(), nn.Conv1d(hidden, hidden, 3, padding=1), nn.ReLU()
        )
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True, bidirectional=True)
        self.classify = nn.Linear(2 * hidden, labels)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """(batch, mels, frames) -> (frames, batch, labels) log-probabilities, the layout ctc_loss takes."""
        hidden, _ = self.lstm(self.conv(features).transpose(1, 2))
        return F.log_softmax(self.classify(hidden), -1).transpose(0, 1)


class CTCAcousticModel(TorchWorkload):
    """Conv1d + BiLSTM acoustic model, CTC loss, Adam, on synthetic spectrograms."""

    domain = "speech"
    steps = 16
    labels, mels, frames, length = 8, 16, 32, 6

    def build_model(self) -> nn.Module:
        return _AcousticNet(self.mels, self.labels).to(self.device)

    def setup(self, ctx) -> None:
        self.device = torch.device(ctx.device)
        features, targets, lengths = _spectrograms(ctx.seed, 48, self.labels, self.mels, self.frames, self.length)
        self.features, self.targets = features.to(self.device), targets.to(self.device)
        self.target_lengths = lengths.to(self.device)
        self.model = self.build_model()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=5e-3)

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """The held-out spectrograms, which `infer` feeds the model."""
        return (self.features[32:],)

    def train_step(self, ctx, step: int) -> float:
        self.model.train()
        log_probs = self.model(self.features[:32])
        frames = torch.full((32,), self.frames, dtype=torch.long, device=self.device)
        loss = F.ctc_loss(log_probs, self.targets[:32], frames, self.target_lengths[:32], blank=0, zero_infinity=True)
        return self.optimize(loss, clip_norm=5.0)

    def infer(self, ctx) -> dict:
        return {"log_probs": self.predict().detach().cpu().numpy()}
