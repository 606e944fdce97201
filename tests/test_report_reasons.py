"""Every verdict says why: the rule that decided it, with its numbers, in every report (console, JSON, Markdown,
JUnit), from one field the check writes."""

from __future__ import annotations

import numpy as np
from rich.console import Console

from modelci.checks import Policy
from modelci.checks.precision import check_output
from modelci.checks.timing import check_timing
from modelci.records import Result
from modelci.report import json_report, junit, markdown
from modelci.report.console import _compare_cells, render_problems
from modelci.workflow import Comparison


def findings() -> list:
    rng = np.random.default_rng(3)
    policy = Policy()
    return [
        # 2.2x and p far below alpha, but 0.6 ms apart: under the timing floor
        check_timing("time.infer", rng.normal(0.5e-3, 1e-7, 20), rng.normal(1.1e-3, 1e-7, 20), policy),
        # thousands of ULP apart but within the float32 tolerance
        check_output("logits", np.linspace(1, 2, 8, dtype=np.float32),
                     (np.linspace(1, 2, 8) * (1 + 3e-5)).astype(np.float32), policy),
        # float64 -> float32: same family, compared by value, and said
        check_output("probs", np.linspace(0, 1, 6), np.linspace(0, 1, 6).astype(np.float32), policy),
        # a scalar that changed by 94%: its two values, and no cosine of two numbers
        check_output("score", np.float64(0.5), np.float64(0.97), policy),
    ]


def test_each_check_writes_the_rule_and_its_numbers_into_the_finding():
    timing, logits, probs, score = findings()
    assert timing.verdict == "ok" and "within the timing floor of 1 ms" in timing.reason
    assert "2.20x" in timing.reason and "p=" in timing.reason
    assert logits.verdict == "ok" and "within rtol=0.0001 atol=1e-06 (the float32 default)" in logits.reason
    assert "ULP apart" in logits.reason
    assert probs.verdict == "ok" and "dtype float64 -> float32" in probs.reason
    assert score.verdict == "regression" and "cosine" not in score.numbers
    assert (score.numbers["baseline_value"], score.numbers["current_value"]) == (0.5, 0.97)
    assert "0.5 -> 0.97" in score.reason
    for finding in (timing, logits, probs, score):
        assert finding.numbers["reason"] == finding.reason and finding.message.endswith(finding.reason)


def test_every_report_shows_the_same_reason(tmp_path):
    found = findings()
    comparison = Comparison(Result(workload="suite/Model", status="ok"), Result(workload="suite/Model", status="ok"),
                            found)
    entries = json_report.result_entries([comparison])
    assert [f["reason"] for f in entries[0]["findings"]] == [f.reason for f in found]
    table = "\n".join(markdown.comparisons_table([comparison]))
    xml = "\n".join(e.text or "" for e in junit.suite_xml("modelci", [comparison], {}).iter("system-out"))
    out = Console(record=True, width=400)
    render_problems([comparison], out)
    console = out.export_text()
    for finding in found:
        assert markdown.cell(finding.reason) in table
        assert finding.reason in xml
    assert found[3].reason in console  # the regression is printed with its reason
    a, b, _ = _compare_cells(found[3])
    assert a.startswith("0.5") and b.startswith("0.97")  # a scalar output shows its two values
    assert _compare_cells(found[1])[0] == "float32[8]"


def test_the_compare_table_says_why_for_the_findings_that_are_not_ok_only():
    """On a CI log the table's `why` of every ok finding (hundreds of outputs and timings in a zoo) buried the
    few that matter: the console shows the reasons of findings that are not ok, or that a second pass did not
    confirm, and says where the others are; JSON and Markdown keep every one."""
    from types import SimpleNamespace

    from modelci.checks import Finding
    from modelci.report.console import render_compare

    timing, logits, probs, score = findings()
    unconfirmed = Finding("timing", "time.train", "ok", {"reason": "not confirmed by a second run of both, so not "
                                                                  "counted", "confirmation": {"confirmed": False}})
    comparison = Comparison(Result(workload="suite/Model", status="ok"), Result(workload="suite/Model", status="ok"),
                            [timing, logits, probs, score, unconfirmed])
    env = SimpleNamespace(id="e1", lock="numpy==2.0.0\n", fingerprint={})
    side = SimpleNamespace(target=SimpleNamespace(label="fw==1.0", name="fw"), environment=env)
    outcome = SimpleNamespace(a=side, b=side, comparisons=[comparison])
    out = Console(record=True, width=400)
    render_compare(outcome, out)
    text = out.export_text()
    assert score.reason in text and unconfirmed.reason in text
    for ok in (timing, logits, probs):
        assert ok.reason not in text
    assert "the reasons of the 3 ok finding(s) are in the --json and --markdown reports" in text
    table = "\n".join(markdown.comparisons_table([comparison]))
    assert all(markdown.cell(f.reason) in table for f in comparison.findings)
