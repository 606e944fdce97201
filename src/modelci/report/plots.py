"""Trend figures of one workload as plain plotly.js figure dicts (data + layout), ready to embed as JSON.

Built as dicts rather than plotly.graph_objects: validating 50 workloads x 500 targets of traces through
graph_objects costs seconds, and the page only needs the JSON. Plotly renders its text as pseudo-HTML, so every
name and label that reaches a figure is escaped here.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from modelci.report.queries import ResultInfo, TargetInfo

__all__ = ["ChangeFinder", "Point", "esc", "trend_figures", "loss_overlay"]

#: one colour per runner, and the translucent fill of its min-max band
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
MIB = 2**20


@lru_cache(maxsize=65536)
def esc(text: Any) -> str:
    """Escape text for plotly, which parses `<b>`, `<br>`, `<a href>` in labels and decodes the entities back."""
    # cached: the same target labels are escaped for every trace of every workload
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _num(value: float | None) -> float | None:
    # NaN and inf are not JSON; plotly leaves a gap for null
    return value if value is not None and math.isfinite(value) else None


class ChangeFinder:
    """`detect_changes` for the trend plots, with a noise floor and a time budget for the whole site.

    A noise-free series (a deterministic final loss, exact RSS) has an estimated noise of 0, so every tiny drift
    is "significant", and a trend plot would get a marker at every tiny drift (confirming them took seconds on
    500 points before detect_changes re-tested only the neighbours of a dropped one). A floor of FLOOR_CV of the
    series median keeps such series to the changes worth a marker; the budget stops detection (the page says
    so) rather than let one odd series blow the 15 s limit.
    """

    FLOOR_CV = 0.005

    def __init__(self, detect: Callable[..., list] | None, budget_s: float = 10.0):
        self.detect, self.budget_s = detect, budget_s
        self.spent_s = 0.0
        self.skipped = 0

    def __call__(self, values: list[float], labels: list[str], metric: str) -> list:
        """The change points of one series; [] (and counted in `skipped`) once the budget is spent."""
        if self.detect is None:
            return []
        if self.spent_s > self.budget_s:
            self.skipped += 1
            return []
        started = time.perf_counter()
        try:
            floor = self.FLOOR_CV * abs(statistics.median(values))
            # a rough sd from the median absolute step (1.05 x for normal noise); detect_changes makes its own,
            # better estimate when this one clears the floor, so the rough one only decides whether to floor
            steps = sorted(abs(b - a) for a, b in zip(values, values[1:]))
            noise_sd = floor if 1.05 * steps[len(steps) // 2] < floor else None
            return self.detect(values, labels, noise_sd=noise_sd, metric=metric)
        except (ValueError, FloatingPointError, ArithmeticError):
            return []
        finally:
            self.spent_s += time.perf_counter() - started


@dataclass
class Point:
    """One result on a trend: its target, runner and summaries."""

    target: TargetInfo
    runner: str
    result: ResultInfo


def _layout(title: str, ytitle: str, categories: list[str], log: bool = False) -> dict[str, Any]:
    return {
        "title": {"text": esc(title), "font": {"size": 14}, "x": 0.01, "xanchor": "left"},
        "height": 340, "margin": {"l": 60, "r": 20, "t": 60, "b": 90},
        "xaxis": {"type": "category", "categoryorder": "array", "categoryarray": categories,
                  "tickangle": -40, "automargin": True},
        "yaxis": {"title": {"text": esc(ytitle)}, "type": "log" if log else "linear", "rangemode": "tozero"},
        "legend": {"orientation": "h", "x": 1, "xanchor": "right", "y": 1.0, "yanchor": "bottom"},
        "hovermode": "closest",
    }


def _rgba(colour: str, alpha: float) -> str:
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def trend_figures(points: Sequence[Point], detect: Callable[..., list] | None, alarms: Sequence[dict[str, Any]] = (),
                  changes: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The trend plots of one workload: each time.* metric (median with a min-max band), memory, final loss,
    user metrics and precision drift, one trace per runner, with change points and alarms marked.

    The change points found are also appended to `changes` (metric, runner, label, magnitude, evidence)."""
    changes = [] if changes is None else changes
    groups = _by_runner(points)
    categories = list(dict.fromkeys(esc(p.target.label) for p in sorted(points, key=lambda p: p.target.rank)))
    runners = sorted({p.runner for p in points})
    names = sorted({name for p in points for name in p.result.metrics})
    figures = []
    # training and inference first: they are what a framework change moves; setup and others follow
    timings = sorted((n for n in names if n.startswith("time.")),
                     key=lambda n: (n not in ("time.train", "time.infer"), n != "time.train", n))
    for name in timings:
        figures.append(_metric_figure(groups, runners, categories, name, "median", True, detect, alarms,
                                      f"{name} (median, min-max band)", "seconds", changes=changes))
    for name in [n for n in names if n.startswith("mem.")]:
        unit = next((p.result.metrics[name].unit for p in points if name in p.result.metrics), "")
        scale, ytitle = (MIB, "MiB") if unit == "bytes" else (1.0, unit)
        figures.append(_metric_figure(groups, runners, categories, name, "median", False, detect, alarms,
                                      f"peak memory: {name}", ytitle, scale, changes=changes))
    for name in names:
        kind = next(p.result.metrics[name].kind for p in points if name in p.result.metrics)
        if kind == "curve":
            figures.append(_metric_figure(groups, runners, categories, name, "final", False, detect, alarms,
                                          f"final {name}", name, changes=changes))
    for name in [n for n in names if not n.startswith(("time.", "mem."))]:
        kind = next(p.result.metrics[name].kind for p in points if name in p.result.metrics)
        if kind != "curve":
            figures.append(_metric_figure(groups, runners, categories, name, "median", False, detect, alarms,
                                          name, name, changes=changes))
    for figure in figures:
        _one_legend_entry(figure["data"], ("change point", "alarm"))
    drift = _drift_figure(points, runners, categories, alarms)
    if drift is not None:
        figures.append(drift)
    for index, figure in enumerate(figures):
        figure["id"] = f"plot-{index}"
    return figures


def _one_legend_entry(data: list[dict[str, Any]], names: tuple[str, ...]) -> None:
    """Marker traces repeat per runner; the legend needs each name once (its click still toggles them all)."""
    seen: set[str] = set()
    for trace in data:
        name = trace.get("name")
        if name in names:
            trace["legendgroup"] = name
            trace["showlegend"] = name not in seen
            seen.add(name)


def _by_runner(points: Sequence[Point]) -> dict[str, list[Point]]:
    """Points per runner in target order, sorted once per workload rather than once per metric."""
    groups: dict[str, list[Point]] = {}
    for point in sorted(points, key=lambda p: p.target.rank):
        groups.setdefault(point.runner, []).append(point)
    return groups


def _metric_figure(groups: dict[str, list[Point]], runners: list[str], categories: list[str], name: str, field: str,
                   band: bool, detect: Callable[..., list] | None, alarms: Sequence[dict[str, Any]], title: str,
                   ytitle: str, scale: float = 1.0, changes: list | None = None) -> dict[str, Any]:
    data: list[dict[str, Any]] = []
    for index, runner in enumerate(runners):
        series = [p for p in groups.get(runner, ()) if name in p.result.metrics]
        if not series:
            continue
        colour = PALETTE[index % len(PALETTE)]
        x = [esc(p.target.label) for p in series]
        summaries = [p.result.metrics[name] for p in series]
        values = [_scaled(getattr(m, field), scale) for m in summaries]
        if band:
            data.append({"type": "scatter", "mode": "lines", "x": x, "showlegend": False, "hoverinfo": "skip",
                         "y": [_scaled(m.maximum, scale) for m in summaries],
                         "line": {"width": 0, "color": colour}, "legendgroup": esc(runner)})
            data.append({"type": "scatter", "mode": "lines", "x": x, "fill": "tonexty", "showlegend": False,
                         "y": [_scaled(m.minimum, scale) for m in summaries],
                         "fillcolor": _rgba(colour, 0.2), "line": {"width": 0, "color": colour},
                         "hoverinfo": "skip", "legendgroup": esc(runner)})
        data.append({"type": "scatter", "mode": "lines+markers", "name": esc(runner), "x": x, "y": values,
                     "line": {"color": colour}, "marker": {"size": 4}, "legendgroup": esc(runner),
                     "customdata": [p.result.run_id for p in series],
                     "hovertemplate": "%{x}<br>%{y}<br>run %{customdata}<extra>" + esc(runner) + "</extra>"})
        data += _change_trace(detect, series, x, values, name, runner, colour, changes)
        data += _alarm_trace([p for p in series], x, values, name, runner, alarms)
    return {"data": data, "layout": _layout(title, ytitle, categories), "metric": name}


def _scaled(value: float | None, scale: float) -> float | None:
    if value is None:
        return None
    return _num(value / scale if scale != 1.0 else value)


def _change_trace(detect: Callable[..., list] | None, series: list[Point], x: list[str],
                  values: list[float | None], name: str, runner: str, colour: str,
                  found: list | None) -> list[dict[str, Any]]:
    """A marker trace at each change point of the series, with its evidence as hover text."""
    if detect is None:
        return []
    known = [(p.target.label, label, value) for p, label, value in zip(series, x, values) if value is not None]
    if len(known) < 6:
        return []
    changes = detect([v for _, _, v in known], [raw for raw, _, _ in known], metric=name)
    if not changes:
        return []
    if found is not None:
        found += [{"metric": name, "runner": runner, "target": c.label, "magnitude": c.magnitude,
                   "evidence": c.evidence} for c in changes]
    return [{"type": "scatter", "mode": "markers", "name": "change point", "legendgroup": "change point",
             "x": [known[c.index][1] for c in changes], "y": [known[c.index][2] for c in changes],
             "marker": {"symbol": "diamond-open", "size": 14, "line": {"width": 2}, "color": colour},
             "text": [esc(c.evidence) for c in changes], "hovertemplate": "%{text}<extra>change point</extra>"}]


def _alarm_trace(series: list[Point], x: list[str], values: list[float | None], name: str, runner: str,
                 alarms: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A marker at each point that an open alarm names (same metric and runner, and its target)."""
    marked = []
    for alarm in alarms:
        if alarm.get("metric") not in (name, None, "") or alarm.get("runner") not in (runner, None, ""):
            continue
        for label, value, point in zip(x, values, series):
            if value is not None and alarm.get("target") in (point.target.label, point.target.id):
                marked.append((label, value, esc(alarm.get("message", "alarm"))))
    if not marked:
        return []
    return [{"type": "scatter", "mode": "markers", "name": "alarm", "x": [m[0] for m in marked],
             "y": [m[1] for m in marked], "text": [m[2] for m in marked],
             "marker": {"symbol": "triangle-up", "size": 14, "color": "#d62728"},
             "hovertemplate": "%{text}<extra>alarm</extra>"}]


def _drift_figure(points: Sequence[Point], runners: list[str], categories: list[str],
                  alarms: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Precision drift against each result's baseline: the worst max_rel and max_abs over its outputs."""
    data = []
    for index, runner in enumerate(runners):
        series = sorted((p for p in points if p.runner == runner
                         and (p.result.max_rel is not None or p.result.max_abs is not None)),
                        key=lambda p: p.target.rank)
        if not series:
            continue
        colour = PALETTE[index % len(PALETTE)]
        x = [esc(p.target.label) for p in series]
        for field, dash in (("max_rel", "solid"), ("max_abs", "dot")):
            data.append({"type": "scatter", "mode": "lines+markers", "name": esc(f"{runner} {field}"), "x": x,
                         "y": [_num(getattr(p.result, field)) for p in series], "marker": {"size": 4},
                         "line": {"color": colour, "dash": dash}, "customdata": [p.result.run_id for p in series],
                         "hovertemplate": "%{x}<br>%{y}<br>run %{customdata}<extra>" + field + "</extra>"})
        outputs = [a for a in alarms if a.get("check") == "precision"]
        data += _alarm_trace(series, x, [_num(p.result.max_rel) for p in series], "", runner,
                             [{**a, "metric": ""} for a in outputs])
    if not data:
        return None
    figure = {"data": data, "layout": _layout("precision drift against the baseline (worst output)",
                                              "error", categories), "metric": "precision"}
    return figure


def loss_overlay(curves: list[tuple[str, list[float]]], metric: str = "loss") -> dict[str, Any] | None:
    """The per-step curves of the last N targets on one plot, oldest faint, newest strong."""
    if not curves:
        return None
    data = []
    for index, (label, values) in enumerate(curves):
        alpha = 0.35 + 0.65 * (index + 1) / len(curves)
        data.append({"type": "scatter", "mode": "lines", "name": esc(label), "x": list(range(len(values))),
                     "y": [_num(v) for v in values], "opacity": round(alpha, 2)})
    layout = {"title": {"text": esc(f"{metric} per step, last {len(curves)} targets"), "font": {"size": 14}},
              "height": 360, "margin": {"l": 60, "r": 20, "t": 40, "b": 50}, "hovermode": "closest",
              "xaxis": {"title": {"text": "step"}}, "yaxis": {"title": {"text": esc(metric)}}}
    return {"id": "plot-overlay", "data": data, "layout": layout, "metric": metric}
