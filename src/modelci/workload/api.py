"""The workload contract (docs/design.md, "The workload contract").

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


def shown(value: Any) -> str:
    """A value a workload gave, in a message: its type and a repr cut to 60 characters (its type alone when its
    repr raises: the message must not fail on the very value it is about)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - the workload's own __repr__ may raise anything
        return f"{type(value).__name__} (its repr() raised)"
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def exception_message(exc: BaseException) -> str:
    """`str(exc)`, or `<Type; its str() raised Error>` when the exception's own `__str__` raises."""
    try:
        return str(exc)
    except Exception as err:  # noqa: BLE001 - the workload's own __str__ may raise anything
        return _unprintable(exc, err)


def exception_text(exc: BaseException) -> str:
    """`Type: message` of an exception, safe against an exception whose `__str__` itself raises. Every reason the
    child writes goes through here, since a failure in formatting the failure would lose the result and leave only
    an exit code."""
    try:
        return f"{type(exc).__name__}: {str(exc)}"
    except Exception as err:  # noqa: BLE001 - the workload's own __str__ may raise anything
        return _unprintable(exc, err)


def _unprintable(exc: BaseException, err: Exception) -> str:
    return f"<{type(exc).__name__}; its str() raised {type(err).__name__}>"


def exception_repr(exc: BaseException) -> str:
    """`SystemExit(0)`, `KeyboardInterrupt()`: an exception as the code that raised it wrote it; the type name
    alone when its repr raises."""
    try:
        return repr(exc)
    except Exception:  # noqa: BLE001 - the workload's own __repr__ may raise anything
        return type(exc).__name__


#: the metrics the harness records itself (`child.run_phases`, `child.execute`): a workload's own metric of one of
#: these names would replace the harness's figure, and `time.*`/`mem.*` are read as timings and memory by the
#: checks, `output:NAME` names an inference output in the policy, `status` the result's status. The settings
#: checks (alarms/settings.is_builtin_metric) read the first two too: one list of the harness's own metrics
RESERVED_METRICS = ("status", "loss")
MEASURED_PREFIXES = ("time.", "mem.")
RESERVED_PREFIXES = (*MEASURED_PREFIXES, "output:")
#: the longest metric name the history stores
METRIC_NAME_MAX = 200


def metric_name_problem(name: Any) -> str:
    """Why a workload cannot record a metric named `name`, or "" when it can."""
    if not isinstance(name, str) or not name.strip():
        return "a metric name is a non-empty string"
    if len(name) > METRIC_NAME_MAX:
        return f"the name is {len(name)} characters long; the most is {METRIC_NAME_MAX}"
    if any(ord(ch) < 32 or 127 <= ord(ch) < 160 for ch in name):
        return "a metric name may not hold a newline or another control character"
    if name in RESERVED_METRICS or name.startswith(RESERVED_PREFIXES):
        return ("the harness records that name itself (loss, status, time.*, mem.*, output:*); give your metric "
                "a name of its own, such as 'accuracy' or 'loss_d'")
    return ""


@dataclass
class Context:
    """What the harness hands to each phase of a workload."""

    seed: int = 0
    device: str = "cpu"
    rank: int = 0
    world_size: int = 1
    #: the rank among this node's ranks, and which node this is (`nodes > 1`)
    local_rank: int = 0
    node_rank: int = 0
    scratch: Path = field(default_factory=Path)
    #: user metrics recorded with `record`, name -> samples
    metrics: dict[str, list[float]] = field(default_factory=dict)
    #: free-form state a workload may keep between phases
    state: dict[str, Any] = field(default_factory=dict)

    def rng(self, offset: int = 0) -> random.Random:
        """A stdlib random generator derived from the seed; `offset` gives independent streams."""
        return random.Random(self.seed * 1_000_003 + offset)

    def record(self, name: str, value: float) -> None:
        """Record one sample of a user metric (e.g. `accuracy`); it is stored and compared like the others.

        A name the harness records itself (`loss`, `time.*`, `mem.*`) is refused here, in the call that gave it:
        stored, it would replace the harness's own figure (a recorded `time.train` became the run's train time).
        """
        problem = metric_name_problem(name)
        if problem:
            label = repr(name) if isinstance(name, str) else shown(name)
            raise ValueError(f"ctx.record({label}, ...) refused the name: {problem}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"ctx.record({name!r}, ...) got {shown(value)}; record a number (a float, or a tensor "
                            "of one element)") from None
        self.metrics.setdefault(name, []).append(number)


class Format(str):
    """A save format named in `Workload.formats`, with whether loading it can execute code.

    A plain string is a format too. A format the workload saves and loads itself with its own `save`/`load` is
    counted as executing code on load unless it is declared here with `unsafe=False`: a custom loader may
    unpickle, and modelci cannot tell. A format the framework helper saves takes the helper's word.

        formats = ("state_dict", modelci.Format("npz_weights", unsafe=False))
    """

    unsafe: bool | None

    def __new__(cls, name: str, unsafe: bool | None = None) -> Format:
        self = super().__new__(cls, name)
        self.unsafe = unsafe
        return self

    def __reduce__(self) -> tuple:
        return Format, (str(self), self.unsafe)


class Workload:
    """Base class of one model in a suite. Subclasses set the class attributes and write the phases."""

    #: selects the framework helper (seeding, to-numpy, save/load): a name in `workload.frameworks.REGISTRY`
    framework: ClassVar[str] = "numpy"
    domain: ClassVar[str] = "other"
    #: extra needs, installed into the environment next to the target
    requires: ClassVar[list[str]] = []
    #: training steps that are recorded
    steps: ClassVar[int] = 10
    #: save formats checked for backward compatibility (names, or `Format(name, unsafe=...)`): the workload's
    #: own `save`/`load` when it writes them, else the framework helper's
    formats: ClassVar[tuple[str, ...]] = ()
    #: number of cooperating processes (torch.distributed) on each node; rank 0 reports
    devices: ClassVar[int] = 1
    #: number of machines the ranks span (`nodes * devices` ranks in all); more than 1 needs a cluster executor
    #: (`executor = "ray"`), which starts `devices` ranks on each of `nodes` different nodes
    nodes: ClassVar[int] = 1
    #: what a node must offer to run it, for the Ray executor's placement: `{"gpu": 1}`, `{"cpu": 4}`,
    #: `{"memory": 8e9}` (bytes) or a custom resource a node was started with (`{"a100": 1}`); docs/ray.md.
    #: A workload that no node of the cluster can place is `skipped` with the reason. The local executor runs
    #: every workload on this machine.
    resources: ClassVar[dict[str, float]] = {}
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
    def format_unsafe(cls, fmt: str, helper_unsafe: tuple[str, ...] = ()) -> bool:
        """Whether loading `fmt` can execute code: the format's declared flag; else, for a format the workload
        saves or loads itself, True (unknown means unsafe); else whether the helper lists it as unsafe."""
        declared = next((f.unsafe for f in cls.formats if isinstance(f, Format) and f == fmt), None)
        if declared is not None:
            return bool(declared)
        if cls.save is not Workload.save or cls.load is not Workload.load:
            return True
        return fmt in helper_unsafe

    @classmethod
    def workload_name(cls) -> str:
        """The name this workload is stored under."""
        return cls.name or cls.__name__
