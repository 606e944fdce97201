"""The workload contract (DESIGN.md, "The workload contract").

A workload author writes the model; the harness owns seeding, determinism, timing, repeats,
capture and saving. Nothing here may import anything outside the standard library.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar


class SkipWorkload(Exception):
    """Raise from any phase to mark the workload `skipped` with a reason (e.g. it needs a GPU)."""


@dataclass
class Context:
    """What the harness hands to each phase of a workload."""

    seed: int = 0
    device: str = "cpu"
    rank: int = 0
    world_size: int = 1
    scratch: Path = field(default_factory=Path)
    #: user metrics recorded with `record`, name -> samples
    metrics: dict[str, list[float]] = field(default_factory=dict)
    #: free-form state a workload may keep between phases
    state: dict[str, Any] = field(default_factory=dict)

    def rng(self, offset: int = 0) -> random.Random:
        """A stdlib random generator derived from the seed; `offset` gives independent streams."""
        return random.Random(self.seed * 1_000_003 + offset)

    def record(self, name: str, value: float) -> None:
        """Record one sample of a user metric (e.g. `accuracy`); it is stored and compared like the others."""
        self.metrics.setdefault(name, []).append(float(value))


class Workload:
    """Base class of one model in a suite. Subclasses set the class attributes and write the phases."""

    #: selects the framework helper (seeding, to-numpy, save/load): a name in `workload.frameworks.REGISTRY`
    framework: ClassVar[str] = "numpy"
    domain: ClassVar[str] = "other"
    #: extra needs, installed into the environment next to the target
    requires: ClassVar[list[str]] = []
    #: training steps that are recorded
    steps: ClassVar[int] = 10
    #: save formats checked for backward compatibility
    formats: ClassVar[tuple[str, ...]] = ()
    #: number of cooperating processes (torch.distributed); rank 0 reports
    devices: ClassVar[int] = 1
    #: inference warm-up calls and timed repeats
    warmup: ClassVar[int] = 1
    repeats: ClassVar[int] = 5
    #: the name that identifies the workload in history; defaults to the class name
    name: ClassVar[str | None] = None

    def setup(self, ctx: Context) -> None:
        """Build the model and its data from `ctx.seed`. Never download anything."""

    def train_step(self, ctx: Context, step: int) -> float:
        """Run one training step and return its loss."""
        raise NotImplementedError

    def infer(self, ctx: Context) -> dict[str, Any]:
        """Run inference and return {name: array}; these outputs are compared across versions."""
        raise NotImplementedError

    def save(self, ctx: Context, fmt: str, path: Path) -> None:
        """Save the trained model in `fmt` at `path`; optional when the framework helper knows `fmt`."""
        raise NotImplementedError

    def load(self, ctx: Context, fmt: str, path: Path) -> Any:
        """Load a model saved in `fmt` and make `infer` use it; returns the loaded model."""
        raise NotImplementedError

    @classmethod
    def workload_name(cls) -> str:
        """The name this workload is stored under."""
        return cls.name or cls.__name__
