"""Plain records passed between the steps of the pipeline (docs/design.md, "Flow of modelci run").

They hold data only; the store turns them into rows and the checks compare them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

#: result statuses (docs/design.md, "Conventions")
STATUSES = ("ok", "failed", "crashed", "timeout", "skipped", "error")


@dataclass
class Metric:
    """A named series: raw samples (`time.*`, `mem.*`, user metrics) or a per-step curve (`loss`)."""

    name: str
    kind: str  # "samples" | "curve"
    values: list[float]
    unit: str = ""

    @property
    def median(self) -> float | None:
        """Median of the values, or None when empty."""
        if not self.values:
            return None
        ordered = sorted(self.values)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


class ResultInfo(TypedDict, total=False):
    """What a result says about how it was measured (`Result.info`): every key any step writes, declared here
    with its type. Stored as JSON with the result (`results.info`), so a key is only ever added; a reader of an
    older row finds fewer keys, never other ones."""

    # -- written by the child (workload/child.py) --------------------------------------------------------
    #: top-level module -> {"version", "file"}: proof of which framework build ran
    modules: dict[str, dict[str, str]]
    #: the saved-model entries of each format the workload saved (compat reads them)
    saved: list[dict[str, Any]]
    python: str
    #: the device the workload ran on ("cpu", "cuda:0"), and the framework helper's versions of its stack
    device: str
    versions: dict[str, str]
    #: a `devices > 1` workload: how many ranks, how they started ("fork" | "spawn") and why not forked
    world_size: int
    ranks: str
    ranks_reason: str
    #: a `nodes > 1` workload: this node's rank, where the ranks met (rank 0's node address and port) and this
    #: node's own address
    node_rank: int
    master_addr: str
    master_port: int
    node_address: str
    #: whether the timed inference repeats gave bit-identical outputs
    infer_repeatable: bool
    #: bytes of the resident set at the end: {"anon", "file", "shmem"}
    rss_end: dict[str, int]
    #: why the outputs were not written (no room in the scratch folder); the run that stores it is incomplete
    outputs_lost: str
    # -- written by the executor (execute/forked.py) -------------------------------------------------------
    #: "fork" or "spawn", and why a workload did not fork when it was meant to
    isolation: str
    isolation_reason: str
    worker_rss: int
    # -- written by the Ray executor's agent (execute/ray_agent.py) ----------------------------------------
    #: the node that ran it: {"id": Ray's node id, "address": its IP, "hostname"}
    node: dict[str, str]
    #: a workload that spans nodes (execute/ray_nodes.py): each node's rank, address, status and reason
    nodes: list[dict[str, Any]]
    # -- written by the workflow ---------------------------------------------------------------------------
    #: the harness settings it was measured with (seed, threads, repeats): what stored results are reused by
    settings: dict[str, int]
    #: a git target that did not build: the commit and the build plan's text
    build_failed: bool
    commit: str
    build: str
    # -- read back from the store, or made by a bisect's compat probe ---------------------------------------
    #: the stored findings of the result (`modelci show`)
    findings: list[dict[str, Any]]
    #: a compat probe: "<format> saved by <producer>" -> the outcome of loading it
    compat: dict[str, str]


@dataclass
class Result:
    """One workload's outcome in a run, as executed or as loaded from the store."""

    workload: str
    status: str
    reason: str = ""
    traceback: str = ""
    stderr_tail: str = ""
    code_hash: str = ""
    framework: str = ""
    domain: str = ""
    duration: float = 0.0
    metrics: dict[str, Metric] = field(default_factory=dict)
    #: output name -> numpy array (loaded lazily when the result comes from the store)
    outputs: Mapping[str, Any] = field(default_factory=dict)
    #: what the child saw: module versions and files, bit-reproducibility, saved-model entries (ResultInfo)
    info: ResultInfo = field(default_factory=dict)  # type: ignore[assignment]
    #: set once stored
    id: int | None = None
    #: the stored run it belongs to, when loaded from the history
    run_id: int | None = None
    #: True when taken from the history instead of executed again
    reused: bool = False


def clean_text(text: str) -> str:
    """`text` as any database can store it: a lone surrogate (what `os.fsdecode` makes of a file name that is
    not UTF-8, `data-\\udcff.bin`) and a NUL (PostgreSQL's text refuses it) become visible escapes; the rest is
    kept. A workload's message must never make the run that holds it impossible to store."""
    if text.isascii() and "\x00" not in text:
        return text
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")


#: a URL's password (`scheme://user:password@`), and a query argument that holds a secret (`?password=...`).
#: A quote that ends a word (whitespace or the end after it) ends the argument's value: it closes the quoted
#: argument the URL is in. A command line is redacted again where it is stored (Store.ingest), and in one that
#: shlex.quote wrote, taking that quote in with the value left the rest of the line unquoted. Any other quote is
#: part of the value (shlex writes a quote inside an argument as '"'"'), and so is redacted with it
_URL_PASSWORD = re.compile(r"(://[^/\s:@]*):[^/\s@]+@")
_SECRET_QUERY = re.compile(r"(?i)([?&](?:password|passwd|pwd|sslpassword|token|access_token|secret|api_key)=)"
                           r"""(?:[^&\s'"]|['"](?!\s|$))+""")
#: what stands for a password that was taken out (`redacted`)
REDACTED = "***"


def redacted(text: str) -> str:
    """`text` with any password or token of a URL in it replaced by `***`: what is stored or shown of a command
    line, a target or a repository. The history is shared, and shown by `show`, the report files and the
    dashboard a CI job publishes: a `--db postgresql://ci:secret@db/h` or a
    `git+https://x-access-token:secret@host/fw.git@v1` put the secret in all of them."""
    return _SECRET_QUERY.sub(rf"\1{REDACTED}", _URL_PASSWORD.sub(rf"\1:{REDACTED}@", text))


def redacted_json(value: Any) -> Any:
    """`value` (JSON-like: dicts, lists, strings) with `redacted` applied to every string in it."""
    if isinstance(value, str):
        return redacted(value)
    if isinstance(value, Mapping):
        return {key: redacted_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redacted_json(item) for item in value]
    return value


def fit(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, ending with 12 hex digits of the whole text's digest when cut: two
    texts that differ past the cut stay different, and one text is always cut the same way."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{text[:limit - 13]}-{digest}"


def clean(value: Any) -> Any:
    """`clean_text` applied to every string inside `value` (dicts, lists, tuples), keys included."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(clean(v) for v in value)
    return value


def clean_result(result: Result) -> Result:
    """Make every string a Result holds storable (`clean_text`), in place; returns it."""
    for name in ("workload", "status", "reason", "traceback", "stderr_tail", "code_hash", "framework", "domain"):
        setattr(result, name, clean_text(getattr(result, name)))
    result.info = clean(result.info)
    for metric in result.metrics.values():
        metric.name, metric.unit = clean_text(metric.name), clean_text(metric.unit)
    result.metrics = {metric.name: metric for metric in result.metrics.values()}
    return result
