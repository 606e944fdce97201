"""zoo:torch generative workload: a small DCGAN on synthetic 16x16 blob images.

Generator and discriminator have their own Adam optimizer and take alternating steps. The recorded
loss is D + G; each part is also recorded as a user metric (`loss_d`, `loss_g`).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from _common import TorchWorkload


def _blob_images(seed: int, count: int, size: int = 16) -> torch.Tensor:
    """Images in [-1, 1] holding one Gaussian blob each, at a random place and width."""
    gen = torch.Generator().manual_seed(seed)
    centre = torch.rand(count, 2, 1, 1, generator=gen) * (size - 6) + 3
    width = torch.rand(count, 1, 1, generator=gen) * 1.5 + 1.5
    grid = torch.arange(size, dtype=torch.float32)
    dist2 = (grid.view(1, size, 1) - centre[:, 0]) ** 2 + (grid.view(1, 1, size) - centre[:, 1]) ** 2
    return (torch.exp(-dist2 / (2 * width**2)) * 2 - 1).unsqueeze(1)


class _Generator(nn.Module):
    """z -> 32x4x4 -> two strided transposed convolutions (BatchNorm, ReLU) -> 1x16x16 in tanh."""

    def __init__(self, latent: int) -> None:
        super().__init__()
        self.project = nn.Sequential(nn.Linear(latent, 32 * 4 * 4), nn.BatchNorm1d(32 * 4 * 4), nn.ReLU())
        self.upsample = nn.Sequential(
            nn.ConvTranspose2d(32, 16, 4, 2, 1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.ConvTranspose2d(16, 1, 4, 2, 1),
            nn.Tanh(),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.upsample(self.project(z).view(-1, 32, 4, 4))


class _Discriminator(nn.Module):
    """1x16x16 -> two strided convolutions (LeakyReLU, BatchNorm) -> one real/fake logit."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 4, 2, 1),
            nn.LeakyReLU(0.2),
            nn.Conv2d(16, 32, 4, 2, 1, bias=False),
            nn.BatchNorm2d(32),
            nn.LeakyReLU(0.2),
        )
        self.classify = nn.Linear(32 * 4 * 4, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classify(torch.flatten(self.features(images), 1)).squeeze(1)


class _DCGANNet(nn.Module):
    """Both networks in one module, so that one state_dict or graph holds the whole GAN."""

    def __init__(self, latent: int) -> None:
        super().__init__()
        self.generator = _Generator(latent)
        self.discriminator = _Discriminator()

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        images = self.generator(z)
        return images, self.discriminator(images)


class DCGANMini(TorchWorkload):
    """DCGAN with alternating discriminator and generator steps (non-saturating loss); `self.model` holds both
    networks, each with its own optimizer (`opt_d`, `opt_g`)."""

    domain = "generative"
    steps = 16
    latent, batch = 16, 32

    def build_model(self) -> nn.Module:
        """A freshly initialised GAN on the workload's device."""
        return _DCGANNet(self.latent).to(self.device)

    def setup(self, ctx) -> None:
        self.device = torch.device(ctx.device)
        self.real = _blob_images(ctx.seed, 128).to(self.device)
        gen = torch.Generator().manual_seed(ctx.seed + 1)
        self.noise = torch.randn(self.steps, self.batch, self.latent, generator=gen).to(self.device)
        self.eval_noise = torch.randn(16, self.latent, generator=gen).to(self.device)
        self.model = self.build_model()
        betas = (0.5, 0.999)
        self.opt_d = torch.optim.Adam(self.model.discriminator.parameters(), lr=2e-3, betas=betas)
        self.opt_g = torch.optim.Adam(self.model.generator.parameters(), lr=2e-3, betas=betas)

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """The fixed latent batch that `infer` turns into images."""
        return (self.eval_noise,)

    def train_step(self, ctx, step: int) -> float:
        g, d = self.model.generator, self.model.discriminator
        self.model.train()
        real = self.real[(step % 4) * self.batch : (step % 4 + 1) * self.batch]
        ones = torch.ones(self.batch, device=self.device)
        zeros = torch.zeros(self.batch, device=self.device)

        fake = g(self.noise[step % self.steps])
        loss_d = F.binary_cross_entropy_with_logits(d(real), ones) + F.binary_cross_entropy_with_logits(
            d(fake.detach()), zeros
        )
        self.opt_d.zero_grad()
        loss_d.backward()
        self.opt_d.step()

        loss_g = F.binary_cross_entropy_with_logits(d(fake), ones)
        self.opt_g.zero_grad()
        loss_g.backward()
        self.opt_g.step()

        ctx.record("loss_d", loss_d.item())
        ctx.record("loss_g", loss_g.item())
        return loss_d.item() + loss_g.item()

    def infer(self, ctx) -> dict:
        images, scores = self.predict()
        return {"images": images.detach().cpu().numpy(), "scores": scores.detach().cpu().numpy()}
