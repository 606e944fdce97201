"""zoo:paddle vision workloads: a small ResNet with BatchNorm and LeNet, on synthetic images.

The images are class prototypes plus noise drawn with numpy from `ctx.seed`, so the data are the
same in every paddle version; the loss falls within a few steps. Nothing is downloaded.
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import nn

from _common import PaddleWorkload, use_device


def _prototype_images(seed: int, count: int, classes: int, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """`count` float32 images shaped `shape`: one random prototype per class plus noise, and int64 labels."""
    rng = np.random.RandomState(seed)
    prototypes = rng.standard_normal((classes, *shape))
    labels = rng.randint(0, classes, count)
    images = prototypes[labels] + 0.8 * rng.standard_normal((count, *shape))
    return images.astype("float32"), labels.astype("int64")


class _PrototypeClassifier(PaddleWorkload):
    """A classifier of `_prototype_images` shaped `shape`: it trains on two alternating batches of `batch` images
    and infers on the 32 held out after them."""

    domain = "vision"
    shape: tuple[int, ...]
    batch: int

    def make_optimizer(self) -> paddle.optimizer.Optimizer:
        """The optimizer of `self.model`."""
        raise NotImplementedError

    def setup(self, ctx) -> None:
        use_device(ctx.device)
        train = 2 * self.batch
        images, labels = _prototype_images(ctx.seed, train + 32, 10, self.shape)
        self.images, self.labels = paddle.to_tensor(images[:train]), paddle.to_tensor(labels[:train])
        self.eval_images = paddle.to_tensor(images[train:])
        self.model = self.build_model()
        self.optimizer = self.make_optimizer()

    def example_inputs(self) -> tuple:
        """The evaluation batch, which `infer` feeds the model."""
        return (self.eval_images,)

    def train_step(self, ctx, step: int) -> float:
        self.model.train()
        rows = slice((step % 2) * self.batch, (step % 2 + 1) * self.batch)
        return self.optimize(F.cross_entropy(self.model(self.images[rows]), self.labels[rows]))

    def infer(self, ctx) -> dict:
        return {"logits": self.predict().detach().cpu().numpy()}


class _BasicBlock(nn.Layer):
    """Two 3x3 convolutions with BatchNorm and an identity (or 1x1 projection) shortcut."""

    def __init__(self, inp: int, out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2D(inp, out, 3, stride, 1, bias_attr=False)
        self.bn1 = nn.BatchNorm2D(out)
        self.conv2 = nn.Conv2D(out, out, 3, 1, 1, bias_attr=False)
        self.bn2 = nn.BatchNorm2D(out)
        self.shortcut = nn.Identity()
        if stride != 1 or inp != out:
            self.shortcut = nn.Sequential(nn.Conv2D(inp, out, 1, stride, bias_attr=False), nn.BatchNorm2D(out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class _ResNetMiniNet(nn.Layer):
    """ResNet for 32x32 images: a stem and three stages of one residual block each (8, 16, 32 channels;
    half the torch twin's width, because paddle's CPU convolutions are several times slower)."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2D(3, 8, 3, 1, 1, bias_attr=False), nn.BatchNorm2D(8), nn.ReLU())
        self.stages = nn.Sequential(_BasicBlock(8, 8, 1), _BasicBlock(8, 16, 2), _BasicBlock(16, 32, 2))
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        features = self.stages(self.stem(x))
        return self.head(paddle.flatten(F.adaptive_avg_pool2d(features, 1), 1))


class ResNetMini(_PrototypeClassifier):
    """A three-stage ResNet with BatchNorm trained with momentum SGD on 32x32 synthetic images."""

    steps = 12
    shape, batch = (3, 32, 32), 32

    def build_model(self) -> nn.Layer:
        return _ResNetMiniNet()

    def make_optimizer(self) -> paddle.optimizer.Optimizer:
        return paddle.optimizer.Momentum(
            learning_rate=0.05, momentum=0.9, parameters=self.model.parameters(), weight_decay=1e-4
        )


class _LeNetNet(nn.Layer):
    """LeNet-5: two conv + max-pool stages and three fully connected layers, for 1x28x28 images."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2D(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2D(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):
        x = F.max_pool2d(paddle.tanh(self.conv1(x)), 2)
        x = F.max_pool2d(paddle.tanh(self.conv2(x)), 2)
        x = paddle.flatten(x, 1)
        return self.fc3(paddle.tanh(self.fc2(paddle.tanh(self.fc1(x)))))


class LeNet(_PrototypeClassifier):
    """LeNet-5 trained with Adam on 28x28 synthetic digits-like images."""

    steps = 20
    shape, batch = (1, 28, 28), 64

    def build_model(self) -> nn.Layer:
        return _LeNetNet()

    def make_optimizer(self) -> paddle.optimizer.Optimizer:
        return paddle.optimizer.Adam(learning_rate=2e-3, parameters=self.model.parameters())

    def infer(self, ctx) -> dict:
        logits = self.predict()
        return {"logits": logits.detach().cpu().numpy(), "probabilities": F.softmax(logits, -1).cpu().numpy()}
