"""The static dashboard: `generate_site(store, out)` writes an index, a page per workload and a page per run.

The site opens from file:// with no server and no CDN: plotly.js is copied once from the plotly
package into `assets/` and every page references it relatively. Pages are Jinja2 templates with autoescape on,
and the plot data is JSON in a `<script type="application/json">` block with `<`, `>` and `&` escaped, so a
workload that prints `<script>` in its error shows that text and runs nothing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import modelci
from modelci.errors import UserError
from modelci.report import files, forked, plots, queries, runpage
from modelci.report.markup import display_status, fmt, run_page, safe_href, status_class, when
from modelci.report.queries import History, ResultInfo

#: written next to the pages: which data each run page was built from, so a rebuild can keep it (versioned)
MANIFEST, MANIFEST_SCHEMA = ".modelci-site.json", 1
#: below this many runs a forked child costs more than it saves
FORK_MIN_RUNS = 100

__all__ = ["SiteReport", "generate_site", "collect_alarms", "collect_compat", "collect_bisects"]


@dataclass
class SiteReport:
    """What `generate_site` wrote: the folder, the pages, the largest page and how long it took."""

    out: Path
    pages: int = 0
    largest_page: str = ""
    largest_bytes: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    kept_pages: int = 0  # run pages left as they were: built before from the same data
    child_cpu_seconds: float = 0.0  # CPU of the forked child that built the run pages, if one did
    extra_pages: list[str] = field(default_factory=list)
    #: seconds per phase, wall and "(cpu)": load, index, workload pages (of which change points), run pages (the
    #: wait for them after the workload pages when a child built them; "run pages (own)" is their own time)
    phases: dict[str, float] = field(default_factory=dict)


# -- what the site shows besides the runs --------------------------------------------------------------------------


def collect_alarms(store: Any) -> list[dict[str, Any]]:
    """The live alarms (open, acknowledged, silenced) as dicts: id, workload, runner, check, metric, kind, target
    (the label of the target it first fired on), state, message, opened_at, recovered, last_target. The message
    is as listed (wording.listed: shortened); `cut` says whether something was left out, and `run_id` is the run
    it last fired in, whose page has the whole of it."""
    from modelci.alarms import wording
    from modelci.alarms.lifecycle import list_alarms

    keys = ("id", "workload", "runner", "check", "metric", "kind", "target", "message", "opened_at", "recovered",
            "last_target")
    rows = []
    for alarm in list_alarms(store):
        row = {key: getattr(alarm, key) for key in keys}
        row["state"] = alarm.status
        now, was = wording.alarm_parts(alarm)  # a recovered one: how it is now, then "was"
        row["message"] = wording.joined(*(wording.shorten(part)[0] for part in (now, was)))
        row["cut"] = any(wording.shorten(part)[1] for part in (now, was))
        row["run_id"] = alarm.last_run_id
        rows.append(row)
    return rows


def collect_compat(store: Any) -> dict[str, Any] | None:
    """The compat matrix (`queries.compat_table`): the latest check of each pair of builds; None when no compat
    check is stored."""
    return queries.compat_table(store)


def collect_bisects(store: Any) -> tuple[dict[str, Any] | None, list[tuple[str, dict[str, Any]]]]:
    """The bisect page's table, a row per stored bisect (newest first) with its culprit, PR and probes, and a
    page per bisect listing its probes, each linked to the run it stored; (None, []) when none is stored."""
    rows, pages = [], []
    for bisect in store.bisects():
        result = bisect.result
        culprit, last_good = result.get("culprit") or {}, result.get("last_good") or {}
        probes = result.get("probes", [])
        page = f"bisects/{bisect.id}.html"
        found = bisect.status == "found"
        rows.append({"label": f"{bisect.workload} · {bisect.check}"
                              + (" (improvement)" if bisect.direction == "improvement" else ""),
                     "href": page, "cells": [
            {"text": bisect.status, "status": "ok" if found else "failed"},
            {"text": _suspect_text(culprit) if culprit else result.get("message", "")},
            {"text": f"#{culprit['pr']}" if culprit.get("pr") else ""},
            {"text": _suspect_text(last_good) if last_good else ""},
            {"text": f"{len(probes)} probes, {result.get('rounds', 0)} rounds over {result.get('range_size', 0)} "
                     f"candidates", "href": page},
            {"text": when(bisect.created_at)},
        ]})
        probe_rows = [{"label": probe.get("label") or probe.get("item", ""), "cells": [
            {"text": "ends" if probe.get("round") == 0 else "confirm" if (probe.get("round") or 0) < 0
             else str(probe.get("round"))},
            {"text": probe.get("verdict", ""), "status": _VERDICT_STATUS.get(probe.get("verdict", ""), "none")},
            {"text": probe.get("why", "")[:300]},
            {"text": f"run {probe['run_id']}" + (" (reused)" if probe.get("reused") else ""),
             "href": f"../{run_page(probe['run_id'])}"} if probe.get("run_id") else {"text": ""},
        ]} for probe in probes]
        what = "first improved" if bisect.direction == "improvement" else "first bad"
        pages.append((page, {"title": f"bisect #{bisect.id}: {bisect.workload} on the {bisect.check} check",
                             "intro": (f"{what}: {_suspect_text(culprit)}" if culprit else result.get("message", ""))
                             + (f"; last good: {_suspect_text(last_good)}" if last_good else "")
                             + (f". {result['evidence']}" if result.get("evidence") else ""),
                             "columns": ["round", "verdict", "why", "run"], "rows": probe_rows}))
    if not rows:
        return None, []
    table = {"title": "bisect results", "columns": ["status", "culprit", "PR", "last good", "probes", "when"],
             "rows": rows, "intro": "Each bisect kept in the history: the commit or release it found, and the "
                                    "probes that found it (each a stored run)."}
    return table, pages


#: a probe's verdict as a status colour of the site
_VERDICT_STATUS = {"good": "ok", "old": "ok", "bad": "failed", "new": "failed", "skip": "skipped"}


def _suspect_text(suspect: dict[str, Any]) -> str:
    """A commit as `abc123def0 subject (author, date)`, or a release's spec."""
    if not suspect.get("sha"):
        return suspect.get("spec") or suspect.get("item", "")
    who = ", ".join(part for part in (suspect.get("author"), suspect.get("date")) if part)
    return f"{suspect['sha'][:10]} {suspect.get('subject', '')}" + (f" ({who})" if who else "")


def change_detector(budget_s: float = 10.0) -> plots.ChangeFinder:
    """`modelci.checks.history.detect_changes` behind a noise floor and a time budget."""
    from modelci.checks import history  # ruptures and scipy load only once a series is long enough

    return plots.ChangeFinder(history.detect_changes, budget_s=budget_s)


# -- generation ---------------------------------------------------------------------------------------------------


def generate_site(store: Any, out: str | Path, *, overlay: int = 10, recent: int = 30, table_rows: int = 200,
                  full: bool = False, jobs: int = 2) -> SiteReport:
    """Write the site for the store's history into `out`; pages are replaced atomically one by one.

    Run pages that a previous generation in `out` wrote from the same data are kept (`full` writes them all).
    With `jobs` > 1 and a large history, the run pages are built by a forked child meanwhile (see forked.py).
    """
    started, cpu = time.perf_counter(), time.process_time()
    plotly = plotly_js()  # before anything is written: without it there is no site to write
    if not str(out).strip():
        raise UserError("--out is empty; pass the folder to write the site into")
    out = Path(out)
    if out.is_dir() and not (out / MANIFEST).exists():
        # files of the user's own, not a site an earlier report wrote (which leaves its manifest): not ours to
        # replace. `report --out .` in a project, or `--out /`, spread index.html, assets/, w/ and runs/ among
        # them, and replaced any of the same name
        theirs = sorted(p.name for p in out.iterdir())
        if theirs:
            shown = ", ".join(theirs[:3]) + (f" and {len(theirs) - 3} more" if len(theirs) > 3 else "")
            raise UserError(f"{out} holds files that no modelci report wrote ({shown}); pass a new or empty "
                            "folder, or the folder of an earlier report")
    try:
        for folder in (out, out / "assets", out / "w", out / "runs"):
            folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot write the site into {out}: {exc.strerror}; pass another --out folder") from None
    report = SiteReport(out=out)
    phase = _Phases(report.phases)
    _copy_assets(out / "assets", plotly)
    history = queries.load_history(store)
    alarms = collect_alarms(store)
    extras = []
    compat_table = collect_compat(store)
    if compat_table is not None:
        extras.append(("compat.html", "compat matrix", compat_table))
    bisect_table, bisect_pages = collect_bisects(store)
    if bisect_table is not None:
        extras.append(("bisect.html", "bisect results", bisect_table))
    phase("load")
    pages = _Pages(out, report, [(filename, title) for filename, title, _ in extras])
    by_workload = history.by_workload()
    slugs = workload_slugs(list(by_workload))
    pages.write("index.html", "index.html", **_index_context(history, slugs, alarms, recent))
    phase("index")
    def write_runs() -> dict[str, Any]:
        return _write_run_pages(store, history, slugs, _Pages(out, SiteReport(out=out), pages.nav), full)

    # the run pages are the other half of the work: in a forked child when that is safe and worth it
    forking = jobs > 1 and len(history.runs) >= FORK_MIN_RUNS and forked.can_fork()
    child = forked.Forked(write_runs, before=store.before_fork) if forking else None
    detect = change_detector()
    for workload, results in by_workload.items():
        pages.write(f"w/{slugs[workload]}.html", "workload.html",
                    **_workload_context(store, history, workload, results, slugs, alarms, detect, overlay,
                                        table_rows))
    report.phases["change points"] = detect.spent_s
    phase("workload pages")
    merged = child.result() if child is not None else None
    if merged is not None:
        _merge(report, merged, from_child=True)
    else:  # not forked, or the child failed: build them here
        _merge(report, write_runs(), from_child=False)
    phase("run pages")
    for filename, title, table in extras:
        pages.write(filename, "table.html", title=title, table=_table(table, title))
        report.extra_pages.append(filename)
    if bisect_pages:
        (out / "bisects").mkdir(exist_ok=True)
    for filename, table in bisect_pages:
        pages.write(filename, "table.html", title=table["title"], table=_table(table, table["title"]))
    _prune(out, {"runs": {run_page(run_id).split("/", 1)[1] for run_id in history.runs},
                 "w": {f"{slug}.html" for slug in slugs.values()},
                 "bisects": {Path(filename).name for filename, _ in bisect_pages},
                 ".": {"index.html", *(filename for filename, _, _ in extras)}})
    report.seconds = time.perf_counter() - started
    report.cpu_seconds = time.process_time() - cpu + report.child_cpu_seconds
    return report


#: the pages of the site's top folder that a generation writes when there is something to show
_OPTIONAL_TOP_PAGES = ("compat.html", "bisect.html")


def _prune(out: Path, keep: dict[str, set[str]]) -> None:
    """Remove the pages an earlier generation in `out` wrote that this one did not: a report of another history
    (or of this one before `env gc` or a new database) left its runs, workloads and bisects there, readable as
    this history's from a bookmark or a search. Only the site's own folders and .html pages are touched."""
    for folder, names in keep.items():
        where = out / folder
        candidates = [where / name for name in _OPTIONAL_TOP_PAGES] if folder == "." else \
            (where.glob("*.html") if where.is_dir() else [])
        for page in candidates:
            if page.name not in names and page.is_file() and not page.is_symlink():
                page.unlink(missing_ok=True)


def _write_run_pages(store: Any, history: History, slugs: dict[str, str], pages: _Pages, full: bool) -> dict:
    """Write the run pages whose data changed since the manifest (all with `full`); returns the counters."""
    started, cpu = time.perf_counter(), time.process_time()
    # a run page changes only when its findings, its next run or its target's label do: keep the others
    key = _site_key(slugs, pages.nav)
    signatures = runpage.page_signatures(store, history)
    previous = {} if full else _read_manifest(pages.out / MANIFEST, key)
    todo = [run_id for run_id, signature in signatures.items()
            if previous.get(str(run_id)) != signature or not (pages.out / run_page(run_id)).is_file()]
    for run_id, context in runpage.run_contexts(store, history, slugs, None if len(todo) == len(signatures) else todo):
        pages.write(run_page(run_id), "run.html", **context)
    pages.write_text(MANIFEST, json.dumps({"schema": MANIFEST_SCHEMA, "key": key, "runs": signatures}))
    report = pages.report
    return {"pages": report.pages, "largest_page": report.largest_page, "largest_bytes": report.largest_bytes,
            "kept_pages": len(signatures) - len(todo), "seconds": time.perf_counter() - started,
            "cpu_seconds": time.process_time() - cpu}


def _merge(report: SiteReport, part: dict[str, Any], from_child: bool) -> None:
    """Add the run pages' counters (from this process or the child) to the site's report."""
    report.pages += part["pages"]
    report.kept_pages = part["kept_pages"]
    if part["largest_bytes"] > report.largest_bytes:
        report.largest_bytes, report.largest_page = part["largest_bytes"], part["largest_page"]
    report.phases["run pages (own)"] = part["seconds"]
    report.child_cpu_seconds = part["cpu_seconds"] if from_child else 0.0


class _Phases:
    """Records the wall time since the previous call under a name (the benchmark prints the breakdown)."""

    def __init__(self, into: dict[str, float]):
        self.into, self.last, self.cpu = into, time.perf_counter(), time.process_time()

    def __call__(self, name: str) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        self.into[name] = now - self.last
        self.into[f"{name} (cpu)"] = cpu - self.cpu
        self.last, self.cpu = now, cpu


class _Pages:
    """Renders templates into files, keeping count of pages and the largest one."""

    def __init__(self, out: Path, report: SiteReport, nav: list[tuple[str, str]]):
        import jinja2

        self.out, self.report, self.nav = out, report, nav
        self.env = jinja2.Environment(loader=jinja2.PackageLoader("modelci.report", "templates"),
                                      autoescape=True, trim_blocks=True, lstrip_blocks=True,
                                      undefined=jinja2.StrictUndefined)
        self.env.filters["fmt"] = fmt
        self.env.filters["when"] = when
        self.env.filters["status_class"] = status_class
        self.env.filters["href"] = safe_href
        self.env.filters["run_page"] = run_page
        self.generated = when(datetime.now(timezone.utc))

    def write(self, relative: str, template: str, **context: Any) -> None:
        """Render `template` into `out/relative` (atomically: a server never serves half a page)."""
        root = "../" * relative.count("/")
        html = self.env.get_template(template).render(root=root, nav=self.nav, generated=self.generated, **context)
        self.write_text(relative, html, page=True)

    def write_text(self, relative: str, text: str, page: bool = False) -> None:
        """Write a file atomically; a page counts towards the report's pages and largest page."""
        data = text.encode("utf-8")
        files.write_bytes(self.out / relative, data)  # whole, or a WriteError naming the file; no temporary left
        if not page:
            return
        self.report.pages += 1
        if len(data) > self.report.largest_bytes:
            self.report.largest_bytes, self.report.largest_page = len(data), relative


def _site_key(slugs: dict[str, str], nav: list[tuple[str, str]]) -> str:
    """What every run page depends on besides its own data: modelci, the templates, the workload files, the nav."""
    digest = hashlib.sha256(f"{modelci.__version__}\n{json.dumps([slugs, nav], sort_keys=True)}".encode())
    for path in sorted((Path(__file__).parent / "templates").rglob("*")):
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(Path(runpage.__file__).read_bytes())
    return digest.hexdigest()


def _read_manifest(path: Path, key: str) -> dict[str, str]:
    """The run-page signatures a previous generation wrote, or {} when absent, unreadable or from other code."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA or data.get("key") != key:
        return {}
    return data.get("runs") or {}


def _table(table: dict[str, Any], title: str) -> dict[str, Any]:
    """A table with every optional key present, so the template can stay strict about its own names."""
    rows = [{"label": row.get("label", ""), "href": row.get("href"),
             "cells": [{"text": cell.get("text", ""), "status": cell.get("status"), "href": cell.get("href")}
                       for cell in row.get("cells", [])]}
            for row in table.get("rows", [])]
    return {"title": table.get("title") or title, "intro": table.get("intro", ""),
            "columns": list(table.get("columns", [])), "rows": rows}


def _copy_assets(assets: Path, plotly: Path) -> None:
    """plotly.min.js (once; it is 4-5 MB, shared by every page), and the site's CSS/JS."""
    target = assets / "plotly.min.js"
    if not target.is_file() or target.stat().st_size != plotly.stat().st_size:
        shutil.copyfile(plotly, target)
    static = Path(__file__).parent / "templates" / "assets"
    for item in static.iterdir():
        shutil.copyfile(item, assets / item.name)


def plotly_js() -> Path:
    """The plotly.min.js that the plotly package ships, which the site copies and draws its plots with.

    plotly is the `report` extra, not a dependency of every install: 64 MB of Python package for this one
    file, which only `modelci report` and `modelci serve` need. Missing, it is a UserError saying how to get it.
    """
    spec = importlib.util.find_spec("plotly")
    if spec is None or spec.origin is None:
        raise UserError("the dashboard draws its plots with plotly.js, which the plotly package ships, and plotly "
                        "is not installed: install it with `pip install 'modelci[report]'`")
    path = Path(spec.origin).parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise UserError(f"the plotly package at {path.parent.parent} has no package_data/plotly.min.js; "
                        "reinstall it with `pip install --force-reinstall 'modelci[report]'`")
    return path


#: the longest workload page name, before `.html`: far below the 255 bytes of a file name, with room for the
#: temporary name a page is written under before it is renamed
SLUG_MAX = 120


def workload_slugs(workloads: list[str]) -> dict[str, str]:
    """A file name per workload (`fakesuite/Stable` -> `fakesuite_Stable`), unique even when two names collide.

    A long id (a suite folder of 200 characters and a workload name of 60 are both allowed) is cut to
    SLUG_MAX characters and ends with a digest of the whole id: a page name past the file system's 255 bytes
    failed every later `report` and `serve` of that history."""
    slugs: dict[str, str] = {}
    taken: set[str] = set()
    for workload in sorted(workloads):
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", workload).strip("._") or "workload"
        if len(slug) > SLUG_MAX:
            digest = hashlib.sha256(workload.encode('utf-8', 'surrogatepass')).hexdigest()[:12]
            slug = f"{slug[:SLUG_MAX - 13]}-{digest}"
        base, n = slug, 1
        while slug.lower() in taken:  # case-insensitive file systems would merge Foo and foo
            n += 1
            slug = f"{base}-{n}"
        taken.add(slug.lower())
        slugs[workload] = slug
    return slugs


def plot_json(figures: list[dict[str, Any]]) -> str:
    """Figures as JSON safe inside `<script type="application/json">`: no `</script>`, `<!--` or `&` survive."""
    text = json.dumps(figures, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# -- page contexts ------------------------------------------------------------------------------------------------


def _index_context(history: History, slugs: dict[str, str], alarms: list[dict[str, Any]],
                   recent: int) -> dict[str, Any]:
    runners = history.runners()
    latest = history.latest()
    previous = _previous_results(history)
    rows = []
    for workload in sorted(slugs):
        cells = []
        for runner in runners:
            result = latest.get((workload, runner))
            if result is None:
                cells.append(None)
                continue
            run = history.runs[result.run_id]
            mine = [a for a in alarms if a.get("workload") == workload and a.get("runner") == runner]
            cell = {"status": display_status(result), "run_id": run.id,
                    "target": history.targets[run.target_id].label, "reason": result.reason[:300]}
            cell.update(workload_state(cell, mine, previous.get((workload, runner)), history))
            cells.append(cell)
        rows.append({"workload": workload, "slug": slugs[workload], "cells": cells})
    by_run = history.by_run()
    parts = history.parts()
    runs = []
    # a confirmation run is part of the run it confirms: listed with it, never as a run of its own
    for run in sorted(history.own_runs(), key=lambda r: r.id, reverse=True)[:recent]:
        results = by_run.get(run.id, [])
        counts: dict[str, int] = {}
        for result in results:
            counts[display_status(result)] = counts.get(display_status(result), 0) + 1
        runs.append({"run": run, "target": history.targets[run.target_id].label, "counts": sorted(counts.items()),
                     "confirmations": [part.id for part in parts.get(run.id, [])]})
    return {"title": "modelci dashboard", "runners": runners, "rows": rows, "runs": runs,
            "alarms": alarms, "slugs": slugs,
            "totals": {"runs": len(history.own_runs()), "targets": len(history.targets), "workloads": len(slugs),
                       "results": len(history.results)}}


#: the states of the index's matrix, by what a person should do: look at an alarm, at a regression no alarm
#: covers (a report-only runner, a compare), note a recovery, or nothing
STATES = ("open alarm", "regressed", "recovered", "ok")


def workload_state(cell: dict[str, Any], alarms: list[dict[str, Any]], previous: ResultInfo | None,
                   history: History) -> dict[str, str]:
    """The state of one workload on one runner that a person should act on, with the target that caused it:

    - `open alarm`: a live (open or acknowledged) alarm that has not recovered; the target it first fired on;
    - `regressed` (or the failed status): the latest result in target order is not ok, or has a gating regression
      (a compare's, or a report that no alarm covers); its target;
    - `recovered`: an alarm recovered and no one resolved it yet, or the previous target's result was bad and
      the latest is good; the target that recovered;
    - `ok`: the latest target's result is good.
    """
    live = [a for a in alarms if not a.get("recovered") and str(a.get("state") or "open").split(",")[0]
            in ("open", "acknowledged")]
    if live:
        first = min(live, key=lambda a: a.get("id") or 0)
        more = f" (+{len(live) - 1})" if len(live) > 1 else ""
        return {"state": "open alarm", "state_text": f"alarm #{first.get('id')}{more}",
                "state_target": first.get("target") or cell["target"],
                "state_detail": f"{first.get('check')}:{first.get('metric')}: {first.get('message') or ''}"[:300],
                "state_class": "failed"}
    if cell["status"] not in ("ok", "skipped"):
        return {"state": "regressed", "state_text": cell["status"], "state_target": cell["target"],
                "state_detail": cell["reason"], "state_class": cell["status"]}
    recovered = [a for a in alarms if a.get("recovered")]
    was_bad = previous is not None and display_status(previous) not in ("ok", "skipped")
    if recovered or was_bad:
        since = (f"after {history.targets[history.runs[previous.run_id].target_id].label} "
                 f"({display_status(previous)})") if was_bad else f"alarm #{recovered[0].get('id')} recovered"
        return {"state": "recovered", "state_text": "recovered", "state_target": cell["target"],
                "state_detail": since, "state_class": "ok"}
    return {"state": "ok", "state_text": cell["status"], "state_target": cell["target"], "state_detail": "",
            "state_class": cell["status"]}


def _previous_results(history: History) -> dict[tuple[str, str], ResultInfo]:
    """(workload, runner) -> the latest result of the target before the latest one, in target order."""
    by_key: dict[tuple[str, str], dict[int, ResultInfo]] = {}
    for result in history.results:  # ascending ids: the last of a target is its latest
        run = history.runs[result.run_id]
        if not run.purpose:
            by_key.setdefault((result.workload, run.runner), {})[run.target_id] = result
    found = {}
    for key, per_target in by_key.items():
        ordered = sorted(per_target, key=lambda t: history.targets[t].rank)
        if len(ordered) > 1:
            found[key] = per_target[ordered[-2]]
    return found


def _workload_context(store: Any, history: History, workload: str, results: list[ResultInfo],
                      slugs: dict[str, str], alarms: list[dict[str, Any]], detect: plots.ChangeFinder,
                      overlay: int, table_rows: int) -> dict[str, Any]:
    # one point per (target, runner): the latest result, so a rerun replaces rather than doubles a point; a
    # confirmation run is part of the run it confirms, and the history's series leave it out too
    latest: dict[tuple[int, str], ResultInfo] = {}
    for result in results:
        run = history.runs[result.run_id]
        if not run.purpose:
            latest[(run.target_id, run.runner)] = result
    points = [plots.Point(history.targets[t], runner, r) for (t, runner), r in latest.items()]
    mine = [a for a in alarms if a.get("workload") == workload]
    changes: list[dict[str, Any]] = []
    figures = plots.trend_figures(points, detect, mine, changes)
    overlay_figure = _overlay(store, history, points, overlay)
    if overlay_figure is not None:
        figures.append(overlay_figure)
    rows = []
    for result in sorted(results, key=lambda r: r.id, reverse=True)[:table_rows]:
        run = history.runs[result.run_id]
        rows.append({"result": result, "status": display_status(result), "run": run,
                     "target": history.targets[run.target_id].label})
    first = results[-1]
    return {"title": workload, "workload": workload, "framework": first.framework, "domain": first.domain,
            "figures": figures, "plot_json": plot_json(figures), "rows": rows, "total": len(results),
            "changes": changes, "detection": detect.detect is not None, "skipped": detect.skipped, "alarms": mine,
            "slugs": slugs}


def _overlay(store: Any, history: History, points: list[plots.Point], count: int) -> dict[str, Any] | None:
    """The loss curves of the last `count` targets (the latest result of each), read only for those results."""
    with_curve = [p for p in points if p.result.metrics.get("loss", None) is not None
                  and p.result.metrics["loss"].kind == "curve"]
    by_target: dict[int, plots.Point] = {}
    for point in sorted(with_curve, key=lambda p: p.result.id):
        by_target[point.target.id] = point
    chosen = sorted(by_target.values(), key=lambda p: p.target.rank)[-count:] if count > 0 else []
    curves = queries.loss_curves(store, [p.result.id for p in chosen])
    return plots.loss_overlay([(p.target.label, curves[p.result.id]) for p in chosen if curves.get(p.result.id)])
