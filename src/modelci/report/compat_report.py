"""The compat matrix: producer build × consumer build, per workload and format, in the console, Markdown and JSON.

Every cell is one outcome (`ok`, `load_failed`, `outputs_differ`, `unsupported`, `missing`, `unreadable`,
`save_failed`, `not_saved`, `not_checked`); each row says how the producer's run saved the format (`saved`: ok,
failed, skipped, as the run's own summary does); below the matrix each cell that is not ok is spelled out with its
reason, and formats that can execute code on load are named as such.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from modelci.report.console import escape
from rich.table import Table

from modelci.report.console import SAVE_STYLE  # a save's status looks as it does in the run's table
from modelci.report.markdown import cell, code

#: bump on any change that breaks a reader; readers check it
SCHEMA = "modelci.compat/1"
OUTCOME_STYLE = {"ok": "green", "missing": "yellow", "unsupported": "red", "load_failed": "bold red",
                 "outputs_differ": "bold red", "unreadable": "bold red", "save_failed": "yellow",
                 "not_saved": "yellow", "not_checked": "yellow"}
UNSAFE_NOTE = "executes code on load"


def matrix(entries: list[Any]) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """workload -> format -> producer label -> consumer label -> entry, in the entries' order."""
    table: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for e in entries:
        cells = table.setdefault(e.workload, {}).setdefault(e.format, {})
        cells.setdefault(e.producer.get("label", "?"), {})[e.consumer.get("label", "?")] = e
    return table


def consumers(entries: list[Any]) -> list[str]:
    """The consumer labels, in the order they first appear."""
    return list(dict.fromkeys(e.consumer.get("label", "?") for e in entries))


def summary(entries: list[Any]) -> dict[str, int]:
    """Outcome -> count."""
    return dict(Counter(e.outcome for e in entries))


def unsafe_formats(entries: list[Any]) -> list[str]:
    """The formats among the entries whose loading can execute code."""
    return sorted({e.format for e in entries if e.unsafe})


def _entry_json(e: Any) -> dict[str, Any]:
    return {"workload": e.workload, "format": e.format, "producer": e.producer, "consumer": e.consumer,
            "direction": e.direction, "outcome": e.outcome, "gating": e.gating, "saved": e.saved,
            "reason": e.reason, "error": e.error,
            "executes_code_on_load": e.unsafe, "sha256": e.sha256, "size": e.size, "manifest": e.key,
            "numbers": e.numbers, "times": e.times, "traceback": e.traceback}


def to_json(outcome: Any) -> dict[str, Any]:
    """The versioned JSON report of one compat check."""
    cells = {w: {f: {p: {c: e.outcome for c, e in row.items()} for p, row in by_p.items()} for f, by_p in by_f.items()}
             for w, by_f in matrix(outcome.entries).items()}
    from modelci.compat import target_dict

    return {"schema": SCHEMA, "kind": "compat", "regressed": outcome.regressed,
            "interrupted": bool(getattr(outcome, "interrupted", False)), "check_id": outcome.check_id,
            "direction": outcome.direction, "target": target_dict(outcome.target), "artifacts": outcome.artifacts,
            "summary": summary(outcome.entries), "executes_code_on_load": unsafe_formats(outcome.entries),
            "matrix": cells, "entries": [_entry_json(e) for e in outcome.entries]}


def write_json(path: str | Path, outcome: Any) -> None:
    """Write the JSON report (NaN and infinities as strings, like the run report)."""
    from modelci.report import json_report

    json_report.write(path, to_json(outcome))


def _headline(outcome: Any, name: Callable[[str], str] = str) -> str:
    """One sentence: what was checked and what came of it; `name` shows the target's label (a code span in
    Markdown)."""
    counts = summary(outcome.entries)
    bad = sum(1 for e in outcome.entries if e.gating)
    parts = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
    cut = (" before the check was interrupted; the rest were not checked"
           if getattr(outcome, "interrupted", False) else "")
    return (f"{outcome.direction} compatibility of {name(outcome.target.label)}: {len(outcome.entries)} saved "
            f"model(s) checked ({parts}){cut}; {bad} regression(s)")


def _problems(outcome: Any) -> list[Any]:
    return [e for e in outcome.entries if e.outcome != "ok"]


def _saved(row: dict[str, Any]) -> str:
    """How the producer's run saved one row's format (the same in every consumer's cell)."""
    return next(iter(row.values())).saved


def _shown(entries: list[Any]) -> dict[str, str]:
    """label -> how the report names the build: with how a commit was built where it appears built two ways."""
    from modelci.compat import shown_labels

    return shown_labels([b for e in entries for b in (e.producer, e.consumer)])


def _where(e: Any, shown: dict[str, str], name: Callable[[str], str] = str) -> str:
    """Which saved model an entry is and where it was loaded; `name` shows each name (a code span in Markdown)."""
    producer, consumer = e.producer.get("label", "?"), e.consumer.get("label", "?")
    return (f"{name(e.workload)} {name(e.format)} saved by {name(shown.get(producer, producer))}, loaded in "
            f"{name(shown.get(consumer, consumer))}")


def markdown(outcome: Any) -> str:
    """The matrix as Markdown: one table per workload, then the problems and the unsafe formats. Names (workloads,
    formats, builds, the store) are code spans that show them as they are, and reasons plain text (markdown.code
    and markdown.cell, as in the run's summary): a `|`, a backtick, `*`, `<` or a newline in one of them breaks
    no table and adds no markup."""
    lines = [f"# Compatibility: {code(outcome.target.label)}", "", _headline(outcome, code) + ".", "",
             f"Artifact store: {code(outcome.artifacts)}", ""]
    names, shown = consumers(outcome.entries), _shown(outcome.entries)
    for workload, by_format in matrix(outcome.entries).items():
        header = " | ".join(code(shown.get(c, c), table=True) for c in names)
        lines += [f"## {code(workload)}", "", f"| format | saved by | saved | {header} |",
                  "|---|---|---|" + "---|" * len(names)]
        for fmt, by_producer in by_format.items():
            unsafe = any(e.unsafe for row in by_producer.values() for e in row.values())
            fmt_shown = code(fmt, table=True) + (f" ({UNSAFE_NOTE})" if unsafe else "")
            for producer, row in by_producer.items():
                cells = [(f"**{row[c].outcome}**" if row[c].gating else row[c].outcome) if c in row else ""
                         for c in names]
                by = code(shown.get(producer, producer), table=True)
                lines.append(f"| {fmt_shown} | {by} | {cell(_saved(row))} | " + " | ".join(cells) + " |")
        lines.append("")
    problems = _problems(outcome)
    if problems:
        lines += ["## Problems", ""]
        lines += [f"- {_where(e, shown, code)}: **{e.outcome}**: {cell(e.reason)}" for e in problems]
        lines.append("")
    unsafe = unsafe_formats(outcome.entries)
    if unsafe:
        lines += ["## Formats that execute code on load", "",
                  "Loading these runs code stored in the file; load them only from a store you trust: "
                  + ", ".join(code(f) for f in unsafe) + ".", ""]
    return "\n".join(lines)


def write_markdown(path: str | Path, outcome: Any) -> None:
    """Write the Markdown report whole (report.files.write_text: through a FIFO or /dev/stdout too)."""
    from modelci.report import files

    files.write_text(path, markdown(outcome))


def render(outcome: Any, out: Console) -> None:
    """The matrix in the console: one table per workload, then every cell that is not ok, with its error."""
    names, labels = consumers(outcome.entries), _shown(outcome.entries)
    for workload, by_format in matrix(outcome.entries).items():
        table = Table(title=escape(workload), title_justify="left", show_lines=False)
        table.add_column("format")
        table.add_column("saved by")
        table.add_column("saved")
        for name in names:
            table.add_column(escape(labels.get(name, name)))
        for fmt, by_producer in by_format.items():
            unsafe = any(e.unsafe for row in by_producer.values() for e in row.values())
            shown = escape(fmt) + (f" [yellow]({UNSAFE_NOTE})[/]" if unsafe else "")
            for producer, row in by_producer.items():
                cells = [f"[{OUTCOME_STYLE.get(row[c].outcome, '')}]{row[c].outcome}[/]" if c in row else ""
                         for c in names]
                saved = _saved(row)
                table.add_row(shown, escape(labels.get(producer, producer)),
                              f"[{SAVE_STYLE.get(saved, '')}]{escape(saved)}[/]", *cells)
        out.print(table)
    for e in _problems(outcome):
        style = OUTCOME_STYLE.get(e.outcome, "")
        out.print(f"[{style}]{e.outcome}[/] {escape(_where(e, labels))}: {escape(e.reason)}")
    unsafe = unsafe_formats(outcome.entries)
    if unsafe:
        out.print(f"[yellow]formats that can execute code on load:[/] {escape(', '.join(unsafe))} - load them only "
                  "from a store you trust")
    out.print(("[bold red]" if outcome.regressed else "[green]") + escape(_headline(outcome)) + "[/]")
