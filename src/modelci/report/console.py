"""Console output: progress while running, and the tables of `run`, `compare`, `history` and `show`.

On a terminal long work shows a live progress bar; elsewhere (CI logs) it prints one plain line per
event (docs/design.md, "Conventions").
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markup import escape as escape_markup
from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table

STATUS_STYLE = {"ok": "green", "skipped": "yellow", "failed": "red", "crashed": "red", "timeout": "red",
                "error": "red"}
VERDICT_STYLE = {"ok": "green", "regression": "bold red", "improvement": "cyan", "new": "blue"}


#: what a terminal would act on rather than show: control characters but tab and newline (ESC starts a colour,
#: a cursor move or a title change; rich itself drops only BEL, backspace, CR, VT and FF), DEL and C1 controls
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escape(text: object) -> str:
    """`text` made safe to print: rich markup escaped, and every control character a workload's message, a name or
    a path may hold written as a visible escape (`\\x1b`). A workload's error printed raw could recolour the rest
    of the log, move the cursor over earlier lines, or set the terminal's title."""
    return escape_markup(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text)))


def console(stderr: bool = False) -> Console:
    """A rich console; colour only on a terminal, no wrapping of long lines in logs."""
    stream = sys.stderr if stderr else sys.stdout
    # in a CI log there is no terminal width: use a wide one rather than cutting workload names
    width = None if stream.isatty() else 160
    # soft wrap: a message in a log stays one line, whatever its length, so grep finds it whole
    # no emoji codes: escape() leaves them, and a workload id or message holding `:star:` must print as it is
    return Console(stderr=stderr, highlight=False, emoji=False, width=width, soft_wrap=width is not None)


class Progress:
    """Progress of a run: a live bar on a terminal, plain lines otherwise; nothing but the results with `quiet`.

    A long step (an environment or a git build, one workload) shows its elapsed time: a spinner on a terminal,
    and off a terminal (a CI log) a line `still <what> (1m30s)` every `every` seconds while it lasts, so that a
    log never stays silent for minutes.
    """

    def __init__(self, quiet: bool = False, every: float = 30.0):
        self.out = console(stderr=True)
        self.quiet = quiet
        self.every = every
        self.live = self.out.is_terminal and not quiet
        self.bar: RichProgress | None = None
        self.task: Any = None
        self.count = 0
        self.total = 0
        self._beating: tuple[threading.Thread, threading.Event] | None = None

    @contextmanager
    def step(self, what: str) -> Iterator[None]:
        """A long step of the harness's own, `what` it does ("preparing the environment of numpy==2.1.3")."""
        if self.quiet:
            yield
        elif self.live and self.bar is None:
            with RichProgress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                              console=self.out, transient=True) as spinner:
                spinner.add_task(escape(what), total=None)
                yield
        else:
            self._beat(what)
            try:
                yield
            finally:
                self._stop_beat()

    def _beat(self, what: str) -> None:
        """Off a terminal: say `still <what>` every `every` seconds until `_stop_beat` (one at a time)."""
        if self.live or self.quiet or self.every <= 0:
            return
        self._stop_beat()
        stop = threading.Event()
        start = time.monotonic()

        def beat() -> None:
            while not stop.wait(self.every):
                self.out.print(f"still {escape(what)} ({_elapsed(time.monotonic() - start)})", style="dim")

        thread = threading.Thread(target=beat, name="modelci-progress", daemon=True)
        thread.start()
        self._beating = (thread, stop)

    def _stop_beat(self) -> None:
        if self._beating is not None:
            thread, stop = self._beating
            stop.set()
            thread.join()
            self._beating = None

    def note(self, text: str) -> None:
        """A one-line message about the harness's own work (building an environment, …)."""
        if not self.quiet:
            self.out.print(f"[dim]{escape(text)}[/]")

    def start(self, total: int) -> None:
        """Begin a sequence of `total` workloads."""
        self.count, self.total = 0, total
        if self.live and total:
            self.bar = RichProgress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                    MofNCompleteColumn(), TimeElapsedColumn(), console=self.out, transient=True)
            self.bar.start()
            self.task = self.bar.add_task("running", total=total)

    def begin(self, workload: str) -> None:
        """A workload starts."""
        if self.bar is not None:
            self.bar.update(self.task, description=escape(workload))
        self._beat(f"running {workload}")

    def done(self, workload: str, result: Any, reused: bool = False) -> None:
        """A workload finished (or was reused from the history)."""
        self._stop_beat()
        self.count += 1
        if self.bar is not None:
            self.bar.advance(self.task)
        if self.quiet:
            return
        style = STATUS_STYLE.get(result.status, "")
        how = "reused from history" if reused else f"{result.duration:.1f}s"
        reason = f" - {result.reason.splitlines()[0]}" if result.reason and result.status != "ok" else ""
        self.out.print(f"[{self.count}/{self.total}] {escape(workload)} [{style}]{result.status}[/] ({how})"
                       f"{escape(reason)}")

    def stop(self) -> None:
        """End the sequence."""
        self._stop_beat()
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _elapsed(seconds: float) -> str:
    """`45s`, `1m30s`, `1h02m`: an elapsed time as a log line says it."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "bytes":
        return f"{value / 2**20:.1f} MiB"
    if unit == "s":
        return f"{value * 1e3:.2f} ms" if value < 1 else f"{value:.3f} s"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _median(result: Any, name: str) -> Any:
    metric = result.metrics.get(name) if result else None
    return metric.median if metric else None


def render_run(outcome: Any, out: Console) -> None:
    """The summary of one run: a row per result, then every finding that is not ok."""
    target = outcome.target
    run = f"run {outcome.run_id}" if outcome.run_id else "no new run (all results reused)"
    if getattr(outcome, "unstored", ""):
        run = "run not stored (not compared)"
    out.print(f"[bold]{run}[/] · target [bold]{escape(target.label)}[/] · environment {outcome.environment.id} · "
              f"runner {escape(outcome.runner)}")
    table = Table(show_edge=False, pad_edge=False)
    saving = any(r.info.get("saved") for r in outcome.results)
    columns = ["workload", "status", "train (median step)", "infer (median)", "peak RSS", "baseline", "verdict"]
    for column in columns + (["saved"] if saving else []):
        table.add_column(column)
    judged = getattr(outcome, "judged", True)  # unjudged, an empty list of findings is no "ok"
    for comparison in outcome.comparisons:
        result = comparison.result
        base = comparison.baseline
        table.add_row(
            escape(result.workload), f"[{STATUS_STYLE.get(result.status, '')}]{result.status}[/]",
            _fmt(_median(result, "time.train"), "s"), _fmt(_median(result, "time.infer"), "s"),
            _fmt(_median(result, "mem.peak_rss"), "bytes"),
            (f"result {base.id}" if base is not None else "none yet") if judged else "-",
            _verdict_summary(comparison.findings) if judged else "[dim]not judged[/]",
            *([saved_summary(result)] if saving else []),
        )
    out.print(table)
    stored = not getattr(outcome, "unstored", "")  # a run not stored has no baselines, and is no reference
    if stored and judged:
        render_baseline_rules(outcome.comparisons, out)
    render_saves(outcome.comparisons, out)
    render_problems(outcome.comparisons, out)
    if stored and judged and outcome.comparisons and all(c.baseline is None for c in outcome.comparisons):
        out.print("\nno baseline yet for these workloads on this runner: this run becomes the reference; it passes "
                  "unless a workload failed.")


def render_saves(comparisons: list[Any], out: Console) -> None:
    """Each declared save format that was skipped, with the reason (failed saves are among the problems): a
    skipped format is never silent, since compat has nothing to check for it."""
    for comparison in comparisons:
        result = comparison.result
        for entry in result.info.get("saved", []) if not result.reused else []:
            if entry.get("status") == "skipped":
                out.print(f"[yellow]format {escape(entry.get('format', '?'))} of {escape(result.workload)} "
                          f"{escape(entry.get('status', '?'))}[/]: {escape(str(entry.get('reason', '')))}")


def render_baseline_rules(comparisons: list[Any], out: Console) -> None:
    """Which rule chose the baselines (modelci.baselines): one line per rule, with how many workloads it served."""
    rules: dict[str, int] = {}
    for comparison in comparisons:
        rule = getattr(comparison, "baseline_rule", "")
        if rule:
            rules[rule] = rules.get(rule, 0) + 1
    for rule, count in rules.items():
        what = f"{count} workloads" if count > 1 else "1 workload"
        out.print(f"[dim]baseline ({what}): {escape(rule)}[/]")


def _verdict_summary(findings: list[Any]) -> str:
    from modelci.checks.precision import not_compared

    worst = [f for f in findings if f.verdict == "regression" and f.gating]
    if worst:
        return f"[bold red]{len(worst)} regression{'s' * (len(worst) > 1)}[/]"
    if not_compared(findings):  # "new" read as checked and fine
        return "[yellow]not compared[/]"
    if any(f.verdict == "new" for f in findings):
        return "[blue]new[/]"
    if any(f.verdict == "improvement" for f in findings):
        return "[cyan]improved[/]"
    return "[green]ok[/]"


def render_failure(result: Any, out: Console) -> None:
    """A result that is not ok or skipped: its status, reason, and the last lines of its traceback or stderr."""
    if result.status in ("ok", "skipped"):
        return
    out.print(f"\n[red]{escape(result.workload)}: {result.status}[/] - {escape(result.reason)}")
    detail = result.traceback or result.stderr_tail
    if detail:
        out.print("[dim]" + escape("\n".join(detail.strip().splitlines()[-12:])) + "[/]")


SAVE_STYLE = {"ok": "green", "failed": "bold red", "skipped": "yellow"}


def saved_summary(result: Any) -> str:
    """Each saved format of a result with its status (`npz ok, onnx failed`), for the run's table."""
    return ", ".join(f"{escape(str(e.get('format')))} [{SAVE_STYLE.get(e.get('status'), '')}]{e.get('status')}[/]"
                     for e in result.info.get("saved", []))


def render_problems(comparisons: list[Any], out: Console) -> None:
    """Failures with their reason and stderr tail, failed saves, then findings that are not ok, and the outputs
    that could not be compared."""
    from modelci.checks.precision import MISSING_ARRAYS, missing_arrays, not_compared

    for comparison in comparisons:
        for finding in not_compared(comparison.findings):
            out.print(f"[yellow]{escape(comparison.result.workload)} {escape(finding.message)}[/]: "
                      f"{escape(finding.reason)}")
    if missing_arrays([f for c in comparisons for f in c.findings]):
        out.print(f"[yellow]{escape(MISSING_ARRAYS)}[/]")
    for comparison in comparisons:
        result = comparison.result
        render_failure(result, out)
        for entry in result.info.get("saved", []):
            if entry.get("status") == "failed":
                out.print(f"[red]{escape(result.workload)}: saving {escape(str(entry.get('format')))} failed[/] - "
                          f"{escape(str(entry.get('reason', '')))}; compat has no model of it from this run")
        for finding in comparison.findings:
            if finding.verdict in ("regression", "improvement"):
                gate = "" if finding.gating else " (reported only)"
                out.print(f"[{VERDICT_STYLE[finding.verdict]}]{finding.verdict}[/]{gate} {escape(result.workload)} "
                          f"{finding.check}/{escape(finding.metric)}: {escape(finding.message)}")


def render_compare(outcome: Any, out: Console) -> None:
    """One table for `compare A B`: per workload and metric, A, B, the ratio or error statistics, the verdict."""
    out.print(f"[bold]compare[/] A = {escape(outcome.a.target.label)} (env {outcome.a.environment.id}) · "
              f"B = {escape(outcome.b.target.label)} (env {outcome.b.environment.id})")
    table = Table(show_edge=False, pad_edge=False)
    for column in ("workload", "check", "metric", "A", "B", "ratio / error", "verdict", "why"):
        table.add_column(column)
    hidden = 0
    for comparison in outcome.comparisons:
        for finding in comparison.findings:
            a, b, stat = _compare_cells(finding)
            gate = "" if finding.gating else " (report only)"
            why = finding.reason if explains(finding) else ""
            hidden += bool(finding.reason) and not why
            table.add_row(escape(comparison.result.workload), finding.check, escape(finding.metric), a, b, stat,
                          f"[{VERDICT_STYLE.get(finding.verdict, '')}]{finding.verdict}[/]{gate}", escape(why))
    out.print(table)
    if hidden:
        out.print(f"[dim]why: shown for the findings that are not ok; the reasons of the {hidden} ok finding(s) are in "
                  "the --json and --markdown reports[/]")
    render_problems(outcome.comparisons, out)
    from modelci.envs.diff import between  # what changed besides the target

    render_env_diff(between(outcome.a.environment, outcome.b.environment), out,
                    targets={outcome.a.target.name, outcome.b.target.name})


def explains(finding: Any) -> bool:
    """Whether the console's table shows a finding's reason: one that is not ok, or one that was flagged and
    then not confirmed by a second pass (its reason says why it does not count). An ok finding's reason is the
    rule it passed, as long as a passing rule's numbers: printed for each of a suite's hundreds of outputs and
    timings, it buried the few that matter in a CI log. JSON and Markdown keep every reason."""
    return finding.verdict != "ok" or bool((finding.numbers or {}).get("confirmation"))


def render_env_diff(diff: Any, out: Console, targets: set[str] = frozenset()) -> None:
    """Packages added, removed and changed (with the bump size) and the fingerprint fields that differ."""
    if diff.same:
        out.print(f"\n[bold]environment[/]: A and B are the same environment ({escape(diff.a)})")
        return
    besides = diff.besides(set(targets))
    out.print(f"\n[bold]environment[/] A {escape(diff.a)} → B {escape(diff.b)}: {len(besides)} package change(s) "
              f"besides the target, {len(diff.fingerprint)} fingerprint field(s) differ")
    if diff.packages:
        table = Table(show_edge=False, pad_edge=False)
        for column in ("package", "A", "B", "change"):
            table.add_column(column)
        for change in diff.packages:
            name = escape(change.name) + (" [dim](target)[/]" if change.name in targets else "")
            what = change.bump if change.change in ("changed", "rebuilt") else change.change
            style = "red" if change.name not in targets else "dim"
            table.add_row(name, escape(change.before or "-"), escape(change.after or "-"),
                          f"[{style}]{escape(what)}[/]")
        out.print(table)
    if diff.fingerprint:
        table = Table(show_edge=False, pad_edge=False)
        for column in ("fingerprint field", "A", "B"):
            table.add_column(column)
        for change in diff.fingerprint:
            table.add_row(escape(change.field), *_env_values(change.before, change.after))
        out.print(table)


def _env_values(before: Any, after: Any) -> tuple[str, str]:
    """Short cells for two fingerprint values, each showing what differs: of two lists (of names, or of tables
    such as the BLAS libraries or the constraints files) the items one side has that the other lacks, of two
    tables the keys whose values differ. The first 57 characters of both whole values were the same whenever
    what differed came later, which it did for every list of tables."""
    def text(value: Any) -> str:
        if isinstance(value, dict):
            return ", ".join(f"{k}={text(v)}" for k, v in value.items())
        return "-" if value is None else " ".join(str(value).split())

    def short(value: str, limit: int = 300) -> str:
        return escape(value if len(value) <= limit else value[:limit - 3] + "...")

    if isinstance(before, list) and isinstance(after, list):
        def key(value: Any) -> str:
            return json.dumps(value, sort_keys=True, default=str)

        keys_a, keys_b = {key(v) for v in before}, {key(v) for v in after}
        only_a = [text(v) for v in before if key(v) not in keys_b]
        only_b = [text(v) for v in after if key(v) not in keys_a]
        return (short("only: " + "; ".join(only_a)) if only_a else "-",
                short("only: " + "; ".join(only_b)) if only_b else "-")
    if isinstance(before, dict) and isinstance(after, dict):
        keys = [k for k in {**before, **after} if before.get(k) != after.get(k)]
        return (short(text({k: before.get(k) for k in keys})), short(text({k: after.get(k) for k in keys})))
    return short(text(before), 60), short(text(after), 60)


def _compare_cells(finding: Any) -> tuple[str, str, str]:
    n = finding.numbers or {}
    if finding.check == "status":
        return str(n.get("baseline", "-")), str(n.get("current", "-")), ""
    if finding.check in ("timing", "memory"):
        unit = "s" if finding.check == "timing" else "bytes"
        ratio = n.get("ratio")
        p = n.get("p_value")
        stat = (f"{ratio:.3f}x" if isinstance(ratio, (int, float)) else "-") + (
            f" p={p:.3g}" if isinstance(p, (int, float)) else "")
        return _fmt(n.get("baseline_median"), unit), _fmt(n.get("current_median"), unit), stat
    if finding.check == "precision":
        parts = [f"{k}={n[k]:.3g}" for k in ("max_abs", "max_rel") if isinstance(n.get(k), (int, float))]
        if isinstance(n.get("max_ulp"), (int, float)):
            parts.append(f"ulp={n['max_ulp']:.0f}")
        return _output_cell(n, "baseline"), _output_cell(n, "current"), " ".join(parts)
    if finding.check == "metric":
        return _fmt(n.get("baseline_median", n.get("baseline_value"))), _fmt(n.get("current_median",
                                                                                 n.get("current_value"))), (
            f"{n['ratio']:.3f}x" if isinstance(n.get("ratio"), (int, float)) else "")
    if finding.check == "curve":
        step = n.get("first_diverging_step")
        return (_fmt(n.get("final_baseline")), _fmt(n.get("final_current")),
                f"diverges at step {step}" if step is not None else "")
    return "", "", ""


def _output_cell(numbers: dict[str, Any], side: str) -> str:
    """One side of an output: its value when it is a scalar, else its dtype and shape (float32[3, 4])."""
    value = numbers.get(f"{side}_value")
    dtype, shape = numbers.get(f"{side}_dtype"), numbers.get(f"{side}_shape")
    described = f"{dtype}{list(shape)}" if dtype is not None and shape is not None else ""
    if value is not None:
        return f"{_fmt(value)} ({dtype})" if dtype else _fmt(value)
    return escape(described)


def render_history(points: Sequence[Any], metric: str, out: Console, total: int | None = None) -> None:
    """Points of one series (store.RunPoint), oldest first; `total` says how many the whole series holds."""
    table = Table(show_edge=False, pad_edge=False, title=f"{metric}")
    for column in ("run", "date", "runner", "target", "status", "median", "min", "max", "final"):
        table.add_column(column)
    unit = "s" if metric.startswith("time.") else "bytes" if metric.startswith("mem.") else ""
    for point in points:
        table.add_row(str(point.run_id), point.started_at.strftime("%Y-%m-%d %H:%M"), escape(point.runner),
                      escape(point.target.label), point.status, _fmt(point.median, unit),
                      _fmt(point.minimum, unit), _fmt(point.maximum, unit), _fmt(point.final, unit))
    out.print(table)
    if total is not None and total > len(points):
        out.print(f"the last {len(points)} of {total} runs; --all shows every run, --last N the last N")


def render_workloads(rows: list[dict[str, Any]], runs: list[Any], out: Console) -> None:
    """The workloads in the history with their latest status, then the recent runs."""
    table = Table(show_edge=False, pad_edge=False, title="workloads")
    for column in ("workload", "latest status", "latest run", "runner", "target", "results"):
        table.add_column(column)
    for row in rows:
        table.add_row(escape(row["workload"]), f"[{STATUS_STYLE.get(row['status'], '')}]{row['status']}[/]",
                      str(row["id"]), escape(row["runner"]), escape(row["target"]), str(row["results"]))
    out.print(table)
    recent = Table(show_edge=False, pad_edge=False, title="recent runs")
    for column in ("run", "date", "runner", "target", "status"):
        recent.add_column(column)
    for run in runs:
        recent.add_row(str(run.id), run.started_at.strftime("%Y-%m-%d %H:%M"), escape(run.runner),
                       escape(run.target.label), run.status)
    out.print(recent)


def render_show(stored: Any, out: Console) -> None:
    """A stored run: its target, environment, and every result with its findings."""
    row = stored.row
    label = row.target.label
    out.print(f"[bold]run {row.id}[/] · {row.status} · target [bold]{escape(label)}[/] · runner {escape(row.runner)} · "
              f"{row.started_at:%Y-%m-%d %H:%M:%S}")
    env = row.environment
    fp = stored.fingerprint or env.fingerprint or {}
    out.print(f"environment {env.id} ({'isolated' if env.isolated else 'not isolated'}): python {fp.get('python', '?')}"
              f" on {escape(str(fp.get('platform', '?')))}, {len(env.lock.splitlines())} packages locked")
    if fp.get("cpu"):
        out.print(f"machine: {escape(str(fp['cpu']))}, {fp.get('cpu_usable') or fp.get('cpu_count', '?')} usable cores"
                  f"{', GPU ' + escape(', '.join(g.get('name', '?') for g in fp['gpus'])) if fp.get('gpus') else ''}")
    table = Table(show_edge=False, pad_edge=False)
    for column in ("result", "workload", "status", "train (median step)", "infer (median)", "peak RSS", "findings"):
        table.add_column(column)
    for result in stored.results:
        findings = result.info.get("findings", [])
        bad = [f for f in findings if f["verdict"] == "regression" and f["gating"]]
        summary = f"[bold red]{len(bad)} regression(s)[/]" if bad else ("[blue]new[/]" if any(
            f["verdict"] == "new" for f in findings) else "[green]ok[/]" if findings else "-")
        table.add_row(str(result.id), escape(result.workload),
                      f"[{STATUS_STYLE.get(result.status, '')}]{result.status}[/]",
                      _fmt(_median(result, "time.train"), "s"), _fmt(_median(result, "time.infer"), "s"),
                      _fmt(_median(result, "mem.peak_rss"), "bytes"), summary)
    out.print(table)
    for result in stored.results:
        render_failure(result, out)
        for finding in result.info.get("findings", []):
            if finding["verdict"] in ("regression", "improvement"):
                out.print(f"{finding['verdict']} {escape(result.workload)} {finding['check']}/"
                          f"{escape(finding['metric'])}: {escape(finding['message'])}")


def render_config(cfg: Any, out: Console) -> None:
    """Every option with its value and where the value came from."""
    from modelci.config import OPTIONS
    from modelci.records import redacted

    table = Table(show_edge=False, pad_edge=False, title=f"config file: {cfg.file or 'none'}")
    # the help wraps first: a value or its source cut short ("postgresql://ci@db:5432/hi…") is what the table is
    # for, and it folds onto a second line only when the columns cannot fit it otherwise
    for column in ("option", "value", "source", "variable"):
        table.add_column(column, no_wrap=True, overflow="fold")
    table.add_column("help")
    for option in OPTIONS:
        # the table goes into CI logs: a `db` or `artifacts` URL's password is not shown
        table.add_row(option.name, escape(redacted(str(getattr(cfg, option.name)))), escape(cfg.sources[option.name]),
                      option.env, escape(option.help))
    out.print(table)
    if cfg.checks:
        out.print("[bold]checks[/] " + ", ".join(f"{k}={v}" for k, v in cfg.checks.items()))
    for entry in cfg.overrides:
        out.print("[bold]override[/] " + ", ".join(f"{k}={v}" for k, v in entry.items()))


def render_calibration(outcome: Any, out: Console, max_timing_cv: float = 0.05) -> None:
    """The noise profile `calibrate` measured: timing CV, output spread, bit-identity, and the gate verdict."""
    out.print(f"[bold]calibration[/] · target [bold]{escape(outcome.target.label)}[/] · runner "
              f"{escape(outcome.runner)} · runs {', '.join(map(str, outcome.run_ids))}")
    table = Table(show_edge=False, pad_edge=False)
    for column in ("workload", "metric", "runs", "cv between runs", "cv within run", "spread (rel)",
                   "bit-identical", "gate"):
        table.add_column(column)
    for entry in outcome.entries:
        gate = ""
        if entry.kind == "timing" and entry.cv is not None:
            gate = ("[yellow]too noisy to gate on timing[/]" if entry.cv > max_timing_cv
                    else "[green]gates[/]")
        table.add_row(escape(entry.workload), escape(entry.metric), str(entry.runs),
                      f"{entry.cv:.2%}" if entry.cv is not None else "",
                      f"{entry.cv_within:.2%}" if entry.cv_within is not None else "",
                      f"{entry.spread_rtol:.3g}" if entry.spread_rtol is not None else "",
                      {True: "yes", False: "[yellow]no[/]", None: ""}[entry.bit_identical], gate)
    out.print(table)
    for result in outcome.failures:
        out.print(f"[red]{escape(result.workload)}: {result.status}[/] - {escape(result.reason)}")
