"""The versioned JSON report that scripts read (`--json FILE`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from modelci.records import redacted

#: bump on any change that breaks a reader; readers check it
SCHEMA = "modelci.report/1"


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: write them as strings so the file stays standard. No URL's password goes into
    a report (records.redacted): a compat check's consumer, a bisect's candidates, a target name their repository."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str):
        return redacted(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def target_section(target: Any) -> dict[str, Any]:
    """The `target` object of a report: its spec, kind, name, version, commit, wheel digest and label."""
    return {"spec": target.spec, "kind": target.kind, "name": target.name, "version": target.version,
            "commit": target.commit, "wheel_sha256": target.wheel_sha256, "label": target.label}


def run_section(outcome: Any) -> dict[str, Any]:
    """The `run` object: id, target, runner, environment."""
    return {
        "id": outcome.run_id,
        "target": target_section(outcome.target),
        "runner": outcome.runner,
        "environment": outcome.environment.id,
        "reused_results": outcome.reused,
        # seconds per step of the harness: environment, store, discovery, execute, ingest, compat, checks, alarms,
        # and worker_start (from the worker's launch to its ready message, overlapping store and discovery)
        "timings": {step: round(seconds, 4) for step, seconds in outcome.timings.items()},
    }


def result_entries(comparisons: list[Any]) -> list[dict[str, Any]]:
    """One entry per result: workload, status, reason, baseline and findings."""
    entries = []
    for comparison in comparisons:
        result = comparison.result
        entries.append({
            "workload": result.workload,
            "status": result.status,
            "reason": result.reason,
            "result_id": result.id,
            "reused": result.reused,
            "duration": result.duration,
            "isolation": result.info.get("isolation", ""),
            "saved": [{"format": e.get("format"), "status": e.get("status"), "reason": e.get("reason", "")}
                      for e in result.info.get("saved", [])],
            "baseline_result_id": comparison.baseline.id if comparison.baseline is not None else None,
            # which rule chose the baseline: nearest earlier version or commit, the compare's A, or by run time
            "baseline_rule": getattr(comparison, "baseline_rule", ""),
            "metrics": {name: {"kind": m.kind, "unit": m.unit, "median": m.median, "n": len(m.values)}
                        for name, m in result.metrics.items()},
            "findings": [{"check": f.check, "metric": f.metric, "verdict": f.verdict, "gating": f.gating,
                          "message": f.message, "reason": f.reason, "numbers": f.numbers}
                         for f in comparison.findings],
        })
    return entries


def alarm_entries(report: Any) -> list[dict[str, Any]]:
    """What the alarm step did with the run's verdicts: one entry per alarm opened, reopened or recovered."""
    if report is None:
        return []
    return [{"event": e.event, "reopened": e.reopened, "id": e.alarm.id, "workload": e.alarm.workload,
             "check": e.alarm.check, "metric": e.alarm.metric, "kind": e.alarm.kind, "message": e.alarm.message}
            for e in report.events]


def run_report(outcome: Any, regressed: bool) -> dict[str, Any]:
    """The report of `modelci run`."""
    return {"schema": SCHEMA, "kind": "run", "regressed": regressed, "interrupted": outcome.interrupted,
            "judged": getattr(outcome, "judged", True), "run": run_section(outcome),
            "results": result_entries(outcome.comparisons), "alarms": alarm_entries(outcome.alarms),
            # entries found wrong once the run was stored: the run is judged without them, and exits 2 for them
            "config_errors": list(getattr(outcome, "config_errors", []))}


def compare_report(outcome: Any) -> dict[str, Any]:
    """The report of `modelci compare A B`: `run` is B, `baseline_run` is A. A cancelled compare has
    `interrupted` true, B's finished results unjudged, and `run` null when it was cancelled while A ran."""
    from modelci.envs.diff import between  # what changed besides the target

    a, b = outcome.a, outcome.b
    env_diff = None
    if a is not None and b is not None:
        env_diff = between(a.environment, b.environment).to_json()
        env_diff["targets"] = sorted({a.target.name, b.target.name})
    return {"schema": SCHEMA, "kind": "compare", "regressed": outcome.regressed,
            # B's workloads that gave no result: the compare exits 1 for them, regressed or not
            "unmeasured": list(getattr(outcome, "unmeasured", [])),
            "interrupted": bool(getattr(outcome, "interrupted", False)),
            # B's results unjudged: cancelled, or the history refused a side (`problem` says why)
            "judged": not (getattr(outcome, "interrupted", False) or getattr(outcome, "problem", "")),
            "problem": getattr(outcome, "problem", ""),
            "run": run_section(b) if b is not None else None,
            "baseline_run": run_section(a) if a is not None else None, "results": result_entries(outcome.comparisons),
            "alarms": alarm_entries(outcome.alarms), "environment_diff": env_diff,
            "config_errors": list(getattr(b, "config_errors", []))}


def calibration_report(outcome: Any) -> dict[str, Any]:
    """The JSON report of `calibrate`: the noise it measured per workload and metric, and the runs it stored."""
    import dataclasses

    return {"schema": SCHEMA, "kind": "calibration", "failed": bool(outcome.failures),
            "interrupted": bool(getattr(outcome, "interrupted", False)),
            "target": target_section(outcome.target),
            "runner": outcome.runner, "environment": outcome.environment.id, "run_ids": list(outcome.run_ids),
            "noise": [dataclasses.asdict(entry) for entry in outcome.entries],
            "failures": [{"workload": r.workload, "status": r.status, "reason": r.reason} for r in outcome.failures]}


def write(path: str | Path, report: dict[str, Any]) -> None:
    """Write a report as JSON."""
    from modelci.report import files

    files.write_text(path, json.dumps(_clean(report), indent=2, default=str) + "\n")
