"""Which workloads `-k PATTERN` selects: the one rule that discovery, a git build's static needs and compat share.

A pattern is a glob when it holds `*`, `?` or `[`, else a substring; it is matched against the workload's id
(`torch/LeNet`) and its name (`LeNet`). A pattern that is exactly a workload's id selects that workload alone:
bisect and compare's confirmation name one workload this way, and `-k torch/LeNet` must not also pick
`torch/LeNetWide`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")


def matches(pattern: str, text: str) -> bool:
    """Whether `text` matches `pattern`: a glob (`*`, `?`, `[`) matches the whole text, anything else is a
    substring."""
    return fnmatch.fnmatchcase(text, pattern) if any(c in pattern for c in "*?[") else pattern in text


def select(pattern: str | None, items: Iterable[T], workload_id: Callable[[T], str] = str) -> list[T]:
    """The items (workloads, manifests, ids) that `-k pattern` selects, in their order; all of them without a
    pattern. `workload_id` gives an item's id `<suite>/<name>`."""
    items = list(items)
    if not pattern:
        return items
    exact = [item for item in items if workload_id(item) == pattern]
    if exact:
        return exact
    return [item for item in items
            if matches(pattern, workload_id(item)) or matches(pattern, workload_id(item).rpartition("/")[2])]
