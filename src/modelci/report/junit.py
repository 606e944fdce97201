"""JUnit XML (`--junit FILE`): one test case per workload and check, for CI systems that render test reports.

The `status` case fails when the workload failed, crashed or timed out, is an error when the harness could not
run it, and is skipped when it was skipped. Every other check (precision, curve, timing, memory, metric,
history) is one case that fails when any of its findings is a gating regression; report-only findings are
listed in its system-out and never fail it.
"""

from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

#: the order of the cases of one workload; checks not listed come after, by name
CHECK_ORDER = ("status", "precision", "curve", "timing", "memory", "metric", "history")


def classname(workload: str) -> str:
    """A workload id as a dotted JUnit class name (`fakesuite/Slow` -> `fakesuite.Slow`; dots inside a part,
    as in `broken.py`, become underscores so that readers do not nest on them)."""
    return ".".join(part.replace(".", "_") for part in workload.split("/"))


def _line(finding: Any) -> str:
    flag = "" if finding.gating else " (report-only)"
    return f"[{finding.verdict}{flag}] {finding.metric}: {finding.message}"


def _cases(comparison: Any) -> list[ET.Element]:
    """The test cases of one workload."""
    result = comparison.result
    by_check: dict[str, list[Any]] = {"status": []}
    for finding in comparison.findings:
        by_check.setdefault(finding.check, []).append(finding)
    order = sorted(by_check, key=lambda c: (CHECK_ORDER.index(c) if c in CHECK_ORDER else len(CHECK_ORDER), c))
    cases = []
    for check in order:
        findings = by_check[check]
        case = ET.Element("testcase", classname=classname(result.workload), name=check,
                          time=f"{result.duration if check == 'status' else 0.0:.3f}")
        if check == "status" and result.status in ("failed", "crashed", "timeout", "error"):
            tag = "error" if result.status == "error" else "failure"
            first = result.reason.strip().splitlines()[0] if result.reason.strip() else result.status
            element = ET.SubElement(case, tag, message=f"{result.status}: {first}"[:500], type=result.status)
            element.text = "\n\n".join(t for t in (result.reason, result.traceback, result.stderr_tail) if t)
        elif check == "status" and result.status == "skipped":
            ET.SubElement(case, "skipped", message=result.reason.strip()[:500] or "skipped")
        else:
            failing = [f for f in findings if f.verdict == "regression" and f.gating]
            if failing:
                element = ET.SubElement(case, "failure", message="; ".join(f.message for f in failing)[:500],
                                        type="regression")
                element.text = "\n".join(f"{_line(f)}\n  numbers: {f.numbers}" for f in failing)
        if findings:
            ET.SubElement(case, "system-out").text = "\n".join(_line(f) for f in findings)
        cases.append(case)
    return cases


def suite_xml(name: str, comparisons: list[Any], properties: dict[str, Any]) -> ET.Element:
    """A <testsuites> element holding one <testsuite> of the given comparisons."""
    suite = ET.Element("testsuite", name=name, timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       hostname=socket.gethostname())
    props = ET.SubElement(suite, "properties")
    for key, value in properties.items():
        ET.SubElement(props, "property", name=key, value="" if value is None else str(value))
    cases = [case for comparison in comparisons for case in _cases(comparison)]
    suite.extend(cases)
    counts = {
        "tests": len(cases),
        "failures": sum(case.find("failure") is not None for case in cases),
        "errors": sum(case.find("error") is not None for case in cases),
        "skipped": sum(case.find("skipped") is not None for case in cases),
    }
    total = sum(c.result.duration for c in comparisons)
    for key, value in counts.items():
        suite.set(key, str(value))
    suite.set("time", f"{total:.3f}")
    root = ET.Element("testsuites", name="modelci", time=f"{total:.3f}", **{k: str(v) for k, v in counts.items()})
    root.append(suite)
    return root


def run_xml(outcome: Any) -> ET.Element:
    """The JUnit XML of `modelci run`; a cancelled run says so in its name and an `interrupted` property."""
    properties = {"run_id": outcome.run_id, "target": outcome.target.label, "runner": outcome.runner,
                  "environment": outcome.environment.id}
    name = f"modelci run {outcome.target.label} on {outcome.runner}"
    if getattr(outcome, "interrupted", False):
        properties["interrupted"] = "true"
        name += " (interrupted: only the workloads that finished, not compared)"
    elif not getattr(outcome, "judged", True):  # not stored, or the history failed after storing it
        properties["judged"] = "false"
        name += " (not judged: the history failed; its cases say only whether each workload ran)"
    return suite_xml(name, outcome.comparisons, properties)


def compare_xml(outcome: Any) -> ET.Element:
    """The JUnit XML of `modelci compare A B` (B's results judged against A's); a cancelled compare says so in
    its name and an `interrupted` property, with B's finished results (none when it was cancelled while A ran)."""
    a, b = outcome.a, outcome.b
    properties = {"a": a.target.label, "b": b.target.label if b is not None else "", "a_run_id": a.run_id,
                  "b_run_id": b.run_id if b is not None else None, "runner": (b or a).runner}
    name = f"modelci compare {a.target.label} -> {b.target.label if b is not None else 'B'}"
    if getattr(outcome, "interrupted", False):
        properties["interrupted"] = "true"
        name += (" (interrupted: only the workloads that finished, not compared)" if b is not None
                 else " (interrupted while A ran: B did not run)")
    elif getattr(outcome, "problem", ""):
        properties["judged"] = "false"
        name += " (not compared: the history failed; its cases say only whether each workload ran)"
    return suite_xml(name, outcome.comparisons, properties)


#: what XML 1.0 cannot hold, even escaped: control characters other than tab, newline and carriage return,
#: surrogates (a file name that is not UTF-8 decodes to them) and U+FFFE/U+FFFF
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """`text` with every character XML cannot hold written as a visible escape (`\\x1b`), so that a workload's
    message with a terminal colour code or a NUL still gives a well-formed file."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                        text)


def write(path: str | Path, root: ET.Element) -> None:
    """Write the XML with a declaration, indented, every text and attribute made well-formed (`xml_text`)."""
    from modelci.report import files

    for element in root.iter():
        if element.text:
            element.text = xml_text(element.text)
        for key, value in element.attrib.items():
            element.set(key, xml_text(value))
    ET.indent(root)
    files.write_bytes(path, ET.tostring(root, encoding="utf-8", xml_declaration=True))
