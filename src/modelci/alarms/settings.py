"""The config tables of this package: `[[policy]]`, `[[allow]]`, `[[notify]]` and `[alarms]` (docs/alarms.md).

`config.load` calls the validators here, so that a bad entry fails at load time with the file, the entry and the
key in its message. Only one check must wait for the history: whether a `[[policy]]` naming a user metric or an
output names one that some workload records (`check_policy_metrics`).
"""

from __future__ import annotations

import fnmatch
import re
import urllib.parse
from collections.abc import Callable, Iterable
from datetime import date
from typing import Any

from modelci.errors import UserError, short_number
from modelci.workload.api import MEASURED_PREFIXES, RESERVED_METRICS

#: the metrics the harness itself records (workload/child.py); a `time.`/`mem.` name outside these is a typo
BUILTIN_METRICS = ("status", "loss", "time.setup", "time.train", "time.infer", "mem.peak_rss", "mem.peak_device")
#: the kinds of [[notify]] entries
NOTIFY_KINDS = ("webhook", "email", "markdown", "junit")
#: alarm events a notifier can be told about
#: ("bisected": `run --bisect-on-alarm` found the commit or release that caused an alarm)
NOTIFY_EVENTS = ("open", "recovered", "bisected")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: [alarms] keys: name -> (type, default, help)
ALARM_SETTINGS: dict[str, tuple[type, Any, str]] = {
    "stale_after_days": (int, 7, "open an alarm when a runner had no successful run for this many days (0: never)"),
    "auto_resolve_after_recovered_runs": (
        int, 0, "resolve a recovered alarm after this many runs in a row without the finding (0: only a person)"),
    "changes": (bool, True, "look for change points in each series after every run"),
    "dashboard_url": (str, "", "where `modelci report` is published (http(s)): notifications and the Markdown "
                               "summary link each event to its run page there (\"\": no links)"),
}
#: the largest value of each [alarms] number: a century of days, a million runs. Larger ones mean "never" as
#: well as 0 does, and beyond what a date can hold (999,999,999 days) or SQLite's integers the check that reads
#: them would fail after the run is stored, with a traceback in place of its alarms and report files
ALARM_MAXIMA = {"stale_after_days": 36_500, "auto_resolve_after_recovered_runs": 1_000_000}


def is_builtin_metric(pattern: str) -> bool:
    """Whether a metric name or glob belongs to the harness's own metrics (status, loss, time.*, mem.*)."""
    return pattern in RESERVED_METRICS or pattern.startswith(MEASURED_PREFIXES)


def unknown_builtin_metric(pattern: str, label: str) -> None:
    """Refuse a `time.`/`mem.` metric name or glob that matches none of the harness's metrics (`time.infr`): an
    entry with it would judge nothing, silently. [[policy]], [[overrides]] and [[allow]] entries say it so."""
    if is_builtin_metric(pattern) and not any(fnmatch.fnmatchcase(m, pattern) for m in BUILTIN_METRICS):
        raise UserError(f"{label}: key 'metric' names an unknown metric {pattern!r}; the harness records "
                        f"{', '.join(BUILTIN_METRICS)} (plus output:NAME and the workloads' own metrics)")


def validate_policy_entries(entries: Any, where: str, validate_settings: Callable[[Any, str], dict]) -> list[dict]:
    """Check the [[policy]] entries (Paddle CE KPI objects): a metric, an optional workload glob, and settings.

    A `time.`/`mem.` name must match a metric the harness records; user metrics and `output:NAME` are checked
    against the history later. `active` on a user metric also decides whether it gates (user metrics are
    report-only by default).
    """
    checked = []
    for number, entry in enumerate(_tables(entries, where, "policy"), 1):
        label = f"{where}: [[policy]] entry {number}"
        metric = entry.get("metric")
        if not isinstance(metric, str) or not metric:
            raise UserError(f"{label} needs key 'metric': a metric name or glob such as \"time.train\", "
                            "\"loss\", \"output:logits\" or \"accuracy\"")
        workload = entry.get("workload", "*")
        if not isinstance(workload, str) or not workload:
            raise UserError(f"{label}: key 'workload' must be a workload id or glob, got {workload!r}")
        unknown_builtin_metric(metric, label)
        settings = validate_settings({k: v for k, v in entry.items() if k not in ("workload", "metric")}, label)
        if "active" in settings and "gate_user_metrics" not in settings and not _builtin_or_output(metric):
            settings["gate_user_metrics"] = settings["active"]
        checked.append({"workload": workload, "metric": metric, **settings, "_entry": number})
    return checked


def _builtin_or_output(metric: str) -> bool:
    return is_builtin_metric(metric) or metric.startswith("output:")


def check_policy_metrics(policies: Iterable[dict], known: Iterable[str], where: str) -> None:
    """Refuse a [[policy]] whose user metric or output matches nothing the history records (a typo would
    otherwise silently judge nothing). `known` holds metric names and `output:NAME`s seen in the history."""
    problems = unknown_policy_metrics(policies, known, where)
    if problems:
        raise UserError(problems[0])


def unknown_policy_metrics(policies: Iterable[dict], known: Iterable[str], where: str) -> list[str]:
    """One message per [[policy]] entry whose user metric or output matches nothing in `known` (the metric names
    and `output:NAME`s the history records), naming the entry, the key and the names there are."""
    known = set(known)
    problems = []
    for entry in policies:
        metric = entry["metric"]
        if is_builtin_metric(metric) or any(fnmatch.fnmatchcase(name, metric) for name in known):
            continue
        seen = sorted(n for n in known if not is_builtin_metric(n))
        problems.append(
            f"{where}: [[policy]] entry {entry.get('_entry', '?')}: key 'metric' names {metric!r}, which no workload "
            f"in the history records; known metrics: {', '.join([*BUILTIN_METRICS, *seen])}. Fix the name or remove "
            "the entry"
        )
    return problems


def validate_allow(entries: Any, where: str, today: date, expired: list[str] | None = None) -> list[dict]:
    """Check the [[allow]] entries: a workload and/or metric glob, a reason and an expiry date (PyTorch's
    compatibility allowlist). An entry past its date is an error, so that a silenced difference resurfaces; with
    `expired` (a list), it is said there instead and silences nothing, for the commands that judge nothing."""
    checked = []
    for number, entry in enumerate(_tables(entries, where, "allow"), 1):
        label = f"{where}: [[allow]] entry {number}"
        unknown = sorted(set(entry) - {"workload", "metric", "reason", "expires"})
        if unknown:
            raise UserError(f"{label}: unknown key {unknown[0]!r}; known keys: expires, metric, reason, workload")
        for key in ("workload", "metric"):
            if key in entry and (not isinstance(entry[key], str) or not entry[key]):
                raise UserError(f"{label}: key {key!r} must be a non-empty string pattern, got {entry[key]!r}")
        if "workload" not in entry and "metric" not in entry:
            raise UserError(f"{label} needs a 'workload' or 'metric' pattern (an entry that allows everything "
                            "would silence every check)")
        unknown_builtin_metric(entry.get("metric", "*"), label)
        reason = entry.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise UserError(f"{label}: key 'reason' must be text saying why the difference is known and "
                            f"accepted, got {reason!r}")
        if not isinstance(reason, str) or not reason.strip():
            raise UserError(f"{label}: key 'reason' is required: say why the difference is known and accepted")
        expires = parse_date(entry.get("expires"), f"{label}: key 'expires'")
        pattern = f"workload={entry.get('workload', '*')!r}, metric={entry.get('metric', '*')!r}"
        if expires < today:
            message = (f"{label} ({pattern}, reason {reason.strip()!r}) expired on {expires.isoformat()}: it no "
                       "longer silences anything. Remove it once the difference is fixed, or set a later 'expires' "
                       "if it is still known and accepted")
            if expired is None:
                raise UserError(message)
            expired.append(message)
            continue
        checked.append({"workload": entry.get("workload", "*"), "metric": entry.get("metric", "*"),
                        "reason": reason.strip(), "expires": expires, "_entry": number})
    return checked


def parse_date(value: Any, where: str) -> date:
    """A TOML date (`2025-06-30`) or the same as a string; anything else is a UserError naming `where`."""
    if isinstance(value, date) and not hasattr(value, "hour"):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value.strip())
        except ValueError:
            pass
    if value is None:
        raise UserError(f"{where} is required: a date such as 2025-06-30")
    raise UserError(f"{where} must be a date such as 2025-06-30, got {value!r}")


def allow_entry(allow: Iterable[dict], workload: str, metric: str) -> dict | None:
    """The first [[allow]] entry that matches a workload and metric, or None."""
    for entry in allow:
        if fnmatch.fnmatchcase(workload, entry["workload"]) and fnmatch.fnmatchcase(metric, entry["metric"]):
            return entry
    return None


#: the most seconds one notifier may hold the run, at worst: every attempt running to its timeout, and the waits
#: between them (backoff * (2**retries - 1)). The run waits for its notifications, and a CI job must not be held
#: for hours by a receiver that is down
MAX_NOTIFY_SECONDS = 600
#: the most retries of one delivery: within MAX_NOTIFY_SECONDS more would each get a few milliseconds
MAX_RETRIES = 100

#: [[notify]] keys per kind: key -> (type, default or REQUIRED)
REQUIRED = object()
_COMMON = {"kind": (str, REQUIRED), "name": (str, ""), "on": (list, list(NOTIFY_EVENTS)), "retries": (int, 2),
           "backoff": (float, 1.0), "timeout": (float, 10.0)}
_KIND_KEYS: dict[str, dict[str, tuple[type, Any]]] = {
    "webhook": {"url_env": (str, REQUIRED)},
    "email": {"host": (str, REQUIRED), "port": (int, 25), "sender": (str, "modelci@localhost"), "to": (list, REQUIRED),
              "username": (str, ""), "password_env": (str, ""), "starttls": (bool, False), "ssl": (bool, False)},
    "markdown": {"path": (str, ""), "path_env": (str, "")},
    "junit": {"path": (str, ""), "path_env": (str, "")},
}
#: keys that would put a secret in the file: say where it goes instead
_SECRETS = {"url": "url_env", "webhook": "url_env", "password": "password_env", "token": "url_env"}


def validate_notify(entries: Any, where: str) -> list[dict]:
    """Check the [[notify]] entries: a known kind, its keys and types. Secrets only come from environment
    variables, so a `url` or `password` in the file is refused with the key to use instead."""
    checked = []
    for number, entry in enumerate(_tables(entries, where, "notify"), 1):
        label = f"{where}: [[notify]] entry {number}"
        kind = entry.get("kind")
        if kind not in NOTIFY_KINDS:
            raise UserError(f"{label}: key 'kind' must be one of {', '.join(NOTIFY_KINDS)}, got {kind!r}")
        keys = {**_COMMON, **_KIND_KEYS[kind]}
        for key in entry:
            if key in _SECRETS and key not in keys:
                raise UserError(f"{label}: key {key!r} would keep a secret in the config file; put it in an "
                                f"environment variable and name that variable with {_SECRETS[key]!r}")
            if key not in keys:
                raise UserError(f"{label}: unknown key {key!r} for kind {kind!r}; "
                                f"known keys: {', '.join(sorted(keys))}")
        settings: dict[str, Any] = {"_entry": number}
        for key, (kind_of, default) in keys.items():
            if key not in entry:
                if default is REQUIRED:
                    raise UserError(f"{label}: kind {kind!r} needs key {key!r}")
                settings[key] = list(default) if isinstance(default, list) else default
                continue
            settings[key] = _typed(entry[key], kind_of, f"{label}: key {key!r}")
        _check_notify_values(settings, label)
        checked.append(settings)
    return checked


def _check_notify_values(settings: dict[str, Any], label: str) -> None:
    """The value rules that types alone do not say."""
    for key in ("url_env", "password_env", "path_env"):
        if settings.get(key) and not _ENV_NAME.match(settings[key]):
            raise UserError(f"{label}: key {key!r} must name an environment variable (like SLACK_WEBHOOK_URL), "
                            f"got {settings[key]!r}")
    bad = [e for e in settings["on"] if e not in NOTIFY_EVENTS]
    if bad:
        raise UserError(f"{label}: key 'on' lists {bad[0]!r}; events are {', '.join(NOTIFY_EVENTS)}")
    if settings["kind"] in ("markdown", "junit") and not (settings["path"] or settings["path_env"]):
        raise UserError(f"{label}: kind {settings['kind']!r} needs key 'path' or 'path_env' (e.g. "
                        "path_env = \"GITHUB_STEP_SUMMARY\")")
    if settings["kind"] == "email" and not settings["to"]:
        raise UserError(f"{label}: key 'to' must list at least one address")
    for key in ("retries", "backoff", "timeout"):
        if settings[key] < 0:
            raise UserError(f"{label}: key {key!r} must not be negative, got {settings[key]!r}")
    if not 0 < settings["timeout"] < float("inf"):  # the deadline of one delivery: 0 or NaN would be none at all
        raise UserError(f"{label}: key 'timeout' must be a number of seconds greater than 0, "
                        f"got {settings['timeout']!r}")
    # the run waits for its notifications: retries that wait for ever (or NaN seconds) would hold the CI job
    if not 0 <= settings["backoff"] < float("inf"):
        raise UserError(f"{label}: key 'backoff' must be a number of seconds, got {settings['backoff']!r}")
    retries = settings["retries"]
    # at most a billion retries in the sum: one of hundreds of digits overflowed the float it is multiplied by
    worst = (1 + min(retries, 10**9)) * settings["timeout"] + settings["backoff"] * (2 ** min(retries, 64) - 1)
    if worst > MAX_NOTIFY_SECONDS:
        held = f"{worst:.3g} s" if worst < float("inf") else "without end"
        raise UserError(f"{label}: retries = {short_number(retries)}, timeout = {settings['timeout']:g} and backoff = "
                        f"{settings['backoff']:g} can hold the run {held} (every attempt to its timeout, and "
                        f"the waits between them, which double); the run waits for its notifications, so keep it "
                        f"within {MAX_NOTIFY_SECONDS} s")
    if retries > MAX_RETRIES:
        raise UserError(f"{label}: key 'retries' must be {MAX_RETRIES} or less, got {retries}")
    if settings["kind"] == "email" and not 0 < settings["port"] < 65536:
        raise UserError(f"{label}: key 'port' must be a TCP port from 1 to 65535, got {settings['port']!r}")


def validate_alarm_settings(table: Any, where: str) -> dict[str, Any]:
    """Check the [alarms] table; missing keys get their defaults (ALARM_SETTINGS)."""
    label = f"{where}: [alarms]"
    if not isinstance(table, dict):
        raise UserError(f"{label} must be a table")
    unknown = sorted(set(table) - set(ALARM_SETTINGS))
    if unknown:
        raise UserError(f"{label}: unknown key {unknown[0]!r}; known keys: {', '.join(sorted(ALARM_SETTINGS))}")
    settings = {}
    for key, (kind, default, _help) in ALARM_SETTINGS.items():
        value = _typed(table[key], kind, f"{label}: key {key!r}") if key in table else default
        if kind is int and value < 0:
            raise UserError(f"{label}: key {key!r} must not be negative, got {value!r}")
        if kind is int and value > ALARM_MAXIMA[key]:
            raise UserError(f"{label}: key {key!r} must be {ALARM_MAXIMA[key]:,} or less (0 means never), "
                            f"got {value!r}")
        settings[key] = value
    settings["dashboard_url"] = dashboard_url(settings["dashboard_url"], f"{label}: key 'dashboard_url'")
    return settings


def dashboard_url(value: str, where: str) -> str:
    """The base URL of the published dashboard, ending in "/" so that a page's relative name joins it; "" stays
    "" (no links). Only an http(s) URL with a host: the link lands in chat and mail, where a `javascript:` or
    `file:` one must not go, and one with a user or password would keep a secret in the config file."""
    text = value.strip()
    if not text:
        return ""
    try:
        parsed = urllib.parse.urlsplit(text)
        parsed.port  # noqa: B018 - urllib checks the port only when it is read
    except ValueError:
        parsed = None
    if parsed is None or parsed.scheme.lower() not in ("http", "https") or not parsed.hostname:
        raise UserError(f"{where} must be the http(s) URL where the dashboard (`modelci report --out`) is published, "
                        f"such as \"https://ci.example.com/modelci/\", got {value!r}")
    if parsed.username is not None or parsed.password is not None:
        raise UserError(f"{where} must not hold a user or password: it would keep a secret in the config file, and "
                        "every notification would show it")
    if parsed.query or parsed.fragment or any(c.isspace() or ord(c) < 32 for c in text):
        raise UserError(f"{where} must be the folder of the dashboard's index.html, without a query, a fragment or "
                        f"spaces, got {value!r}")
    return text if text.endswith("/") else text + "/"


def _tables(entries: Any, where: str, name: str) -> list[dict]:
    """An array of tables, or a UserError saying how to write one."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise UserError(f"{where}: {name!r} must be an array of tables ([[{name}]])")
    return entries


def _typed(value: Any, kind: type, where: str) -> Any:
    """`value` checked against `kind` (an int is a fine float; a bool is no number)."""
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        try:
            value = float(value) if ok else value
        except OverflowError:  # an integer of hundreds of digits is no float
            raise UserError(f"{where} must be a finite number, got {short_number(value)}") from None
    elif kind is list:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:
        ok = isinstance(value, str)
    if not ok:
        names = {bool: "true or false", int: "an integer", float: "a number", list: "a list of strings",
                 str: "a string"}
        raise UserError(f"{where} must be {names[kind]}, got {value!r}")
    return value
