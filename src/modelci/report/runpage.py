"""The run pages: their contexts (target, environment and its diff, results) and the bulk of their HTML.

A run page holds every result of the run with its metrics and findings: 500 runs of 50 results are 300,000 table
rows. Through Jinja2's autoescape (a Markup object per value) they took most of the site's time, so the result
articles are built here with html.escape on every value; the rest of the page stays a template.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import lru_cache
from html import escape
from typing import Any

from modelci.report import queries
from modelci.report.markup import display_status, status_class
from modelci.report.queries import History

__all__ = ["neighbours", "page_signatures", "run_contexts", "results_html", "flatten"]

#: names (checks, metrics, verdicts, workloads) repeat on every page: escape each once
_name = lru_cache(maxsize=8192)(escape)


def neighbours(history: History) -> tuple[dict[int, Any], dict[int, int]]:
    """For each run: the previous run on the same runner (or None), and the next one's id where there is one."""
    previous_of: dict[int, Any] = {}
    last_by_runner: dict[str, Any] = {}
    for run in history.runs.values():  # ascending ids
        previous_of[run.id] = last_by_runner.get(run.runner)
        last_by_runner[run.runner] = run
    return previous_of, {prev.id: run_id for run_id, prev in previous_of.items() if prev is not None}


def page_signatures(store: Any, history: History) -> dict[int, str]:
    """What each run page shows, in a few words: when it changes (new findings, a next run, a relabelled target,
    a new status), the page must be written again; otherwise the page on disk is still right."""
    findings = queries.run_signatures(store)
    _, next_of = neighbours(history)
    return {run.id: repr((findings.get(run.id), next_of.get(run.id), history.targets[run.target_id].label,
                          run.status, str(run.finished_at)))
            for run in history.runs.values()}


def run_contexts(store: Any, history: History, slugs: dict[str, str],
                 only: list[int] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(run id, page context) for every run (or those in `only`): results, findings and the environment diff."""
    details = queries.run_details(store, only)
    previous_of, next_of = neighbours(history)
    runs = [history.runs[i] for i in only] if only is not None else list(history.runs.values())
    wanted = {run.environment_id for run in runs} | {previous_of[run.id].environment_id for run in runs
                                                     if previous_of[run.id] is not None}
    envs = queries.environments(store, wanted if only is not None else None)
    by_run = history.by_run()
    empty = {"traceback": "", "stderr_tail": "", "code_hash": "", "findings": []}
    for run in runs:
        env = envs.get(run.environment_id, {})
        previous = previous_of[run.id]
        diff = None
        if previous is not None:
            same = previous.environment_id == run.environment_id
            diff = {"run": previous, "same": same, "packages": [], "fingerprint": []}
            if not same:
                diff.update(queries.environment_diff(envs.get(previous.environment_id, {}), env))
        results = [{"result": result, "status": display_status(result), "slug": slugs[result.workload],
                    **details.get(result.id, empty)} for result in by_run.get(run.id, [])]
        yield run.id, {"title": f"run {run.id}", "run": run, "target": history.targets[run.target_id], "env": env,
                       "fingerprint": split_fingerprint(flatten(env.get("fingerprint") or {})), "diff": diff,
                       "results": results,
                       "results_html": results_html(results), "next_id": next_of.get(run.id)}


def flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """A fingerprint as (dotted key, text) rows; the per-package file digests are summarised as a count."""
    items = []
    for key, value in data.items():
        if key == "distributions" and isinstance(value, dict):
            # one file digest per package: the lock already lists them, a count is enough here
            items.append((f"{prefix}{key}", f"{len(value)} packages with file digests"))
        elif isinstance(value, dict):
            items += flatten(value, f"{prefix}{key}.")
        else:
            items.append((f"{prefix}{key}", value if isinstance(value, str) else json.dumps(value)))
    return items


#: fingerprint fields shown at once; the rest (CPU flags, OS details, ...) sit behind a <details>
KEY_FIELDS = ("python", "implementation", "platform", "machine", "cpu", "cpu_count", "gpus", "cuda", "blas")
KEY_PREFIXES = ("frameworks.", "packages_of_interest.", "blas.", "cuda.", "threads.")


def split_fingerprint(rows: list[tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """Fingerprint rows as {"main": the facts a reader looks for first, "rest": everything else}."""
    main = [row for row in rows if row[0] in KEY_FIELDS or row[0].startswith(KEY_PREFIXES)]
    return {"main": main, "rest": [row for row in rows if row not in main]}


def results_html(entries: list[dict[str, Any]]) -> str:
    """The results table, then one <article> per result: status, error texts, metric summaries and findings,
    every value escaped."""
    rows = []
    for entry in entries:
        result, status = entry["result"], entry["status"]
        rows.append(f'<tr><td><a href="#r{int(result.id)}">{_name(result.workload)}</a></td>'
                    f'<td class="status {status_class(status)}">{_name(status)}</td>'
                    f"<td>{_number(result.duration, ' s')}</td><td>{result.regressions or ''}</td></tr>")
    table = ('<table class="grid"><thead><tr><th>workload</th><th>status</th><th>duration</th><th>regressions</th>'
             f'</tr></thead><tbody>{"".join(rows)}</tbody></table>')
    return table + "".join(_article(entry) for entry in entries)


def _number(value: float | None, unit_html: str, in_mib: bool = False) -> str:
    # markup.fmt, inlined: a full build formats half a million numbers
    if value is None:
        return ""
    return f"{value / 1048576:.1f} MiB" if in_mib else f"{value:.4g}{unit_html}"


def _article(entry: dict[str, Any]) -> str:
    result, status = entry["result"], entry["status"]
    open_ = " open" if result.status != "ok" else ""
    parts = [f'<article class="result" id="r{int(result.id)}">',
             f'<h3><a class="workload-link" href="../w/{_name(entry["slug"])}.html">{_name(result.workload)}</a> '
             f'<span class="pill {status_class(status)}">{_name(status)}</span></h3>']
    if result.reason:
        parts.append(f'<p class="reason error-text">{escape(result.reason)}</p>')
    if entry["traceback"]:
        parts.append(f'<details{open_}><summary>traceback</summary><pre class="error-text">'
                     f'{escape(entry["traceback"])}</pre></details>')
    if entry["stderr_tail"]:
        parts.append(f'<details{open_}><summary>stderr (tail)</summary><pre class="stderr">'
                     f'{escape(entry["stderr_tail"])}</pre></details>')
    if result.metrics:
        parts.append('<table class="grid small"><thead><tr><th>metric</th><th>n</th><th>median</th><th>min</th>'
                     '<th>max</th><th>final</th></tr></thead><tbody>')
        for name in sorted(result.metrics):
            m = result.metrics[name]
            unit, mib = (" " + _name(m.unit) if m.unit else ""), m.unit == "bytes"
            parts.append(f"<tr><td>{_name(name)}</td><td>{m.n}</td><td>{_number(m.median, unit, mib)}</td>"
                         f"<td>{_number(m.minimum, unit, mib)}</td><td>{_number(m.maximum, unit, mib)}</td>"
                         f"<td>{_number(m.final, unit, mib)}</td></tr>")
        parts.append("</tbody></table>")
    if entry["findings"]:
        parts.append('<table class="grid small findings"><thead><tr><th>check</th><th>metric</th><th>verdict</th>'
                     '<th>finding</th></tr></thead><tbody>')
        for _, check, metric, verdict, gating, message, baseline_id in entry["findings"]:
            only, note = ("", "") if gating else (" report-only", " (report only)")
            baseline = f' <span class="muted">(baseline result {int(baseline_id)})</span>' if baseline_id else ""
            parts.append(f'<tr class="verdict-{_name(verdict)}{only}"><td>{_name(check)}</td>'
                         f"<td>{_name(metric)}</td><td>{_name(verdict)}{note}</td>"
                         f"<td>{escape(message or '')}{baseline}</td></tr>")
        parts.append("</tbody></table>")
    parts.append("</article>")
    return "".join(parts)
