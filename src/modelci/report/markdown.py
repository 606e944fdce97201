"""GitHub-flavoured Markdown summaries, for pull-request comments and `$GITHUB_STEP_SUMMARY` (`--markdown FILE`).

One table row per workload, problems first; the numbers of every finding fold away under `<details>`, so that a
comment stays short however large the suite.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Any

from modelci.alarms import wording

STATUS_ICON = {"ok": "✅", "skipped": "⏭️", "failed": "❌", "crashed": "💥", "timeout": "⏱️", "error": "⚠️"}
VERDICT_ICON = {"regression": "🔴", "improvement": "🟢", "new": "🆕", "ok": "✅"}


#: the characters Markdown (GitHub's: strikethrough `~`, math `$`) reads as inline syntax; a backslash before any
#: ASCII punctuation makes it the character itself
_INLINE_SYNTAX = re.compile(r"([\\`*_\[\]~|!$])")


def cell(text: Any) -> str:
    """Text as plain text, in a table cell or a line: one line, every Markdown mark escaped with a backslash (an
    error's `**x** [link](javascript:…)` or `![img](…)` stays text) and `&`, `<`, `>` as entities (no HTML tag).
    Not for a code span, which shows an escape as written: `code` is."""
    value = _INLINE_SYNTAX.sub(r"\\\1", " ".join(str(text).split()))
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def code(text: Any, table: bool = False) -> str:
    """Text as one code span, which shows it as it is (an entity or a backslash escape would show literally): on
    one line, fenced by more backticks than its longest run of them, with a space inside the fence where it
    starts or ends with one. In a table row (`table`), `|` is `\\|` even there: GitHub splits a row at every
    unescaped `|` before it reads the code spans, and shows `\\|` in a cell's code span as `|`."""
    value = " ".join(str(text).split())
    if not value:
        return ""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", value)), default=0) + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    if table:
        value = value.replace("|", "\\|")
    return f"{fence}{pad}{value}{pad}{fence}"


#: the characters a link's URL keeps as they are: those of a URL that Markdown reads as themselves there
_URL_SAFE = ":/%@!$&'*+,;=-._~"


def link(text: str, url: str) -> str:
    """A link to `url` (an http(s) URL that modelci checked, such as the dashboard's), shown as `text` (Markdown
    already). What Markdown would read in the URL is percent-encoded (a parenthesis ends it, `|` a table's cell,
    `<`, `>`, a backslash or a backtick) and `&` is an entity (`&copy;` would be ©), so it lands as given."""
    target = urllib.parse.quote(url, safe=_URL_SAFE).replace("&", "&amp;")
    return f"[{text}]({target})"


def _run(run_id: int | None, url: str) -> str:
    """"run 42", linked to its page on the dashboard given its URL; an unstored run has none."""
    if run_id is None:
        return "run (not stored)"
    return link(f"run {run_id}", url) if url else f"run {run_id}"


def _failed(comparison: Any) -> bool:
    return comparison.result.status not in ("ok", "skipped") or any(
        f.gating and f.verdict == "regression" for f in comparison.findings)


def _problems(comparison: Any) -> str:
    """The findings worth a glance: gating regressions, then report-only ones, then the outputs not compared."""
    from modelci.checks.precision import not_compared

    findings = comparison.findings
    gating = [f for f in findings if f.verdict == "regression" and f.gating and f.check != "status"]
    soft = [f for f in findings if f.verdict == "regression" and not f.gating]
    parts = [f"🔴 **{cell(f.check)}** {cell(f.message)}" for f in gating]
    parts += [f"🟠 {cell(f.check)} (report-only) {cell(f.message)}" for f in soft]
    parts += [f"⚠️ {cell(f.message)}: {cell(f.reason)}" for f in not_compared(findings)]
    if comparison.result.status not in ("ok", "skipped") and comparison.result.reason:
        parts.insert(0, cell(comparison.result.reason.strip().splitlines()[0][:300]))
    if not parts:
        counts: dict[str, int] = {}
        for f in findings:
            counts[f.verdict] = counts.get(f.verdict, 0) + 1
        parts = [", ".join(f"{n} {v}" for v, n in sorted(counts.items()))] if counts else ["no findings"]
    return "<br>".join(parts)


def _what(finding: Any) -> str:
    """The message without the reason at its end, which has a column of its own."""
    reason = finding.reason
    if reason and finding.message == reason:
        return ""
    if reason and finding.message.endswith(f": {reason}"):
        return finding.message[: -len(reason) - 2]
    return finding.message


def comparisons_table(comparisons: list[Any]) -> list[str]:
    """The workload table, failures first, and every finding's numbers folded under <details>."""
    lines = ["| workload | status | baseline | findings |", "|---|---|---|---|"]
    ordered = sorted(comparisons, key=lambda c: (not _failed(c), c.result.workload))
    for comparison in ordered:
        result = comparison.result
        baseline = f"result {comparison.baseline.id}" if comparison.baseline is not None else "none"
        icon = STATUS_ICON.get(result.status, "")
        lines.append(f"| {code(result.workload, table=True)} | {icon} {result.status} | {baseline} | "
                     f"{_problems(comparison)} |")
    details = []
    for comparison in ordered:
        rows = [f"| {VERDICT_ICON.get(f.verdict, '')} {f.verdict}{'' if f.gating else ' (report-only)'} | "
                f"{cell(f.check)} | {code(f.metric, table=True)} | {cell(_what(f))} | {cell(f.reason)} |"
                for f in comparison.findings]
        if rows:
            details += [f"**{cell(comparison.result.workload)}**", "", "| verdict | check | metric | finding | why |",
                        "|---|---|---|---|---|", *rows, ""]
    saves = [f"- {code(c.result.workload)} {cell(str(e.get('format')))}: {cell(e.get('status'))}"
             + (f" ({cell(str(e['reason']))})" if e.get("reason") else "")
             for c in ordered for e in c.result.info.get("saved", [])]
    if saves:
        lines += ["", "Saved models (what compat can check later):", "", *saves]
    if details:
        lines += ["", "<details><summary>All findings</summary>", "", *details, "</details>"]
    return lines


def alarm_lines(events: list[Any]) -> list[str]:
    """One bullet per alarm event (opened, reopened, recovered, bisected)."""
    words = {"open": "🚨 opened", "recovered": "✅ recovered", "bisected": "🔎 bisected"}
    lines = []
    for event in events:
        alarm = event.alarm
        word = "🚨 reopened" if event.reopened else words[event.event]
        what = wording.listed(*wording.event_parts(event), alarm.id, esc=cell)
        lines.append(f"- {word} alarm #{alarm.id} {code(alarm.workload)} {cell(alarm.check)}:{code(alarm.metric)}"
                     f" ({cell(alarm.kind)}, first on {cell(alarm.target) or 'no target'}): {what}")
    return lines


def _alarm_section(outcome: Any, events: list[Any] | None) -> list[str]:
    report = getattr(outcome, "alarms", None)
    events = events if events is not None else (report.events if report is not None else [])
    lines = ["", "### Alarms", "", *alarm_lines(events)] if events else []
    if report is not None and report.failed_deliveries:
        lines += ["", *[f"- ⚠️ notification not delivered: {cell(d.error)}" for d in report.failed_deliveries]]
    return lines


def _baseline_rules(comparisons: list[Any]) -> list[str]:
    """Which rule chose the baselines (modelci.baselines), one bullet per rule with how many workloads it served."""
    rules: dict[str, int] = {}
    for comparison in comparisons:
        rule = getattr(comparison, "baseline_rule", "")
        if rule:
            rules[rule] = rules.get(rule, 0) + 1
    if not rules:
        return []
    return ["", *[f"- baseline of {n} workload{'s' * (n > 1)}: {cell(rule)}" for rule, n in rules.items()]]


def run_summary(outcome: Any, events: list[Any] | None = None, url: str = "") -> str:
    """The summary of `modelci run`: verdict, target, runner, the workload table and the alarm events; `url`, the
    run's page on the dashboard (`[alarms] dashboard_url`, markup.dashboard_page), links the run's number."""
    from modelci.checks.precision import MISSING_ARRAYS, missing_arrays, not_compared

    bad = any(_failed(c) for c in outcome.comparisons)
    verdict = "❌ regression or failure" if bad else "✅ no regression"
    if getattr(outcome, "interrupted", False):
        verdict = "⚠️ interrupted: only the workloads that finished, not compared"
    if getattr(outcome, "unstored", ""):
        verdict = "⚠️ not stored (the history refused it), not compared"
    unchecked = [f for c in outcome.comparisons for f in not_compared(c.findings)]
    if unchecked and verdict == "✅ no regression":
        verdict = f"⚠️ no regression found, but {len(unchecked)} output{'s' * (len(unchecked) > 1)} not compared"
    counts: dict[str, int] = {}
    for comparison in outcome.comparisons:
        counts[comparison.result.status] = counts.get(comparison.result.status, 0) + 1
    lines = [
        f"## modelci: {verdict} on {code(outcome.target.label)}",
        "",
        f"Runner {code(outcome.runner)} · {_run(outcome.run_id, url)} · "
        f"environment {code(str(outcome.environment.id)[:12])} · {len(outcome.comparisons)} workloads: "
        + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())),
        "",
        *([MISSING_ARRAYS, ""] if missing_arrays(unchecked) else []),
        *comparisons_table(outcome.comparisons),
        *(_baseline_rules(outcome.comparisons) if not getattr(outcome, "unstored", "") else []),
        *_alarm_section(outcome, events),
    ]
    return "\n".join(lines) + "\n"


def compare_summary(outcome: Any) -> str:
    """The summary of `modelci compare A B`: B judged against A."""
    verdict = "❌ B regresses against A" if outcome.regressed else "✅ no regression of B against A"
    unmeasured = getattr(outcome, "unmeasured", [])
    if unmeasured and not outcome.regressed:
        verdict = f"❌ B gave no result for {len(unmeasured)} workload{'s' * (len(unmeasured) > 1)}: not compared"
    a, b = outcome.a, outcome.b
    if getattr(outcome, "interrupted", False):
        verdict = ("⚠️ interrupted: only the workloads that finished, not compared" if b is not None
                   else "⚠️ interrupted while A ran: B did not run")
    if getattr(outcome, "problem", ""):
        verdict = f"⚠️ not compared: {cell(outcome.problem.splitlines()[0][:300])}"
    side_b = f"{code(b.target.label)} (run {b.run_id})" if b is not None else "not run"
    lines = [
        f"## modelci compare: {verdict}",
        "",
        f"A = {code(a.target.label)} (run {a.run_id}) · B = {side_b} · runner {code((b or a).runner)}",
        "",
        *comparisons_table(outcome.comparisons),
        *_alarm_section(outcome, None),  # what the alarm step did with these verdicts, and nothing else
    ]
    return "\n".join(lines) + "\n"


def alarms_summary(events: list[Any], url: str = "", run_id: int | None = None) -> str:
    """Alarm events alone (from `modelci alarms check`, with no run, or a bisect after run `run_id`); `url`, the
    page on the dashboard that the notifiers link for them (markup.dashboard_page), is linked below them."""
    lines = ["## modelci alarms", "", *alarm_lines(events)]
    if url:
        lines += ["", f"{link(f'run {run_id}', url)} on the dashboard" if run_id is not None
                  else link("the dashboard", url)]
    return "\n".join(lines) + "\n"


def write(path: str | Path, text: str) -> None:
    """Write a summary to a file (replacing it)."""
    from modelci.report import files

    files.write_text(path, text)
