"""What a listed alarm or alarm event says, shared by the notifiers, `modelci alarms`, the Markdown summary and
the dashboard (docs/alarms.md: "Recovered", and "What they say" under notifiers).

An alarm's `message` is what it last fired with. A recovery says how the metric is now, from the observation
that recovered it, with the failure it recovered from as context: a failure printed under "recovered" reads as
a failure.

Where alarms are listed (`alarms list`, a notification, the Markdown summary, the dashboard's alarm tables) a
message is cut to its first line and `MESSAGE_MAX` characters, and says where the whole of it is: an exception's
message can run to thousands of characters, which made one alarm hundreds of lines of a listing. `alarms show`
and the run page show one alarm or run, and keep it whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: the most characters of a message where alarms are listed
MESSAGE_MAX = 200


def shorten(text: Any, limit: int = MESSAGE_MAX) -> tuple[str, bool]:
    """The first non-blank line of `text`, its whitespace collapsed, at most `limit` characters; and whether
    anything was left out (the end of that line or a later line), which an ellipsis then marks."""
    lines = str(text or "").strip().splitlines()
    first = lines[0] if lines else ""
    line = " ".join(first[: limit * 2].split())  # a line of megabytes is not split whole
    if len(line) > limit:
        return line[: limit - 1].rstrip() + "…", True
    if len(lines) > 1 or len(first) > limit * 2:
        return f"{line} …", True
    return line, False


def listed(now: str, was: str, alarm_id: Any, esc: Callable[[str], str] = str, limit: int = MESSAGE_MAX) -> str:
    """`joined(now, was)`, each part shortened and passed through `esc` (a format's escaping of text), and where
    the whole is when something was left out."""
    now, cut = shorten(now, limit)
    if was:
        was, cut_was = shorten(was, limit)
        cut = cut or cut_was
    return esc(joined(now, was)) + (f" (whole message: `modelci alarms show {alarm_id}`)" if cut else "")


def event_parts(event: Any) -> tuple[str, str]:
    """(what the event says, the earlier state it replaces or ""): an opening says its failure; a recovery how
    the metric is now, and the failure as "was"; a bisect its culprit."""
    alarm = event.alarm
    if event.event == "bisected":
        return alarm.culprit, ""
    if event.event == "recovered":
        return event.detail or alarm.recovery or "back to normal", alarm.message
    return alarm.message, ""


def alarm_parts(alarm: Any) -> tuple[str, str]:
    """As event_parts, for a live alarm as listed: a recovered one says how it is now, and what it was."""
    if alarm.recovered and alarm.state != "resolved":
        return alarm.recovery or "back to normal", alarm.message
    return alarm.message, ""


def joined(now: str, was: str) -> str:
    """The two parts as one text: "status ok (was: status failed: RuntimeError: boom)"."""
    return f"{now} (was: {was})" if was else now
