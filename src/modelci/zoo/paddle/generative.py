"""zoo:paddle generative workload: a small DCGAN on synthetic 16x16 blob images.

Generator and discriminator have their own Adam optimizer and take alternating steps. The recorded
loss is D + G; each part is also recorded as a user metric (`loss_d`, `loss_g`).
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import nn

from _common import PaddleWorkload, use_device


def _blob_images(rng: np.random.RandomState, count: int, size: int = 16) -> np.ndarray:
    """float32 images in [-1, 1] holding one Gaussian blob each, at a random place and width."""
    centre = rng.uniform(3, size - 3, (count, 2, 1, 1))
    width = rng.uniform(1.5, 3.0, (count, 1, 1))
    grid = np.arange(size, dtype="float64")
    dist2 = (grid.reshape(1, size, 1) - centre[:, 0]) ** 2 + (grid.reshape(1, 1, size) - centre[:, 1]) ** 2
    return (np.exp(-dist2 / (2 * width**2)) * 2 - 1)[:, None].astype("float32")


class _Generator(nn.Layer):
    """z -> 32x4x4 -> two strided transposed convolutions (BatchNorm, ReLU) -> 1x16x16 in tanh."""

    def __init__(self, latent: int) -> None:
        super().__init__()
        self.project = nn.Sequential(nn.Linear(latent, 32 * 4 * 4), nn.BatchNorm1D(32 * 4 * 4), nn.ReLU())
        self.upsample = nn.Sequential(
            nn.Conv2DTranspose(32, 16, 4, 2, 1, bias_attr=False),
            nn.BatchNorm2D(16),
            nn.ReLU(),
            nn.Conv2DTranspose(16, 1, 4, 2, 1),
            nn.Tanh(),
        )

    def forward(self, z):
        return self.upsample(self.project(z).reshape([-1, 32, 4, 4]))


class _Discriminator(nn.Layer):
    """1x16x16 -> two strided convolutions (LeakyReLU, BatchNorm) -> one real/fake logit."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2D(1, 16, 4, 2, 1),
            nn.LeakyReLU(0.2),
            nn.Conv2D(16, 32, 4, 2, 1, bias_attr=False),
            nn.BatchNorm2D(32),
            nn.LeakyReLU(0.2),
        )
        self.classify = nn.Linear(32 * 4 * 4, 1)

    def forward(self, images):
        return self.classify(paddle.flatten(self.features(images), 1)).squeeze(1)


class _DCGANNet(nn.Layer):
    """Both networks in one layer, so that one state dict or program holds the whole GAN."""

    def __init__(self, latent: int) -> None:
        super().__init__()
        self.generator = _Generator(latent)
        self.discriminator = _Discriminator()

    def forward(self, z):
        images = self.generator(z)
        return images, self.discriminator(images)


class DCGANMini(PaddleWorkload):
    """DCGAN with alternating discriminator and generator steps (non-saturating loss); `self.model` holds both
    networks, each with its own optimizer (`opt_d`, `opt_g`)."""

    domain = "generative"
    steps = 16
    latent, batch = 16, 32

    def build_model(self) -> nn.Layer:
        return _DCGANNet(self.latent)

    def setup(self, ctx) -> None:
        use_device(ctx.device)
        rng = np.random.RandomState(ctx.seed)
        self.real = paddle.to_tensor(_blob_images(rng, 128))
        self.noise = paddle.to_tensor(rng.standard_normal((self.steps, self.batch, self.latent)).astype("float32"))
        self.eval_noise = paddle.to_tensor(rng.standard_normal((16, self.latent)).astype("float32"))
        self.model = self.build_model()
        self.opt_d = paddle.optimizer.Adam(
            learning_rate=2e-3, beta1=0.5, parameters=self.model.discriminator.parameters()
        )
        self.opt_g = paddle.optimizer.Adam(learning_rate=2e-3, beta1=0.5, parameters=self.model.generator.parameters())

    def example_inputs(self) -> tuple:
        """The fixed latent batch that `infer` turns into images."""
        return (self.eval_noise,)

    def train_step(self, ctx, step: int) -> float:
        g, d = self.model.generator, self.model.discriminator
        self.model.train()
        lo = (step % 4) * self.batch
        real = self.real[lo : lo + self.batch]
        ones = paddle.ones([self.batch])
        zeros = paddle.zeros([self.batch])

        fake = g(self.noise[step % self.steps])
        loss_d = F.binary_cross_entropy_with_logits(d(real), ones) + F.binary_cross_entropy_with_logits(
            d(fake.detach()), zeros
        )
        self.opt_d.clear_grad()
        loss_d.backward()
        self.opt_d.step()

        # the generator step also leaves gradients on the discriminator; opt_d clears them before its next step
        loss_g = F.binary_cross_entropy_with_logits(d(fake), ones)
        self.opt_g.clear_grad()
        loss_g.backward()
        self.opt_g.step()

        ctx.record("loss_d", float(loss_d))
        ctx.record("loss_g", float(loss_g))
        return float(loss_d) + float(loss_g)

    def infer(self, ctx) -> dict:
        images, scores = self.predict()
        return {"images": images.detach().cpu().numpy(), "scores": scores.detach().cpu().numpy()}
