"""Backward compatibility on compatfw 1.0 / 2.0: real uv environments, real child processes, a real SQLite history.

2.0 renames a state key, changes a layer's numerics and drops a format; compat must report exactly those three
(plus the workload deleted from the suite as `missing`), and everything else `ok`.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from compatfw import SUITE, write_project

from modelci import compat, targets, workflow
from modelci import config as config_module
from modelci.errors import UserError
from modelci.execute import forked
from modelci.report import compat_report
from modelci.store import Store
from modelci.store import compat_schema as records

#: (workload, format) -> outcome of 1.0's saved models loaded in 2.0, once retired.py is gone
BACKWARD = {
    ("compatsuite/Legacy", "json"): "ok",
    ("compatsuite/Legacy", "text"): "unsupported",
    ("compatsuite/Numerics", "json"): "outputs_differ",
    ("compatsuite/Renamed", "json"): "load_failed",
    ("compatsuite/Retired", "json"): "missing",
    ("compatsuite/Stable", "folder"): "ok",
    ("compatsuite/Stable", "json"): "ok",
}


def outcomes(outcome) -> dict[tuple[str, str], str]:
    return {(e.workload, e.format): e.outcome for e in outcome.entries}


@pytest.fixture(scope="module")
def project(tmp_path_factory, env_cache):
    """compatfw 1.0 and 2.0 both run once over the suite, so the store holds both versions' saved models."""
    root = tmp_path_factory.mktemp("compat") / "project"
    paths = write_project(root, env_cache)
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith("MODELCI_")]:
            mp.delenv(key)
        mp.setenv("MODELCI_FIND_LINKS", str(paths["wheels"]))
        mp.setenv("PIP_NO_INDEX", "1")
        mp.chdir(root)
        cfg = config_module.load()
        first = workflow.run(cfg, str(paths["v1"]), [str(paths["suite"])])
        second = workflow.run(cfg, str(paths["v2"]), [str(paths["suite"])])
        assert [r.status for r in first.results + second.results] == ["ok"] * 10
        # the same suite without retired.py: Retired's saved model then has no workload to load it
        current = root / "now" / "compatsuite"
        shutil.copytree(paths["suite"], current)
        (current / "retired.py").unlink()
        yield dict(paths, root=root, cfg=cfg, current=current, first=first)


def test_backward_reports_the_renamed_key_the_numerics_and_the_dropped_format_exactly(project):
    outcome = compat.check(project["cfg"], str(project["v2"]), [str(project["current"])])

    assert outcomes(outcome) == BACKWARD
    assert outcome.regressed
    by_key = {(e.workload, e.format): e for e in outcome.entries}
    assert {e.producer["version"] for e in outcome.entries} == {"1.0"}
    assert {e.consumer["version"] for e in outcome.entries} == {"2.0"}
    assert "KeyError: 'kernel' (in load)" in by_key["compatsuite/Renamed", "json"].error
    differ = by_key["compatsuite/Numerics", "json"]
    assert differ.numbers["output:y"]["max_rel"] == pytest.approx(1e-3, rel=0.01)
    # the inputs made again from the seed are the producer's, so the model, not the data, changed
    assert differ.numbers["inputs"]["match"] is True
    assert "compatfw 2.0 has no format 'text'" in by_key["compatsuite/Legacy", "text"].error
    assert not by_key["compatsuite/Retired", "json"].gating
    assert by_key["compatsuite/Stable", "json"].numbers["output:y"]["max_abs"] == 0
    # as check findings, for alarms: the three breaks gate, the deleted workload is reported only
    found = compat.findings(outcome)
    assert sorted(f.numbers["outcome"] for f in found if f.verdict == "regression" and f.gating) == [
        "load_failed", "outputs_differ", "unsupported"]
    assert {f.check for f in found} == {"compat"}

    # kept as history
    store = Store.from_config(project["cfg"])
    with store.sessions() as session:
        rows = [r for r in records.compat_history(session) if r.check_id == outcome.check_id]
    assert {(r.workload, r.format): r.outcome for r in rows} == BACKWARD


def test_reports_name_every_cell_and_problem(project, tmp_path):
    outcome = compat.check(project["cfg"], str(project["v2"]), [str(project["current"])])
    compat_report.write_json(tmp_path / "compat.json", outcome)
    compat_report.write_markdown(tmp_path / "compat.md", outcome)

    report = json.loads((tmp_path / "compat.json").read_text())
    assert report["schema"] == "modelci.compat/1" and report["regressed"] is True
    cells = {(w, f): next(iter(next(iter(by_p.values())).values()))
             for w, by_f in report["matrix"].items() for f, by_p in by_f.items()}
    assert cells == BACKWARD
    assert report["summary"] == {"ok": 3, "load_failed": 1, "outputs_differ": 1, "unsupported": 1, "missing": 1}
    text = (tmp_path / "compat.md").read_text()
    assert "## `compatsuite/Numerics`" in text and "**outputs_differ**" in text and "KeyError" in text
    # the workloads' own formats execute code on load unless declared safe, as Stable's are
    unsafe = {(e["workload"], e["format"]): e["executes_code_on_load"] for e in report["entries"]}
    assert unsafe["compatsuite/Renamed", "json"] is True and unsafe["compatsuite/Stable", "json"] is False


def test_a_build_loads_its_own_models(project):
    outcome = compat.check(project["cfg"], str(project["v1"]), [str(project["suite"])], from_spec="==1.0")
    assert set(outcomes(outcome).values()) == {"ok"} and len(outcome.entries) == 7
    assert not outcome.regressed


def test_forward_loads_the_targets_models_in_the_older_build(project):
    outcome = compat.check(project["cfg"], str(project["v2"]), [str(project["suite"])], direction="forward")
    assert outcomes(outcome) == {
        ("compatsuite/Legacy", "json"): "ok",
        ("compatsuite/Numerics", "json"): "outputs_differ",
        ("compatsuite/Renamed", "json"): "load_failed",
        ("compatsuite/Retired", "json"): "ok",
        ("compatsuite/Stable", "folder"): "ok",
        ("compatsuite/Stable", "json"): "ok",
        # 2.0 dropped the format: its run skipped it, and the matrix says so rather than leaving the row out
        ("compatsuite/Legacy", "text"): "not_saved",
    }
    skipped = next(e for e in outcome.entries if e.outcome == "not_saved")
    assert skipped.saved == "skipped" and not skipped.gating and "format was skipped" in skipped.reason
    assert {(e.producer["version"], e.consumer["version"]) for e in outcome.entries} == {("2.0", "1.0")}
    assert "KeyError: 'weight'" in next(e.error for e in outcome.entries if e.workload.endswith("Renamed"))


def test_manifests_record_producer_bytes_inputs_outputs_and_store_them_once(project):
    store = Store.from_config(project["cfg"])
    manifests, problems = records.read_manifests(store.artifacts)
    assert problems == []
    v1 = [m for m in manifests if m["producer"]["version"] == "1.0"]
    assert sorted((m["workload"], m["format"]) for m in v1) == sorted(BACKWARD)
    stable = next(m for m in v1 if m["workload"] == "compatsuite/Stable" and m["format"] == "json")
    data = store.artifacts.get(stable["sha256"])
    assert json.loads(data).keys() == {"w", "b"} and stable["size"] == len(data) and stable["layout"] == "file"
    assert stable["producer"]["name"] == "compatfw" and stable["producer"]["wheel_sha256"]
    assert stable["seed"] == 0 and stable["fingerprint"] and stable["recorded_at"] and not stable["unsafe"]
    # a format the workload saves itself is unsafe unless declared otherwise: its loader may unpickle
    renamed = next(m for m in v1 if m["workload"] == "compatsuite/Renamed")
    assert renamed["unsafe"] is True
    result = next(r for r in project["first"].results if r.workload == "compatsuite/Stable")
    assert stable["result_id"] == result.id
    assert (store.artifacts.get_array(stable["outputs"]["y"]["sha256"]) == result.outputs["y"]).all()
    assert store.artifacts.get_array(stable["inputs"]["arrays"]["input_0"]["sha256"]).shape == (4, 3)
    folder = next(m for m in v1 if m["format"] == "folder")
    assert folder["layout"] == "tar"
    with store.sessions() as session:
        assert len(records.saved_models(session, "compatfw")) == len(manifests)

    def blobs() -> int:
        return sum(1 for p in Path(store.artifacts.base).rglob("*") if p.is_file())

    before = blobs()
    rerun = workflow.run(project["cfg"], str(project["v1"]), [str(project["suite"])])
    assert [r.status for r in rerun.results] == ["ok"] * 5
    assert blobs() == before, "the same saved bytes, inputs and outputs must be stored once"
    with store.sessions() as session:
        assert len(records.saved_models(session, "compatfw")) == len(manifests)


def test_corrupt_artifacts_are_refused_and_reported_not_skipped(project, tmp_path):
    artifacts = tmp_path / "artifacts"
    shutil.copytree(Path(project["cfg"].artifacts), artifacts)
    cfg = config_module.load(cli={"db": str(tmp_path / "history.db"), "artifacts": str(artifacts)})
    store = Store.from_config(cfg)
    manifests, _ = records.read_manifests(store.artifacts)
    # Renamed's blob is its own (Stable, Numerics and Retired save the same bytes, stored once)
    renamed = next(m for m in manifests if m["workload"] == "compatsuite/Renamed" and m["producer"]["version"] == "1.0")
    blob = Path(store.artifacts.path(renamed["sha256"]))
    blob.write_bytes(blob.read_bytes().replace(b'"weight"', b'"WEIGHT"'))
    legacy = next(m for m in manifests if m["workload"] == "compatsuite/Legacy" and m["format"] == "json"
                  and m["producer"]["version"] == "1.0")
    index = artifacts / records.INDEX / f"{legacy['key']}.json"
    tampered = json.loads(index.read_text())
    tampered["seed"] = 1
    index.write_text(json.dumps(tampered))

    outcome = compat.check(cfg, str(project["v2"]), [str(project["current"])])
    got = outcomes(outcome)
    assert got.pop(("compatsuite/Renamed", "json")) == "unreadable"
    assert got.pop(("(unreadable manifest)", "")) == "unreadable"
    expected = dict(BACKWARD)
    del expected[("compatsuite/Renamed", "json")], expected[("compatsuite/Legacy", "json")]
    assert got == expected
    refused = next(e for e in outcome.entries if e.workload == "compatsuite/Renamed")
    assert "corrupt" in refused.error and "compatfw==1.0" in refused.error
    assert not refused.times and not refused.traceback  # refused before any child saw it
    assert "do not hash to its name" in next(e.error for e in outcome.entries if e.workload.startswith("("))


def _as_version_1(manifest: dict, index: Path, **changes) -> None:
    """Write `manifest` (with `changes`) as a version 1 manifest under its version 1 key: what an older modelci
    stored, whose key left out `file`, `requires`, `unsafe` and the rest."""
    old = dict(manifest, schema="modelci.saved-model/1", **changes)
    old["key"] = records.manifest_key(old)
    (index / f"{old['key']}.json").write_text(json.dumps(old))


def test_a_manifest_naming_a_file_outside_its_suite_is_refused_before_any_import(project, tmp_path):
    """compat imports `suite / file`: a store that "may be anyone's" could have `../../evil.py` imported as the
    workload's code. A version 2 manifest hashes `file`, so an edit is refused as corrupt; a version 1 manifest
    did not, and its `file` is checked against the suite before any import."""
    artifacts = tmp_path / "artifacts"
    shutil.copytree(Path(project["cfg"].artifacts), artifacts)
    cfg = config_module.load(cli={"db": str(tmp_path / "history.db"), "artifacts": str(artifacts)})
    manifests, _ = records.read_manifests(Store.from_config(cfg).artifacts)
    stable = next(m for m in manifests if m["workload"] == "compatsuite/Stable" and m["producer"]["version"] == "1.0"
                  and m["format"] == "json")
    marker = tmp_path / "imported"
    (tmp_path / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    evil = os.path.relpath(tmp_path / "evil.py", project["current"])
    index = artifacts / records.INDEX
    tampered = json.loads((index / f"{stable['key']}.json").read_text())
    tampered["file"] = evil
    (index / f"{stable['key']}.json").write_text(json.dumps(tampered))
    outcome = compat.check(cfg, str(project["v2"]), [str(project["current"])], "Stable")
    assert any("do not hash to its name" in e.error for e in outcome.entries if e.outcome == "unreadable")
    assert not marker.exists()

    (index / f"{stable['key']}.json").unlink()
    _as_version_1(stable, index, file=evil)
    outcome = compat.check(cfg, str(project["v2"]), [str(project["current"])], "Stable")
    refused = [e for e in outcome.entries if e.outcome == "unreadable"]
    assert refused and all("which is not a file of suite" in e.error for e in refused)
    assert not marker.exists()


def test_a_manifest_whose_requirements_or_safety_were_edited_is_refused_and_version_1_is_still_read(project,
                                                                                                  tmp_path):
    """compat installs a manifest's `requires` into the consumer and says whether its format executes code on
    load (`unsafe`): version 1 did not hash them, so an edited or corrupt manifest could install anything, or
    call a pickle safe, unseen. A version 1 manifest as an older modelci wrote it still loads and matches."""
    artifacts = tmp_path / "artifacts"
    shutil.copytree(Path(project["cfg"].artifacts), artifacts)
    cfg = config_module.load(cli={"db": str(tmp_path / "history.db"), "artifacts": str(artifacts)})
    manifests, _ = records.read_manifests(Store.from_config(cfg).artifacts)
    assert {m["schema"] for m in manifests} == {records.MANIFEST_SCHEMA} == {"modelci.saved-model/2"}
    index = artifacts / records.INDEX
    mine = {m["workload"]: m for m in manifests if m["producer"]["version"] == "1.0" and m["format"] == "json"}
    for workload, field, value in (("compatsuite/Numerics", "requires", ["compatfw", "evil-package==6.6.6"]),
                                   ("compatsuite/Renamed", "unsafe", False)):
        path = index / f"{mine[workload]['key']}.json"
        edited = json.loads(path.read_text())
        assert edited[field] != value
        edited[field] = value
        path.write_text(json.dumps(edited))
    legacy = mine["compatsuite/Legacy"]
    (index / f"{legacy['key']}.json").unlink()
    _as_version_1(legacy, index)
    found, problems = records.read_manifests(Store.from_config(cfg).artifacts)
    assert len(problems) == 2 and all("do not hash to its name" in p["error"] for p in problems)
    assert {m["workload"] for m in found if m["schema"] == "modelci.saved-model/1"} == {"compatsuite/Legacy"}
    outcome = compat.check(cfg, str(project["v2"]), [str(project["current"])], "Legacy")
    assert outcomes(outcome)[("compatsuite/Legacy", "json")] == "ok"


def test_a_suite_file_that_no_longer_imports_is_load_failed_not_missing(project, tmp_path):
    broken = tmp_path / "compatsuite"
    shutil.copytree(project["current"], broken)
    # as if the suite now used a module that this compatfw lacks
    (broken / "models.py").write_text((broken / "models.py").read_text() + "\nimport compatfw.removed\n")
    outcome = compat.check(project["cfg"], str(project["v2"]), [str(broken)], "Stable")
    assert {e.outcome for e in outcome.entries} == {"load_failed"} and len(outcome.entries) == 2
    assert all("No module named 'compatfw.removed' (in import)" in e.error for e in outcome.entries)


def test_no_stored_models_for_the_selection_fails_clearly(project, tmp_path):
    with pytest.raises(UserError, match=r"no stored models saved by compatfw versions ==9\.9.*not a pass"):
        compat.check(project["cfg"], str(project["v2"]), [str(project["suite"])], from_spec="==9.9")
    cfg = config_module.load(cli={"db": str(tmp_path / "h.db"), "artifacts": str(tmp_path / "empty")})
    with pytest.raises(UserError, match="it holds: nothing"):
        compat.check(cfg, str(project["v2"]), [str(project["suite"])])
    with pytest.raises(UserError, match="--from 'not a version'"):
        compat.check(project["cfg"], str(project["v2"]), [str(project["suite"])], from_spec="not a version")


def test_a_read_only_store_refuses_a_run_but_serves_compat(project, tmp_path):
    cfg = config_module.load(cli={"db": str(tmp_path / "h.db"), "artifacts_readonly": True})
    with pytest.raises(UserError, match="read-only"):
        workflow.run(cfg, str(project["v1"]), [str(project["suite"])])
    outcome = compat.check(cfg, str(project["v2"]), [str(project["current"])])
    assert outcomes(outcome) == BACKWARD


def test_cli_exit_codes_and_reports(project, tmp_path):
    env = dict(os.environ)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "modelci.cli", "-q", "compat", "--target", str(project["v2"]),
                               "--suite", str(project["current"]), *args], cwd=project["root"], env=env,
                              capture_output=True, text=True, timeout=300)

    done = cli("--json", str(tmp_path / "c.json"), "--markdown", str(tmp_path / "c.md"))
    assert done.returncode == 1, done.stderr
    assert "outputs_differ" in done.stdout and "KeyError" in done.stdout
    assert json.loads((tmp_path / "c.json").read_text())["summary"]["load_failed"] == 1
    assert (tmp_path / "c.md").read_text().startswith("# Compatibility")
    assert cli("-k", "Stable").returncode == 0
    nothing = cli("--from", "==9.9")
    assert nothing.returncode == 2 and "not a pass" in nothing.stderr and "Traceback" not in nothing.stderr


def test_a_consumer_that_cannot_be_set_up_is_a_setup_error_not_a_regression(tmp_path, env_cache, monkeypatch):
    """The wheel of the older build was moved away: its models cannot be loaded there, which says nothing about
    compatibility. Each is `not_checked`, with the missing path; no alarm, and exit 2 as for an empty store."""
    paths = write_project(tmp_path / "moved", env_cache)
    for key in [k for k in os.environ if k.startswith("MODELCI_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("MODELCI_FIND_LINKS", str(paths["wheels"]))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.chdir(tmp_path / "moved")
    cfg = config_module.load()
    for version in ("v1", "v2"):
        workflow.run(cfg, str(paths[version]), [str(paths["suite"])], "Stable")
    gone = paths["v1"].rename(tmp_path / paths["v1"].name)
    done = subprocess.run([sys.executable, "-m", "modelci.cli", "compat", "--target", str(paths["v2"]), "--suite",
                           str(paths["suite"]), "-k", "Stable", "--direction", "forward", "--from", "compatfw==1.0",
                           "--json", str(tmp_path / "c.json")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "alarm opened" not in done.stdout
    assert f"{paths['v1']}': no such wheel file" in done.stderr and "not a pass" in done.stderr
    report = json.loads((tmp_path / "c.json").read_text())
    assert report["regressed"] is False and report["summary"] == {"not_checked": 2}
    # put back, the same check loads them
    gone.rename(paths["v1"])
    outcome = compat.check(cfg, str(paths["v2"]), [str(paths["suite"])], "Stable", from_spec="compatfw==1.0",
                           direction="forward")
    assert set(outcomes(outcome).values()) == {"ok"}


def test_a_format_a_version_lacks_is_skipped_with_its_reason_in_the_runs_output(project):
    """compatfw 2.0 dropped `text`: Legacy's run saves json and shows why text was not saved."""
    done = subprocess.run([sys.executable, "-m", "modelci.cli", "run", "--target", str(project["v2"]), "--suite",
                           str(project["current"]), "-k", "Legacy"], cwd=project["root"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if "format text of compatsuite/Legacy" in line)
    assert "skipped" in line and "text" in line.split("skipped", 1)[1]


#: workloads of compatfw whose `save` of format `raw` leaves nothing at its path (as `np.savez(path)` writes
#: `path.npz`); Beside saves `json` as well, Nothing only `raw`
UNSAVED_SUITE = SUITE.split("class Stable")[0] + '''
class Beside(_Base):
    formats = ("json", "raw")

    def supports(self, fmt):  # why a format cannot be saved, or None: `raw` always can
        return None if fmt == "raw" else super().supports(fmt)

    def save(self, ctx, fmt, path):
        if fmt != "raw":
            return super().save(ctx, fmt, path)
        import pathlib
        pathlib.Path(str(path) + ".npz").write_bytes(b"x")


class Nothing(Beside):
    formats = ("raw",)
'''


def test_compat_shows_each_saved_formats_status_and_why_each_cell_holds(project, tmp_path):
    """A format the producer's run failed to save is a row of the matrix saying so, with the run's reason, not
    an absence; every entry says why it holds its outcome, in the console, the JSON and the Markdown."""
    suite = tmp_path / "unsavedsuite"
    suite.mkdir()
    (suite / "models.py").write_text(UNSAVED_SUITE)
    produced = workflow.run(project["cfg"], str(project["v1"]), [str(suite)])
    assert [r.status for r in produced.results] == ["ok", "ok"]

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "modelci.cli", "compat", "--target", str(project["v2"]),
                               "--suite", str(suite), *args], cwd=project["root"], capture_output=True, text=True,
                              timeout=300, env={**os.environ, "COLUMNS": "250"})

    done = cli("--json", str(tmp_path / "c.json"), "--markdown", str(tmp_path / "c.md"))
    assert done.returncode == 0, done.stdout + done.stderr  # a failed save is the producer run's failure
    report = json.loads((tmp_path / "c.json").read_text())
    entries = {(e["workload"], e["format"]): e for e in report["entries"]}
    assert {k: (e["outcome"], e["saved"]) for k, e in entries.items()} == {
        ("unsavedsuite/Beside", "json"): ("ok", "ok"),
        ("unsavedsuite/Beside", "raw"): ("save_failed", "failed"),
        ("unsavedsuite/Nothing", "raw"): ("save_failed", "failed"),
    }
    assert entries["unsavedsuite/Beside", "json"]["reason"].startswith("loaded; every output matches")
    failed = entries["unsavedsuite/Beside", "raw"]["reason"]
    assert "the save failed in the producer's run" in failed and "found raw.npz instead" in failed
    header = next(line for line in done.stdout.splitlines() if "saved by" in line)
    assert "saved " in header.split("saved by", 1)[1]  # the column of the save's status
    assert "save_failed unsavedsuite/Beside raw saved by compatfw==1.0" in done.stdout
    assert "found raw.npz instead" in done.stdout and "Traceback" not in done.stderr
    markdown_text = (tmp_path / "c.md").read_text()
    assert "| format | saved by | saved |" in markdown_text
    raw_rows = [line for line in markdown_text.splitlines() if line.startswith("| `raw` |")]
    assert raw_rows and all(row.endswith("| failed | save_failed |") for row in raw_rows), raw_rows  # not gating
    assert "found raw.npz instead" in markdown_text
    # the findings alarms and notifications see carry the same reasons
    outcome = compat.check(project["cfg"], str(project["v2"]), [str(suite)])
    assert [f.reason for f in compat.findings(outcome)] == [e.reason for e in outcome.entries]
    assert all(f.reason for f in compat.findings(outcome))
    # nothing loadable at all is still not a pass, and the message says what the producer's run did instead
    nothing = cli("-k", "Nothing")
    assert nothing.returncode == 2 and "not a pass" in nothing.stderr, nothing.stderr
    assert "unsavedsuite/Nothing raw of compatfw==1.0" in nothing.stderr and "found raw.npz" in nothing.stderr


# -- pieces, without environments -----------------------------------------------------------------


HOSTILE = "suite/<img src=x onerror=alert(1)>|*[md](javascript:alert(1))*_u_``tick\nline"
HOSTILE_REASON = "RuntimeError: **bold** [link](javascript:alert(1)) <b>b</b> | _u_ `c` &amp;\nsecond line"


def _rendered(text: str) -> str:
    """The Markdown as HTML, by a CommonMark parser with GitHub's tables and strikethrough."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(text)


def test_the_markdown_report_shows_names_in_code_spans_as_they_are_and_reasons_as_plain_text():
    """Workload, format and build names come from users (a suite, a wheel's version, a commit), and reasons from
    exceptions: none of them may split a table row, start a heading or a list, or add a link, a tag or emphasis."""
    import html
    import re

    def build(label):
        return {"kind": "requirement", "name": "fw", "version": "1", "label": label}

    producer, consumer = build("fw==1.0|*p*`x`"), build("fw==2.0 <b>c</b>\n# h")
    entries = [compat.CompatEntry(workload=HOSTILE, format="f|m`t*_<i>", producer=producer, consumer=consumer,
                                  direction="backward", outcome="load_failed", error=HOSTILE_REASON, unsafe=True,
                                  saved="ok|*x*"),
               compat.CompatEntry(workload=HOSTILE, format="plain", producer=producer, consumer=consumer,
                                  direction="backward", outcome="ok")]
    target = targets.Target(spec="fw==2.0", kind="requirement", name="fw|*t*", version="2.0<i>`")
    outcome = compat.CompatOutcome(target=target, direction="backward", entries=entries, artifacts="/s`|*a*")
    text = compat_report.markdown(outcome)
    page = _rendered(text)
    assert not any(tag in page for tag in ("<a ", "<img", "<strong>bold", "<em>", "<b>", "<i>", "<h1>h")), text
    for name in (HOSTILE, "f|m`t*_<i>", "fw==1.0|*p*`x`", "fw==2.0 <b>c</b>\n# h", target.label, "/s`|*a*"):
        assert f"<code>{html.escape(' '.join(name.split()), quote=False)}</code>" in page, name
    assert html.escape(" ".join(HOSTILE_REASON.split()), quote=False) in page
    # one table, of the header, the rule and two rows, each of 3 + 1 consumer columns
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert len(rows) == 4 and all(len(re.split(r"(?<!\\)\|", row)) == 6 for row in rows), rows
    assert page.count("<tr>") == 3 and page.count("<td>") == 8
    assert page.count("<h2>") == 3  # the workload, Problems, and the formats that execute code on load


def test_folders_pack_to_the_same_bytes_and_unpack_safely(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for folder, mtime in ((one, 1_000_000), (two, 2_000_000)):
        (folder / "sub").mkdir(parents=True)
        for name in ("b.txt", "a.txt", "sub/c.bin"):
            (folder / name).write_bytes(name.encode() * 3)
            os.utime(folder / name, (mtime, mtime))
    data, layout = records.pack(one)
    assert layout == "tar" and records.pack(two) == (data, "tar")
    out = records.unpack(data, "tar", tmp_path / "out", "model")
    assert (out / "sub" / "c.bin").read_bytes() == b"sub/c.bin" * 3

    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w") as archive:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 2
        archive.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(tarfile.TarError):
        records.unpack(evil.getvalue(), "tar", tmp_path / "evil", "model")
    assert not (tmp_path / "evil" / "escaped.txt").exists()


CRASHY = '''\
import os, time
import modelci


class _W(modelci.Workload):
    framework = "python"

    def setup(self, ctx):
        self.value = 1.0

    def load(self, ctx, fmt, path):
        self.value = float(open(path).read())

    def infer(self, ctx):
        return {"v": [self.value]}


class Fine(_W):
    pass


class Aborts(_W):
    def load(self, ctx, fmt, path):
        os.abort()


class Hangs(_W):
    def load(self, ctx, fmt, path):
        time.sleep(60)
'''


@pytest.mark.parametrize("isolation", ["none", "fork"])
def test_a_model_that_kills_or_hangs_the_loader_is_a_finding_and_the_rest_still_load(tmp_path, isolation):
    suite = tmp_path / "crashy"
    suite.mkdir()
    (suite / "models.py").write_text(CRASHY)
    (tmp_path / "model").write_text("2.5")
    names = ["Fine", "Aborts", "Fine", "Hangs", "Fine"]
    jobs = [{"index": i, "workload": f"crashy/{n}", "format": "txt", "path": str(tmp_path / "model"), "seed": 0}
            for i, n in enumerate(names)]
    # "fork": the jobs run in forks of a warm worker, as the record step of `run` does
    (tmp_path / "scratch").mkdir()
    with forked.Executor(Path(sys.executable), tmp_path / "scratch", isolation="fork") as executor:
        done = compat.run_jobs(Path(sys.executable), {"crashy": suite}, jobs, tmp_path / "jobs", timeout=3,
                               executor=executor if isolation == "fork" else None)
        assert (executor.worker is not None) == (isolation == "fork")  # a hang killed the child, not the worker
    assert [done[i]["status"] for i in range(5)] == ["ok", "load_failed", "ok", "load_failed", "ok"]
    assert "killed by SIGABRT" in done[1]["reason"]
    assert "killed after 3 s" in done[3]["reason"]
    assert done[4]["outputs"]["v"]["shape"] == [1]


PARENT = '''\
import os
import modelci


class Parent(modelci.Workload):
    framework = "python"

    def setup(self, ctx):
        pass

    def example_inputs(self):
        return {"ppid": [os.getppid()], "hashseed": [int(os.environ.get("PYTHONHASHSEED", "-1"))]}
'''


def test_jobs_run_in_a_fork_of_the_runs_worker_when_the_seed_matches_and_spawn_otherwise(tmp_path):
    suite = tmp_path / "parent"
    suite.mkdir()
    (suite / "models.py").write_text(PARENT)
    jobs = [{"index": i, "workload": "parent/Parent", "file": str(suite / "models.py"), "seed": seed}
            for i, seed in enumerate([7, 8])]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with forked.Executor(Path(sys.executable), scratch, seed=7, isolation="fork") as executor:
        executor.discover({"parent": suite})  # starts the worker, as a run has by then
        worker = executor.worker.pid
        done = compat.run_jobs(Path(sys.executable), {"parent": suite}, jobs, tmp_path / "jobs", command="inputs",
                               executor=executor, framework="python")
    got = {}
    for index in (0, 1):
        record = done[index]
        assert record["status"] == "ok", record
        got[index] = {name: int(np.load(Path(record["_folder"]) / entry["file"])[0])
                      for name, entry in record["inputs"].items()}
    assert got[0] == {"ppid": worker, "hashseed": 7}
    # seed 8: a fork would keep the worker's hash seed 7, so that job gets a process of its own
    assert got[1]["ppid"] != worker and got[1]["hashseed"] == 8


def test_producers_are_taken_by_history_and_from():
    """Without --from: every older build; a bare version: that and later, still older; a specifier set: exactly
    its versions; a target spec: that one build. Local labels (`V+g<sha>`) never make an invalid specifier."""
    def build(version, **more):
        return {"kind": "requirement", "name": "fakefw", "version": version, "label": f"fakefw=={version}", **more}

    target = targets.Target(spec="fakefw==2.0", kind="requirement", name="fakefw", version="2.0")
    every = compat.Producers(None, target, "/nonexistent-cache")
    assert [every.takes(build(v)) for v in ("1.0", "1.5", "2.0", "2.1")] == [True, True, False, False]
    since = compat.Producers("1.2", target, "/nonexistent-cache")
    assert [since.takes(build(v)) for v in ("1.0", "1.5", "2.0")] == [False, True, False]
    exact = compat.Producers("==2.0", target, "/nonexistent-cache")
    assert [exact.takes(build(v)) for v in ("1.5", "2.0")] == [False, True]
    one = compat.Producers("fakefw==1.0", target, "/nonexistent-cache")
    assert [one.takes(build(v)) for v in ("1.0", "1.5")] == [True, False]
    # a commit built with pythonpath: `<1.0+g...` is not a valid specifier, and --from was not given
    local = targets.Target(spec="git+/r@x", kind="git", name="fakefw", version="1.0+gabcdef123456", commit="ab" * 20)
    older = compat.Producers(None, local, "/nonexistent-cache")
    assert older.takes(build("0.9")) and not older.takes(build("1.1"))
    # same public version, other local label, and no repository to ask: history cannot tell, so not taken
    assert not older.takes(build("1.0+g0123456789ab", commit="cd" * 20))
    with pytest.raises(UserError, match="--from 'not a version!'"):
        compat.Producers("not a version!", target, "/nonexistent-cache")


# -- real torch --------------------------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.slow
def test_zoo_torch_models_saved_by_torch_2_13_load_and_match_in_the_same_version(tmp_path, monkeypatch):
    """End to end with the real thing: torch 2.13.0 installed from the configured find-links, zoo:torch's LeNet
    trained and saved in three formats, then loaded in torch 2.13.0 again by the compat child."""
    for key in [k for k in os.environ if k.startswith("MODELCI_")]:
        monkeypatch.delenv(key)
    # the module's `project` fixture keeps the fake wheels' offline settings for the whole module
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)
    monkeypatch.chdir(tmp_path)
    # the persistent cache of tests/e2e/test_zoo_frameworks.py: the torch environment is built once per machine
    cache = Path(os.environ.get("MODELCI_TEST_CACHE", Path.home() / ".cache" / "modelci-tests"))
    (tmp_path / "modelci.toml").write_text(f'cache_dir = "{cache}"\ntimeout = 900\nrunner = "test-runner"\n')
    cfg = config_module.load()
    try:
        produced = workflow.run(cfg, "torch==2.13.0", ["zoo:torch"], "LeNet")
    except UserError as exc:  # HarnessError too: uv could not install torch 2.13.0 from the configured indexes
        if os.environ.get("CI"):  # CI installs what the tests need: a skip there would hide a broken install
            raise
        pytest.skip(f"torch 2.13.0 cannot be installed here: {exc}")
    (result,) = produced.results
    assert result.status == "ok", result.reason + result.stderr_tail
    assert {e["format"]: e["status"] for e in result.info["saved"]} == {
        "state_dict": "ok", "torchscript": "ok", "torch_export": "ok"}

    outcome = compat.check(cfg, "torch==2.13.0", ["zoo:torch"], "LeNet", from_spec="==2.13.0")
    assert {(e.workload, e.format): e.outcome for e in outcome.entries} == {
        ("torch/LeNet", "state_dict"): "ok", ("torch/LeNet", "torchscript"): "ok",
        ("torch/LeNet", "torch_export"): "ok"}
    assert {e.producer["version"] for e in outcome.entries} == {e.consumer["version"] for e in outcome.entries}
    assert all(e.numbers["inputs"]["match"] for e in outcome.entries)  # example_inputs() kept as arrays
    unsafe = {e.format: e.unsafe for e in outcome.entries}
    assert unsafe["state_dict"] is False and unsafe["torchscript"] is True
    assert "executes code on load" in compat_report.markdown(outcome)


PICKLED_SUITE = '''
import torch
import modelci


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


class _Tiny(modelci.Workload):
    framework = "torch"
    steps = 1
    warmup = 0
    repeats = 1

    def setup(self, ctx):
        self.model = Net()
        self.x = torch.randn(3, 4)

    def train_step(self, ctx, step):
        return 0.0

    def infer(self, ctx):
        with torch.no_grad():
            return {"y": self.model(self.x)}


class HelperPickle(_Tiny):
    """The torch helper's torch_pickle: torch.save(model) and, in the consumer, a plain torch.load."""
    formats = ("torch_pickle",)


class OwnPickle(_Tiny):
    """A format the torch helper has never heard of, saved and loaded by the workload itself, as a user does."""
    formats = ("module_pickle",)

    def save(self, ctx, fmt, path):
        torch.save(self.model, path)

    def load(self, ctx, fmt, path):
        self.model = torch.load(path)
'''


@pytest.mark.torch
@pytest.mark.slow
def test_a_pickled_torch_module_fails_as_plain_torch_load_fails_for_users(tmp_path, monkeypatch):
    """torch 2.13's torch.load defaults to weights_only=True, which refuses a whole pickled module: compat reports
    what a user's plain `torch.load(path)` does, `load_failed` with torch's own message, for the helper's
    torch_pickle and for a workload's own format alike (saved by the workload, never skipped)."""
    for key in [k for k in os.environ if k.startswith("MODELCI_")]:
        monkeypatch.delenv(key)
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)
    monkeypatch.chdir(tmp_path)
    cache = Path(os.environ.get("MODELCI_TEST_CACHE", Path.home() / ".cache" / "modelci-tests"))
    (tmp_path / "modelci.toml").write_text(f'cache_dir = "{cache}"\ntimeout = 900\nrunner = "test-runner"\n')
    suite = tmp_path / "pickles"
    suite.mkdir()
    (suite / "nets.py").write_text(PICKLED_SUITE)
    cfg = config_module.load()
    try:
        produced = workflow.run(cfg, "torch==2.13.0", [str(suite)])
    except UserError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"torch 2.13.0 cannot be installed here: {exc}")
    saved = {(r.workload, e["format"]): e for r in produced.results for e in r.info["saved"]}
    assert {k: e["status"] for k, e in saved.items()} == {
        ("pickles/HelperPickle", "torch_pickle"): "ok", ("pickles/OwnPickle", "module_pickle"): "ok"}
    # both unpickle a module: unsafe, the custom one because it is undeclared
    assert all(e["unsafe"] for e in saved.values())

    outcome = compat.check(cfg, "torch==2.13.0", [str(suite)], from_spec="==2.13.0")
    assert {(e.workload, e.format): e.outcome for e in outcome.entries} == {
        ("pickles/HelperPickle", "torch_pickle"): "load_failed", ("pickles/OwnPickle", "module_pickle"): "load_failed"}
    for entry in outcome.entries:
        assert "Weights only load failed" in entry.error and "(in load)" in entry.error, entry.error
        assert entry.unsafe


def _processes_naming(text: str) -> list[int]:
    """The processes whose command line holds `text`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and text in (proc / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(proc.name))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_cancelled_check_stores_and_reports_the_models_it_checked(project, tmp_path, signum, code):
    """A CI job cancelled while a saved model loads: the models checked before the signal are stored and in the
    reports, marked interrupted; the loader is gone. Renamed's load hangs here, and the suite's workloads load
    in order (Legacy and Numerics before it, Stable after it)."""
    suite = tmp_path / "hanging" / "compatsuite"
    shutil.copytree(project["current"], suite)
    marker = tmp_path / "loading"
    source = (suite / "models.py").read_text()
    hang = (f'    def load(self, ctx, fmt, path):\n        open({str(marker)!r}, "w").close()\n'
            '        import time\n        time.sleep(600)\n')
    (suite / "models.py").write_text(source.replace('    layer = "Dense"\n', '    layer = "Dense"\n\n' + hang))
    db, report, markdown = tmp_path / "h.db", tmp_path / "c.json", tmp_path / "c.md"
    proc = subprocess.Popen([sys.executable, "-m", "modelci.cli", "-q", "--db", str(db), "compat", "--target",
                             str(project["v2"]), "--suite", str(suite), "--json", str(report), "--markdown",
                             str(markdown)], cwd=project["root"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 240
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None and marker.exists(), proc.communicate()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "Traceback" not in out + err, err
    assert f"interrupted by {signal.Signals(signum).name}" in err and "checked before it are stored" in err, err
    checked = json.loads(report.read_text())
    assert checked["interrupted"] is True
    cells = {(e["workload"], e["format"]): e["outcome"] for e in checked["entries"]}
    assert cells == {key: value for key, value in BACKWARD.items() if key[0] < "compatsuite/Renamed"}, cells
    assert "interrupted" in markdown.read_text().splitlines()[2]
    with Store.from_config(config_module.load(cli={"db": str(db)})).read() as session:
        stored = records.compat_history(session)
    assert {(r.workload, r.format): r.outcome for r in stored} == cells
    assert {r.check_id for r in stored} == {checked["check_id"]}
    assert _processes_naming(str(suite)) == []  # the loader went with the check
