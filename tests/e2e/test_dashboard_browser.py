"""The dashboard in a real browser: Debian's chromium driven by Playwright, pages opened from file:// and from a
`modelci serve` subprocess, over a history made by real runs of the fakefw suite.

Screenshots go to $MODELCI_TEST_OUTPUT, else test-output/ at the repository root.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from fakeproject import make_fake_project

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("MODELCI_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
OUTPUT = Path(os.environ.get("MODELCI_TEST_OUTPUT") or Path(__file__).resolve().parents[2] / "test-output")
HOSTILE = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>"

#: a workload that fails with markup in its error and its stderr, as a hostile or careless one might
HOSTILE_SUITE = f'''\
import sys

import modelci

PAYLOAD = {HOSTILE!r}


class Markup(modelci.Workload):
    """Fails in setup; its message and its stderr hold HTML."""

    framework = "python"
    steps = 2

    def setup(self, ctx):
        print("stderr: " + PAYLOAD, file=sys.stderr, flush=True)
        raise RuntimeError(PAYLOAD)

    def train_step(self, ctx, step):
        return 0.0

    def infer(self, ctx):
        return {{}}
'''


def _need_browser() -> None:
    sync_api = None
    try:
        from playwright import sync_api
    except ImportError:
        pass
    if sync_api is None or not Path(CHROMIUM).is_file():
        message = f"needs playwright and {CHROMIUM} (apt-get install chromium; pip install playwright)"
        if os.environ.get("CI") or os.environ.get("MODELCI_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def project(tmp_path_factory, env_cache):
    """A fakefw project with two real runs (1.0, then 1.1) plus the hostile workload, and its site."""
    _need_browser()
    project = make_fake_project(tmp_path_factory.mktemp("dash") / "project", env_cache, timeout=3.0)
    (project.suite / "hostile.py").write_text(HOSTILE_SUITE)
    for wheel in (project.v10, project.v11):
        # all but Hangs, which only waits for its timeout; Aborts and Raises still give a crash and a failure
        done = project.cli("-q", "run", "--target", str(wheel), "--suite", str(project.suite), "-k", "*/[!H]*")
        assert done.returncode == 1, done.stdout + done.stderr  # the failing workloads fail the run
    done = project.cli("report", "--out", "site")
    assert done.returncode == 0, done.stdout + done.stderr
    return project


@pytest.fixture(scope="module")
def browser():
    _need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield instance
        instance.close()


@pytest.fixture
def page(browser):
    """A fresh page that records console errors and uncaught exceptions in `page.problems`."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.problems = []
    page.on("console", lambda message: message.type == "error" and page.problems.append(message.text))
    page.on("pageerror", lambda error: page.problems.append(str(error)))
    yield page
    context.close()


def shoot(page, name: str) -> None:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(OUTPUT / f"dashboard-{name}.png"), full_page=True)


def assert_plots_rendered(page) -> None:
    expected = page.locator("div.plot").count()
    assert expected >= 5
    page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {expected}",
                           timeout=20_000)
    assert page.locator(".js-plotly-plot").count() == expected
    assert page.locator(".js-plotly-plot .scatterlayer .trace").count() >= expected


def test_file_pages_render_plots_without_errors(project, page):
    site = project.root / "site"
    page.goto((site / "index.html").as_uri())
    assert page.locator("table.matrix td.status").count() == 6
    # the runs opened alarms for the failures; they are listed, escaped
    alarms = page.locator("#alarms tr.alarm")
    assert alarms.filter(has_text="fakesuite/Raises").count() >= 1
    assert alarms.filter(has_text="window.__pwned=1").count() >= 1
    shoot(page, "index")
    page.goto((site / "w" / "fakesuite_Precision.html").as_uri())
    assert_plots_rendered(page)
    shoot(page, "workload")
    assert page.problems == []


def test_click_from_index_to_workload_to_run(project, page):
    page.goto((project.root / "site" / "index.html").as_uri())
    page.locator("#matrix").get_by_role("link", name="fakesuite/Slow", exact=True).click()
    page.wait_for_url("**/w/fakesuite_Slow.html")
    assert_plots_rendered(page)
    page.locator("#results tbody tr").first.get_by_role("link").click()
    page.wait_for_url("**/runs/2.html")
    assert page.locator("h1").inner_text().startswith("Run 2")
    slow = page.locator("article.result", has=page.get_by_role("link", name="fakesuite/Slow", exact=True))
    assert "time.infer" in slow.locator("tr.verdict-regression").inner_text()
    aborts = page.locator("article.result", has=page.get_by_role("link", name="fakesuite/Aborts", exact=True))
    assert "fused_update" in aborts.locator("pre.stderr").inner_text()
    shoot(page, "run")
    assert page.problems == []


def test_from_the_bisect_page_to_the_culprit_and_the_runs_of_its_probes(project, page):
    from modelci import config as config_module
    from modelci.bisect import BisectResult, Probe, Suspect
    from modelci.gitrepo import Commit
    from modelci.store import Store

    def commit(sha: str, subject: str) -> Suspect:
        return Suspect(sha, f"git+repo@{sha}", Commit(sha, "2026-11-30T10:00:00+00:00", subject, "Ada"))

    good, culprit = commit("a" * 40, "Start"), commit("b" * 40, "Fuse the update " + HOSTILE + " (#57)")
    result = BisectResult("found", "fakesuite/Slow", "timing", ["time.infer"], good, culprit, culprit=culprit,
                          last_good=good, rounds=1, range_size=1, evidence="time.infer 3x slower",
                          probes=[Probe(good.item, good.spec, good.label, "good", "the good end", "ok", 0, run_id=1),
                                  Probe(culprit.item, culprit.spec, culprit.label, "bad", "3x", "ok", 0, run_id=2)])
    cfg = config_module.load(cwd=project.root, environ=project.env)
    Store.from_config(cfg).add_bisect(cfg.runner, result.to_json())
    done = project.cli("report", "--out", "site-bisect")
    assert done.returncode == 0, done.stdout + done.stderr
    page.goto((project.root / "site-bisect" / "index.html").as_uri())
    page.locator("nav.top").get_by_role("link", name="bisect results").click()
    page.wait_for_url("**/bisect.html")
    row = page.locator("tbody tr", has_text="fakesuite/Slow")
    assert "bbbbbbbbbb Fuse the update" in row.inner_text() and "#57" in row.inner_text()
    row.get_by_role("link", name="fakesuite/Slow · timing").click()
    page.wait_for_url("**/bisects/*.html")
    assert "first bad: bbbbbbbbbb Fuse the update" in page.locator("main p").first.inner_text()
    shoot(page, "bisect")
    page.get_by_role("link", name="run 2").click()
    page.wait_for_url("**/runs/2.html")
    assert page.locator("h1").inner_text().startswith("Run 2")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.problems == []


def test_hostile_error_text_is_shown_and_never_run(project, page):
    site = project.root / "site"
    for url in [(site / "runs" / "1.html").as_uri(), (site / "w" / "fakesuite_Markup.html").as_uri(),
                (site / "index.html").as_uri()]:
        page.goto(url)
        page.wait_for_load_state("load")
        assert page.evaluate("typeof window.__pwned") == "undefined", url
    page.goto((site / "runs" / "1.html").as_uri())
    hostile = page.locator("article.result", has=page.get_by_role("link", name="fakesuite/Markup", exact=True))
    assert HOSTILE in hostile.locator("p.reason").inner_text()
    assert "stderr: " + HOSTILE in hostile.locator("pre.stderr").inner_text()
    assert page.locator("article.result img").count() == 0
    page.goto((site / "w" / "fakesuite_Markup.html").as_uri())
    assert HOSTILE in page.locator("#results td.reason").first.inner_text()
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.problems == []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(url: str, proc: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"modelci serve exited {proc.returncode}: {proc.stdout.read()}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing answered at {url} within {seconds} s")


def assert_loopback_only(port: int) -> None:
    """Nothing answers on this machine's other addresses (a machine with only loopback has none to try)."""
    addresses = {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:  # the address of the default route; a UDP connect sends nothing
            probe.connect(("192.0.2.1", 9))
            addresses.add(probe.getsockname()[0])
        except OSError:
            pass
    for address in sorted(a for a in addresses if not a.startswith("127.") and a != "0.0.0.0"):
        with pytest.raises(OSError), socket.create_connection((address, port), timeout=2):
            pass


def test_served_site_refreshes_after_a_new_run(project, page):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "modelci.cli", "serve", "--port", str(port)], cwd=project.root,
                            env=project.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_for(url, proc)
        assert_loopback_only(port)
        page.goto(url)
        assert page.locator("#runs tbody tr").count() == 2
        page.locator("#matrix").get_by_role("link", name="fakesuite/Stable", exact=True).click()
        assert_plots_rendered(page)
        shoot(page, "served-workload")
        done = project.cli("-q", "run", "--target", str(project.v10), "--suite", str(project.suite), "-k", "Stable")
        assert done.returncode == 0, done.stdout + done.stderr
        page.goto(url)
        assert page.locator("#runs tbody tr").count() == 3
        page.locator("#runs tbody tr").first.get_by_role("link").click()
        page.wait_for_url("**/runs/3.html")
        # run 3 (fakefw 1.0) against the previous run on this runner, run 2 (fakefw 1.1)
        assert page.locator("#env-diff tbody tr").first.inner_text().split("\t")[:4] == ["fakefw", "changed", "1.1",
                                                                                       "1.0"]
        assert page.problems == []
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert f"serving the dashboard at http://127.0.0.1:{port}/" in output


def test_a_long_alarm_message_stays_within_the_page_width(project, page, tmp_path):
    """An exception's message of 12,000 characters, one word long, made the index's alarm table run far past
    the page; it is cut where alarms are listed, and what is left wraps."""
    from modelci import config as config_module
    from modelci.alarms import lifecycle
    from modelci.store import Store

    cfg = config_module.load(cwd=project.root, environ={})
    store = Store.from_config(cfg)
    fired = lifecycle.Observation(cfg.runner, "fakesuite/Markup", "status", "status", True, kind="status",
                                  message="status failed: RuntimeError: " + "/very/long/path" * 800)
    lifecycle.apply(store, cfg, [fired], run_id=2, target_label="fakefw==1.1")
    done = project.cli("report", "--out", str(tmp_path / "site"))
    assert done.returncode == 0, done.stdout + done.stderr
    page.goto((tmp_path / "site" / "index.html").as_uri())
    page.wait_for_load_state("load")
    assert page.evaluate("document.documentElement.scrollWidth") <= page.evaluate("window.innerWidth")
    cell = page.locator("#alarms tr.alarm td.message").filter(has_text="/very/long/path").first
    assert "…" in cell.inner_text() and "modelci alarms show" in cell.inner_text()
    shoot(page, "long-alarm")
    assert page.problems == []
