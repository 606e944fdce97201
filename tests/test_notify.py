"""Notifiers against real servers on 127.0.0.1 (an http.server webhook receiver, an aiosmtpd SMTP server), and the
JUnit and Markdown reports."""

from __future__ import annotations

import html
import json
import re
import urllib.parse
import logging
import socket
import threading
import time
from pathlib import Path
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult
from alarm_history import History, timed

from modelci import cli
from modelci.alarms import lifecycle, notify
from modelci.records import Result
from modelci.report import junit, markdown, markup

SLOW = "suite/Slow"


class Receiver:
    """A webhook receiver: answers each POST with the next status of `statuses` (then 200) and keeps the bodies."""

    def __init__(self, statuses=()):
        self.statuses = list(statuses)
        self.posts: list[dict] = []
        self.headers: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server spelling
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                if status == 200:
                    receiver.posts.append(json.loads(body))
                    receiver.headers.append(dict(self.headers))
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/T000/B000/secret-token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Mailbox:
    """An aiosmtpd handler keeping every message."""

    def __init__(self):
        self.messages: list = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - the aiosmtpd spelling
        self.messages.append(envelope)
        return "250 OK"


@pytest.fixture
def smtp_server():
    mailbox = Mailbox()

    def authenticator(server, session, envelope, mechanism, auth_data):
        ok = auth_data.login == b"modelci" and auth_data.password == b"s3cret"
        return AuthResult(success=ok, handled=False)  # handled=False: the server itself answers 535

    controller = Controller(mailbox, hostname="127.0.0.1", port=free_port(), authenticator=authenticator,
                            auth_require_tls=False)
    controller.start()
    yield controller.port, mailbox
    controller.stop()


WEBHOOK = '[[notify]]\nkind = "webhook"\nurl_env = "TEST_HOOK_URL"\nbackoff = 0.01\n'


def slow_then_fixed(history: History) -> list:
    """1.0 fine, 1.1 slower (alarm opens), 1.2 as slow (same alarm), 1.3 fixed (it recovers)."""
    return [history.run(v, [timed(SLOW, t, seed=i)]) for i, (v, t) in
            enumerate([("1.0", 0.10), ("1.1", 0.13), ("1.2", 0.13), ("1.3", 0.10)])]


def test_webhook_posts_slack_compatible_json_when_an_alarm_opens_and_recovers_only(tmp_path, receiver, monkeypatch):
    monkeypatch.setenv("TEST_HOOK_URL", receiver.url)
    history = History(tmp_path / "p", WEBHOOK)
    outcomes = slow_then_fixed(history)
    assert [len(o.alarms.deliveries) for o in outcomes] == [0, 1, 0, 1]
    opened, recovered = receiver.posts
    assert receiver.headers[0]["Content-Type"] == "application/json"
    assert isinstance(opened["text"], str) and "OPENED" in opened["text"] and "suite/Slow" in opened["text"]
    assert "*`fw==1.1` on `ci`*" in opened["text"]
    (event,) = opened["modelci"]["events"]
    assert (event["event"], event["metric"], event["target"]) == ("open", "time.infer", "fw==1.1")
    assert "RECOVERED" in recovered["text"] and recovered["modelci"]["events"][0]["event"] == "recovered"
    alarm = lifecycle.list_alarms(history.store)[0]
    log = [e["event"] for e in lifecycle.get_alarm(history.store, alarm.id).events]
    assert log == ["opened", "notified", "seen", "recovered", "notified"]


def test_a_failing_webhook_is_retried_with_backoff(tmp_path, monkeypatch):
    server = Receiver(statuses=[503, 502])
    try:
        monkeypatch.setenv("TEST_HOOK_URL", server.url)
        history = History(tmp_path / "p", WEBHOOK)
        waits: list[float] = []
        events = slow_then_fixed(history)[1].alarms.events
        server.statuses = [503, 502]
        (delivery,) = notify.deliver(history.config, events, sleep=waits.append)
        assert delivery.ok and delivery.attempts == 3 and waits == [0.01, 0.02]
        server.statuses = [404]
        (refused,) = notify.deliver(history.config, events, sleep=waits.append)
        assert not refused.ok and refused.attempts == 1 and "HTTP 404" in refused.error
    finally:
        server.close()


def test_unreachable_webhook_and_smtp_server_are_reported_by_name_and_the_run_is_stored(tmp_path, monkeypatch, caplog):
    hook_port, smtp_port = free_port(), free_port()
    monkeypatch.setenv("TEST_HOOK_URL", f"http://127.0.0.1:{hook_port}/hooks/secret-token")
    toml = (WEBHOOK + "retries = 1\n" + f'[[notify]]\nkind = "email"\nhost = "127.0.0.1"\nport = {smtp_port}\n'
            'to = ["oncall@example.com"]\nretries = 0\ntimeout = 2\n')
    history = History(tmp_path / "p", toml)
    history.run("1.0", [timed(SLOW, 0.10)])
    with caplog.at_level(logging.WARNING, logger="modelci.alarms"):
        outcome = history.run("1.1", [timed(SLOW, 0.13, seed=1)])
    webhook, email = outcome.alarms.failed_deliveries
    assert webhook.attempts == 2 and "URL from $TEST_HOOK_URL" in webhook.error
    assert f"host 127.0.0.1:{hook_port} unreachable" in webhook.error and "secret-token" not in webhook.error
    assert email.attempts == 1 and f"SMTP server 127.0.0.1:{smtp_port} unreachable" in email.error
    assert "notification not delivered (the run is stored)" in caplog.text and f"{smtp_port}" in caplog.text
    # the run and its alarm are stored; the failure is in the alarm's record
    assert history.store.run(outcome.run_id).row.status == "complete"
    (alarm,) = lifecycle.list_alarms(history.store)
    assert [e["event"] for e in lifecycle.get_alarm(history.store, alarm.id).events] == [
        "opened", "notify-failed", "notify-failed"]


def test_a_missing_secret_is_named_and_not_retried(tmp_path, monkeypatch):
    monkeypatch.delenv("TEST_HOOK_URL", raising=False)
    history = History(tmp_path / "p", WEBHOOK)
    (delivery,) = slow_then_fixed(history)[1].alarms.deliveries
    assert not delivery.ok and delivery.attempts == 1
    assert "environment variable TEST_HOOK_URL is not set" in delivery.error


@pytest.mark.parametrize("url", ["http://127.0.0.1:port/hooks/secret-token", "http://127.0.0.1:70000/hooks/t",
                                 "ftp://127.0.0.1/hooks/secret-token"])
def test_a_webhook_url_that_is_no_http_url_is_named_and_not_retried(tmp_path, monkeypatch, url):
    # a port that was no number raised a bare ValueError out of the notifier, after the run was stored
    monkeypatch.setenv("TEST_HOOK_URL", url)
    history = History(tmp_path / "p", WEBHOOK)
    outcome = slow_then_fixed(history)[1]
    (delivery,) = outcome.alarms.deliveries
    assert not delivery.ok and delivery.attempts == 1
    assert "$TEST_HOOK_URL is not an http(s) URL" in delivery.error and "secret-token" not in delivery.error
    assert history.store.run(outcome.run_id).row.status == "complete"


@pytest.mark.parametrize("url", ["http://[::1/hooks/secret-token", "http://exa mple.com/hooks/secret-token"])
def test_a_webhook_url_that_urllib_or_http_client_cannot_parse_is_named_not_raised(tmp_path, monkeypatch, url):
    # ValueError("Invalid IPv6 URL") and http.client.InvalidURL escaped the notifier: a traceback after the run
    monkeypatch.setenv("TEST_HOOK_URL", url)
    history = History(tmp_path / "p", WEBHOOK)
    (delivery,) = slow_then_fixed(history)[1].alarms.deliveries
    assert not delivery.ok and delivery.attempts == 1
    assert "$TEST_HOOK_URL is not an http(s) URL" in delivery.error and "secret-token" not in delivery.error


def _raw_receiver(answer):
    """A receiver on 127.0.0.1 that reads the request and then calls `answer(connection)`: its URL, and a function
    that stops it and closes every connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    connections = []

    def serve():
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            connections.append(connection)
            connection.recv(65536)
            threading.Thread(target=answer, args=(connection,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()

    def close():
        server.close()
        for connection in connections:
            connection.close()

    return f"http://127.0.0.1:{server.getsockname()[1]}/hooks/t", close


def _huge(connection):
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000000\r\n\r\nok")  # and then nothing


def _trickle(connection):
    connection.sendall(b"HTTP/1.1 200 OK\r\n")
    try:
        while True:  # a header line a second, for ever: the answer never completes
            connection.sendall(b"X-Still: here\r\n")
            time.sleep(0.5)
    except OSError:
        pass


@pytest.mark.parametrize("answer, says", [(_huge, "gave no complete answer within the timeout of 2 s"),
                                          (_trickle, "gave no complete answer within the timeout of 2 s")])
def test_a_receiver_that_never_completes_its_answer_is_a_failure_bounded_by_the_timeout(tmp_path, monkeypatch,
                                                                                        answer, says):
    """A Content-Length of 100 GB made the notifier read until MemoryError (a traceback out of `deliver`, which
    never raises); a receiver trickling headers past the deadline was recorded as `notified`."""
    url, close = _raw_receiver(answer)
    try:
        monkeypatch.setenv("TEST_HOOK_URL", url)
        history = History(tmp_path / "p", WEBHOOK + "timeout = 2\nretries = 0\n")
        began = time.monotonic()
        (delivery,) = slow_then_fixed(history)[1].alarms.deliveries
        assert time.monotonic() - began < 30
        assert not delivery.ok and says in delivery.error, delivery
    finally:
        close()


def _entry(kind: str, path) -> dict:
    from modelci.alarms import settings

    return settings.validate_notify([{"kind": kind, "path": str(path)}], "test")[0]


@pytest.mark.parametrize("kind", ["junit", "markdown"])
def test_a_file_notifier_never_writes_over_the_history_the_config_or_a_fifo(tmp_path, kind):
    """`path` of a junit or markdown notifier was written whatever it was: the history became JUnit XML, the config
    a Markdown summary (every later command failed), and a FIFO hung the run for ever; junit, which replaces its
    file, also wrote over a user's file."""
    import dataclasses
    import os

    history = History(tmp_path / "p")
    outcome = history.run("1.0", [timed(SLOW, 0.10)])
    config_file = history.root / "modelci.toml"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    kept = {p: Path(p).read_bytes() for p in (history.config.db, config_file, notes)}
    for path in [history.config.db, config_file, fifo] + ([notes] if kind == "junit" else []):
        config = dataclasses.replace(history.config, notify=[_entry(kind, path)])
        (delivery,) = notify.deliver(config, [], outcome=outcome)
        assert not delivery.ok and "not written" in delivery.error, (path, delivery)
    assert {p: Path(p).read_bytes() for p in kept} == kept
    written = tmp_path / "out"
    (delivery,) = notify.deliver(dataclasses.replace(history.config, notify=[_entry(kind, written)]), [],
                                 outcome=outcome)
    assert delivery.ok and written.stat().st_size > 0


def test_email_through_a_real_smtp_server_with_login(tmp_path, smtp_server, monkeypatch):
    port, mailbox = smtp_server
    monkeypatch.setenv("TEST_SMTP_PASSWORD", "s3cret")
    history = History(tmp_path / "p", f'[[notify]]\nkind = "email"\nhost = "127.0.0.1"\nport = {port}\n'
                                      'sender = "modelci@ci.example.com"\nto = ["a@example.com", "b@example.com"]\n'
                                      'username = "modelci"\npassword_env = "TEST_SMTP_PASSWORD"\n')
    outcomes = slow_then_fixed(history)
    assert len(mailbox.messages) == 2
    first = mailbox.messages[0]
    assert first.mail_from == "modelci@ci.example.com" and first.rcpt_tos == ["a@example.com", "b@example.com"]
    text = first.content.decode()
    assert "Subject: modelci: 1 alarm opened on fw==1.1 (runner ci)" in text and "time.infer" in text
    # a wrong password is a clear failure, not retried
    monkeypatch.setenv("TEST_SMTP_PASSWORD", "wrong")
    (refused,) = notify.deliver(history.config, outcomes[1].alarms.events)
    assert not refused.ok and refused.attempts == 1 and "refused the login of 'modelci'" in refused.error


def test_markdown_and_junit_notifiers_write_on_every_run(tmp_path, monkeypatch):
    summary = tmp_path / "step-summary.md"
    summary.write_text("# earlier step\n")
    monkeypatch.setenv("TEST_STEP_SUMMARY", str(summary))
    history = History(tmp_path / "p", '[[notify]]\nkind = "markdown"\npath_env = "TEST_STEP_SUMMARY"\n'
                                      f'[[notify]]\nkind = "junit"\npath = "{tmp_path / "junit.xml"}"\n')
    history.run("1.0", [timed(SLOW, 0.10)])
    history.run("1.1", [timed(SLOW, 0.13, seed=1)])
    text = summary.read_text()
    assert text.startswith("# earlier step\n") and text.count("## modelci:") == 2
    assert "🚨 opened alarm #1" in text
    root = ET.parse(tmp_path / "junit.xml").getroot()
    assert root.find("testsuite").get("name") == "modelci run fw==1.1 on ci"


def judged(tmp_path) -> object:
    history = History(tmp_path / "p")
    history.run("1.0", [timed(SLOW, 0.10), timed("suite/Raises", 0.1), timed("suite/Pipe|Name", 0.1)])
    skipped = Result(workload="suite/Skips", status="skipped", reason="no GPU")
    return history.run("1.1", [timed(SLOW, 0.13, seed=1),
                               timed("suite/Raises", status="failed", reason="RuntimeError: boom"),
                               timed("suite/Pipe|Name", 0.1, seed=2), skipped,
                               Result(workload="suite/broken.py", status="error", reason="line 4: ValueError")])


def test_junit_has_one_case_per_workload_and_check(tmp_path):
    path = tmp_path / "junit.xml"
    junit.write(path, junit.run_xml(judged(tmp_path)))
    root = ET.parse(path).getroot()
    suite = root.find("testsuite")
    cases = {(c.get("classname"), c.get("name")): c for c in suite.iter("testcase")}
    assert set(cases) >= {("suite.Slow", "status"), ("suite.Slow", "timing"), ("suite.Slow", "curve"),
                          ("suite.Slow", "memory"), ("suite.Raises", "status"), ("suite.Skips", "status"),
                          ("suite.broken_py", "status")}
    assert ("suite.Raises", "timing") not in cases  # a failed workload has nothing else to judge
    assert "time.infer" in cases[("suite.Slow", "timing")].find("failure").get("message")
    assert cases[("suite.Slow", "curve")].find("failure") is None
    assert cases[("suite.Raises", "status")].find("failure").get("message") == "failed: RuntimeError: boom"
    assert cases[("suite.broken_py", "status")].find("error") is not None
    assert cases[("suite.Skips", "status")].find("skipped").get("message") == "no GPU"
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("2", "1", "1")
    assert int(suite.get("tests")) == len(cases) and root.get("tests") == suite.get("tests")


def test_markdown_summary_puts_problems_first_and_escapes_cells(tmp_path):
    text = markdown.run_summary(judged(tmp_path))
    assert text.startswith("## modelci: ❌ regression or failure on `fw==1.1`")
    rows = [line for line in text.splitlines() if line.startswith("| `suite/")]
    assert [r.split("`")[1] for r in rows][:3] == ["suite/Raises", "suite/Slow", "suite/broken.py"]
    assert "🔴 **timing** time.infer" in text and "RuntimeError: boom" in text
    assert "`suite/Pipe\\|Name`" in text  # a pipe in a name must not split the table row
    assert "### Alarms" in text and "<details><summary>All findings</summary>" in text


def test_cli_compare_and_run_write_junit_and_markdown_and_notify_on_open(fake_project, receiver, monkeypatch, capsys):
    monkeypatch.setenv("TEST_HOOK_URL", receiver.url)
    toml = fake_project.root / "modelci.toml"
    toml.write_text(toml.read_text() + WEBHOOK + '[alarms]\ndashboard_url = "https://ci.example.com/modelci"\n')
    files = fake_project.root
    args = ["--suite", str(fake_project.suite), "-k", "Slow", "--junit", str(files / "c.xml"),
            "--markdown", str(files / "c.md")]
    assert cli.main(["compare", str(fake_project.v10), str(fake_project.v11), *args]) == 1
    suite = ET.parse(files / "c.xml").getroot().find("testsuite")
    assert suite.get("name").startswith("modelci compare fakefw==1.0") and suite.get("failures") == "1"
    assert "B regresses against A" in (files / "c.md").read_text()
    # compare ran 1.0 then 1.1: the 1.1 run opened the timing alarm, and the webhook heard about it once
    (post,) = receiver.posts
    assert "`fakesuite/Slow` `timing:time.infer`" in post["text"]
    capsys.readouterr()
    assert cli.main(["run", "--target", str(fake_project.v11), "--suite", str(fake_project.suite), "-k", "Slow",
                     "--junit", str(files / "r.xml"), "--markdown", str(files / "r.md")]) == 1
    assert ET.parse(files / "r.xml").getroot().find("testsuite").get("name").startswith("modelci run fakefw==1.1")
    assert "fakesuite/Slow" in (files / "r.md").read_text()
    # with [alarms] dashboard_url, the summary links the run's page there, as the notifiers do
    assert re.search(r"\[run (\d+)\]\(https://ci\.example\.com/modelci/runs/\1\.html\)", (files / "r.md").read_text())
    assert len(receiver.posts) == 1  # the alarm was already open: no second message


def _console():
    import io

    from rich.console import Console

    return Console(file=io.StringIO(), width=400, color_system=None)


def test_a_recovery_says_how_the_alarm_is_now_and_which_run_recovered_it(tmp_path, receiver, monkeypatch):
    from modelci.alarms import views

    monkeypatch.setenv("TEST_HOOK_URL", receiver.url)
    history = History(tmp_path / "p", WEBHOOK)
    history.run("1.0", [timed("suite/Raises", 0.1)])
    history.run("1.1", [timed("suite/Raises", status="failed", reason="RuntimeError: boom")])
    recovered = history.run("1.2", [timed("suite/Raises", 0.1, seed=2)])
    opened, back = receiver.posts
    assert "- OPENED #1 [status] `suite/Raises` `status:status`: status failed: RuntimeError: boom" in opened["text"]
    # the failure is kept as context, after how it is now and where that was seen
    assert ("- RECOVERED #1 [status] `suite/Raises` `status:status` in run 3 on `fw==1.2`: status ok "
            "(was: status failed: RuntimeError: boom)") in back["text"]
    assert back["modelci"]["events"][0]["detail"] == "status ok"
    out = _console()
    views.render_alarm_report(recovered.alarms, out)
    assert "suite/Raises status:status: status ok (was: status failed: RuntimeError: boom)" in out.file.getvalue()
    out = _console()
    views.render_alarms(lifecycle.list_alarms(history.store), out)
    assert "run 3: status ok (was: status failed: RuntimeError: boom)" in out.file.getvalue()
    out = _console()
    views.render_alarm(lifecycle.get_alarm(history.store, 1), out)
    assert "recovered        in run 3: status ok" in out.file.getvalue()
    assert "✅ recovered alarm #1" in markdown.alarms_summary(recovered.alarms.events)
    assert "status ok (was: status failed: RuntimeError: boom)" in markdown.alarms_summary(recovered.alarms.events)
    from modelci.report import site

    assert site.collect_alarms(history.store)[0]["message"] == "status ok (was: status failed: RuntimeError: boom)"


def test_each_event_says_its_baseline_and_links_its_run_page_on_the_dashboard(tmp_path, receiver, monkeypatch):
    from modelci.report.markup import run_page

    monkeypatch.setenv("TEST_HOOK_URL", receiver.url)
    history = History(tmp_path / "p", WEBHOOK + '[alarms]\ndashboard_url = "https://ci.example.com/modelci"\n')
    outcomes = slow_then_fixed(history)
    opened, recovered = receiver.posts
    baseline_id = outcomes[0].comparisons[0].result.id
    assert f"  baseline fw==1.0 (result {baseline_id}) · https://ci.example.com/modelci/runs/2.html" in opened["text"]
    (event,) = opened["modelci"]["events"]
    assert (event["baseline"], event["baseline_result_id"]) == (f"fw==1.0 (result {baseline_id})", baseline_id)
    assert event["url"] == "https://ci.example.com/modelci/" + run_page(outcomes[1].run_id)
    # recovery is judged against the first baseline, and the link is the page of the run that recovered it
    assert recovered["modelci"]["events"][0]["url"].endswith("/runs/4.html")
    assert f"baseline fw==1.0 (result {baseline_id})" in recovered["text"]


def test_the_markdown_notifier_links_the_run_page_on_the_dashboard_as_the_webhook_does(tmp_path, receiver,
                                                                                       monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("TEST_HOOK_URL", receiver.url)
    history = History(tmp_path / "p", WEBHOOK + f'[[notify]]\nkind = "markdown"\npath = "{summary}"\n'
                      '[alarms]\ndashboard_url = "https://ci.example.com/modelci"\n')
    history.run("1.0", [timed(SLOW, 0.10)])
    opened = history.run("1.1", [timed(SLOW, 0.13, seed=1)])
    (event,) = receiver.posts[0]["modelci"]["events"]
    page = "https://ci.example.com/modelci/runs/2.html"
    assert event["url"] == page
    # each run's summary links its own run's page, the one the webhook links for the events of that run
    assert _rendered(summary.read_text()).count(f'<a href="{page}">run 2</a>') == 1
    assert 'href="https://ci.example.com/modelci/runs/1.html">run 1</a>' in _rendered(summary.read_text())
    # what the run's own --markdown file says (commands/run.py) links the same page
    url = markup.dashboard_page(history.config.alarms["dashboard_url"], opened.run_id)
    assert f'<a href="{page}">run 2</a>' in _rendered(markdown.run_summary(opened, url=url))
    # events of no run (`alarms check`) link the dashboard's index, as the webhook does
    summary.write_text("")
    notify.deliver(history.config, opened.alarms.events)
    assert receiver.posts[-1]["modelci"]["events"][0]["url"] == "https://ci.example.com/modelci/index.html"
    assert '<a href="https://ci.example.com/modelci/index.html">the dashboard</a>' in _rendered(summary.read_text())


def test_a_markdown_link_keeps_its_url_whole_whatever_it_holds():
    url = "https://ci.example.com/a(b)|c&copy;d`e<f>g_h*i/runs/2.html"
    page = _rendered(f"| x |\n|---|\n| {markdown.link('run 2', url)} |")
    (href,) = re.findall(r'<a href="([^"]*)">run 2</a>', page)
    assert urllib.parse.unquote(html.unescape(href)) == url


def test_without_a_dashboard_url_an_event_says_its_baseline_and_links_nothing(tmp_path, receiver, monkeypatch):
    monkeypatch.setenv("TEST_HOOK_URL", receiver.url)
    slow_then_fixed(History(tmp_path / "p", WEBHOOK))
    (event,) = receiver.posts[0]["modelci"]["events"]
    assert event["url"] == "" and event["baseline"].startswith("fw==1.0 (result ")
    assert "http" not in receiver.posts[0]["text"]


@pytest.mark.parametrize("url, says", [
    ("javascript:alert(1)", "must be the http(s) URL"), ("ci.example.com/modelci", "must be the http(s) URL"),
    ("https://user:pw@ci.example.com/", "must not hold a user or password"),
    ("https://ci.example.com/?a=1", "without a query"), ("https://ci.example.com:99999/", "must be the http(s) URL"),
])
def test_a_dashboard_url_that_is_no_published_http_folder_is_refused_naming_the_key(tmp_path, url, says):
    from modelci.errors import UserError

    with pytest.raises(UserError, match="dashboard_url") as refused:
        History(tmp_path / "p", f'[alarms]\ndashboard_url = "{url}"\n')
    assert says in str(refused.value)
    assert History(tmp_path / "q", '[alarms]\ndashboard_url = " http://ci/x/ "\n').config.alarms["dashboard_url"] \
        == "http://ci/x/"


def test_the_webhook_text_escapes_what_slack_would_read_as_links_or_entities(tmp_path, receiver, smtp_server,
                                                                              monkeypatch):
    """A workload, runner, target or message holding `<url|label>`, `<!channel>` or `&gt;` is shown as written:
    Slack reads `<...>` in `text` as a link or a mention, and `&...;` as an entity."""
    port, mailbox = smtp_server
    monkeypatch.setenv("TEST_HOOK_URL", receiver.url)
    name = "suite/<https://evil.example|click> & <!channel>"
    reason = "RuntimeError: <https://evil.example|see the log> &gt; x"
    history = History(tmp_path / "p", WEBHOOK + '[alarms]\ndashboard_url = "https://ci.example.com/a&b/"\n'
                      f'[[notify]]\nkind = "email"\nhost = "127.0.0.1"\nport = {port}\nto = ["a@example.com"]\n',
                      runner="ci<x>")
    history.run("1.0&<1>", [timed(name, 0.1)])
    history.run("1.1&<1>", [timed(name, status="failed", reason=reason)])
    (post,) = receiver.posts
    text = post["text"]
    assert "<" not in text and ">" not in text  # no link, no mention: modelci's own text has neither
    assert all(part.startswith(("amp;", "lt;", "gt;")) for part in text.split("&")[1:])  # every & an entity
    assert "`suite/&lt;https://evil.example|click&gt; &amp; &lt;!channel&gt;` `status:status`" in text
    assert "status failed: RuntimeError: &lt;https://evil.example|see the log&gt; &amp;gt; x" in text
    assert "runner `ci&lt;x&gt;`" in text and "*`fw==1.1&amp;&lt;1&gt;` on `ci&lt;x&gt;`*" in text
    assert "https://ci.example.com/a&amp;b/runs/2.html" in text
    # the formatting modelci adds is left as it is, and scripts and mail get the text as written
    assert text.startswith("modelci: 1 alarm opened") and "\n- OPENED #1 [status] " in text
    (event,) = post["modelci"]["events"]
    assert (event["workload"], event["message"]) == (name, f"status failed: {reason}")
    (mail,) = mailbox.messages
    assert name in mail.content.decode() and "&amp;" not in mail.content.decode()


def test_the_webhook_text_shows_names_in_inline_code_and_pings_nobody(tmp_path, receiver, smtp_server, monkeypatch):
    """Slack reads `*x*`, `_x_` and `~x~` as formatting, and Mattermost (Slack too, with `link_names`) `@channel`
    and `@here` as mentions: a workload, metric, target or runner named so, or an error saying so, must neither
    format the message nor ping a channel. Names are inline code, and a zero-width space follows a mention's `@`."""
    port, mailbox = smtp_server
    monkeypatch.setenv("TEST_HOOK_URL", receiver.url)
    name = "@channel *bold* _it_ ~strike~ `tick`"
    history = History(tmp_path / "p", WEBHOOK + '[alarms]\ndashboard_url = "https://ci.example.com/@here/"\n'
                      f'[[notify]]\nkind = "email"\nhost = "127.0.0.1"\nport = {port}\nto = ["a@example.com"]\n',
                      runner="@here")
    history.run("1.0*x*", [timed(name, 0.1)])
    history.run("1.1_y_", [timed(name, status="failed", reason="RuntimeError: @channel @here *boom* mail a@b.c")])
    (post,) = receiver.posts
    text = post["text"]
    zwsp = "\u200b"
    # every name is one inline code span, a backtick in it shown as U+02CB: mrkdwn has no escape inside code
    assert f"`@{zwsp}channel *bold* _it_ ~strike~ \u02cbtick\u02cb` `status:status`" in text, text
    assert f"runner `@{zwsp}here`" in text and f"*`fw==1.1_y_` on `@{zwsp}here`*" in text
    # no mention anywhere, in a name or in a message; an e-mail address and the dashboard's link stay whole
    assert not re.search(r"(?<![A-Za-z0-9_])@(?!\u200b)", text.replace("https://ci.example.com/@here/", "")), text
    assert f"RuntimeError: @{zwsp}channel @{zwsp}here *boom* mail a@b.c" in text
    assert "https://ci.example.com/@here/runs/2.html" in text
    # no backtick but those around names (title 2, heading 2, event 2) and the last line's 2 commands
    assert text.count("`") == 2 * 6 + 2 * 2, text
    # scripts and mail get the names as written
    assert post["modelci"]["events"][0]["workload"] == name
    (mail,) = mailbox.messages
    assert name in mail.content.decode() and zwsp not in mail.content.decode()


HOSTILE = "suite/<img src=x onerror=alert(1)>|*[md](javascript:alert(1))*``tick"
HOSTILE_REASON = "RuntimeError: **bold** [link](javascript:alert(1)) ![i](https://x/i.png) <b>b</b> &amp; ~~s~~ $x$"


def _rendered(text: str) -> str:
    """The Markdown as HTML, by a CommonMark parser with GitHub's tables and strikethrough."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(text)


def test_the_markdown_summary_shows_names_in_code_spans_as_they_are_and_messages_as_plain_text(tmp_path):
    import html

    history = History(tmp_path / "p")
    history.run("1.0", [timed(HOSTILE, 0.1)])
    outcome = history.run("1.1", [timed(HOSTILE, status="failed", reason=HOSTILE_REASON)])
    text = markdown.run_summary(outcome)
    page = _rendered(text)
    # the name reads as written in the table and in the alarm list: no entity, no `\|`, shown literally
    assert page.count(f"<code>{html.escape(HOSTILE, quote=False)}</code>") >= 2, text
    # the error is text: no link, no image, no emphasis, no tag, no strikethrough, no entity decoded
    assert not any(tag in page for tag in ("<a ", "<img", "<strong>bold", "<em>", "<b>", "<s>", "<del>"))
    assert html.escape(f"status failed: {HOSTILE_REASON}", quote=False) in page
    # the table still has its four columns on the workload's row
    (row,) = [line for line in text.splitlines() if line.startswith("| ```suite/")]
    assert len(re.split(r"(?<!\\)\|", row)) == 6


@pytest.mark.parametrize("name", ["a`b", "`a", "a``", "plain", "x | y"])
def test_a_code_span_holds_any_run_of_backticks(name):
    import html

    shown = html.escape(name, quote=False)
    assert _rendered(f"- {markdown.code(name)}").strip() == f"<ul>\n<li><code>{shown}</code></li>\n</ul>"


def test_a_long_message_is_shortened_where_alarms_are_listed_and_whole_where_one_is_shown(tmp_path, receiver,
                                                                                        monkeypatch):
    from modelci.alarms import views

    monkeypatch.setenv("TEST_HOOK_URL", receiver.url)
    history = History(tmp_path / "p", WEBHOOK)
    reason = "RuntimeError: " + " ".join(f"word{i}" for i in range(2000))  # 12,000 characters on one line
    history.run("1.0", [timed("suite/Long", 0.1)])
    outcome = history.run("1.1", [timed("suite/Long", status="failed", reason=reason + "\nsecond line")])
    (post,) = receiver.posts
    assert len(post["text"]) < 600, len(post["text"])
    line = next(line for line in post["text"].splitlines() if "OPENED #1" in line)
    assert "status failed: RuntimeError: word0 word1" in line and "…" in line
    assert line.endswith("(whole message: `modelci alarms show 1`)")
    assert post["modelci"]["events"][0]["message"] == f"status failed: {reason}"  # scripts get it whole
    out = _console()
    views.render_alarms(lifecycle.list_alarms(history.store), out)
    assert len(out.file.getvalue().splitlines()) < 15 and "modelci alarms show 1" in out.file.getvalue()
    out = _console()
    views.render_alarm_report(outcome.alarms, out)
    assert len(out.file.getvalue()) < 500
    summary = markdown.alarms_summary(outcome.alarms.events)
    assert len(summary) < 700 and "(whole message: `modelci alarms show 1`)" in summary
    out = _console()
    views.render_alarm(lifecycle.get_alarm(history.store, 1), out)
    assert "word1999" in out.file.getvalue()  # one alarm shown: the whole message


@pytest.mark.parametrize("text, short, cut", [
    ("status ok", "status ok", False), ("  first\n\nsecond", "first …", True), ("a  b\tc", "a b c", False),
    ("x" * 250, "x" * 199 + "…", True), ("", "", False), ("\n\n  \n", "", False),
])
def test_shorten_keeps_the_first_line_within_the_limit(text, short, cut):
    from modelci.alarms import wording

    assert wording.shorten(text) == (short, cut)


def test_a_notification_that_failed_is_sent_again_once_by_the_next_run_to_the_notifier_that_failed_it(tmp_path,
                                                                                                   monkeypatch):
    # a failed delivery was recorded and forgotten: the next runs only saw the alarm, and nobody heard of it
    server = Receiver(statuses=[503, 503, 503])  # down for the three attempts of 1.1's delivery
    hook = tmp_path / "hook.md"
    try:
        monkeypatch.setenv("TEST_HOOK_URL", server.url)
        history = History(tmp_path / "p", WEBHOOK + f'[[notify]]\nkind = "markdown"\npath = "{hook}"\n')
        history.run("1.0", [timed(SLOW, 0.10)])
        opened = history.run("1.1", [timed(SLOW, 0.13, seed=1)])
        assert [d.ok for d in opened.alarms.deliveries] == [False, True] and server.posts == []
        again = history.run("1.2", [timed(SLOW, 0.13, seed=2)])  # the alarm is only seen: no news of its own
        assert again.alarms.events == [] and [d.ok for d in again.alarms.deliveries] == [True, True]
        (post,) = server.posts  # to the webhook that failed it, not to the markdown file that had it
        assert "OPENED (sent again: its first delivery failed)" in post["text"]  # not news of this run
        assert post["modelci"]["events"][0]["event"] == "open"
        history.run("1.3", [timed(SLOW, 0.13, seed=3)])
        assert len(server.posts) == 1  # once
        (alarm,) = lifecycle.list_alarms(history.store)
        log = [e["event"] for e in lifecycle.get_alarm(history.store, alarm.id).events]
        assert log == ["opened", "notify-failed", "notified", "seen", "notify-resend", "notified", "seen"]
    finally:
        server.close()


def test_alarms_check_sends_again_what_failed_and_two_claims_send_it_once(tmp_path, monkeypatch, capsys):
    server = Receiver(statuses=[503, 503, 503])
    try:
        monkeypatch.setenv("TEST_HOOK_URL", server.url)
        history = History(tmp_path / "p", WEBHOOK + "[alarms]\nstale_after_days = 0\n")
        slow_then_fixed(history)  # 1.1's opening fails, 1.2 sends it again, 1.3's recovery arrives
        history.run("1.4", [timed(SLOW, 0.13, seed=4)])  # it fires again: reopened, and delivered
        assert [p["modelci"]["events"][0]["event"] for p in server.posts] == ["open", "recovered", "open"]
        server.statuses = [503, 503, 503]
        history.run("1.5", [timed(SLOW, 0.10, seed=5)])  # its recovery fails
        monkeypatch.chdir(history.root)
        capsys.readouterr()
        assert cli.main(["alarms", "check"]) == 0
        assert server.posts[-1]["modelci"]["events"][0]["event"] == "recovered" and len(server.posts) == 4
        assert "sent again what failed to be delivered before: alarm(s) #1" in capsys.readouterr().out
        assert cli.main(["alarms", "check"]) == 0 and len(server.posts) == 4  # once
        server.statuses = [503, 503, 503]
        history.run("1.6", [timed(SLOW, 0.13, seed=6)])  # reopened, and that fails
        names = [notify.describe(entry) for entry in history.config.notify]
        # claimed under the history's write lock: a second runner at the same time finds it claimed, sends nothing
        first = lifecycle.claim_undelivered(history.store, names)
        assert [(e.event, e.reopened) for e in first[names[0]]] == [("open", True)]
        assert lifecycle.claim_undelivered(history.store, names) == {}
        # a claim whose process died before it said how the delivery went is claimed again, later
        later = lifecycle.utcnow() + lifecycle.timedelta(seconds=lifecycle.RESEND_CLAIM_SECONDS + 1)
        assert list(lifecycle.claim_undelivered(history.store, names, now=later)) == names
    finally:
        server.close()
