"""Source of the fake framework `fakefw`, pure Python so that it installs offline in milliseconds.

Version 1.1 differs from 1.0 in exactly five places: one output
changes by about 1e-3 relative, one function is twice as slow, and three workloads raise, abort,
or hang. Everything else is identical, so `compare` must flag exactly those.
"""

TEMPLATE = '''\
"""fakefw {version}: a fake framework for modelci's tests."""
import math
import os
import time

__version__ = "{version}"
_V11 = __version__ == "1.1"


def dense(weights, inputs):
    """Matrix-vector product in plain Python."""
    return [sum(w * x for w, x in zip(row, inputs)) for row in weights]


def activation(values):
    """tanh, elementwise."""
    return [math.tanh(v) for v in values]


def output_scale(values):
    """The last layer's scaling; 1.1 changes it by 1e-3 relative (a numeric regression)."""
    factor = 1.001 if _V11 else 1.0
    return [v * factor for v in values]


def heavy_kernel(n):
    """A kernel; 1.1 takes twice as long (a 2x slowdown). It sleeps n microseconds rather than computing, so a
    busy machine (CI runs other jobs beside these tests) stretches neither side and the ratio stays near 2."""
    time.sleep(n * 1e-6 * (2 if _V11 else 1))
    return float(n)


def validate(values):
    """Input validation; 1.1 raises on valid input (a failure)."""
    if _V11:
        raise RuntimeError("fakefw 1.1: validate() rejects a valid input")
    return values


def fused_update(weights, grads, lr):
    """An in-place update; 1.1 aborts the process (a crash)."""
    if _V11:
        os.abort()
    return [[w - lr * g for w, g in zip(wr, gr)] for wr, gr in zip(weights, grads)]


def sync_barrier():
    """A barrier; 1.1 never returns (a hang)."""
    while _V11:
        time.sleep(0.05)
'''


def source(version: str) -> str:
    """The text of fakefw/__init__.py at `version`."""
    return TEMPLATE.format(version=version)
