"""zoo:torch vision workloads: a small ResNet with BatchNorm and LeNet, on synthetic images.

The images are class prototypes plus noise, so the loss falls within a few steps. Everything is built
from `ctx.seed`; nothing is downloaded.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from _common import TorchWorkload


def _prototype_images(seed: int, count: int, classes: int, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` images shaped `shape`: one random prototype per class plus noise, and their labels."""
    gen = torch.Generator().manual_seed(seed)
    prototypes = torch.randn(classes, *shape, generator=gen)
    labels = torch.randint(0, classes, (count,), generator=gen)
    images = prototypes[labels] + 0.8 * torch.randn(count, *shape, generator=gen)
    return images, labels


class _PrototypeClassifier(TorchWorkload):
    """A classifier of `_prototype_images` shaped `shape`: it trains on two alternating batches of `batch` images
    and infers on the 32 held out after them."""

    domain = "vision"
    shape: tuple[int, ...]
    batch: int

    def make_optimizer(self) -> torch.optim.Optimizer:
        """The optimizer of `self.model`."""
        raise NotImplementedError

    def setup(self, ctx) -> None:
        self.device = torch.device(ctx.device)
        train = 2 * self.batch
        images, labels = _prototype_images(ctx.seed, train + 32, 10, self.shape)
        self.images, self.labels = images[:train].to(self.device), labels[:train].to(self.device)
        self.eval_images = images[train:].to(self.device)
        self.model = self.build_model()
        self.optimizer = self.make_optimizer()

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """The evaluation batch, which `infer` feeds the model."""
        return (self.eval_images,)

    def train_step(self, ctx, step: int) -> float:
        self.model.train()
        rows = slice((step % 2) * self.batch, (step % 2 + 1) * self.batch)
        return self.optimize(F.cross_entropy(self.model(self.images[rows]), self.labels[rows]))

    def infer(self, ctx) -> dict:
        return {"logits": self.predict().detach().cpu().numpy()}


class _BasicBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm and an identity (or 1x1 projection) shortcut."""

    def __init__(self, inp: int, out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inp, out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out)
        self.conv2 = nn.Conv2d(out, out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or inp != out:
            self.shortcut = nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class _ResNetMiniNet(nn.Module):
    """ResNet for 32x32 images: a stem and three stages of one residual block each (16, 32, 64 channels)."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.stages = nn.Sequential(_BasicBlock(16, 16, 1), _BasicBlock(16, 32, 2), _BasicBlock(32, 64, 2))
        self.head = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.stages(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(features, 1), 1))


class ResNetMini(_PrototypeClassifier):
    """A three-stage ResNet with BatchNorm trained with SGD + momentum on 32x32 synthetic images."""

    steps = 12
    shape, batch = (3, 32, 32), 32

    def build_model(self) -> nn.Module:
        return _ResNetMiniNet().to(self.device)

    def make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)


class _LeNetNet(nn.Module):
    """LeNet-5: two conv + max-pool stages and three fully connected layers, for 1x28x28 images."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(torch.tanh(self.conv1(x)), 2)
        x = F.max_pool2d(torch.tanh(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


class LeNet(_PrototypeClassifier):
    """LeNet-5 trained with Adam on 28x28 synthetic digits-like images."""

    steps = 20
    shape, batch = (1, 28, 28), 64
    jit_mode = "script"  # TorchScript by compiling the code; the other workloads trace

    def build_model(self) -> nn.Module:
        return _LeNetNet().to(self.device)

    def make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.model.parameters(), lr=2e-3)

    def infer(self, ctx) -> dict:
        logits = self.predict()
        return {"logits": logits.detach().cpu().numpy(), "probabilities": F.softmax(logits, -1).cpu().numpy()}
