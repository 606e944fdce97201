"""Small helpers shared by the dashboard's pages: status classes, number and time formats, safe links.

Each returns plain text; the caller escapes it (Jinja2 autoescape, or html.escape in runpage.py).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

__all__ = ["STATUS_CLASSES", "status_class", "display_status", "fmt", "when", "safe_href", "run_page",
           "dashboard_page"]

#: statuses as they look in the matrix; "regressed" is an ok result with a gating regression finding
STATUS_CLASSES = {"ok": "ok", "failed": "bad", "crashed": "bad", "timeout": "warn", "skipped": "skip",
                  "error": "err", "regressed": "warn", "none": "none"}


def run_page(run_id: int) -> str:
    """The page of a run, relative to the site's root: `runs/<id>.html` (notifications link to it too)."""
    return f"runs/{int(run_id)}.html"


def dashboard_page(dashboard: str, run_id: int | None) -> str:
    """The run's page on the published dashboard (`[alarms] dashboard_url`, ending in "/"), or its index without a
    run; "" without a dashboard URL. Every notifier and the Markdown summary link this one page."""
    if not dashboard:
        return ""
    return dashboard + (run_page(run_id) if run_id is not None else "index.html")


def status_class(status: str | None) -> str:
    """The CSS class of a status (an unknown one looks like an error)."""
    return STATUS_CLASSES.get(status or "none", "err")


def display_status(result: Any) -> str:
    """The result's status, or `regressed` for an ok result with a gating regression."""
    return "regressed" if result.status == "ok" and result.regressions else result.status


def fmt(value: Any, unit: str = "") -> str:
    """A number for a table: 4 significant digits, bytes in MiB; empty for None."""
    if value is None:
        return ""
    if isinstance(value, float):
        if unit == "bytes":
            return f"{value / 1048576:.1f} MiB"
        return f"{value:.4g} {unit}" if unit else f"{value:.4g}"
    return str(value)


def when(value: datetime | str | None) -> str:
    """A timestamp as `2024-05-01 12:00:00 UTC` (SQLite hands back naive UTC datetimes); text passes through."""
    if value is None:
        return ""
    if not isinstance(value, datetime):
        return str(value)
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc)
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


def safe_href(value: Any) -> str:
    """A link from a hook's data, kept only when relative or http(s): a `javascript:` URL must not reach a page."""
    text = str(value or "").strip()
    # browsers drop tabs, newlines and controls inside a scheme ("java\tscript:"), so judge it without them
    head = re.split(r"[/?#]", re.sub(r"[\x00-\x20]", "", text), maxsplit=1)[0]
    if ":" in head and head.split(":", 1)[0].lower() not in ("http", "https"):
        return "#"
    return text
