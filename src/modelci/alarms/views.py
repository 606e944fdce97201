"""Console views of alarms and change points (`modelci alarms`, `modelci history --changes`, after `run`)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from modelci.alarms import wording
from modelci.report.console import escape

EVENT_WORDS = {"open": "[red]alarm opened[/]", "recovered": "[green]alarm recovered[/]",
               "bisected": "[magenta]alarm bisected[/]"}
STATE_STYLE = {"open": "bold red", "acknowledged": "yellow", "silenced": "dim", "resolved": "green"}


def _when(value: Any) -> str:
    return f"{value:%Y-%m-%d %H:%M}" if value is not None else ""


def render_alarms(alarms: list[Any], out: Console) -> None:
    """The alarms, grouped by the target they first fired on."""
    if not alarms:
        out.print("no alarms")
        return
    table = Table(title="alarms", show_lines=False)
    for column in ("id", "state", "kind", "workload", "check:metric", "seen", "last seen", "message"):
        table.add_column(column, overflow="fold")
    group = None
    for alarm in alarms:
        if alarm.group != group:
            group = alarm.group
            table.add_section()
            table.add_row("", f"[bold]{escape(group)}[/]", "", "", "", "", "", "")
        style = "green" if alarm.recovered and alarm.state != "resolved" else STATE_STYLE.get(alarm.state, "")
        table.add_row(str(alarm.id), f"[{style}]{escape(alarm.status)}[/]", alarm.kind, escape(alarm.workload),
                      escape(f"{alarm.check}:{alarm.metric}"), str(alarm.count), _when(alarm.last_seen_at),
                      escape(_listed(alarm)))
    out.print(table)


def _listed(alarm: Any) -> str:
    """An alarm's message as listed: a recovered one says how it is now, in which run, and what it was; shortened
    (`alarms show` has it whole)."""
    now, was = wording.alarm_parts(alarm)
    text = wording.listed(now, was, alarm.id)
    return f"run {alarm.recovery_run_id}: {text}" if was and alarm.recovery_run_id is not None else text


def render_alarm(alarm: Any, out: Console) -> None:
    """One alarm and everything that happened to it."""
    out.print(f"[bold]alarm {alarm.id}[/] [{STATE_STYLE.get(alarm.state, '')}]{escape(alarm.status)}[/] "
              f"({alarm.kind})")
    rows = [("runner", alarm.runner), ("workload", alarm.workload), ("check", alarm.check), ("metric", alarm.metric),
            ("first target", alarm.target), ("last target", alarm.last_target), ("seen", f"{alarm.count} times"),
            ("opened", _when(alarm.opened_at)), ("last seen", _when(alarm.last_seen_at)),
            ("acknowledged by", alarm.acknowledged_by), ("resolved by", alarm.resolved_by), ("note", alarm.note),
            ("message", alarm.message), ("recovered", _recovery(alarm)), ("bisect", alarm.culprit)]
    for name, value in rows:
        if value:
            out.print(f"  {name:<16} {escape(str(value))}")
    if alarm.numbers:
        out.print("  numbers          " + escape(", ".join(f"{k}={v}" for k, v in alarm.numbers.items())))
    table = Table(title="events")
    for column in ("at", "event", "run", "by", "detail"):
        table.add_column(column, overflow="fold")
    for event in alarm.events:
        table.add_row(_when(event["at"]), event["event"], str(event["run_id"] or ""), escape(event["by"]),
                      escape(event["detail"]))
    out.print(table)


def _recovery(alarm: Any) -> str:
    """What the run that recovered a live alarm said, and which run it was; "" unless it is recovered."""
    if not alarm.recovered or alarm.state == "resolved":
        return ""
    return (f"in run {alarm.recovery_run_id}: " if alarm.recovery_run_id is not None else "") + alarm.recovery


def render_changes(found: list[Any], out: Console) -> None:
    """Change points, one row each: where the series changed, by how much, and the evidence."""
    if not found:
        out.print("no change points in the history")
        return
    table = Table(title="change points")
    for column in ("runner", "workload", "metric", "first target after", "change", "before", "after", "p", "",
                   "why"):
        table.add_column(column, overflow="fold")
    for item in found:
        c = item.change
        word = "[red]worse[/]" if item.worse else "[cyan]better[/]"
        shift = c.after_mean - c.before_mean
        # near zero (within 3 noise sds) a percentage means nothing: the shift in the metric's unit instead
        size = f"{c.magnitude:+.1%}" if abs(c.before_mean) > 3 * c.noise_sd and c.before_mean else f"{shift:+.4g}"
        table.add_row(escape(item.series.runner), escape(item.series.workload), escape(item.series.metric),
                      escape(c.label), size, f"{c.before_mean:.4g}±{c.before_sd:.2g}",
                      f"{c.after_mean:.4g}±{c.after_sd:.2g}", f"{c.p_value:.1g}", word, escape(item.finding().reason))
    out.print(table)


def render_alarm_report(report: Any, out: Console) -> None:
    """After a run: the alarms that opened or recovered, and how many notifiers failed (each failure was logged
    as a warning naming the notifier when it happened)."""
    if report is None:
        return
    for event in report.events:
        alarm = event.alarm
        word = "[red]alarm reopened[/]" if event.reopened else EVENT_WORDS[event.event]
        out.print(f"{word} #{alarm.id} {escape(alarm.workload)} {escape(alarm.check)}:{escape(alarm.metric)}: "
                  f"{escape(wording.listed(*wording.event_parts(event), alarm.id))}")
    failed = len(report.failed_deliveries)
    if failed:
        out.print(f"[red]{failed} notifier{'s' * (failed > 1)} could not deliver[/] (see the warnings above); "
                  "the run is stored")
