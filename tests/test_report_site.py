"""The static dashboard: pages, target order, escaping, change points, env diff, hooks, and the live server.

The history comes from Store.ingest with realistic records judged by the real checks (workflow.evaluate), in a
real SQLite file; the browser tests (tests/e2e/test_dashboard_browser.py) add histories made by real runs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from modelci import config as config_module
from modelci import workflow
from modelci.records import Metric, Result
from modelci.report import forked, queries
from modelci.report import site as site_module
from modelci.report.server import LiveSite, make_server
from modelci.report.markup import safe_href
from modelci.report.site import generate_site, plot_json, workload_slugs
from modelci.bisect import BisectResult, Probe, Suspect
from modelci.compat import CompatEntry
from modelci.gitrepo import Commit
from modelci.store import Store, compat_schema
from modelci.targets import Target

HOSTILE = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>"


def make_result(workload: str, version_index: int, *, slow_from: int | None = None, status: str = "ok",
                reason: str = "", stderr: str = "", seed: int = 0) -> Result:
    """A result as a run produces one: timing samples, peak memory, a loss curve and an output array."""
    rng = np.random.default_rng(seed * 1000 + version_index)
    scale = 0.02 * (1.5 if slow_from is not None and version_index >= slow_from else 1.0)
    if status != "ok":
        return Result(workload=workload, status=status, reason=reason, stderr_tail=stderr, framework="fakefw")
    return Result(
        workload=workload, status="ok", framework="fakefw", domain="tabular", duration=0.5,
        metrics={"time.train": Metric("time.train", "samples", list(scale * (1 + 0.01 * rng.standard_normal(12))), "s"),
                 "time.infer": Metric("time.infer", "samples", list(scale / 3 * (1 + 0.01 * rng.standard_normal(7))),
                                      "s"),
                 "mem.peak_rss": Metric("mem.peak_rss", "samples", [100e6 + 1e5 * rng.standard_normal()], "bytes"),
                 "loss": Metric("loss", "curve", [float(v) for v in np.exp(-np.arange(10) / 3)])},
        outputs={"prediction": np.linspace(0, 1, 12).reshape(3, 4) * (1 + 1e-4 * (version_index % 3))},
    )


def ingest(store: Store, cfg, version: str, results: list[Result], runner: str = "ci-cpu", lock_extra: str = "") -> int:
    """Store one run of fakefw==version and judge it with the real checks against its default baseline."""
    target = Target(spec=f"fakefw=={version}", kind="requirement", name="fakefw", version=version)
    env = SimpleNamespace(id=f"env-{version}-{runner}"[:64], python="/envs/bin/python", isolated=True,
                          lock=f"fakefw=={version}\nfilelock==3.13.1\n{lock_extra}",
                          fingerprint={"schema": 1, "python": "3.11.7", "cpu": "test"})
    run_id = store.ingest(target=target, environment=env, runner=runner, results=results)
    workflow.evaluate(SimpleNamespace(runner=runner, policy_for=cfg.policy_for), store, target, results)
    return run_id


@pytest.fixture
def cfg(tmp_path):
    return config_module.load(cwd=tmp_path, environ={})


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "history.db"), str(tmp_path / "artifacts"))


#: ingested out of order on purpose: the site must still plot them in version order (1.9 before 1.10)
#: 22 targets: detect_changes estimates the noise from the series only from 20 points on
VERSIONS = [f"1.{i}" for i in range(22)]
VERSIONS[9], VERSIONS[10] = VERSIONS[10], VERSIONS[9]
STEP_FROM = 12  # index (in version order) of the first slow target: 1.12


def ordered_index(version: str) -> int:
    return sorted(VERSIONS, key=lambda v: tuple(int(p) for p in v.split("."))).index(version)


@pytest.fixture(scope="module")
def history_folder(tmp_path_factory) -> Path:
    """22 targets of two workloads; `suite/Steps` slows by 50% from 1.12 on; Flat fails at 1.15 with hostile text.

    Built once per module; each test gets its own copy (`history`), so a test may add runs."""
    folder = tmp_path_factory.mktemp("history")
    store = Store(str(folder / "history.db"), str(folder / "artifacts"))
    cfg = config_module.load(cwd=folder, environ={})
    for version in VERSIONS:
        index = ordered_index(version)
        steps = make_result("suite/Steps", index, slow_from=STEP_FROM)
        if version == "1.15":
            flat = make_result("suite/Flat", index, status="failed", reason=f"RuntimeError: {HOSTILE}",
                               stderr=f"stderr says {HOSTILE}")
        else:
            flat = make_result("suite/Flat", index, seed=1)
        ingest(store, cfg, version, [steps, flat], lock_extra="numpy==2.1.0\n" if index >= 5 else "")
    store.engine.dispose()  # the last connection checkpoints the WAL into the file that is copied
    return folder


@pytest.fixture
def history(history_folder, tmp_path) -> Store:
    shutil.copytree(history_folder, tmp_path / "history")
    return Store(str(tmp_path / "history" / "history.db"), str(tmp_path / "history" / "artifacts"))


def plot_data(page: str) -> list[dict]:
    block = re.search(r'<script type="application/json" id="plot-data">(.*?)</script>', page, re.S).group(1)
    return json.loads(block)


def test_site_has_index_workload_and_run_pages(history, tmp_path):
    report = generate_site(history, tmp_path / "site")
    site = tmp_path / "site"
    assert (site / "assets" / "plotly.min.js").stat().st_size > 1_000_000
    assert sorted(p.name for p in (site / "w").iterdir()) == ["suite_Flat.html", "suite_Steps.html"]
    assert len(list((site / "runs").iterdir())) == len(VERSIONS)
    assert report.pages == 1 + 2 + len(VERSIONS)
    index = (site / "index.html").read_text()
    assert 'href="w/suite_Steps.html"' in index and f'href="runs/{len(VERSIONS)}.html"' in index
    # every page references the one shared plotly copy relatively: file:// needs no server and no CDN
    workload = (site / "w" / "suite_Steps.html").read_text()
    assert '<script src="../assets/plotly.min.js"></script>' in workload
    assert "http://" not in workload and "https://" not in workload
    assert report.largest_bytes < 200_000


def test_trends_are_in_version_order_with_band_and_change_point(history, tmp_path):
    generate_site(history, tmp_path / "site")
    page = (tmp_path / "site" / "w" / "suite_Steps.html").read_text()
    figures = plot_data(page)
    train = next(f for f in figures if f["metric"] == "time.train")
    expected = [f"fakefw=={v}" for v in sorted(VERSIONS, key=lambda v: tuple(int(p) for p in v.split(".")))]
    assert train["layout"]["xaxis"]["categoryarray"] == expected
    median = next(t for t in train["data"] if t.get("name") == "ci-cpu")
    assert median["x"] == expected
    band = [t for t in train["data"] if t.get("fill") == "tonexty"]
    assert band and all(lo <= mid for lo, mid in zip(band[0]["y"], median["y"]))
    change = next(t for t in train["data"] if t.get("name") == "change point")
    assert change["x"] == ["fakefw==1.12"]
    assert "fakefw==1.12" in page.split('id="changes"')[1].split("</section>")[0]
    metrics = {f["metric"] for f in figures}
    assert {"time.train", "time.infer", "mem.peak_rss", "loss", "precision"} <= metrics
    overlay = next(f for f in figures if f["id"] == "plot-overlay")
    assert [t["name"] for t in overlay["data"]] == expected[-10:]


def test_precision_drift_comes_from_the_stored_findings(history, tmp_path):
    generate_site(history, tmp_path / "site")
    figures = plot_data((tmp_path / "site" / "w" / "suite_Steps.html").read_text())
    drift = next(f for f in figures if f["metric"] == "precision")
    max_rel = next(t for t in drift["data"] if t["name"].endswith("max_rel"))
    # outputs scale by 1 + 1e-4 * (i % 3): the relative error against the previous version is about 1e-4
    assert max(v for v in max_rel["y"] if v is not None) == pytest.approx(2e-4, rel=0.05)


def test_hostile_text_is_escaped_everywhere(history, tmp_path):
    generate_site(history, tmp_path / "site")
    site = tmp_path / "site"
    for page in [site / "index.html", *site.glob("w/*.html"), *site.glob("runs/*.html")]:
        text = page.read_text()
        assert "<script>window" not in text and "<img src=x" not in text, page
        assert text.count("<script") == text.count("</script>"), page
    failed_run = next(p for p in site.glob("runs/*.html") if "__pwned" in p.read_text())
    text = failed_run.read_text()
    assert "RuntimeError: &lt;script&gt;window.__pwned=1&lt;/script&gt;" in text
    assert "stderr says &lt;script&gt;" in text


def test_plot_json_cannot_close_its_script_block():
    text = plot_json([{"name": "</script><!-- <script>alert(1)</script> & more"}])
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == [{"name": "</script><!-- <script>alert(1)</script> & more"}]


def test_hostile_runner_and_target_names_reach_plots_escaped(store, cfg, tmp_path):
    runner = '<b onmouseover="x">ci</b>'
    for index, version in enumerate(["1.0", "1.1"]):
        ingest(store, cfg, version, [make_result("suite/A", index)], runner=runner)
    generate_site(store, tmp_path / "site")
    page = (tmp_path / "site" / "w" / "suite_A.html").read_text()
    assert "<b onmouseover" not in page
    names = {t.get("name") for f in plot_data(page) for t in f["data"]}
    # plotly parses <b> in names and decodes entities back: escaped, it shows the text as written
    assert "&lt;b onmouseover=\"x\"&gt;ci&lt;/b&gt;" in names


def test_run_page_shows_environment_diff_and_findings(history, tmp_path):
    generate_site(history, tmp_path / "site")
    site = tmp_path / "site"
    by_version = {}
    for page in site.glob("runs/*.html"):
        found = re.search(r"<th>target</th><td>fakefw==([\d.]+)</td>", page.read_text())
        by_version[found.group(1)] = page.read_text()
    first, fifth = by_version["1.0"], by_version["1.5"]
    assert "The first run on this runner" in first
    diff = fifth.split('id="env-diff"')[1].split("</table>")[0]
    assert re.search(r"<td>fakefw</td><td>changed</td><td>1.4</td><td>1.5</td><td>minor</td>", diff)
    assert re.search(r"<td>numpy</td><td>added</td><td></td><td>2.1.0</td>", diff)
    assert "time.train" in by_version["1.12"] and "slower" in by_version["1.12"]
    assert 'class="verdict-regression"' in by_version["1.12"]


def test_lock_diff_names_added_removed_and_changed():
    before = "a==1.0\nb==2.0\nc==3.0\n"
    after = "A==1.0\nb==2.1\nd==4.0\n"
    rows = [{k: row[k] for k in ("name", "change", "before", "after")} for row in queries.lock_diff(before, after)]
    assert rows == [
        {"name": "b", "change": "changed", "before": "2.0", "after": "2.1"},
        {"name": "c", "change": "removed", "before": "3.0", "after": ""},
        {"name": "d", "change": "added", "before": "", "after": "4.0"},
    ]


def test_workload_slugs_are_unique_file_names():
    slugs = workload_slugs(["a/b", "a_b", "A/B", "../x", "<s>"])
    assert len(set(s.lower() for s in slugs.values())) == 5
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+", s) for s in slugs.values())
    assert slugs["../x"] == "x"


def test_a_workload_id_too_long_for_a_file_name_gets_a_page_all_the_same(store, cfg, tmp_path):
    # a suite folder of 200 characters and a workload name of 60: both allowed, 261 characters together
    long_id = f"{'f' * 200}/{'W' * 60}"
    twin = f"{'f' * 200}/{'W' * 59}X"  # the same first 120 characters: the digest tells them apart
    ingest(store, cfg, "1.0", [make_result(long_id, 0), make_result(twin, 0, seed=1)])
    generate_site(store, tmp_path / "site")
    pages = sorted((tmp_path / "site" / "w").glob("*.html"))
    assert len(pages) == 2 and all(len(p.name) <= 125 for p in pages)
    assert long_id in pages[0].read_text() + pages[1].read_text()
    assert [p.name for p in (tmp_path / "site").rglob(".*")] == [".modelci-site.json"]  # no temporary file left
    slugs = workload_slugs([long_id, twin])
    assert slugs[long_id] != slugs[twin] and workload_slugs([long_id]) == {long_id: slugs[long_id]}


@pytest.mark.parametrize("href, kept", [("runs/1.html", True), ("https://ci.example/1", True),
                                        ("javascript:alert(1)", False), ("java\tscript:alert(1)", False),
                                        (" JavaScript:alert(1)", False), ("data:text/html,x", False)])
def test_hook_links_keep_only_relative_and_http(href, kept):
    assert (safe_href(href) == href.strip()) is kept


def test_open_alarms_are_listed_and_marked_on_the_plots(history, tmp_path):
    lifecycle = pytest.importorskip("modelci.alarms.lifecycle")
    fired = lifecycle.Observation("ci-cpu", "suite/Steps", "history", "time.train", True, kind="change",
                                  message="change point: time.train +50% from fakefw==1.12 <b>")
    lifecycle.apply(history, SimpleNamespace(alarms={}), [fired], run_id=13, target_label="fakefw==1.12")
    generate_site(history, tmp_path / "site")
    index = (tmp_path / "site" / "index.html").read_text()
    assert "No alarm store yet" not in index and 'id="no-alarms"' not in index
    assert "change point: time.train +50% from fakefw==1.12 &lt;b&gt;" in index
    page = (tmp_path / "site" / "w" / "suite_Steps.html").read_text()
    train = next(f for f in plot_data(page) if f["metric"] == "time.train")
    marker = next(t for t in train["data"] if t.get("name") == "alarm")
    assert marker["x"] == ["fakefw==1.12"]
    flat = (tmp_path / "site" / "w" / "suite_Flat.html").read_text()
    assert not any(t.get("name") == "alarm" for f in plot_data(flat) for t in f["data"])


def test_the_compat_page_shows_the_stored_matrix(history, tmp_path):
    generate_site(history, tmp_path / "plain")
    assert not (tmp_path / "plain" / "compat.html").exists()
    assert "compat.html" not in (tmp_path / "plain" / "index.html").read_text()

    def build(version: str) -> dict:
        return {"name": "fakefw", "version": version, "label": f"fakefw=={version}"}

    entries = [CompatEntry("suite/A <i>", "npz", build("1.0"), build(v), "backward", outcome, error=error)
               for v, outcome, error in (("1.1", "ok", ""), ("1.2", "load-error", "KeyError: 'w' <script>"))]
    with history.write() as session:
        compat_schema.add_compat_results(session, "check-1", "ci-cpu", entries)
    report = generate_site(history, tmp_path / "site")
    assert report.extra_pages == ["compat.html"]
    page = (tmp_path / "site" / "compat.html").read_text()
    assert "suite/A &lt;i&gt; · npz · saved by fakefw==1.0" in page and "<script>" not in page
    assert page.index("fakefw==1.1") < page.index("fakefw==1.2")  # consumers in version order
    assert 'class="status ok">ok<' in page and "load-error: KeyError: &#39;w&#39; &lt;script&gt;" in page
    assert 'href="compat.html"' in (tmp_path / "site" / "index.html").read_text()


def test_the_bisect_page_shows_each_kept_bisect_with_its_culprit_pr_and_probes(history, tmp_path):
    def commit(sha: str, subject: str) -> Suspect:
        return Suspect(sha, f"git+repo@{sha}", Commit(sha, "2026-11-30T10:00:00+00:00", subject, "Ada <i>"))

    good, bad = commit("a" * 40, "Start"), commit("c" * 40, "Later")
    culprit = commit("b" * 40, "Fuse the kernels (#57)")
    probes = [Probe(good.item, good.spec, good.label, "good", "the good end", "ok", 0, run_id=1),
              Probe(bad.item, bad.spec, bad.label, "bad", "time.train 1.5x <b>", "ok", 0, run_id=2),
              Probe(culprit.item, culprit.spec, culprit.label, "bad", "time.train 1.5x", "ok", 1, run_id=3,
                    reused=True)]
    result = BisectResult("found", "suite/Steps", "timing", ["time.train"], good, bad, culprit=culprit,
                          last_good=good, probes=probes, rounds=1, range_size=2, evidence="1.5x slower")
    history.add_bisect("ci-cpu", result.to_json(), "modelci bisect ...")
    report = generate_site(history, tmp_path / "site")
    assert report.extra_pages == ["bisect.html"]
    page = (tmp_path / "site" / "bisect.html").read_text()
    assert "suite/Steps · timing" in page and 'href="bisects/1.html"' in page
    assert "bbbbbbbbbb Fuse the kernels (#57) (Ada &lt;i&gt;, 2026-11-30T10:00:00+00:00)" in page
    assert ">#57<" in page and "3 probes, 1 rounds over 2 candidates" in page
    probes_page = (tmp_path / "site" / "bisects" / "1.html").read_text()
    assert "first bad: bbbbbbbbbb Fuse the kernels (#57)" in probes_page
    assert "time.train 1.5x &lt;b&gt;" in probes_page and "run 3 (reused)" in probes_page
    for run_id in (1, 2, 3):  # each probe links to the page of the run it stored, which exists
        assert f'href="../runs/{run_id}.html"' in probes_page
        assert (tmp_path / "site" / "runs" / f"{run_id}.html").is_file()
    assert 'href="../bisect.html"' in probes_page  # the site's navigation, from one folder down


def test_empty_history_gives_an_index_that_says_so(store, tmp_path):
    report = generate_site(store, tmp_path / "site")
    assert report.pages == 1
    assert "holds no results yet" in (tmp_path / "site" / "index.html").read_text()


def test_live_site_rebuilds_only_when_the_history_changes(history, cfg, tmp_path):
    site = LiveSite(history, tmp_path / "site", log=lambda text: None)
    assert site.refresh() is True
    assert site.refresh() is False
    ingest(history, cfg, "1.30", [make_result("suite/Steps", 30)])
    assert site.refresh() is True
    assert "fakefw==1.30" in (tmp_path / "site" / "index.html").read_text()


def test_server_serves_pages_and_refreshes_after_a_new_run(history, cfg, tmp_path):
    server = make_server(history, "127.0.0.1", 0, tmp_path / "site", log=lambda text: None)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        def get(path: str) -> tuple[int, str, str]:
            with urllib.request.urlopen(server.url + path, timeout=30) as response:
                return response.status, response.headers.get("Content-Type", ""), response.read().decode()

        status, kind, body = get("index.html")
        assert status == 200 and kind.startswith("text/html") and "suite/Steps" in body
        assert "fakefw==1.40" not in body
        ingest(history, cfg, "1.40", [make_result("suite/Steps", 40)])
        assert "fakefw==1.40" in get("")[2]
        assert get("assets/plotly.min.js")[0] == 200
        assert server.server_address[0] == "127.0.0.1"
        # a path no file can have: a 400, where the server's log got a traceback and the client no answer
        for path in ("w/%00", "%00.html", "runs/1.html%00"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                get(path)
            refused.value.close()  # its response, and so its socket
            assert refused.value.code == 400
        assert get("index.html")[0] == 200
        # the site's bookkeeping and folder listings are no pages: they were served
        for path in (".modelci-site.json", "%2Emodelci-site.json", "runs/", "assets/"):
            with pytest.raises(urllib.error.HTTPError) as hidden:
                get(path)
            hidden.value.close()
            assert hidden.value.code == 404, path
        assert get("runs/1.html")[0] == 200
    finally:
        server.shutdown()
        server.server_close()


def test_a_client_that_goes_away_mid_answer_leaves_no_traceback_in_the_servers_log(history, tmp_path, capfd):
    """`curl .../plotly.min.js | head -c 100`, a tab closed while loading: the base class printed a whole
    BrokenPipeError traceback for each; 300 such clients gave 297 tracebacks in a CI log."""
    import socket
    import time

    logged: list[str] = []
    server = make_server(history, "127.0.0.1", 0, tmp_path / "site", log=logged.append)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        for _ in range(5):
            client = socket.create_connection(server.server_address[:2], timeout=30)
            client.sendall(b"GET /assets/plotly.min.js HTTP/1.1\r\nHost: x\r\n\r\n")
            assert client.recv(100).startswith(b"HTTP/1.")
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            client.close()  # a reset, mid-answer
        time.sleep(1.0)
        with urllib.request.urlopen(server.url + "index.html", timeout=30) as response:
            assert response.status == 200  # still serving
    finally:
        server.shutdown()
        server.server_close()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipeError" not in err and "ConnectionResetError" not in err, err
    assert not [line for line in logged if "error while answering" in line], logged


def test_a_second_generation_keeps_the_run_pages_whose_data_did_not_change(history, cfg, tmp_path):
    site = tmp_path / "site"
    first = generate_site(history, site)
    assert first.kept_pages == 0
    again = generate_site(history, site)
    assert again.kept_pages == len(VERSIONS) and again.pages == 3
    before = (site / "runs" / f"{len(VERSIONS)}.html").read_text()
    assert "next run on" not in before
    ingest(history, cfg, "1.50", [make_result("suite/Steps", 50)])
    third = generate_site(history, site)
    # the new run's page, and the previous run's page (it now links to the next run) are written again
    assert third.kept_pages == len(VERSIONS) - 1 and third.pages == 3 + 2
    assert f'href="{len(VERSIONS) + 1}.html"' in (site / "runs" / f"{len(VERSIONS)}.html").read_text()
    assert generate_site(history, site, full=True).kept_pages == 0


def test_a_site_written_over_another_historys_keeps_none_of_its_pages(history, store, cfg, tmp_path):
    """`report --out DIR` over the report of a larger history left that history's run and workload pages in DIR,
    readable as this one's from a bookmark; the site's own other files (and a user's) are left alone."""
    site = tmp_path / "site"
    generate_site(history, site)
    assert (site / "runs" / f"{len(VERSIONS)}.html").is_file() and (site / "w" / "suite_Flat.html").is_file()
    (site / "runs" / "notes.txt").write_text("not a page")
    ingest(store, cfg, "9.0", [make_result("suite/Other", 0)])  # another history: one run of one workload
    generate_site(store, site)
    assert sorted(p.name for p in (site / "runs").iterdir()) == ["1.html", "notes.txt"]
    assert sorted(p.name for p in (site / "w").iterdir()) == ["suite_Other.html"]
    assert "suite/Other" in (site / "index.html").read_text()


def test_compat_page_shows_the_latest_stored_outcome_of_each_pair(history, tmp_path):
    compat_schema = pytest.importorskip("modelci.store.compat_schema")
    compat_schema.ensure_tables(history.engine)
    row = dict(check_id="c1", direction="forward", runner="ci-cpu", consumer_name="fakefw", producer_name="fakefw",
               producer_version="1.0", producer_label="fakefw==1.0", workload="suite/Steps", format="npz")
    with history.sessions.begin() as session:
        session.add_all([
            compat_schema.CompatResultRow(**row, consumer_version="1.10", consumer_label="fakefw==1.10",
                                          outcome="load_failed", error="KeyError: <weights>"),
            compat_schema.CompatResultRow(**row, consumer_version="1.9", consumer_label="fakefw==1.9", outcome="ok"),
            compat_schema.CompatResultRow(**{**row, "check_id": "c2"}, consumer_version="1.9",
                                          consumer_label="fakefw==1.9", outcome="outputs_differ"),
        ])
    generate_site(history, tmp_path / "site")
    page = (tmp_path / "site" / "compat.html").read_text()
    header = re.findall(r"<th>(fakefw==[\d.]+)</th>", page)
    assert header == ["fakefw==1.9", "fakefw==1.10"]  # version order, not text order
    cells = re.findall(r'<td class="status (\w+)">([^<]*)</td>', page)
    assert cells == [("warn", "outputs_differ"), ("bad", "load_failed: KeyError: &lt;weights&gt;")]


def test_report_command_writes_the_site_and_refuses_a_file_as_folder(history, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELCI_")}
    env.update(MODELCI_DB=str(history.engine.url.database), MODELCI_ARTIFACTS=str(tmp_path / "history" / "artifacts"))
    done = subprocess.run([sys.executable, "-m", "modelci.cli", "report", "--out", "site"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"wrote {1 + 2 + len(VERSIONS)} pages" in done.stdout and (tmp_path / "site" / "index.html").is_file()
    (tmp_path / "taken").write_text("a file, not a folder")
    done = subprocess.run([sys.executable, "-m", "modelci.cli", "report", "--out", "taken"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "cannot write the site into taken" in done.stderr
    assert "Traceback" not in done.stderr


def test_precision_drift_survives_a_finding_whose_json_the_database_refuses(history, tmp_path):
    # json.dumps writes NaN as a bare token, which SQLite's JSON functions reject: the site must still build
    with history.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE findings SET numbers = '{\"max_rel\": NaN, \"max_abs\": 0.5}' "
                             "WHERE id = (SELECT max(id) FROM findings WHERE \"check\" = 'precision')")
    generate_site(history, tmp_path / "site")
    drift = [f for page in (tmp_path / "site" / "w").iterdir() for f in plot_data(page.read_text())
             if f["metric"] == "precision"]
    assert any(0.5 in trace["y"] for figure in drift for trace in figure["data"])


def test_forked_child_builds_the_same_run_pages_as_one_process(history, tmp_path, monkeypatch):
    monkeypatch.setattr(site_module, "FORK_MIN_RUNS", 1)
    together = generate_site(history, tmp_path / "forked", jobs=2)
    alone = generate_site(history, tmp_path / "alone", jobs=1)
    assert alone.child_cpu_seconds == 0  # one process: no child
    assert (together.pages, together.largest_bytes) == (alone.pages, alone.largest_bytes)

    def page(path: Path) -> str:  # the generation time is the one line that may differ
        return re.sub(r'<span class="generated">[^<]*</span>', "", path.read_text())

    for path in (tmp_path / "alone" / "runs").iterdir():
        assert page(path) == page(tmp_path / "forked" / "runs" / path.name)


def test_forked_work_returns_its_value_or_none_when_it_fails():
    assert forked.Forked(lambda: {"pages": 3}).result() == {"pages": 3}
    assert forked.Forked(lambda: 1 / 0).result() is None


def test_a_long_alarm_message_is_shortened_in_the_alarm_lists_with_a_link_to_its_run(history, tmp_path):
    lifecycle = pytest.importorskip("modelci.alarms.lifecycle")
    long = "RuntimeError: " + "x" * 12_000  # one word: without a break it ran far past the page's width
    fired = lifecycle.Observation("ci-cpu", "suite/Flat", "status", "status", True, kind="status",
                                  message=f"status failed: {long}")
    lifecycle.apply(history, SimpleNamespace(alarms={}), [fired], run_id=16, target_label="fakefw==1.15")
    generate_site(history, tmp_path / "site")
    for page, root in (("index.html", ""), ("w/suite_Flat.html", "../")):
        text = (tmp_path / "site" / page).read_text()
        assert "x" * 12_000 not in text and "x" * 150 + "…" in text
        assert f'<a href="{root}runs/16.html">run 16</a>, <code>modelci alarms show 1</code>' in text
    css = (tmp_path / "site" / "assets" / "site.css").read_text()
    assert "#alarms td, #alarms li { overflow-wrap: anywhere; }" in css
