"""Write arrays as `.npy` files, with numpy when the environment has it and with the standard library when not.

A pure-Python target (a fake framework in the tests, a tokenizer library) still gets its outputs
compared, so the child must not need numpy to write them.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any


def _numpy():
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def _flatten(value: Any) -> tuple[list[float], list[int]]:
    """Flatten nested lists/tuples of numbers into values and a rectangular shape."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [float(value)], []
    if isinstance(value, bool):
        return [float(value)], []
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"cannot turn a {type(value).__name__} into an array without numpy")
    parts = [_flatten(item) for item in value]
    shapes = {tuple(shape) for _, shape in parts}
    if len(shapes) > 1:
        raise ValueError("nested lists are not rectangular")
    inner = list(shapes.pop()) if shapes else []
    return [v for values, _ in parts for v in values], [len(value), *inner]


def _stdlib_npy(value: Any) -> tuple[bytes, str, list[int]]:
    """Encode nested numbers as a float64 `.npy` (format 1.0) without numpy."""
    values, shape = _flatten(value)
    shape_text = "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': %s, }" % shape_text
    # the header is padded so that the data starts on a 64-byte boundary, as numpy does
    total = 10 + len(header) + 1
    header += " " * ((64 - total % 64) % 64) + "\n"
    prefix = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header))
    return prefix + header.encode("latin1") + struct.pack(f"<{len(values)}d", *values), "float64", shape


def to_bytes(value: Any) -> bytes:
    """The `.npy` encoding of `value`; two values are bit-identical when their encodings are equal."""
    np = _numpy()
    if np is None:
        return _stdlib_npy(value)[0]
    array = np.asarray(value)
    if array.dtype.hasobject:
        raise TypeError("it makes an array of Python objects (dtype object); return numeric arrays")
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def save(path: Path, value: Any) -> tuple[str, list[int]]:
    """Write `value` as `.npy` at `path`; returns its dtype name and shape."""
    np = _numpy()
    if np is None:
        data, dtype, shape = _stdlib_npy(value)
        path.write_bytes(data)
        return dtype, shape
    array = np.asarray(value)
    path.write_bytes(to_bytes(array))
    return str(array.dtype), list(array.shape)
