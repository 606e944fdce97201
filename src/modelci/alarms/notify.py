"""Notifiers, picked by name from `[[notify]]` entries (docs/design.md: backends are a name → factory table).

- webhook: POST of JSON with a `text` field (Slack, Mattermost and Teams-compatible receivers read it); the URL
  comes only from the environment variable named by `url_env`, since webhook URLs are secrets.
- email: SMTP (optionally SSL or STARTTLS, optionally logging in with the password in `password_env`).
- markdown: the run's GitHub-flavoured summary, appended to a file ($GITHUB_STEP_SUMMARY through `path_env`).
- junit: the run as JUnit XML, one test case per workload and check.

Webhook and e-mail fire only when an alarm opens or recovers, never on every run; the two file kinds write every
run. A failing notifier is retried with exponential backoff, a bounded number of times, then logged and reported:
the run is stored before anyone is notified, so a notifier can never lose it. What it failed to deliver is sent
again by the next run or `alarms check` (`undelivered`), to it alone.
"""

from __future__ import annotations

import base64
import functools
import http.client
import json
import logging
import os
import re
import smtplib
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from modelci.alarms import wording
from modelci.alarms.lifecycle import AlarmEvent
from modelci.errors import UserError, described

log = logging.getLogger("modelci.notify")
#: bump when the JSON a webhook receives changes in a way that breaks a reader
SCHEMA = "modelci.notify/1"


class NotifyError(Exception):
    """A notifier could not deliver; `retry` says whether trying again may help."""

    def __init__(self, message: str, retry: bool = True):
        super().__init__(message)
        self.retry = retry


@dataclass
class Delivery:
    """What one notifier did: delivered or not, after how many attempts, and why not."""

    notifier: str
    ok: bool
    attempts: int
    error: str = ""


@dataclass
class Message:
    """What is sent: a title (e-mail subject), plain text (e-mail), the same for chat (`chat`: Slack's mrkdwn,
    escaped), the events, and the run when there is one."""

    title: str
    text: str
    events: list[AlarmEvent]
    outcome: Any = None
    run_id: int | None = None
    #: alarm id -> (its baseline in words, the baseline result's id), and the run's page on the dashboard
    baselines: dict[int, tuple[str, int | None]] = field(default_factory=dict)
    url: str = ""
    chat: str = ""


#: how a notification names each event
EVENT_WORDS = {"open": "OPENED", "recovered": "RECOVERED", "bisected": "BISECTED"}


def compose(events: list[AlarmEvent], outcome: Any = None, run_id: int | None = None, *,
            baselines: Mapping[int, tuple[str, int | None]] | None = None, dashboard: str = "") -> Message:
    """The notification of some alarm events, grouped by the target each alarm first fired on. Each event says
    what its alarm is judged against (`baselines`: alarm id -> (in words, result id), from `baselines_of`) and,
    given the dashboard's published URL, links the run's page there."""
    baselines = baselines or {}
    from modelci.report.markup import dashboard_page

    page = dashboard_page(dashboard, run_id)
    title, text = _lines(events, outcome, run_id, baselines, page, str, str)
    chat = _lines(events, outcome, run_id, baselines, slack_escape(page), slack_text, slack_name)[1]
    return Message(title=title, text=text, events=events, outcome=outcome, run_id=run_id,
                   baselines=dict(baselines), url=page, chat=chat)


def slack_escape(text: Any) -> str:
    """Text as Slack's mrkdwn reads it literally: `&`, `<` and `>` as entities (Slack's rule for `text`), so that
    a name or message holding `<https://x|label>`, `<!channel>` or `&gt;` shows as written, not as a link, a
    mention or another character."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


#: an `@` where chat reads a mention (`@channel`, `@here`, `@all`, `@alice`): after no letter, digit or `_`
_MENTION = re.compile(r"(?<![A-Za-z0-9_])@")
#: what follows such an `@`: a zero-width space, which shows nothing and keeps the word from being a mention
ZERO_WIDTH_SPACE = "\u200b"


def slack_text(text: Any) -> str:
    """Text for the chat message: `slack_escape`d, and no mention: `@channel` in an error would ping a channel
    in Mattermost (and in Slack with `link_names`), so a zero-width space follows each `@` that starts a word."""
    return slack_escape(_MENTION.sub("@" + ZERO_WIDTH_SPACE, str(text)))


def slack_name(text: Any) -> str:
    """A name (workload, metric, target, runner) for the chat message: inline code, in which Slack's and
    Mattermost's `*bold*`, `_italic_`, `~strike~` and `:emoji:` are literal, on one line; mrkdwn has no escape for
    a backtick inside it, so a backtick shows as `ˋ` (U+02CB). Mentions and `&<>` as `slack_text`: some receivers
    still notify a mention in code."""
    value = " ".join(str(text).split()).replace("`", "\u02cb")
    return f"`{slack_text(value)}`" if value else ""


def _lines(events: list[AlarmEvent], outcome: Any, run_id: int | None, baselines: Mapping[int, tuple[str, int | None]],
           page: str, esc: Callable[[Any], str], name: Callable[[Any], str]) -> tuple[str, str]:
    """(title, text) of a notification; `esc` is applied to every piece of text that modelci did not write itself
    (messages, baselines), never to the formatting around them, and `name` to the names (workloads, checks and
    metrics, targets, runners). `page`, the run's page on the dashboard, comes as the format shows it: in chat only
    `slack_escape`d, since a zero-width space in it would break the link."""
    opened = sum(e.event == "open" for e in events)
    recovered = sum(e.event == "recovered" for e in events)
    bisected = sum(e.event == "bisected" for e in events)
    parts = [f"{opened} alarm{'s' * (opened != 1)} opened"] if opened else []
    parts += [f"{recovered} recovered"] if recovered else []
    parts += [f"{bisected} bisected"] if bisected else []
    where = f" on {name(outcome.target.label)} (runner {name(outcome.runner)})" if outcome is not None else ""
    title = f"modelci: {', '.join(parts) or 'no alarm changes'}{where}"
    lines = [title]
    groups: dict[str, list[AlarmEvent]] = {}
    for event in events:
        groups.setdefault(event.alarm.group, []).append(event)
    for members in groups.values():
        first = members[0].alarm  # the group's target and runner, as Alarm.group names them
        lines.append(f"*{name(first.target) if first.target else '(no target)'} on {name(first.runner)}*")
        for event in members:
            alarm = event.alarm
            word = "REOPENED" if event.reopened else EVENT_WORDS[event.event]
            if event.resent:  # an earlier run's news: the reader may have seen later ones
                word += " (sent again: its first delivery failed)"
            lines.append(f"- {word} #{alarm.id} [{esc(alarm.kind)}] {name(alarm.workload)} "
                         f"{name(f'{alarm.check}:{alarm.metric}')}{_recovered_in(event, outcome, run_id, name)}: "
                         f"{wording.listed(*wording.event_parts(event), alarm.id, esc=esc)}")
            baseline = baselines.get(alarm.id, ("", None))[0]
            more = [f"baseline {esc(baseline)}"] if baseline else []
            more += [page] if page else []
            if more:
                lines.append(f"  {' · '.join(more)}")
    if run_id is not None:
        lines.append(f"run {run_id}: `modelci show {run_id}`; `modelci alarms list` for every live alarm")
    return title, "\n".join(lines)


def baselines_of(store: Any, events: list[AlarmEvent], outcome: Any = None) -> dict[int, tuple[str, int | None]]:
    """Alarm id -> (what the alarm is judged against, in words; the baseline result's id or None): the result it
    first fired against, as "<target> (result N)"; for a status alarm, which has none of its own, the baseline
    this run chose for the workload; for a change point, the level before the change. A stale runner has none."""
    from sqlalchemy import select

    from modelci.store.schema import ResultRow, RunRow, TargetRow

    chosen = {c.result.workload: c.baseline.id for c in getattr(outcome, "comparisons", None) or []
              if c.baseline is not None and c.baseline.id is not None}
    ids: dict[int, int] = {}
    found: dict[int, tuple[str, int | None]] = {}
    for event in events:
        alarm = event.alarm
        result_id = alarm.baseline_result_id or (chosen.get(alarm.workload) if alarm.check == "status" else None)
        if result_id is not None:
            ids[alarm.id] = result_id
        elif alarm.check == "history" and "before_mean" in alarm.numbers:
            numbers = alarm.numbers
            level = f"{numbers['before_mean']:.4g}" + (f" {numbers['unit']}" if numbers.get("unit") else "")
            found[alarm.id] = (f"the level before the change at {numbers.get('first_target', '?')}: {level}", None)
    if ids and store is not None:
        with store.read() as session:
            stmt = (select(ResultRow.id, TargetRow).join(RunRow, ResultRow.run_id == RunRow.id)
                    .join(TargetRow, RunRow.target_id == TargetRow.id).where(ResultRow.id.in_(set(ids.values()))))
            labels = {result_id: target.label for result_id, target in session.execute(stmt)}
        for alarm_id, result_id in ids.items():
            label = labels.get(result_id)
            found[alarm_id] = (f"{label} (result {result_id})" if label else f"result {result_id}", result_id)
    return found


def _recovered_in(event: AlarmEvent, outcome: Any, run_id: int | None, name: Callable[[Any], str]) -> str:
    """Where a recovery was seen (" in run 3 on fw==1.2"): the group heading names the target it first fired on."""
    if event.event != "recovered":
        return ""
    where = f" in run {run_id}" if run_id is not None else ""
    return where + (f" on {name(outcome.target.label)}" if outcome is not None else "")


def payload(message: Message) -> dict[str, Any]:
    """The JSON body a webhook receives: `text` for chat receivers, the events for scripts."""
    return {
        "text": message.chat or message.text,
        "modelci": {
            "schema": SCHEMA,
            "title": message.title,
            "run_id": message.run_id,
            "events": [{"event": e.event, "reopened": e.reopened, "resent": e.resent, "id": e.alarm.id,
                        "kind": e.alarm.kind,
                        "runner": e.alarm.runner, "workload": e.alarm.workload, "check": e.alarm.check,
                        "metric": e.alarm.metric, "state": e.alarm.state, "target": e.alarm.target,
                        "count": e.alarm.count, "message": e.alarm.message, "culprit": e.alarm.culprit,
                        "detail": e.detail, "baseline": message.baselines.get(e.alarm.id, ("", None))[0],
                        "baseline_result_id": message.baselines.get(e.alarm.id, ("", None))[1], "url": message.url}
                       for e in message.events],
        },
    }


# -- the notifiers -----------------------------------------------------------------------------------------------


def describe(entry: Mapping[str, Any]) -> str:
    """How messages name a notifier: its entry number, kind and where it sends, never a secret."""
    name = f" {entry['name']!r}" if entry.get("name") else ""
    head = f"[[notify]] entry {entry.get('_entry', '?')}{name}"
    kind = entry["kind"]
    if kind == "webhook":
        return f"{head} (webhook, URL from ${entry['url_env']})"
    if kind == "email":
        return f"{head} (email via SMTP {entry['host']}:{entry['port']})"
    return f"{head} ({kind} file {entry['path'] or '$' + entry['path_env']})"


def _secret(entry: Mapping[str, Any], key: str, environ: Mapping[str, str]) -> str:
    """The value of the environment variable an entry names; unset is an error that retrying cannot fix."""
    variable = entry[key]
    value = environ.get(variable, "")
    if not value:
        raise NotifyError(f"environment variable {variable} is not set (named by key {key!r}); export it where "
                          "modelci runs: secrets are read only from the environment", retry=False)
    return value


#: how much of a webhook receiver's answer is read (its status is what counts)
MAX_ANSWER_BYTES = 1 << 16


def send_webhook(entry: Mapping[str, Any], message: Message, environ: Mapping[str, str]) -> None:
    """POST the JSON payload; any status outside 2xx, or no complete answer within `timeout` seconds in all (a
    deadline for the whole request, not only for each read), is a failure.

    A proxy is used as urllib would use it (`http_proxy`, `https_proxy`, `no_proxy`): an https receiver through
    a CONNECT tunnel, an http one by sending the proxy the absolute URL. The deadline covers the proxy too."""
    url = _secret(entry, "url_env", environ)
    try:
        parsed = urllib.parse.urlsplit(url)
    except ValueError as exc:  # "Invalid IPv6 URL"
        raise NotifyError(f"${entry['url_env']} is not an http(s) URL ({exc})", retry=False) from None
    try:
        parsed.port  # noqa: B018 - urllib checks the port only when it is read
    except ValueError:
        raise NotifyError(f"${entry['url_env']} is not an http(s) URL: its port is not a number from 0 to 65535",
                          retry=False) from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise NotifyError(f"${entry['url_env']} is not an http(s) URL", retry=False)
    host = f"{parsed.hostname}:{parsed.port}" if parsed.port else parsed.hostname
    body = json.dumps(payload(message)).encode()
    timeout = float(entry["timeout"])
    headers = {"Content-Type": "application/json", "User-Agent": "modelci"}
    kind = http.client.HTTPSConnection if parsed.scheme == "https" else http.client.HTTPConnection
    path = urllib.parse.urlunsplit(("", "", parsed.path or "/", parsed.query, ""))
    proxy = webhook_proxy(parsed.scheme, host, environ)
    try:
        if proxy is None:
            connection = kind(parsed.hostname, parsed.port, timeout=timeout)
            where = f"host {host}"
        else:
            proxy_host, proxy_port, proxy_headers = proxy
            connection = kind(proxy_host, proxy_port, timeout=timeout)
            where = f"host {host} through the proxy {proxy_host}:{proxy_port}"
            if parsed.scheme == "https":  # TLS end to end: the proxy only joins the two sockets
                connection.set_tunnel(parsed.hostname, parsed.port, headers=proxy_headers)
            else:  # the proxy forwards the request itself, and reads the receiver from the absolute URL
                path = urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, parsed.path or "/", parsed.query, ""))
                headers.update(proxy_headers)
    except (http.client.InvalidURL, ValueError) as exc:  # a host with a space, a control character
        raise NotifyError(f"${entry['url_env']} is not an http(s) URL ({type(exc).__name__})", retry=False) from None
    deadline = Deadline(timeout, lambda: connection.sock)
    try:
        connection.request("POST", path, body, headers)
        response = connection.getresponse()
        # the answer's body says nothing we use: read a little of it, not the gigabytes a Content-Length may claim
        response.read(MAX_ANSWER_BYTES)
        if deadline.overdue.is_set():
            # the deadline shut the socket mid-answer, which http.client may take for the end of the headers
            raise http.client.IncompleteRead(b"")
    except (OSError, http.client.HTTPException) as exc:
        if deadline.overdue.is_set():  # a receiver this slow will not be faster on the next try
            raise NotifyError(f"{where} gave no complete answer within the timeout of {timeout:g} s",
                              retry=False) from None
        raise NotifyError(f"{where} unreachable: {getattr(exc, 'reason', exc)}") from None
    finally:
        deadline.cancel()
        connection.close()
    if not 200 <= response.status < 300:
        # 4xx means the receiver refuses this request as it is: retrying the same bytes will not help
        raise NotifyError(f"{where} answered HTTP {response.status} {response.reason}",
                          retry=response.status >= 500)


def webhook_proxy(scheme: str, host: str, environ: Mapping[str, str]) -> tuple[str, int, dict[str, str]] | None:
    """The proxy a request to `scheme://host` goes through, as (host, port, headers that log in to it), or None
    for a direct connection: `<scheme>_proxy` unless `no_proxy` names the host, read as urllib reads them."""
    import urllib.request  # here: only a webhook that fires needs it, not every run

    proxies = urllib.request.getproxies() if environ is os.environ else _environment_proxies(environ)
    proxy = proxies.get(scheme)
    if not proxy or urllib.request.proxy_bypass_environment(host, proxies):
        return None
    parsed = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    try:
        port = parsed.port or 80
    except ValueError:
        port = None
    if parsed.scheme != "http" or not parsed.hostname or port is None:
        # the proxy's own URL is the user's to fix, and never shown: it may hold a password
        raise NotifyError(f"{scheme}_proxy is not a proxy this notifier can use: give http://HOST:PORT (with "
                          "user:password@ if the proxy needs a login)", retry=False)
    headers = {}
    if parsed.username is not None:
        login = f"{urllib.parse.unquote(parsed.username)}:{urllib.parse.unquote(parsed.password or '')}"
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(login.encode()).decode()
    return parsed.hostname, port, headers


def _environment_proxies(environ: Mapping[str, str]) -> dict[str, str]:
    """scheme -> proxy URL from `<scheme>_proxy` variables of `environ` (a lower-case name wins over an upper-case
    one, an empty value unsets), as `urllib.request.getproxies` reads the process's own environment."""
    proxies: dict[str, str] = {}
    for name, value in sorted(environ.items(), key=lambda item: item[0].islower()):
        if name.lower().endswith("_proxy"):
            if value:
                proxies[name.lower()[:-6]] = value
            else:
                proxies.pop(name.lower()[:-6], None)
    return proxies


class Deadline:
    """The deadline of one whole delivery. A socket's `timeout` bounds each operation; a receiver that trickles
    its answer a byte at a time passes every one of them and holds modelci for minutes. At `timeout` seconds the
    socket that `sock_of()` returns then is shut, so that the read it is blocked in ends now."""

    def __init__(self, timeout: float, sock_of: Callable[[], socket.socket | None]):
        self.overdue = threading.Event()
        self._sock_of = sock_of
        self._timer = threading.Timer(timeout, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self) -> None:
        self.overdue.set()
        sock = self._sock_of()
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        self._timer.cancel()


def send_email(entry: Mapping[str, Any], message: Message, environ: Mapping[str, str]) -> None:
    """Send one plain-text e-mail through the configured SMTP server."""
    password = _secret(entry, "password_env", environ) if entry["password_env"] else ""
    mail = EmailMessage()
    mail["Subject"] = message.title
    mail["From"] = entry["sender"]
    mail["To"] = ", ".join(entry["to"])
    mail.set_content(message.text + "\n")
    kind = smtplib.SMTP_SSL if entry["ssl"] else smtplib.SMTP
    timeout = float(entry["timeout"])
    smtp = kind(timeout=timeout)  # not connected yet, so that the deadline can reach its socket
    deadline = Deadline(timeout, lambda: getattr(smtp, "sock", None))
    try:
        smtp.connect(entry["host"], entry["port"])
        if entry["starttls"]:
            smtp.starttls()
        if entry["username"]:
            smtp.login(entry["username"], password)
        smtp.send_message(mail)
        smtp.quit()
    except smtplib.SMTPAuthenticationError as exc:
        raise NotifyError(f"SMTP server refused the login of {entry['username']!r}: {exc.smtp_code}",
                          retry=False) from None
    except (smtplib.SMTPException, OSError) as exc:
        if deadline.overdue.is_set():  # a server this slow will not be faster on the next try
            raise NotifyError(f"SMTP server {entry['host']}:{entry['port']} did not take the message within the "
                              f"timeout of {timeout:g} s", retry=False) from None
        raise NotifyError(f"SMTP server {entry['host']}:{entry['port']} unreachable or refused: "
                          f"{exc.__class__.__name__}: {exc}") from None
    finally:
        deadline.cancel()
        smtp.close()


def _file_path(entry: Mapping[str, Any], environ: Mapping[str, str]) -> Path:
    return Path(entry["path"]) if entry["path"] else Path(_secret(entry, "path_env", environ))


def write_markdown(entry: Mapping[str, Any], message: Message, environ: Mapping[str, str]) -> None:
    """Append the run's Markdown summary (or the alarm events alone) to the file, as step summaries expect; with
    `[alarms] dashboard_url`, it links the run's page there, as the webhook and the e-mail do."""
    from modelci.report import markdown

    if message.outcome is not None:
        text = markdown.run_summary(message.outcome, events=message.events, url=message.url)
    else:
        text = markdown.alarms_summary(message.events, url=message.url, run_id=message.run_id)
    try:
        path = _file_path(entry, environ)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(text + "\n")
    except OSError as exc:
        raise NotifyError(f"cannot write: {exc.strerror}", retry=False) from None


def write_junit(entry: Mapping[str, Any], message: Message, environ: Mapping[str, str]) -> None:
    """Write the run as JUnit XML (replacing the file: one report per run)."""
    from modelci.report import junit

    try:
        junit.write(_file_path(entry, environ), junit.run_xml(message.outcome))
    except OSError as exc:
        raise NotifyError(f"cannot write: {exc.strerror}", retry=False) from None


#: name -> (send function, whether it needs a run rather than alarm events)
NOTIFIERS: dict[str, tuple[Callable[..., None], bool]] = {
    "webhook": (send_webhook, False),
    "email": (send_email, False),
    "markdown": (write_markdown, False),
    "junit": (write_junit, True),
}


def undelivered(config: Any, store: Any, run_id: int | None = None) -> dict[str, list[AlarmEvent]]:
    """The events whose delivery to a configured notifier failed before and that are still news, claimed for
    this process to send again (lifecycle.claim_undelivered): notifier name -> events, for `deliver`'s
    `resend`. The junit kind writes a run, not events: it has none to send again."""
    from modelci.alarms import lifecycle

    names = [describe(entry) for entry in config.notify if not NOTIFIERS[entry["kind"]][1]]
    return lifecycle.claim_undelivered(store, names, run_id)


def deliver(config: Any, events: list[AlarmEvent], *, outcome: Any = None, store: Any = None,
            run_id: int | None = None, environ: Mapping[str, str] | None = None,
            sleep: Callable[[float], None] = time.sleep,
            resend: Mapping[str, list[AlarmEvent]] | None = None) -> list[Delivery]:
    """Send to every configured notifier that has something to say; never raises. With a store, each delivery is
    recorded in the events of the alarms it was about. `resend` (notifier name -> events, from `undelivered`)
    adds to a notifier's message the events it failed to deliver before."""
    environ = os.environ if environ is None else environ
    deliveries = []
    try:
        baselines = baselines_of(store, events, outcome) if events else {}
    except Exception as exc:  # noqa: BLE001 - a message without its baselines beats no message
        log.warning("modelci: the alarms' baselines could not be read for the notifications: %s", described(exc))
        baselines = {}
    said = {"baselines": baselines, "dashboard": (getattr(config, "alarms", None) or {}).get("dashboard_url", "")}
    for entry in config.notify:
        send, needs_run = NOTIFIERS[entry["kind"]]
        wanted = [e for e in events if e.event in entry["on"]]
        fresh = {e.alarm.id for e in wanted}  # an alarm's news of this run is newer than what failed before
        wanted += [e for e in (resend or {}).get(describe(entry), []) if e.alarm.id not in fresh]
        if needs_run and outcome is None:
            continue
        if entry["kind"] in ("webhook", "email") and not wanted:
            continue  # chat and mail only hear about alarms opening and recovering, not about every run
        if entry["kind"] == "markdown" and outcome is None and not wanted:
            continue
        message = compose(wanted, outcome, run_id, **said)
        refused = _refused_path(entry, environ, config) if entry["kind"] in ("markdown", "junit") else ""
        try:
            delivery = (Delivery(describe(entry), False, 0, f"{describe(entry)}: {refused}") if refused
                        else attempt(entry, functools.partial(send, entry, message, environ), sleep))
        except Exception as exc:  # noqa: BLE001 - a notifier's own failure is a failed delivery, never the run's
            delivery = Delivery(describe(entry), False, 1, f"{describe(entry)}: {described(exc, 200)}")
        deliveries.append(delivery)
        if store is not None and wanted:
            from modelci.alarms import lifecycle

            lifecycle.log_event(store, [e.alarm.id for e in wanted], "notified" if delivery.ok else "notify-failed",
                                run_id, detail=describe(entry) if delivery.ok else delivery.error)  # named once
    return deliveries


def _refused_path(entry: Mapping[str, Any], environ: Mapping[str, str], config: Any) -> str:
    """Why a file notifier must not write its path, or "": the history, the config, a FIFO, or (junit, which
    replaces the file) a file that is no modelci report. It wrote over any of them, and the run exited 0."""
    from modelci.report import files

    try:
        path = _file_path(entry, environ)
        files.refuse_overwrite(f"path {path}", str(path), db=getattr(config, "db", None),
                               config=getattr(config, "file", None), foreign=entry["kind"] == "junit")
    except (NotifyError, UserError) as exc:
        return f"not written: {exc}"
    return ""


def attempt(entry: Mapping[str, Any], send: Callable[[], None], sleep: Callable[[float], None]) -> Delivery:
    """Call `send` up to 1 + retries times, waiting backoff, 2 backoff, 4 backoff, … seconds in between."""
    name = describe(entry)
    tries = 1 + int(entry["retries"])
    number = 0
    while True:
        number += 1
        try:
            send()
            return Delivery(name, True, number)
        except NotifyError as exc:
            if not exc.retry or number >= tries:
                return Delivery(name, False, number, f"{name}: {exc} (after {number} attempt{'s' * (number > 1)})")
            wait = entry["backoff"] * 2 ** (number - 1)
            log.info("%s: %s; attempt %d of %d, retrying in %.2gs", name, exc, number, tries, wait)
            sleep(wait)
